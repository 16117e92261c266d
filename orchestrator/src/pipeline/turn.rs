//! One turn: wait for the thread's place in line, check out its process, take a place under the
//! concurrency limit (`throttle`; a permit holder waits for nothing but the CLI), add context, run
//! the turn (idle and total timeouts, the idle one paused while the CLI waits on us; the
//! tool-call cap, which interrupts the turn; tool calls run with the turn's context), store the
//! outcome, and end the turn on the event stream exactly once. An interrupt while the turn waits
//! for its process cancels the wait and kills a half-started process. A thread with an
//! `outputSchema` has the `result`'s `structured_output` checked against it, else the turn fails.

use std::time::{Duration, Instant, SystemTime};

use claude_cli::TurnResult;
use opentelemetry::KeyValue;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::end::TurnEnder;
use super::queue::QueueTicket;
use super::spans::TurnSpans;
use super::tally::{usage_of, Recheck, TurnTally};
use super::{context, Nesting, NewMessage, Pipeline, PipelineError, TurnReply};
use crate::api::events::{ProcessReady, ThreadEvent, TurnStarted, TurnThrottled};
use crate::budget::BudgetExceeded;
use crate::events::{Reply, TurnEnding};
use crate::launch::ProcessSpec;
use crate::pool::{Finish, LeasedTurn, TurnItem};
use crate::store::{EndCause, MessageRow, MessageStatus, Usage};
use crate::throttle::{Admission, Permit};
use crate::traces::TurnTrace;
use crate::turn_error::TurnError;

impl Pipeline {
    /// Runs the message's turn once the ones ahead of it are done, and ends it on the event
    /// stream: `turn_finished` or `turn_failed`, stored before the caller hears the outcome.
    pub(super) async fn run_in_turn(
        &self,
        user: &MessageRow,
        msg: NewMessage,
        mut ticket: QueueTicket,
        nesting: Nesting,
    ) -> Result<TurnReply, PipelineError> {
        let client = msg.client_message_id.clone();
        let trace = self.inner.traces.turn(
            msg.traceparent.as_deref(),
            user.thread_id.as_str(),
            user.id.as_str(),
        );
        trace.content("gen_ai.input.messages", "user", &user.content);
        let queued = SystemTime::now();
        let withdrawn = !self
            .wait_turn(&user.thread_id, client.as_deref(), &mut ticket)
            .await;
        trace.past("queue", queued, SystemTime::now(), Vec::new());
        let mut end = TurnEnder::new(self, user, msg.fence.as_ref());
        let _acting = Acting::mark(self, &user.thread_id, &msg);
        let result = if withdrawn {
            self.withdrawn(user, &mut end).await
        } else {
            let result = self.execute(user, msg, nesting, &mut end, &trace).await;
            if client.is_some() {
                self.turn_ended(&user.thread_id);
            }
            result
        };
        if let Err(other) = &result {
            if !end.is_ended() {
                // Not the CLI (the store, the thread): the turn is over all the same, and the
                // message must not stay `pending`.
                let ending = TurnEnding::failed(EndCause::Error, other.to_string());
                if let Err(err) = end.end(ending).await {
                    warn!(message_id = %user.id, error = %err, "Could not end the failed turn.");
                }
            }
        }
        self.end_recorded(&user.thread_id);
        match &result {
            Ok(reply) => {
                trace.content(
                    "gen_ai.output.messages",
                    "assistant",
                    &reply.message.content,
                );
                trace.end(None);
            }
            Err(err) => trace.end(Some(&err.to_string())),
        }
        // Only now may the next message of the thread start.
        drop(ticket);
        result
    }

