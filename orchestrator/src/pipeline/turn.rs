//! One turn, whatever started it, run by [`Pipeline::run`] from its [`TurnPlan`] through these
//! stages, in the task that owns it:
//!
//! 1. **Its place.** A message waits for the turns ahead of it in its thread's line (its caller
//!    may withdraw it meanwhile); a turn the CLI started waited for the turn that handed its
//!    process over to record its end (`cli_turn.rs`).
//! 2. **Begin.** A message's turn does not start once shutdown began or on a thread archived
//!    while it waited; it waits for its key's turns at once; its budgets are reserved (refused:
//!    nothing reaches the CLI); `turn_started`.
//! 3. **Its process.** A message's turn checks out the thread's process (an interrupt cancels the
//!    wait and kills a half-started one), takes a place under the concurrency limit (a permit
//!    holder waits for nothing but the CLI), has its budgets checked again, and sends its prompt
//!    with context. A CLI-started turn has its process (over budget, the CLI is told to stop it).
//! 4. **Drive** (`drive.rs`): the CLI's stream until its `result`.
//! 5. **End.** [`conclude`] makes of what happened the stored ending, the process's fate and the
//!    caller's answer; the ending is stored once ([`TurnEnder`]), the spending settled, the
//!    outcome counted and logged. A thread with an `outputSchema` has the reply's structured
//!    output checked against it, else the turn fails.

use std::time::SystemTime;

use opentelemetry::KeyValue;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, info, warn};

use plugin_contract::SessionStart;

use super::conclude::{conclude, Answer, Conclusion, Facts, Ran, Started};
use super::end::TurnEnder;
use super::plan::{InLine, Source, TurnPlan};
use super::runtime::QueueTicket;
use super::tally::{usage_of, TurnTally};
use super::{context, Nesting, Pipeline, PipelineError, TurnReply};
use crate::api::events::{PermissionModeNarrowed, ProcessReady, ThreadEvent, TurnStarted};
use crate::budget::{BudgetExceeded, Reservation};
use crate::events::Ending;
use crate::pool::{Adopted, Finish, Lease};
use crate::store::{EndCause, MessageRow, Usage};
use crate::throttle::Permit;
use crate::turn_error::TurnError;

/// What the stages before the end leave: how far the turn got, and what it holds until its end
/// is stored.
struct Gone {
    ran: Ran,
    lease: Option<Lease>,
    /// Its place under the concurrency limit: given back after the lease ends.
    permit: Option<Permit>,
    reservation: Option<Reservation>,
    /// Its place among its key's turns at once.
    key_slot: Option<OwnedSemaphorePermit>,
}

impl Gone {
    fn at(ran: Ran) -> Gone {
        Gone {
            ran,
            lease: None,
            permit: None,
            reservation: None,
            key_slot: None,
        }
    }
}

/// How a message's wait in line ended.
enum Waited {
    /// Its turn came; `behind`: another turn ran first, which may have changed the thread.
    Turn { behind: bool },
    /// Its caller withdrew it.
    Withdrawn,
}

impl Pipeline {
    /// Runs `plan`'s turn to its end, stored before the caller hears the outcome: exactly one
    /// `turn_finished` or `turn_failed`.
    pub(super) async fn run(
        &self,
        mut plan: TurnPlan,
        source: Source,
    ) -> Result<TurnReply, PipelineError> {
        let started = source.started();
        let thread = plan.thread.id.clone();
        let mut end = TurnEnder::new(self, &plan.user, plan.fence.as_ref());
        let mut ticket = None;
        let gone = match source {
            Source::Message(line) | Source::Redrive(line) => {
                let InLine {
                    ticket: mut place,
                    nesting,
                } = line;
                let waited = self.wait_in_line(&plan, &mut place).await;
                ticket = Some(place);
                let _acting = self.act(&plan);
                self.go_in_line(&mut plan, nesting, waited).await
            }
            Source::Cli { lease, adopted } => {
                let _acting = self.act(&plan);
                Ok(self.go_adopted(&plan, lease, adopted).await)
            }
        };
        let result = match gone {
            Ok((gone, tally)) => self.end(&plan, started, gone, tally, &mut end).await,
            Err(err) => Err(err),
        };
        if let Some(client) = &plan.client_message_id {
            self.inner.runtime.client_turn_ended(&thread, client);
        }
        if let Err(other) = &result {
            if !end.is_ended() {
                // Not the CLI (the store, the thread): the turn is over all the same, and the
                // message must not stay `pending`.
                let ending = Ending::failed(EndCause::Error, other.to_string());
                if let Err(err) = end.end(ending).await {
                    warn!(message_id = %plan.user.id, error = %err, "Could not end the failed turn.");
                }
            }
        }
        self.inner.runtime.end_recorded(&thread);
        match &result {
            Ok(reply) => {
                let trace = &plan.trace;
                trace.content(
                    "gen_ai.output.messages",
                    "assistant",
                    &reply.message.content,
                );
                plan.trace.end(None);
            }
            Err(err) => plan.trace.end(Some(&err.to_string())),
        }
        // Only now may the next message of the thread start.
        drop(ticket);
        result
    }

