//! Turns a thread's CLI starts by itself (only with `claude.scheduling_tools`): a cron firing, a
//! `ScheduleWakeup`, the notice of a background task that finished. The pool hands each over
//! with a lease on its process ([`CliTurn`]); here it becomes a turn of the thread like a user's:
//! a message with origin `cli` (its content says what started it), `turn_started`, the turn's
//! events, tool calls and permissions, its reply with usage and cost, and one `turn_finished` or
//! `turn_failed`. The thread's budgets are checked when it starts: over budget, the CLI is told
//! to stop it at once and it ends `refused`, with what it spent until then metered, and the
//! process is let go with the crons and background tasks it held.
//!
//! Such a turn is ordered with the user's by the CLI itself, which runs one turn at a time (a
//! user's message sent meanwhile waits in the CLI's queue and gets its own reply: the lines of
//! each turn are routed by the command the CLI says it runs).

use std::time::Instant;

use tracing::{info, warn};

use plugin_contract::SessionStart;

use super::end::TurnEnder;
use super::tally::{usage_of, TurnTally};
use super::Pipeline;
use crate::api::events::{MessageReceived, ThreadEvent, TurnStarted};
use crate::events::{Reply, TurnEnding};
use crate::pool::{CliTurn, Finish};
use crate::store::{EndCause, Inserted, MessageStatus, NewUserMessage, Origin};
use crate::turn_error::TurnError;

impl Pipeline {
    /// Runs each turn the pool hands over ([`crate::pool::Pool::take_cli_turns`]) in a task of
    /// its own, until the daemon stops. Called once, at start-up.
    pub fn serve_cli_turns(&self) {
        let Some(mut turns) = self.inner.pool.take_cli_turns() else {
            return;
        };
        // Not on the pipeline's tracker, which shutdown waits on: this loop only ends with the
        // daemon. Each turn it starts is tracked.
        let pipeline = self.clone();
        tokio::spawn(async move {
            loop {
                let turn = tokio::select! {
                    turn = turns.recv() => turn,
                    _ = pipeline.inner.stopping.cancelled() => None,
                };
                let Some(turn) = turn else { return };
                let running = pipeline.clone();
                pipeline
                    .inner
                    .tasks
                    .spawn(async move { running.run_cli_turn(turn).await });
            }
        });
    }