    async fn execute(
        &self,
        user: &MessageRow,
        msg: NewMessage,
        nesting: Nesting,
        end: &mut TurnEnder,
        trace: &TurnTrace,
    ) -> Result<TurnReply, PipelineError> {
        let inner = &self.inner;
        if self.is_shutting_down() {
            // Shutdown began while this message waited in line: the grace period is for turns
            // that are running, and a turn started now would only be killed.
            let error = TurnError::ShuttingDown;
            let status = MessageStatus::Interrupted;
            let ending = TurnEnding::failed(EndCause::Shutdown, error.to_string());
            end.end(ending).await?;
            return Err(PipelineError::Turn {
                message_id: user.id.clone(),
                status,
                error,
            });
        }
        let thread = inner.store.require_thread(&user.thread_id).await?;
        if thread.archived_at.is_some() {
            // Archived while this message waited in line: archiving interrupts its turns.
            let error = TurnError::Interrupted;
            let status = MessageStatus::Interrupted;
            let reason = "the thread was archived before this turn started";
            end.end(TurnEnding::failed(EndCause::Interrupted, reason))
                .await?;
            return Err(PipelineError::Turn {
                message_id: user.id.clone(),
                status,
                error,
            });
        }
        // The key's turns at once: held until the turn ends, waited for before anything else.
        let key = inner.keys.of(&msg.caller).await?;
        let _key_slot = match &key {
            Some(key) => inner.keys.turn_slot(key).await,
            None => None,
        };
        // Held until the turn ends: turns starting together see each other's.
        let charge = crate::budget::Budgets::charge(&inner.store, thread.clone())
            .await?
            .with_key(key.as_ref());
        let reservation = match inner.budgets.reserve(&inner.store, &charge).await? {
            Ok(reservation) => reservation,
            Err(exceeded) => {
                let ending = TurnEnding::refused(exceeded.clone());
                return Err(self.store_refusal(user, exceeded, ending, end).await);
            }
        };
        // Its model requests are recorded under its message and span.
        reservation.on_message(&user.id, trace.traceparent());
        let model = msg.model.clone().or(thread.model.clone());
        if let Some(model) = &model {
            trace.set([KeyValue::new("gen_ai.request.model", model.clone())]);
        }
        inner.events.emit(
            &thread.id,
            Some(&user.id),
            ThreadEvent::TurnStarted(TurnStarted {
                message_id: user.id.clone(),
                origin: user.origin,
                source: None,
            }),
        );
        let started = Instant::now();
        let timeout = msg.timeout.unwrap_or(inner.settings.turn_timeout);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut tally = TurnTally {
            unattended: msg.unattended,
            ..TurnTally::default()
        };
        let mut refused = None;
        let spec = inner
            .pool
            .spec(&thread, model.clone())
            .map(|mut spec| {
                if msg.permission_mode.is_some() {
                    spec.options
                        .permission_mode
                        .clone_from(&msg.permission_mode);
                }
                spec.mcp_servers.clone_from(&msg.mcp_servers);
                spec.traceparent = trace.traceparent();
                spec
            })
            .map_err(|err| TurnError::ProfileUnavailable(err.to_string()));
        let ready = match thread.workspace.as_deref() {
            Some(workspace) => inner.workspaces.ready(workspace).await,
            None => Ok(()),
        };
        let outcome = match (spec, ready) {
            (Err(err), _) => Err(err),
            (_, Err(err)) => Err(TurnError::WorkspaceUnavailable(err.to_string())),
            (Ok(spec), Ok(())) => {
                self.checkout_and_run(
                    user,
                    &msg,
                    &spec,
                    thread.output_schema.as_ref(),
                    deadline,
                    timeout,
                    &mut tally,
                    nesting,
                    trace,
                    Recheck {
                        charge: &charge,
                        reservation: &reservation,
                        refused: &mut refused,
                    },
                )
                .await
            }
        };
        // The gateway's meter is read once, as the turn's cost is about to be stored.
        tally.meter(reservation.close_meter());
        if let Some(exceeded) = refused {
            // Refused once it had its process: nothing reached the CLI.
            let ending = TurnEnding::refused(exceeded.clone());
            return Err(self.store_refusal(user, exceeded, ending, end).await);
        }
        if let (Some(exceeded), Err(_)) = (reservation.refused(), &outcome) {
            // A budget ran out during the turn: the gateway refused a model request, and the
            // CLI ended the turn (a turn that still finished, its refused request a side one,
            // keeps its reply).
            let ending = TurnEnding::stopped(exceeded.clone()).with_spending(None, tally.usage);
            let refused = self.store_refusal(user, exceeded, ending, end).await;
            self.count_usage(tally.usage.as_ref());
            reservation.settle(tally.usage.as_ref().map(|u| u.cost_usd));
            return Err(refused);
        }
        trace.set(turn_attributes(&tally));
        match outcome {
            Ok(done) => {
                let reply = Reply {
                    text: done.text,
                    model: model.clone(),
                    structured_output: done.structured_output,
                };
                let ending = TurnEnding::done(reply, done.session_id.clone(), tally.usage);
                let ended = end.end(ending).await?;
                self.count_usage(tally.usage.as_ref());
                reservation.settle(tally.usage.as_ref().map(|u| u.cost_usd));
                inner
                    .turns
                    .finished(tally.is_warm(), "done", started.elapsed());
                info!(
                    thread_id = %thread.id, message_id = %user.id, start = ?tally.start, warm = tally.is_warm(),
                    ms = started.elapsed().as_millis() as u64, api_calls = done.num_turns,
                    tool_calls = tally.tool_calls, outcome = "done", "Turn finished."
                );
                // `None`: shutdown ended it as it finished; the reply was not stored.
                let Some(message) = ended.and_then(|ended| ended.reply) else {
                    return Err(PipelineError::Turn {
                        message_id: user.id.clone(),
                        status: MessageStatus::Interrupted,
                        error: TurnError::ShuttingDown,
                    });
                };
                Ok(TurnReply {
                    message,
                    thread_id: thread.id,
                    session_id: done.session_id,
                    user_message_id: user.id.clone(),
                })
            }
            Err(error) => {
                let cause = error.to_string();
                let (ends, error) = match error {
                    // A turn that met a result for another message (a turn the CLI started by
                    // itself) never ran as asked: it may be sent again, and runs on a new process.
                    TurnError::Interrupted
                    | TurnError::Process(claude_cli::CliError::Unpaired { .. }) => {
                        (EndCause::Interrupted, error)
                    }
                    // Killed by shutdown (the process death is only how): the user did nothing
                    // wrong and may send it again.
                    TurnError::ShuttingDown => (EndCause::Shutdown, error),
                    _ if self.is_shutting_down() => (EndCause::Shutdown, TurnError::ShuttingDown),
                    other => (EndCause::Error, other),
                };
                let status = ends.status();
                let ending =
                    TurnEnding::failed(ends, error.to_string()).with_spending(None, tally.usage);
                end.end(ending).await?;
                self.count_usage(tally.usage.as_ref());
                reservation.settle(tally.usage.as_ref().map(|u| u.cost_usd));
                inner
                    .turns
                    .finished(tally.is_warm(), status.as_str(), started.elapsed());
                warn!(
                    thread_id = %thread.id, message_id = %user.id, start = tally.label(),
                    ms = started.elapsed().as_millis() as u64, tool_calls = tally.tool_calls,
                    outcome = ?status, error = %cause, "Turn failed."
                );
                Err(PipelineError::Turn {
                    message_id: user.id.clone(),
                    status,
                    error,
                })
            }
        }
    }

