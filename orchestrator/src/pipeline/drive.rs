//! Driving a turn on its process: a place under the concurrency limit first ([`Pipeline::take_permit`],
//! for a message's turn), then the CLI's stream until its `result` ([`Pipeline::drive`]): events
//! to the thread's stream, tool calls run with the turn's context, permissions to `approvals`,
//! spans to its trace, the idle and total timeouts and the tool-call cap its process's profile
//! sets.

use std::time::Duration;

use claude_cli::TurnResult;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use super::runtime::Starting;
use super::spans::TurnSpans;
use super::tally::TurnTally;
use super::{Nesting, Pipeline};
use crate::api::events::{ClientToolCall, ClientToolState, ThreadEvent, TurnThrottled};
use crate::mcp::{ClientCall, WaitingCall};
use crate::pool::{CallReply, LeasedTurn, PermissionRequest, TurnItem};
use crate::store::MessageRow;
use crate::throttle::{Admission, Permit};
use crate::traces::TurnTrace;
use crate::turn_error::TurnError;

impl Pipeline {
    /// A place under the concurrency limit: at once, or after waiting in line (announced with one
    /// `turn_throttled` event). The wait ends early on an interrupt, the turn's deadline or
    /// shutdown; leaving the line frees the place.
    pub(super) async fn take_permit(
        &self,
        user: &MessageRow,
        nesting: Nesting,
        starting: &Starting,
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
        inner.parts.events.emit(
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

    /// A call to a tool the client runs, waiting: recorded as `waiting` (the session goes idle
    /// for the client), then as the client's answer (or the CLI's cancel) when it comes, which
    /// goes to the CLI. Dropped with the turn's tool calls when the turn ends, it waits no more.
    fn client_answer(
        &self,
        user: &MessageRow,
        waiting: WaitingCall,
        reply: CallReply,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let events = self.inner.parts.events.clone();
        let mcp = self.inner.parts.mcp.clone();
        let (thread, message) = (user.thread_id.clone(), user.id.clone());
        let (tool_use_id, name) = (waiting.tool_use_id.clone(), waiting.name.clone());
        debug!(thread_id = %thread, tool = %name, "A tool call waits for the client.");
        let record = move |state, answer: Option<&crate::mcp::ClientAnswer>| {
            ThreadEvent::ClientToolCall(ClientToolCall {
                tool_use_id: tool_use_id.clone(),
                name: name.clone(),
                state,
                content: answer.map(|a| serde_json::to_value(&a.content).unwrap_or_default()),
                is_error: answer.map(|a| a.is_error),
            })
        };
        let waiting_event = record(ClientToolState::Waiting, None);
        events.emit(&thread, Some(&message), waiting_event);
        async move {
            let (answer, rpc) = mcp.client_answer(waiting).await;
            let state = match answer {
                Some(_) => ClientToolState::Answered,
                None => ClientToolState::Cancelled,
            };
            events.emit(&thread, Some(&message), record(state, answer.as_ref()));
            reply.send(rpc);
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
        let meter = turn.meter();
        let metered = |response: &str| meter.as_ref()?.response_usage(response);
        let mut spans = TurnSpans::new(trace, &metered);
        let crate::launch::TurnLimits {
            max_tool_calls,
            idle_timeout: idle,
        } = turn.limits();
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
                            inner.parts.events.emit(&user.thread_id, Some(&user.id), event.into());
                        }
                        TurnItem::Alive => {}
                        TurnItem::Transcript(note) => {
                            inner.parts.events.emit(&user.thread_id, Some(&user.id), note.into());
                        }
                        TurnItem::ToolCall(pending) if pending.is_clients() => {
                            let (call, reply) = pending.into_parts();
                            match inner.parts.mcp.client_call(call) {
                                ClientCall::Done(answer) => reply.send(answer),
                                ClientCall::Waiting(waiting) => {
                                    tools.spawn(self.client_answer(user, waiting, reply));
                                }
                            }
                        }
                        TurnItem::ToolCall(pending) => {
                            let mcp = inner.parts.mcp.clone();
                            let (call, reply) = pending.into_parts();
                            let plugin = mcp.registry().get(&call.name).map(|t| t.plugin.as_str());
                            let parent = spans.our_tool(call.tool_use_id(), &call.name, plugin);
                            let ctx = self.traced_tool_context(user.thread_id.clone(), parent);
                            tools.spawn(async move { reply.send(mcp.call(call, ctx).await) });
                        }
                        TurnItem::Permission(request) => {
                            let approvals = inner.parts.approvals.clone();
                            let asked = asked(&request, user, &turn, tally.unattended);
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

/// What the approvals are asked for `request`, a permission request of `turn`, which answers
/// `user`.
fn asked(
    request: &PermissionRequest,
    user: &MessageRow,
    turn: &LeasedTurn<'_>,
    unattended: bool,
) -> crate::approvals::Request {
    crate::approvals::Request {
        request_id: request.request_id().to_owned(),
        thread: user.thread_id.clone(),
        message: Some(user.id.clone()),
        tool_name: request.tool_name().to_owned(),
        input: request.input(),
        tool_use_id: request.tool_use_id().map(str::to_owned),
        cwd: turn.workdir().to_path_buf(),
        profile: turn.profile().to_owned(),
        unattended,
    }
}