    /// Records whom the turn acts for while the guard lives: a child it delegates to acts for
    /// the same caller, unattended too.
    fn act(&self, plan: &TurnPlan) -> super::runtime::Acting {
        let runtime = &self.inner.runtime;
        runtime.act(&plan.thread.id, plan.caller.clone(), plan.unattended)
    }

    /// Stage 1 for a message: waits for the turns ahead of it; withdrawn when its caller stops
    /// its `clientMessageId` meanwhile.
    async fn wait_in_line(&self, plan: &TurnPlan, ticket: &mut QueueTicket) -> Waited {
        let queued = SystemTime::now();
        let thread = &plan.thread.id;
        let waited = match plan.client_message_id.as_deref() {
            None => Waited::Turn {
                behind: ticket.wait_turn().await,
            },
            Some(client) => {
                let runtime = &self.inner.runtime;
                let withdraw = runtime.line_up(thread, client);
                let waited = tokio::select! {
                    behind = ticket.wait_turn() => Waited::Turn { behind },
                    () = withdraw.cancelled() => Waited::Withdrawn,
                };
                let runs = matches!(waited, Waited::Turn { .. });
                runtime.left_line(thread, client, runs);
                waited
            }
        };
        plan.trace
            .past("queue", queued, SystemTime::now(), Vec::new());
        waited
    }

    /// Stages 2 to 4 for a message's turn.
    async fn go_in_line(
        &self,
        plan: &mut TurnPlan,
        nesting: Nesting,
        waited: Waited,
    ) -> Result<(Gone, TurnTally), PipelineError> {
        let mut tally = TurnTally::new(plan.unattended);
        let behind = match waited {
            Waited::Withdrawn => {
                let ran = Ran::NotStarted {
                    cause: EndCause::Withdrawn,
                    reason: "withdrawn by its caller while it waited in line".into(),
                    error: TurnError::Interrupted,
                };
                return Ok((Gone::at(ran), tally));
            }
            Waited::Turn { behind } => behind,
        };
        if let Some(ran) = self.not_starting(plan, behind).await? {
            return Ok((Gone::at(ran), tally));
        }
        // The key's turns at once: held until the turn ends, waited for before anything else.
        let key_slot = match &plan.key {
            Some(key) => self.inner.keys.turn_slot(key).await,
            None => None,
        };
        let reservation = match self.reserve(plan).await? {
            Ok(reservation) => reservation,
            Err(exceeded) => {
                let ran = Ran::Refused {
                    exceeded,
                    leased: false,
                };
                return Ok((Gone::at(ran), tally));
            }
        };
        self.turn_started(plan, None);
        let (ran, lease, permit) = self
            .checkout_and_drive(plan, nesting, &reservation, &mut tally)
            .await;
        let gone = Gone {
            ran,
            lease,
            permit,
            reservation: Some(reservation),
            key_slot,
        };
        Ok((gone, tally))
    }

    /// Why a message's turn does not start after its wait: shutdown began, or the thread was
    /// archived meanwhile (read again only when another turn ran first).
    async fn not_starting(
        &self,
        plan: &mut TurnPlan,
        behind: bool,
    ) -> Result<Option<Ran>, PipelineError> {
        if self.is_shutting_down() {
            // The grace period is for turns that are running, and a turn started now would
            // only be killed.
            return Ok(Some(Ran::NotStarted {
                cause: EndCause::Shutdown,
                reason: TurnError::ShuttingDown.to_string(),
                error: TurnError::ShuttingDown,
            }));
        }
        if behind {
            let thread = self
                .inner
                .parts
                .store
                .require_thread(&plan.thread.id)
                .await?;
            plan.charge = self.charge(&thread, &plan.caller).await?.1;
            plan.spec = self.spec_of(&thread, &plan.asked, &plan.trace);
            plan.thread = thread;
        }
        if plan.thread.archived_at.is_some() {
            // Archiving interrupts the thread's turns.
            return Ok(Some(Ran::NotStarted {
                cause: EndCause::Interrupted,
                reason: "the thread was archived before this turn started".into(),
                error: TurnError::Interrupted,
            }));
        }
        Ok(None)
    }

