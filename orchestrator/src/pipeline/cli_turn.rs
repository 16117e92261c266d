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

use tracing::warn;

use super::plan::Source;
use super::Pipeline;
use crate::api::events::{MessageReceived, ThreadEvent};
use crate::pool::{CliTurn, Finish};
use crate::store::{Inserted, NewUserMessage, Origin};

impl Pipeline {
    /// Runs each turn the pool hands over ([`crate::pool::Pool::take_cli_turns`]) in a task of
    /// its own, until the daemon stops. Called once, at start-up.
    pub fn serve_cli_turns(&self) {
        let Some(mut turns) = self.inner.parts.pool.take_cli_turns() else {
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
                    .spawn(async move { running.cli_turn(turn).await });
            }
        });
    }

    /// Stage 1 of a turn the CLI started by itself (`turn.rs` runs the rest): taken over at
    /// once, so its control requests wait for it; after the turn that handed the process over
    /// has recorded its end, its message is stored (origin `cli`, its content saying what
    /// started it) and announced with `turn_started`.
    async fn cli_turn(&self, cli: CliTurn) {
        let CliTurn {
            thread,
            source,
            lease,
            events,
        } = cli;
        let adopted = lease.adopt(events);
        // The turn that handed the process over is recorded first: this one comes after it.
        self.inner.runtime.after_recorded(&thread).await;
        let parts = &self.inner.parts;
        let inserted = parts
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
        let planned = match inserted {
            Ok(Inserted::New(user) | Inserted::Duplicate(user)) => self.cli_plan(user).await,
            Err(err) => Err(err),
        };
        let plan = match planned {
            Ok(plan) => plan,
            Err(err) => {
                // Unrecorded, it must not run on: stopped, and the process let go.
                warn!(thread_id = %thread, %source, error = %err, "Could not record the CLI-started turn; stopping it.");
                lease.cli_turn(adopted).interrupt_now();
                lease.finish(Finish::Discard).await;
                return;
            }
        };
        let user = &plan.user;
        parts.events.emit(
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
        self.turn_started(&plan, Some(source));
        // Nobody waits for its outcome: it is stored, streamed and announced as any.
        let _ = self.run(plan, Source::Cli { lease, adopted }).await;
    }
}