    /// Ends the turn as refused by a budget, and returns the error its caller reports.
    pub(super) async fn store_refusal(
        &self,
        user: &MessageRow,
        exceeded: BudgetExceeded,
        ending: TurnEnding,
        end: &mut TurnEnder,
    ) -> PipelineError {
        if let Err(err) = end.end(ending).await {
            return err.into();
        }
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
        let ending = TurnEnding::refused(exceeded.clone());
        self.store_refusal(user, exceeded, ending, &mut end).await
    }

    pub(super) fn count_usage(&self, usage: Option<&Usage>) {
        if let Some(usage) = usage {
            self.inner.turns.usage(&usage.tokens(), usage.cost_usd);
        }
    }

    /// Checks out the thread's process, takes a place under the concurrency limit, prepares the
    /// prompt now that the session start is known, runs the turn, and ends the lease according to
    /// how the turn went. The permit is dropped last, on every path.
    ///
    /// The permit comes after the checkout, so a turn that holds one never waits for anything but
    /// the CLI. Taken before, it would be held while the checkout waits for a pool slot, and the
    /// slot may be held by an idle process whose own thread's turn waits for that very permit:
    /// with `pool.max_capacity = 1` (so a limit of 1) the newcomer would push out the regular it
    /// should have let run. The cost: a throttled turn keeps its process while it waits, and a
    /// cold one starts its CLI first.
    #[allow(clippy::too_many_arguments)]
    async fn checkout_and_run(
        &self,
        user: &MessageRow,
        msg: &NewMessage,
        spec: &ProcessSpec,
        schema: Option<&serde_json::Value>,
        deadline: tokio::time::Instant,
        timeout: Duration,
        tally: &mut TurnTally,
        nesting: Nesting,
        trace: &TurnTrace,
        recheck: Recheck<'_>,
    ) -> Result<Done, TurnError> {
        let inner = &self.inner;
        let starting = Starting::new(self, &user.thread_id);
        let checkout = trace.child("checkout".into(), Vec::new());
        let asked = SystemTime::now();
        let lease = tokio::select! {
            lease = tokio::time::timeout_at(
                deadline,
                inner.pool.checkout(spec),
            ) => lease.map_err(|_| TurnError::TurnTimeout(timeout))??,
            // Interrupted while its process starts: a half-started process is killed with
            // the dropped checkout.
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
        crate::sync::lock(&inner.holding).insert(user.thread_id.clone());
        if starting.token.is_cancelled() {
            // The interrupt came as the process became ready: it stays warm, the turn stops.
            lease.finish(Finish::Keep).await;
            return Err(TurnError::Interrupted);
        }
        let mut permit = match self
            .take_permit(user, nesting, &starting, deadline, timeout, trace)
            .await
        {
            Ok(permit) => permit,
            Err(err) => {
                // Stopped while it waited in line: the process was not used and stays warm.
                lease.finish(Finish::Keep).await;
                return Err(err);
            }
        };
        drop(starting);
        // It may have waited while other turns spent past their estimates.
        match (inner.budgets)
            .recheck(&inner.store, recheck.charge, recheck.reservation)
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(exceeded)) => {
                lease.finish(Finish::Keep).await;
                *recheck.refused = Some(exceeded);
                // Not reported: the caller reports the refusal it finds in `refused`.
                return Err(TurnError::Interrupted);
            }
            Err(err) => {
                warn!(thread_id = %user.thread_id, error = %err, "Could not check the budgets again; the turn runs on its reservation.");
            }
        }
        tally.start = Some(start);
        let prompt = context::prepare_prompt(
            &inner.context,
            std::sync::Arc::new(inner.store.clone()),
            &user.thread_id,
            start,
            &msg.content,
        )
        .await;
        let prompt = match inner.files.resolve(prompt).await {
            Ok(prompt) => prompt,
            Err(err) => {
                lease.finish(Finish::Keep).await;
                return Err(TurnError::Files(err.to_string()));
            }
        };
        inner.events.emit(
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
                let permit = Some(&mut permit);
                self.drive(turn, user, deadline, tally, permit, trace).await
            }
            Err(err) => Err(err),
        };
        if let Ok(result) = &outcome {
            // Paid for whether or not the turn worked.
            tally.usage = Some(usage_of(result));
            permit.observe_result(result);
        }
        match outcome {
            Ok(result) if !result.is_error => {
                let session_id = result
                    .session_id
                    .clone()
                    .map(plugin_contract::CliSessionId::from_string)
                    .or_else(|| lease.session_id());
                lease.finish(Finish::Keep).await;
                let structured_output = match schema {
                    Some(schema) => Some(structured(schema, result.structured_output)?),
                    None => None,
                };
                Ok(Done {
                    text: result.text.unwrap_or_default(),
                    structured_output,
                    session_id,
                    num_turns: result.num_turns,
                })
            }
            Ok(result) if result.subtype == "error_max_structured_output_retries" => {
                // The model failed the schema; the process itself is fine.
                lease.finish(Finish::Keep).await;
                Err(TurnError::StructuredOutput(format!(
                    "the CLI gave up (error_max_structured_output_retries): {}",
                    result.error_reason()
                )))
            }
            Ok(result) if result.was_interrupted() => {
                // An interrupt: the process stays usable.
                lease.finish(Finish::Keep).await;
                Err(TurnError::Interrupted)
            }
            Ok(result) => {
                // Also after an API failure (a 529 once the CLI's retries ran out), though the
                // process is healthy: kept, it sends the failed prompt again merged into the next
                // one (measured: the next request's last user text held both), while a process
                // that resumes the session sends only the new prompt.
                let reason = result.error_reason();
                warn!(thread_id = %user.thread_id, pid = lease.pid(), %reason, "Turn failed; evicting the process.");
                lease.finish(Finish::Discard).await;
                Err(TurnError::Cli(crate::turn_error::for_clients(&reason)))
            }
            Err(err @ TurnError::ToolCallLimit(_)) => {
                // Stopped by an interrupt: the process stays usable.
                lease.finish(Finish::Keep).await;
                Err(err)
            }
            Err(err) => {
                // The turn only knows its deadline; the user set (and should read) the total.
                let err = match err {
                    TurnError::TurnTimeout(_) => TurnError::TurnTimeout(timeout),
                    other => other,
                };
                warn!(thread_id = %user.thread_id, pid = lease.pid(), error = %err, "Turn failed; evicting the process.");
                lease.finish(Finish::Discard).await;
                Err(err)
            }
        }
    }

    /// A place under the concurrency limit: at once, or after waiting in line (announced with one
    /// `turn_throttled` event). The wait ends early on an interrupt, the turn's deadline or
    /// shutdown; leaving the line frees the place.
    async fn take_permit(
        &self,
        user: &MessageRow,
        nesting: Nesting,
        starting: &Starting<'_>,
        deadline: tokio::time::Instant,
        timeout: Duration,
        trace: &TurnTrace,
    ) -> Result<Permit, TurnError> {
        let inner = &self.inner;
        let queued = match nesting {
            Nesting::InToolCall => return Ok(inner.throttle.admit_nested()),
            Nesting::TopLevel => match inner.throttle.admit() {
                Admission::Now(permit) => return Ok(permit),
                Admission::Queued(queued) => queued,
            },
        };
        inner.events.emit(
            &user.thread_id,
            Some(&user.id),
            ThreadEvent::TurnThrottled(TurnThrottled {
                message_id: user.id.clone(),
                limit: queued.limit as u64,
                running: queued.running as u64,
                position: queued.position as u64,
            }),
        );
        debug!(
            thread_id = %user.thread_id, limit = queued.limit, running = queued.running,
            position = queued.position, "Turn waits for the concurrency limit."
        );
        let _waiting = trace.child("throttle".into(), Vec::new());
        tokio::select! {
            permit = tokio::time::timeout_at(deadline, queued.wait()) => {
                permit.map_err(|_| TurnError::TurnTimeout(timeout))
            }
            _ = starting.token.cancelled() => Err(TurnError::Interrupted),
            _ = inner.stopping.cancelled() => Err(TurnError::ShuttingDown),
        }
    }

    /// Streams `turn` (ours once its prompt is written, or one the CLI started by itself) until
    /// its `result`: events to the thread's stream (and to the permit, which watches for the
    /// API's push-back), tool calls run with the turn's context, spans to its trace. Idle time
    /// counts only while the CLI is not waiting on us. `permit` is the turn's place under the
    /// concurrency limit, when it took one.
    pub(super) async fn drive(
        &self,
        mut turn: LeasedTurn<'_>,
        user: &MessageRow,
        deadline: tokio::time::Instant,
        tally: &mut TurnTally,
        mut permit: Option<&mut Permit>,
        trace: &TurnTrace,
    ) -> Result<TurnResult, TurnError> {
        let inner = &self.inner;
        let metered = |response: &str| inner.budgets.response_usage(&user.thread_id, response);
        let mut spans = TurnSpans::new(trace, &metered);
        let idle = inner.settings.idle_timeout;
        let max_tool_calls = turn
            .max_tool_calls()
            .unwrap_or(inner.settings.max_tool_calls);
        // Tool calls of this turn; the ones still running when it ends are stopped.
        let mut tools = JoinSet::new();
        let mut last_output = tokio::time::Instant::now();
        let mut over_limit = false;
        loop {
            tokio::select! {
                item = turn.next() => {
                    last_output = tokio::time::Instant::now();
                    match item? {
                        TurnItem::ModelCall(call) => spans.model_call(call),
                        TurnItem::Event(event) => {
                            spans.event(&event);
                            if tally.observe(&event) > u64::from(max_tool_calls) && !over_limit {
                                over_limit = true;
                                warn!(tool_calls = tally.tool_calls, limit = max_tool_calls, "Too many tool calls in one turn; stopping it.");
                                turn.interrupt_now();
                            }
                            if let Some(permit) = permit.as_deref_mut() {
                                permit.observe(&event);
                            }
                            inner.events.emit(&user.thread_id, Some(&user.id), event.into());
                        }
                        TurnItem::Alive => {}
                        TurnItem::ToolCall(pending) => {
                            let mcp = inner.mcp.clone();
                            let (call, reply) = pending.into_parts();
                            let plugin = mcp.registry().get(&call.name).map(|t| t.plugin.as_str());
                            let parent = spans.our_tool(call.tool_use_id(), &call.name, plugin);
                            let ctx = self.traced_tool_context(user.thread_id.clone(), parent);
                            tools.spawn(async move { reply.send(mcp.call(call, ctx).await) });
                        }
                        TurnItem::Permission(request) => {
                            let approvals = inner.approvals.clone();
                            let asked = crate::approvals::Request {
                                request_id: request.request_id().to_owned(),
                                thread: user.thread_id.clone(),
                                message: Some(user.id.clone()),
                                tool_name: request.tool_name().to_owned(),
                                input: request.input(),
                                tool_use_id: request.tool_use_id().map(str::to_owned),
                                cwd: turn.workdir().to_path_buf(),
                                profile: turn.profile().to_owned(),
                                unattended: tally.unattended,
                            };
                            let waiting = spans.approval(request.tool_name());
                            tools.spawn(async move {
                                let decision = approvals.decide(asked).await;
                                drop(waiting);
                                request.answer(decision)
                            });
                        }
                        TurnItem::Done(result) => {
                            if over_limit {
                                return Err(TurnError::ToolCallLimit(max_tool_calls));
                            }
                            return Ok(*result);
                        }
                    }
                }
                _ = tokio::time::sleep_until(last_output + idle) => {
                    if turn.waiting_on_host() {
                        last_output = tokio::time::Instant::now();
                        continue;
                    }
                    return Err(TurnError::IdleTimeout(idle));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    // Only the caller knows the turn's total (it started the clock).
                    return Err(TurnError::TurnTimeout(Duration::ZERO));
                }
            }
        }
    }
}

