//! The host side of each process: its control requests, and the turns it starts by itself.
//!
//! Control requests are served by a task per process ([`serve_host_requests`]): the MCP
//! handshake and `tools/list` are answered by the [`McpAdapter`] at once; a `tools/call` goes to
//! the running turn as a [`TurnItem::ToolCall`](super::TurnItem::ToolCall), whose owner runs it
//! with the turn's context and answers; a `can_use_tool`, and a skill's shell command (the
//! `PreSkillShellCommand` hook), go to it as a permission request.
//! A turn the CLI starts by itself (`claude.scheduling_tools`) is handed to the pipeline with a
//! lease on its process ([`CliTurn`]). Running the turns is not done here: that is the lease's
//! ([`super::lease`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use claude_cli::protocol::SKILL_SHELL_HOOK_ID;
use claude_cli::{CliTurns, HostRequest, HostRequests, SkillShellCommand, StopReport, TurnEvents};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use plugin_contract::ThreadId;

use super::entry::{Entry, Inboxes};
use super::lease::{HostCall, PendingCall, PermissionRequest};
use super::{Lease, Pool};
use crate::mcp::{ClientTools, McpAdapter, Route};
use crate::sync::lock;

/// A turn a thread's CLI started by itself (a cron firing, a `ScheduleWakeup`, a background
/// task's notice), with a lease on its process: [`Lease::adopt`] its events to run it like a
/// turn of ours, then end the lease.
pub struct CliTurn {
    pub thread: ThreadId,
    /// Why the CLI started it ([`claude_cli::CliTurn::source`]).
    pub source: String,
    pub lease: Lease,
    pub events: TurnEvents,
}

/// Serves one process's control requests until it exits: MCP messages the adapter can answer
/// at once are answered here; tool calls and permissions (a tool's, a skill's shell command's)
/// go to the running turn.
/// `client_tools`: the tools its client runs, when its profile has any (the server `custom`).
pub(super) async fn serve_host_requests(
    thread: ThreadId,
    mut requests: HostRequests,
    mcp: Arc<McpAdapter>,
    client_tools: Option<Arc<ClientTools>>,
    calls: Arc<Inboxes>,
    ready: watch::Sender<bool>,
) {
    while let Some(request) = requests.recv().await {
        let permission = match SkillShellCommand::from_request(&request.request) {
            _ if request.subtype == "can_use_tool" => Some(PermissionRequest::tool(request)),
            Some(command) if request.subtype == "hook_callback" => {
                Some(PermissionRequest::skill_shell(request, command))
            }
            _ => {
                serve_other(
                    &thread,
                    request,
                    &mcp,
                    client_tools.as_ref(),
                    &calls,
                    &ready,
                );
                None
            }
        };
        if let Some(permission) = permission {
            let slot = calls.slot(permission.in_cli_turn());
            if let Some(HostCall::Permission(refused)) =
                to_turn(slot, HostCall::Permission(permission))
            {
                let message = "no turn is running on this process; nothing was run";
                refused.answer(json!({"behavior": "deny", "message": message}));
            }
        }
    }
}