    async fn run_cli_turn(&self, cli: CliTurn) {
        let inner = &self.inner;
        let CliTurn {
            thread,
            source,
            lease,
            events,
        } = cli;
        let turn = lease.adopt(events);
        // The turn that handed the process over is recorded first: this one comes after it.
        self.after_recorded(&thread).await;
        let inserted = inner
            .store
            .insert_user_message(
                NewUserMessage {
                    thread_id: thread.clone(),
                    content: format!("(a turn the CLI started by itself: {source})").into(),
                    client_message_id: None,
                    model: None,
                    origin: Origin::Cli,
                    caller: None,
                },
                None,
            )
            .await;
        let user = match inserted {
            Ok(Inserted::New(user) | Inserted::Duplicate(user)) => user,
            Err(err) => {
                // Unrecorded, it must not run on: stopped, and the process let go.
                warn!(thread_id = %thread, %source, error = %err, "Could not record the CLI's own turn; stopping it.");
                turn.interrupt_now();
                drop(turn);
                lease.finish(Finish::Discard).await;
                return;
            }
        };
        let mut end = TurnEnder::new(self, &user, None);
        inner.events.emit(
            &thread,
            Some(&user.id),
            ThreadEvent::MessageReceived(MessageReceived {
                blocks: None,
                message_id: user.id.clone(),
                content: user.content.clone(),
                client_message_id: None,
                origin: Origin::Cli,
            }),
        );
        inner.events.emit(
            &thread,
            Some(&user.id),
            ThreadEvent::TurnStarted(TurnStarted {
                message_id: user.id.clone(),
                origin: Origin::Cli,
                source: Some(source.clone()),
            }),
        );
        // Its own trace: nothing outside started it.
        let trace = inner
            .traces
            .turn(None, user.thread_id.as_str(), user.id.as_str());
        trace.set([opentelemetry::KeyValue::new("harness.origin", "cli")]);
        // Charged before it runs on, like a user's turn: it holds its estimate while it runs
        // (so turns running at once, the one that just handed the process over included,
        // count), and a thread over budget has the turn stopped now.
        let (over_budget, reservation) = match inner.store.require_thread(&thread).await {
            Ok(row) => match reserve_chain(inner, row).await {
                Ok(Ok(reservation)) => {
                    reservation.on_message(&user.id, trace.traceparent());
                    (None, Some(reservation))
                }
                Ok(Err(exceeded)) => (Some(exceeded), None),
                Err(err) => {
                    warn!(thread_id = %thread, error = %err, "Could not check the budgets of the CLI's own turn.");
                    (None, None)
                }
            },
            Err(err) => {
                warn!(thread_id = %thread, error = %err, "The CLI's own turn has no thread.");
                (None, None)
            }
        };
        if over_budget.is_some() {
            turn.interrupt_now();
        }
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + inner.settings.turn_timeout;
        let mut tally = TurnTally {
            start: Some(SessionStart::Warm),
            ..TurnTally::default()
        };
        let outcome = self
            .drive(turn, &user, deadline, &mut tally, None, &trace)
            .await;
        trace.end(outcome.as_ref().err().map(ToString::to_string).as_deref());
        tally.usage = outcome.as_ref().ok().map(usage_of);
        if let Some(reservation) = &reservation {
            tally.meter(reservation.close_meter());
        }
        let usage = tally.usage;
        self.count_usage(usage.as_ref());
        let session = lease.session_id();
        // Refused as it started, or stopped by the gateway half-way (a turn that still finished
        // keeps its reply).
        let finished = matches!(&outcome, Ok(result) if !result.is_error);
        let refusal = over_budget.map(TurnEnding::refused).or_else(|| {
            let stopped = reservation.as_ref().and_then(|r| r.refused());
            stopped.filter(|_| !finished).map(TurnEnding::stopped)
        });
        let (finish, status) = match (refusal, outcome) {
            (Some(ending), _) => {
                let ending = ending.with_spending(session, usage);
                if let Err(err) = end.end(ending).await {
                    warn!(message_id = %user.id, error = %err, "Could not record the refused CLI turn.");
                }
                // The process goes, and with it what would start the next such turn: the
                // session's crons and background tasks. A durable cron stays in the thread's
                // folder, but fires only in a running process, and a message to a thread over
                // budget is refused before any process starts.
                (Finish::Discard, MessageStatus::Refused)
            }
            (None, Ok(result)) if !result.is_error => {
                let session = result
                    .session_id
                    .clone()
                    .map(plugin_contract::CliSessionId::from_string)
                    .or(session);
                let reply = Reply {
                    text: result.text.unwrap_or_default(),
                    model: None,
                    structured_output: None,
                };
                if let Err(err) = end.end(TurnEnding::done(reply, session, usage)).await {
                    warn!(message_id = %user.id, error = %err, "Could not record the CLI turn's reply.");
                    let ending = TurnEnding::failed(EndCause::Error, err.to_string());
                    if let Err(err) = end.end(ending).await {
                        warn!(message_id = %user.id, error = %err, "Could not end the CLI turn.");
                    }
                }
                (Finish::Keep, MessageStatus::Done)
            }
            (None, outcome) => {
                let (cause, error, finish) = match outcome {
                    Ok(result) if result.was_interrupted() => (
                        EndCause::Interrupted,
                        TurnError::Interrupted.to_string(),
                        Finish::Keep,
                    ),
                    Ok(result) => (EndCause::Error, result.error_reason(), Finish::Discard),
                    Err(err) => (EndCause::Error, err.to_string(), Finish::Discard),
                };
                let ending = TurnEnding::failed(cause, error).with_spending(session, usage);
                if let Err(err) = end.end(ending).await {
                    warn!(message_id = %user.id, error = %err, "Could not record the failed CLI turn.");
                }
                let status = cause.status();
                (finish, status)
            }
        };
        lease.finish(finish).await;
        if let Some(reservation) = reservation {
            reservation.settle(usage.as_ref().map(|u| u.cost_usd));
        }
        inner
            .turns
            .finished(true, status.as_str(), started.elapsed());
        info!(
            thread_id = %thread, message_id = %user.id, %source, origin = "cli",
            ms = started.elapsed().as_millis() as u64, tool_calls = tally.tool_calls,
            outcome = status.as_str(), "The CLI's own turn ended."
        );
    }
}

/// [`crate::budget::Budgets::reserve`] for a turn of `thread`, with whoever delegated to it.
async fn reserve_chain(
    inner: &super::Inner,
    thread: crate::store::ThreadRow,
) -> Result<
    Result<crate::budget::Reservation, crate::budget::BudgetExceeded>,
    crate::store::StoreError,
> {
    let charge = crate::budget::Budgets::charge(&inner.store, thread).await?;
    inner.budgets.reserve(&inner.store, &charge).await
}