/// A turn waiting for its process, registered so that an interrupt can cancel the wait.
struct Starting<'a> {
    pipeline: &'a Pipeline,
    thread: plugin_contract::ThreadId,
    token: tokio_util::sync::CancellationToken,
}

impl<'a> Starting<'a> {
    fn new(pipeline: &'a Pipeline, thread: &plugin_contract::ThreadId) -> Self {
        let token = tokio_util::sync::CancellationToken::new();
        crate::sync::lock(&pipeline.inner.starting).insert(thread.clone(), token.clone());
        Starting {
            pipeline,
            thread: thread.clone(),
            token,
        }
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        crate::sync::lock(&self.pipeline.inner.starting).remove(&self.thread);
    }
}

impl Pipeline {
    /// The thread's turn has recorded its end: a turn the CLI started on its process may go on.
    fn end_recorded(&self, thread: &plugin_contract::ThreadId) {
        if crate::sync::lock(&self.inner.holding).remove(thread) {
            self.inner.recorded.notify_waiters();
        }
    }

    /// Waits (a few seconds at most) until the turn that held the thread's process has recorded
    /// its end, so that what the CLI starts next on it comes after that turn in the thread.
    pub(super) async fn after_recorded(&self, thread: &plugin_contract::ThreadId) {
        let inner = &self.inner;
        let wait = async {
            loop {
                let notified = inner.recorded.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !crate::sync::lock(&inner.holding).contains(thread) {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .is_err()
        {
            warn!(thread_id = %thread, "The turn before the CLI's own did not record its end within 5 s; going on.");
        }
    }
}

/// Records, while it lives, whom the thread's running turn acts for and whether anyone attends
/// it, so that a child it delegates to acts for the same caller, unattended too.
struct Acting<'a> {
    pipeline: &'a Pipeline,
    thread: plugin_contract::ThreadId,
}

impl<'a> Acting<'a> {
    fn mark(pipeline: &'a Pipeline, thread: &plugin_contract::ThreadId, msg: &NewMessage) -> Self {
        let facts = (msg.caller.clone(), msg.unattended);
        crate::sync::lock(&pipeline.inner.acting).insert(thread.clone(), facts);
        Acting {
            pipeline,
            thread: thread.clone(),
        }
    }
}

impl Drop for Acting<'_> {
    fn drop(&mut self) {
        crate::sync::lock(&self.pipeline.inner.acting).remove(&self.thread);
    }
}

/// The turn's structured output, checked against the thread's schema.
fn structured(
    schema: &serde_json::Value,
    output: Option<serde_json::Value>,
) -> Result<serde_json::Value, TurnError> {
    let Some(output) = output else {
        return Err(TurnError::StructuredOutput(
            "the model answered without calling StructuredOutput".into(),
        ));
    };
    let compiled =
        crate::mcp::schema::OutputSchema::compile(schema).map_err(TurnError::StructuredOutput)?;
    compiled.check(&output).map_err(|problems| {
        TurnError::StructuredOutput(format!(
            "the output does not match outputSchema: {problems}"
        ))
    })?;
    Ok(output)
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
fn start_label(start: plugin_contract::SessionStart) -> &'static str {
    match start {
        plugin_contract::SessionStart::Warm => "warm",
        plugin_contract::SessionStart::Resumed => "resumed",
        plugin_contract::SessionStart::Fresh { .. } => "fresh",
    }
}

/// A successful turn.
struct Done {
    text: String,
    /// For a thread with an `outputSchema`: the validated value.
    structured_output: Option<serde_json::Value>,
    session_id: Option<plugin_contract::CliSessionId>,
    num_turns: u64,
}