/// Serves a control request that is not a permission: the `Stop` hook, and the MCP messages
/// (answered here, or a tool call handed to the running turn).
fn serve_other(
    thread: &ThreadId,
    request: HostRequest,
    mcp: &McpAdapter,
    client_tools: Option<&Arc<ClientTools>>,
    calls: &Inboxes,
    ready: &watch::Sender<bool>,
) {
    if request.subtype == "hook_callback" && request.request["callback_id"] == SKILL_SHELL_HOOK_ID {
        // A skill's shell command that could not be read: refused, never let through (an
        // empty answer would let it run).
        warn!(thread_id = %thread, "A skill's shell command could not be read; refusing it.");
        let reason = "Harness could not read this shell command; it was not run";
        request.respond(Ok(SkillShellCommand::answer(false, reason)));
        return;
    }
    if request.subtype == "hook_callback" {
        // The `Stop` hook (`claude.scheduling_tools`): what the CLI will still start turns
        // for by itself. Answered empty: the turn ends as it would.
        if let Some(report) = StopReport::from_request(&request.request) {
            let pending = report.background_tasks + report.crons;
            calls.pending_work.store(pending, Ordering::SeqCst);
            debug!(thread_id = %thread, ?report, "The CLI reported its pending work.");
        }
        request.respond(Ok(json!({})));
        return;
    }
    if request.subtype != "mcp_message" {
        warn!(subtype = %request.subtype, "Unsupported control request from the CLI.");
        let reason = format!("unsupported control request: {}", request.subtype);
        request.respond(Err(reason));
        return;
    }
    let server = request
        .request
        .get("server_name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let message = request
        .request
        .get("message")
        .cloned()
        .unwrap_or(Value::Null);
    match mcp.route_with(thread, &server, client_tools, message) {
        Route::Reply(reply) => request.respond(Ok(json!({ "mcp_response": reply }))),
        Route::Listed(reply) => {
            request.respond(Ok(json!({ "mcp_response": reply })));
            let _ = ready.send(true);
        }
        Route::Call(call) => {
            let slot = calls.slot(request.in_cli_turn);
            let refused = to_turn(slot, HostCall::Tool(PendingCall { call, request }));
            if let Some(HostCall::Tool(pending)) = refused {
                let reply = json!({"jsonrpc": "2.0", "error": {
                    "code": -32603, "message": "no turn is running on this process",
                }});
                pending.into_parts().1.send(reply);
            }
        }
    }
}

impl Pool {
    /// Hands each turn `entry`'s CLI starts by itself to the pipeline, with a lease on the
    /// process, until the process ends; and while the CLI reports pending crons or background
    /// tasks, keeps the process from expiring idle. Without `claude.scheduling_tools` (or with
    /// nobody taking [`Pool::take_cli_turns`]) such a turn means containment failed: the process
    /// is retired, as it is once it no longer pairs ([`claude_cli::CliProcess::pairs`]).
    pub(super) async fn serve_cli_turns(self, entry: Arc<Entry>, mut cli_turns: CliTurns) {
        let scheduling = self.inner.launcher.scheduling_tools();
        let mut keep_alive = tokio::time::interval(self.inner.keep_alive_every);
        keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let own: claude_cli::CliTurn = tokio::select! {
                own = cli_turns.recv() => match own {
                    Some(own) => own,
                    None => return,
                },
                _ = keep_alive.tick() => {
                    if entry.has_pending_work() {
                        // Reading resets the time-to-idle of the thread's entry (if it is this).
                        let _ = self.inner.cache.get(&entry.spec.thread).await;
                    }
                    continue;
                }
                _ = entry.process.wait_exit() => return,
                _ = entry.process.wait_unpaired() => {
                    // A result that answers no message of ours: the process goes (now if
                    // idle; a running turn fails with `Unpaired` and discards it).
                    warn!(thread_id = %entry.spec.thread, pid = entry.process.pid(), "The process no longer pairs results with messages; retiring it.");
                    entry.retire();
                    return;
                }
            };
            let lease = match (scheduling, entry.lease(&self)) {
                (true, Some(lease)) => lease,
                _ => {
                    warn!(thread_id = %entry.spec.thread, pid = entry.process.pid(), source = %own.source, "The CLI started a turn of its own; retiring the process.");
                    entry.retire();
                    return;
                }
            };
            let turn = CliTurn {
                thread: entry.spec.thread.clone(),
                source: own.source,
                lease,
                events: own.events,
            };
            if let Err(refused) = self.inner.cli_turns.send(turn) {
                warn!(thread_id = %entry.spec.thread, "Nobody runs the CLI-started turns; retiring the process.");
                drop(refused);
                entry.retire();
                return;
            }
        }
    }
}

/// Hands `call` to the running turn; gives it back when no turn is running.
fn to_turn(
    calls: &Mutex<Option<mpsc::UnboundedSender<HostCall>>>,
    call: HostCall,
) -> Option<HostCall> {
    let inbox = lock(calls).clone();
    match inbox {
        Some(inbox) => inbox.send(call).err().map(|e| e.0),
        None => Some(call),
    }
}