    /// Reserves the turn's estimate in every budget it is charged to, held until it ends: turns
    /// starting together see each other's. Its model requests are recorded under its message
    /// and span.
    async fn reserve(
        &self,
        plan: &TurnPlan,
    ) -> Result<Result<Reservation, BudgetExceeded>, PipelineError> {
        let inner = &self.inner;
        let reserved = inner
            .parts
            .budgets
            .reserve(&inner.parts.store, &plan.charge)
            .await?;
        if let Ok(reservation) = &reserved {
            reservation.on_message(&plan.user.id, plan.trace.traceparent());
        }
        Ok(reserved)
    }

    /// The turn has begun: `turn_started`, and the model on its span.
    pub(super) fn turn_started(&self, plan: &TurnPlan, source: Option<String>) {
        if let Some(model) = plan.model() {
            plan.trace
                .set([KeyValue::new("gen_ai.request.model", model)]);
        }
        self.inner.parts.events.emit(
            &plan.thread.id,
            Some(&plan.user.id),
            ThreadEvent::TurnStarted(TurnStarted {
                message_id: plan.user.id.clone(),
                origin: plan.user.origin,
                source,
            }),
        );
    }

    /// Stages 3 and 4 for a message's turn: checks out the thread's process, takes a place under
    /// the concurrency limit, checks the budgets again, sends the prompt and drives the turn.
    ///
    /// The permit comes after the checkout, so a turn that holds one never waits for anything but
    /// the CLI. Taken before, it would be held while the checkout waits for a pool slot, and the
    /// slot may be held by an idle process whose own thread's turn waits for that very permit:
    /// with `pool.max_capacity = 1` (so a limit of 1) the newcomer would push out the regular it
    /// should have let run. The cost: a throttled turn keeps its process while it waits, and a
    /// cold one starts its CLI first.
    async fn checkout_and_drive(
        &self,
        plan: &TurnPlan,
        nesting: Nesting,
        reservation: &Reservation,
        tally: &mut TurnTally,
    ) -> (Ran, Option<Lease>, Option<Permit>) {
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + plan.timeout;
        let unsent = |error| Ran::Unsent {
            error,
            leased: false,
        };
        let spec = match &plan.spec {
            Ok(spec) => spec,
            Err(err) => return (unsent(err.clone()), None, None),
        };
        if let Some(workspace) = plan.thread.workspace.as_deref() {
            if let Err(err) = inner.parts.workspaces.ready(workspace).await {
                let error = TurnError::WorkspaceUnavailable(err.to_string());
                return (unsent(error), None, None);
            }
        }
        let starting = inner.runtime.starting(&plan.thread.id);
        let meter = reservation.meter();
        let lease = match self.checkout(plan, spec, &meter, &starting, deadline).await {
            Ok(lease) => lease,
            Err(error) => return (unsent(error), None, None),
        };
        let user = &plan.user;
        let permit = self
            .take_permit(
                user,
                nesting,
                &starting,
                deadline,
                plan.timeout,
                &plan.trace,
            )
            .await;
        drop(starting);
        let mut permit = match permit {
            Ok(permit) => permit,
            // Stopped while it waited in line: the process was not used and stays warm.
            Err(error) => {
                return (
                    Ran::Unsent {
                        error,
                        leased: true,
                    },
                    Some(lease),
                    None,
                )
            }
        };
        // It may have waited while other turns spent past their estimates.
        match (inner.parts.budgets)
            .recheck(&inner.parts.store, &plan.charge, reservation)
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(exceeded)) => {
                let ran = Ran::Refused {
                    exceeded,
                    leased: true,
                };
                return (ran, Some(lease), Some(permit));
            }
            Err(err) => {
                warn!(thread_id = %user.thread_id, error = %err, "Could not check the budgets again; the turn runs on its reservation.");
            }
        }
        let ran = (self.send_and_drive(plan, &lease, &mut permit, deadline, tally)).await;
        (ran, Some(lease), Some(permit))
    }

    /// Stages 3 and 4 once the turn has its process and its permit: its prompt, with context,
    /// sent; the CLI's stream driven until its `result`.
    async fn send_and_drive(
        &self,
        plan: &TurnPlan,
        lease: &Lease,
        permit: &mut Permit,
        deadline: tokio::time::Instant,
        tally: &mut TurnTally,
    ) -> Ran {
        let user = &plan.user;
        let start = lease.session_start();
        tally.start = Some(start);
        let prompt = match self.prompt(plan, start).await {
            Ok(prompt) => prompt,
            Err(error) => {
                return Ran::Unsent {
                    error,
                    leased: true,
                }
            }
        };
        self.inner.parts.events.emit(
            &user.thread_id,
            Some(&user.id),
            ThreadEvent::ProcessReady(ProcessReady {
                start: start.into(),
                pid: Some(lease.pid()),
            }),
        );
        debug!(thread_id = %user.thread_id, pid = lease.pid(), ?start, "Turn sent.");
        let outcome = match lease.start_turn(&prompt).await {
            Ok(turn) => {
                let trace = &plan.trace;
                (self.drive(turn, user, deadline, tally, Some(permit), trace)).await
            }
            Err(err) => Err(err),
        };
        if let Some((asked, in_effect)) = lease.mode_narrowed() {
            warn!(thread_id = %user.thread_id, asked, in_effect, "The CLI ran the turn in a narrower permission mode than asked.");
            self.inner.parts.events.emit(
                &user.thread_id,
                Some(&user.id),
                ThreadEvent::PermissionModeNarrowed(PermissionModeNarrowed { asked, in_effect }),
            );
        }
        if let Ok(result) = &outcome {
            // Paid for whether or not the turn worked.
            tally.usage = Some(usage_of(result));
            permit.observe_result(result);
        }
        Ran::Sent(Box::new(outcome))
    }

    /// The thread's process, checked out for the turn: warm, or started now (a half-started one
    /// is killed when an interrupt cancels the wait), its requests counted by `meter`. Its start
    /// shows in the turn's trace.
    async fn checkout(
        &self,
        plan: &TurnPlan,
        spec: &crate::launch::ProcessSpec,
        meter: &crate::budget::Meter,
        starting: &super::runtime::Starting,
        deadline: tokio::time::Instant,
    ) -> Result<Lease, TurnError> {
        let checkout = plan.trace.child("checkout".into(), Vec::new());
        let asked = SystemTime::now();
        let lease = tokio::select! {
            lease = tokio::time::timeout_at(deadline, self.inner.parts.pool.checkout(spec, meter)) => {
                lease.map_err(|_| TurnError::TurnTimeout(plan.timeout))??
            }
            _ = starting.token.cancelled() => return Err(TurnError::Interrupted),
        };
        let start = lease.session_start();
        checkout.set([KeyValue::new("harness.start", start_label(start))]);
        if let Some(born) = lease.born().filter(|born| born.asked >= asked) {
            checkout.past("slot wait", born.asked, born.slot);
            checkout.past("spawn", born.slot, born.ready);
        }
        drop(checkout);
        // From here the turn may hand the process over (to a turn the CLI starts by itself)
        // before it records its end: that turn waits for the end (`after_recorded`).
        self.inner.runtime.hold(&plan.thread.id);
        if starting.token.is_cancelled() {
            // The interrupt came as the process became ready: it stays warm, the turn stops.
            lease.finish(Finish::Keep).await;
            return Err(TurnError::Interrupted);
        }
        Ok(lease)
    }

    /// The prompt, now that the session start is known: the context providers' additions, and
    /// the message's files' bytes.
    async fn prompt(
        &self,
        plan: &TurnPlan,
        start: SessionStart,
    ) -> Result<plugin_contract::UserContent, TurnError> {
        let inner = &self.inner;
        let prompt = context::prepare_prompt(
            &inner.parts.context,
            std::sync::Arc::new(inner.parts.store.clone()),
            &plan.thread.id,
            start,
            &plan.content,
        )
        .await;
        (inner.parts.files.resolve(prompt).await).map_err(|err| TurnError::Files(err.to_string()))
    }

    /// Stages 2 to 4 for a turn the CLI started by itself: charged before it runs on, like a
    /// message's (it holds its estimate while it runs, so turns running at once count, the one
    /// that just handed the process over included); over budget, the CLI is told to stop it now.
    async fn go_adopted(
        &self,
        plan: &TurnPlan,
        lease: Lease,
        adopted: Adopted,
    ) -> (Gone, TurnTally) {
        let mut tally = TurnTally::new(false);
        tally.start = Some(SessionStart::Warm);
        let (over_budget, reservation) = match self.reserve(plan).await {
            Ok(Ok(reservation)) => (None, Some(reservation)),
            Ok(Err(exceeded)) => (Some(exceeded), None),
            Err(err) => {
                warn!(thread_id = %plan.thread.id, error = %err, "Could not check the budgets of the CLI-started turn.");
                (None, None)
            }
        };
        if let Some(reservation) = &reservation {
            lease.meter_with(reservation.meter());
        }
        let turn = lease.cli_turn(adopted);
        if over_budget.is_some() {
            turn.interrupt_now();
        }
        let deadline = tokio::time::Instant::now() + plan.timeout;
        let trace = &plan.trace;
        let outcome = (self.drive(turn, &plan.user, deadline, &mut tally, None, trace)).await;
        tally.usage = outcome.as_ref().ok().map(usage_of);
        let ran = match over_budget {
            Some(exceeded) => Ran::Refused {
                exceeded,
                leased: true,
            },
            None => Ran::Sent(Box::new(outcome)),
        };
        let gone = Gone {
            ran,
            lease: Some(lease),
            permit: None,
            reservation,
            key_slot: None,
        };
        (gone, tally)
    }

    /// Stage 5: what the turn came to, its process finished accordingly, its ending stored, its
    /// spending settled, counted and logged.
    async fn end(
        &self,
        plan: &TurnPlan,
        started: Started,
        gone: Gone,
        mut tally: TurnTally,
        end: &mut TurnEnder,
    ) -> Result<TurnReply, PipelineError> {
        let Gone {
            ran,
            lease,
            permit,
            reservation,
            key_slot,
        } = gone;
        // The gateway's meter is read once, as the turn's cost is about to be stored.
        if let Some(reservation) = &reservation {
            tally.meter(reservation.close_meter());
        }
        // A turn that never started (withdrawn, or stopped as it came up) is no turn in the
        // metrics.
        let started_at_all = !matches!(ran, Ran::NotStarted { .. });
        let conclusion = conclude(Facts {
            started,
            ran,
            stopped_by: reservation.as_ref().and_then(Reservation::refused),
            usage: tally.usage,
            session: lease.as_ref().and_then(Lease::session_id),
            model: plan.model(),
            schema: plan.thread.output_schema.as_ref(),
            timeout: plan.timeout,
            shutting_down: self.is_shutting_down(),
        });
        if let Some(lease) = lease {
            if conclusion.finish == Some(Finish::Discard) {
                warn!(thread_id = %plan.thread.id, pid = lease.pid(), "Turn failed; evicting the process.");
            }
            lease
                .finish(conclusion.finish.unwrap_or(Finish::Discard))
                .await;
        }
        // The permit is given back last, once the process is settled.
        drop(permit);
        if !matches!(conclusion.answer, Answer::Refused(_)) {
            plan.trace.set(turn_attributes(&tally));
        }
        let counted = started_at_all.then_some(&tally);
        let result = self.store_end(plan, conclusion, end, counted).await;
        self.count_usage(tally.usage.as_ref());
        if let Some(reservation) = reservation {
            reservation.settle(tally.usage.as_ref().map(|u| u.cost_usd));
        }
        drop(key_slot);
        result
    }

    /// Stores the turn's ending and answers its caller; counts and logs the outcome of a turn
    /// that started (`tally`: what it showed), logs one that never did.
    async fn store_end(
        &self,
        plan: &TurnPlan,
        conclusion: Conclusion,
        end: &mut TurnEnder,
        tally: Option<&TurnTally>,
    ) -> Result<TurnReply, PipelineError> {
        let user = &plan.user;
        let Conclusion { ending, answer, .. } = conclusion;
        let done = ending.cause == EndCause::Done;
        let ended = match end.end(ending).await {
            Ok(ended) => ended,
            Err(err) => {
                warn!(message_id = %user.id, error = %err, "Could not store the turn's end.");
                if done {
                    let ending = Ending::failed(EndCause::Error, err.to_string());
                    if let Err(err) = end.end(ending).await {
                        warn!(message_id = %user.id, error = %err, "Could not end the turn.");
                    }
                }
                return Err(err.into());
            }
        };
        match answer {
            Answer::Refused(exceeded) => Err(self.refused(user, exceeded)),
            Answer::Reply { session, api_calls } => {
                if let Some(tally) = tally {
                    let ms = tally.elapsed().as_millis() as u64;
                    (self.inner.turns).finished(tally.is_warm(), "done", tally.elapsed());
                    info!(
                        thread_id = %user.thread_id, message_id = %user.id, start = ?tally.start, warm = tally.is_warm(),
                        origin = user.origin.as_str(), ms, api_calls, tool_calls = tally.tool_calls, outcome = "done", "Turn finished."
                    );
                }
                // `None`: shutdown ended it as it finished; the reply was not stored.
                let Some(message) = ended.and_then(|ended| ended.reply) else {
                    return Err(PipelineError::Turn {
                        message_id: user.id.clone(),
                        status: crate::store::MessageStatus::Interrupted,
                        error: TurnError::ShuttingDown,
                    });
                };
                Ok(TurnReply {
                    message,
                    thread_id: user.thread_id.clone(),
                    session_id: session,
                    user_message_id: user.id.clone(),
                })
            }
            Answer::Failed { status, error } => {
                let Some(tally) = tally else {
                    info!(thread_id = %user.thread_id, message_id = %user.id, outcome = ?status, reason = %error, "Message ended before its turn started.");
                    return Err(PipelineError::Turn {
                        message_id: user.id.clone(),
                        status,
                        error,
                    });
                };
                let ms = tally.elapsed().as_millis() as u64;
                (self.inner.turns).finished(tally.is_warm(), status.as_str(), tally.elapsed());
                warn!(
                    thread_id = %user.thread_id, message_id = %user.id, start = tally.label(),
                    origin = user.origin.as_str(), ms, tool_calls = tally.tool_calls, outcome = ?status,
                    error = %error, "Turn failed."
                );
                Err(PipelineError::Turn {
                    message_id: user.id.clone(),
                    status,
                    error,
                })
            }
        }
    }

    /// A turn a budget refused: counted and logged; the error its caller reports.
    fn refused(&self, user: &MessageRow, exceeded: BudgetExceeded) -> PipelineError {
        let budget = exceeded.budget.as_str();
        self.inner.turns.refused(budget);
        info!(
            thread_id = %user.thread_id, message_id = %user.id, budget,
            limit_usd = exceeded.limit_usd, spent_usd = exceeded.spent_usd,
            "Message refused: a budget is spent."
        );
        PipelineError::BudgetExceeded {
            message_id: user.id.clone(),
            exceeded,
        }
    }

    /// A refusal as the message arrives: its turn ended, refused.
    pub(super) async fn refuse(
        &self,
        user: &MessageRow,
        exceeded: BudgetExceeded,
    ) -> PipelineError {
        let mut end = TurnEnder::new(self, user, None);
        if let Err(err) = end.end(Ending::refused(exceeded.clone())).await {
            return err.into();
        }
        self.refused(user, exceeded)
    }

    pub(super) fn count_usage(&self, usage: Option<&Usage>) {
        if let Some(usage) = usage {
            self.inner.turns.usage(&usage.tokens(), usage.cost_usd);
        }
    }
}

/// The root span's figures of a turn: how its process started, its usage and cost.
fn turn_attributes(tally: &TurnTally) -> Vec<KeyValue> {
    let mut attributes = vec![KeyValue::new("harness.tool_calls", tally.tool_calls as i64)];
    if let Some(start) = tally.start {
        attributes.push(KeyValue::new("harness.start", start_label(start)));
    }
    if let Some(usage) = &tally.usage {
        attributes.extend([
            KeyValue::new("gen_ai.usage.input_tokens", usage.input_tokens),
            KeyValue::new("gen_ai.usage.output_tokens", usage.output_tokens),
            KeyValue::new(
                "gen_ai.usage.cache_read.input_tokens",
                usage.cache_read_tokens,
            ),
            KeyValue::new(
                "gen_ai.usage.cache_creation.input_tokens",
                usage.cache_write_tokens,
            ),
            KeyValue::new("harness.cost_usd", usage.cost_usd),
        ]);
    }
    attributes
}

/// How a turn's process started, as its spans name it.
fn start_label(start: SessionStart) -> &'static str {
    match start {
        SessionStart::Warm => "warm",
        SessionStart::Resumed => "resumed",
        SessionStart::Fresh { .. } => "fresh",
    }
}
