//! What a checked-out process offers a turn: a [`Lease`] ([`Pool::checkout`] hands it out; this
//! file does not choose or start processes) starts a turn ([`Lease::start_turn`]) or adopts one
//! the CLI started by itself ([`Lease::adopt`]), and the [`LeasedTurn`] yields [`TurnItem`]s:
//! events, and the tool calls and permission requests the turn's owner answers through the
//! handles they carry ([`CallReply`], [`PermissionRequest`]). How a lease ends ([`Finish`])
//! decides whether the process stays warm.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use claude_cli::{
    HostRequest, SkillShellCommand, Step, TurnEvent, TurnEvents, TurnResult, UserContent,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tracing::info;

use plugin_contract::{CliSessionId, SessionStart};

use super::entry::Entry;
use super::{EvictionCause, Pool, TranscriptNote};
use crate::budget::Meter;
use crate::launch::Switchable;
use crate::mcp::ToolCall;
use crate::sync::lock;
use crate::turn_error::TurnError;

/// How a lease ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The process is fine: it stays warm for the thread's next turn.
    Keep,
    /// The turn failed in a way that leaves the process suspect: it is killed and reaped before
    /// this returns, so the next turn starts clean (and resumes the session).
    Discard,
}

/// A process checked out for one turn. End it with [`Lease::finish`]; a lease dropped without
/// it lets the process go (the turn's state is unknown).
pub struct Lease {
    entry: Arc<Entry>,
    pool: Pool,
    finished: bool,
}

impl Lease {
    /// A lease on `entry`, whose lease count the caller has already taken ([`Entry::lease`]):
    /// it is given back when the lease ends.
    pub(super) fn new(entry: Arc<Entry>, pool: Pool) -> Lease {
        Lease {
            entry,
            pool,
            finished: false,
        }
    }

    /// The leased process, for the pool's own use of it between checkout and turn (a prewarm).
    pub(super) fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }

    /// From now on the process's model requests count in `meter`'s turn, at the model gateway
    /// (the turn that holds the process hands it its meter: [`crate::budget::Reservation::meter`]).
    pub fn meter_with(&self, meter: Meter) {
        self.entry.meter.set(meter);
    }

    /// How the session of this turn started: warm once the process has served a turn.
    pub fn session_start(&self) -> SessionStart {
        self.entry.session_start()
    }

    pub fn pid(&self) -> u32 {
        self.entry.process.pid()
    }

    /// How the process started, when a checkout started it (not a spare's or a prewarm's).
    pub fn born(&self) -> Option<super::entry::Born> {
        self.entry.born.get().copied()
    }

    /// The CLI session id the process reports.
    pub fn session_id(&self) -> Option<CliSessionId> {
        self.entry
            .process
            .session_id()
            .map(CliSessionId::from_string)
    }

    /// Switches the process in place to what `wanted` asks for: its model (the CLI's
    /// `set_model`; it may send the model a one-token probe first), its permission mode
    /// (`set_permission_mode`) and its profile's external MCP servers (`mcp_set_servers`).
    /// Returns whether the model changed; `Err` with the CLI's reason when it refuses.
    pub(super) async fn switch(&self, wanted: &Switchable) -> Result<bool, String> {
        let now = lock(&self.entry.now).clone();
        let thread = &self.entry.spec.thread;
        if now.mcp_servers != wanted.mcp_servers {
            let launcher = &self.pool.inner.launcher;
            let profile = launcher
                .profile(Some(&self.entry.spec.profile))
                .map_err(|err| err.to_string())?;
            let only = wanted.mcp_servers.as_deref();
            if let Some(servers) = profile.external_mcp_servers(only) {
                self.entry.process.set_external_servers(&servers).await?;
            }
            info!(thread_id = %thread, servers = %servers_shown(only), "External MCP servers switched in place.");
            lock(&self.entry.now).mcp_servers = wanted.mcp_servers.clone();
        }
        if now.permission_mode != wanted.permission_mode {
            // The process started without `--permission-mode` runs in `default`.
            let mode = wanted.permission_mode.as_deref().unwrap_or("default");
            let answer = (self.entry.process)
                .request(json!({"subtype": "set_permission_mode", "mode": mode}))
                .await?;
            // Since 2.1.332 the CLI answers with the mode in effect, which managed settings can
            // make narrower; the turn's `system/init` says it again, and the turn reports it.
            let in_effect = answer.get("mode").and_then(Value::as_str).unwrap_or(mode);
            info!(thread_id = %thread, mode, in_effect, "Permission mode switched in place.");
            lock(&self.entry.now).permission_mode = wanted.permission_mode.clone();
        }
        if now.model == wanted.model {
            return Ok(false);
        }
        let model = &wanted.model;
        let reply = self
            .entry
            .process
            .request(json!({"subtype": "set_model", "model": model}))
            .await?;
        let answered = reply.get("model").cloned().unwrap_or(Value::Null);
        info!(thread_id = %thread, model = ?model, now = %answered, "Model switched in place.");
        lock(&self.entry.now).model = model.clone();
        Ok(true)
    }

    /// The permission mode the turn asked for and the one the CLI said it runs in, when they
    /// differ (managed settings narrowed it). Read once the turn has started.
    pub fn mode_narrowed(&self) -> Option<(String, String)> {
        let asked =
            (lock(&self.entry.now).permission_mode.clone()).unwrap_or_else(|| "default".to_owned());
        let in_effect = self.entry.process.permission_mode()?;
        (asked != in_effect).then_some((asked, in_effect))
    }

    /// Writes `prompt` as a turn; its events and tool calls come from the returned stream.
    pub async fn start_turn(&self, prompt: &UserContent) -> Result<LeasedTurn<'_>, TurnError> {
        let (tx, calls) = mpsc::unbounded_channel();
        *lock(&self.entry.calls.ours) = Some(tx);
        match self.entry.process.turn(prompt).await {
            Ok(events) => Ok(LeasedTurn {
                events,
                calls,
                entry: &self.entry,
                pool: &self.pool,
                own: false,
                ending: VecDeque::new(),
            }),
            Err(err) => {
                *lock(&self.entry.calls.ours) = None;
                Err(err.into())
            }
        }
    }

    /// Takes over a turn the CLI started by itself on this lease's process: from now on its
    /// control requests wait for it in the returned value, driven once [`Lease::cli_turn`] makes
    /// it a stream as a turn of ours would be.
    pub fn adopt(&self, events: TurnEvents) -> Adopted {
        let (tx, calls) = mpsc::unbounded_channel();
        *lock(&self.entry.calls.own) = Some(tx);
        Adopted { events, calls }
    }

    /// The adopted turn's stream of items.
    pub fn cli_turn(&self, adopted: Adopted) -> LeasedTurn<'_> {
        LeasedTurn {
            events: adopted.events,
            calls: adopted.calls,
            entry: &self.entry,
            pool: &self.pool,
            own: true,
            ending: VecDeque::new(),
        }
    }

    /// Sends the CLI an interrupt for the running turn without waiting for its answer (the
    /// turn's `result` says how it ended).
    pub fn interrupt_now(&self) {
        let process = self.entry.process.clone();
        self.pool.inner.tasks.spawn(async move {
            let _ = process.interrupt().await;
        });
    }

    /// Ends the lease.
    pub async fn finish(mut self, finish: Finish) {
        self.finished = true;
        let entry = self.entry.clone();
        self.release();
        match finish {
            Finish::Keep => {
                // Touch: resets the thread's idle timer; the process is now a candidate for a
                // spawn that waits for a slot.
                let _ = self.pool.inner.cache.get(&entry.spec.thread).await;
                self.pool.inner.idle.notify_waiters();
            }
            Finish::Discard => {
                if let Some(current) = self.pool.inner.cache.get(&entry.spec.thread).await {
                    if Arc::ptr_eq(&current, &entry) {
                        self.pool
                            .remove(&entry.spec.thread, EvictionCause::Error)
                            .await;
                    }
                }
                entry.retire();
                entry.process.kill_and_reap().await;
            }
        }
    }

    fn release(&self) {
        let entry = &self.entry;
        entry.leases.fetch_sub(1, Ordering::SeqCst);
        if entry.one_turn.load(Ordering::SeqCst) {
            entry.retire();
        }
        entry.kill_if_retired_and_unused();
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.finished {
            self.entry.retired.store(true, Ordering::SeqCst);
            self.release();
        }
    }
}

/// A turn the CLI started by itself, taken over ([`Lease::adopt`]) and not driven yet.
pub struct Adopted {
    events: TurnEvents,
    calls: mpsc::UnboundedReceiver<HostCall>,
}

/// One running turn on a leased process.
pub struct LeasedTurn<'a> {
    events: TurnEvents,
    calls: mpsc::UnboundedReceiver<HostCall>,
    entry: &'a Arc<Entry>,
    pool: &'a Pool,
    /// A turn the CLI started by itself ([`super::CliTurn`]), not one of ours.
    own: bool,
    /// The turn's last items, once its `result` came: its transcript's notes, then `Done`.
    ending: VecDeque<TurnItem>,
}

/// What a running turn produced next.
#[derive(Debug)]
pub enum TurnItem {
    Event(TurnEvent),
    /// A model response the CLI reports (before the events of its content).
    ModelCall(claude_cli::ModelCall),
    /// The CLI wrote something with nothing to report: it is alive.
    Alive,
    /// The model called one of our tools: run it and answer ([`CallReply::send`]).
    ToolCall(PendingCall),
    /// The CLI asks whether a tool may run: decide and answer
    /// ([`PermissionRequest::answer`]).
    Permission(PermissionRequest),
    /// What became of the thread's transcript frames (held, written again, given up on): told
    /// once the turn's frames are stored, before its `Done`.
    Transcript(TranscriptNote),
    /// The turn's `result`: the turn is over.
    Done(Box<TurnResult>),
}

impl LeasedTurn<'_> {
    /// Sends the CLI an interrupt for this turn without waiting for its answer (the turn's
    /// `result` says how it ended).
    pub fn interrupt_now(&self) {
        let (process, own) = (self.entry.process.clone(), self.own);
        self.pool.inner.tasks.spawn(async move {
            let _ = if own {
                process.interrupt_cli_turn().await
            } else {
                process.interrupt().await
            };
        });
    }

    /// The meter the process's model requests count in: its turn's, when the turn handed one
    /// ([`Lease::meter_with`]).
    pub fn meter(&self) -> Option<Meter> {
        self.entry.meter.get()
    }

    /// What bounds the turn: its process's profile's limits.
    pub fn limits(&self) -> crate::launch::TurnLimits {
        self.entry.spec.limits
    }

    /// The process's profile, whose approvals decide its permission requests.
    pub fn profile(&self) -> &str {
        &self.entry.spec.profile
    }

    /// The folder the process works in (its spec's): where its tools' relative paths lead.
    pub fn workdir(&self) -> &std::path::Path {
        &self.entry.spec.workdir
    }

    /// The next item; an error when the process went away mid-turn.
    pub async fn next(&mut self) -> Result<TurnItem, TurnError> {
        if let Some(item) = self.ending.pop_front() {
            return Ok(item);
        }
        tokio::select! {
            biased;
            Some(call) = self.calls.recv() => Ok(match call {
                HostCall::Tool(call) => TurnItem::ToolCall(call),
                HostCall::Permission(request) => TurnItem::Permission(request),
            }),
            step = self.events.next() => match step.map_err(|err| self.entry.died(err))? {
                Step::Event(event) => Ok(TurnItem::Event(event)),
                Step::ModelCall(call) => Ok(TurnItem::ModelCall(call)),
                Step::Alive => Ok(TurnItem::Alive),
                Step::Done(result) => {
                    // The frames before a `result` are the turn's transcript: stored first.
                    self.entry.transcript_stored().await;
                    let notes = self.pool.inner.at_risk.take_notes(&self.entry.spec.thread);
                    self.ending.extend(notes.into_iter().map(TurnItem::Transcript));
                    self.ending.push_back(TurnItem::Done(result));
                    Ok(self.ending.pop_front().unwrap_or(TurnItem::Alive))
                }
            },
        }
    }

    /// True while the CLI waits on us (a tool call runs): its silence is ours then.
    pub fn waiting_on_host(&self) -> bool {
        self.entry.process.waiting_on_host()
    }
}

impl Drop for LeasedTurn<'_> {
    fn drop(&mut self) {
        *lock(self.entry.calls.slot(self.own)) = None;
        self.entry.turns.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        *lock(&self.entry.last_used) = now;
        self.pool
            .inner
            .state
            .lock()
            .history
            .ended(&self.entry.spec.thread, now);
    }
}

/// A `tools/call` of the running turn: the call, and where its answer goes.
#[derive(Debug)]
pub struct PendingCall {
    pub(super) call: ToolCall,
    pub(super) request: HostRequest,
}

impl PendingCall {
    /// Whether the call is to a tool the client runs ([`ToolCall::is_clients`]).
    pub fn is_clients(&self) -> bool {
        self.call.is_clients()
    }

    pub fn into_parts(self) -> (ToolCall, CallReply) {
        (self.call, CallReply(self.request))
    }
}

/// What a process's control requests hand to its running turn.
#[derive(Debug)]
pub(super) enum HostCall {
    Tool(PendingCall),
    Permission(PermissionRequest),
}

/// A permission the running turn decides: a tool call's (`can_use_tool`), or a skill's shell
/// command's (the `PreSkillShellCommand` hook), asked as a `Bash` call of that command so the
/// same rules, mode and people decide it. Dropped unanswered, the CLI gets an error (and does
/// not run the tool), or for a skill's command a denial (an error would let the CLI run it).
#[derive(Debug)]
pub struct PermissionRequest {
    /// Taken by the answer.
    request: Option<HostRequest>,
    /// Set for a skill's shell command.
    skill_shell: Option<SkillShellCommand>,
}

impl PermissionRequest {
    /// A `can_use_tool` request.
    pub(super) fn tool(request: HostRequest) -> PermissionRequest {
        PermissionRequest {
            request: Some(request),
            skill_shell: None,
        }
    }

    /// A `PreSkillShellCommand` hook callback about `command`.
    pub(super) fn skill_shell(
        request: HostRequest,
        command: SkillShellCommand,
    ) -> PermissionRequest {
        PermissionRequest {
            request: Some(request),
            skill_shell: Some(command),
        }
    }

    pub fn request_id(&self) -> &str {
        self.request.as_ref().map_or("", |r| r.request_id.as_str())
    }

    /// Whether the CLI asked while running a turn it started by itself.
    pub(super) fn in_cli_turn(&self) -> bool {
        self.request.as_ref().is_some_and(|r| r.in_cli_turn)
    }

    fn field(&self, key: &str) -> Option<&Value> {
        self.request.as_ref()?.request.get(key)
    }

    pub fn tool_name(&self) -> &str {
        match &self.skill_shell {
            Some(shell) => &shell.tool_name,
            None => self
                .field("tool_name")
                .and_then(Value::as_str)
                .unwrap_or(""),
        }
    }

    /// What the tool would run with. For a skill's shell command: `{"command", "skill"}`, the
    /// command as the shell tool takes it and the skill whose text holds it.
    pub fn input(&self) -> Value {
        match &self.skill_shell {
            Some(shell) => json!({"command": shell.command, "skill": shell.command_name}),
            None => self.field("input").cloned().unwrap_or_else(|| json!({})),
        }
    }

    pub fn tool_use_id(&self) -> Option<&str> {
        match &self.skill_shell {
            Some(shell) => shell.tool_use_id.as_deref(),
            None => self.field("tool_use_id").and_then(Value::as_str),
        }
    }

    /// Sends the decision, given as for `can_use_tool`: `{"behavior": "allow", "updatedInput"}`
    /// or `{"behavior": "deny", "message"}`. A skill's shell command runs as written: an allow
    /// that changes its input refuses it ([`skill_shell_answer`]).
    pub fn answer(mut self, response: Value) {
        let response = match &self.skill_shell {
            Some(_) => skill_shell_answer(&self.input(), &response),
            None => response,
        };
        if let Some(request) = self.request.take() {
            request.respond(Ok(response));
        }
    }
}

impl Drop for PermissionRequest {
    fn drop(&mut self) {
        // The CLI runs a skill's shell command when its hook gets an error: refuse it instead.
        if self.skill_shell.is_some() {
            if let Some(request) = self.request.take() {
                let reason = "the turn ended before Harness decided; it was not run";
                request.respond(Ok(SkillShellCommand::answer(false, reason)));
            }
        }
    }
}

/// The `PreSkillShellCommand` hook's answer for a `can_use_tool`-shaped `decision` about the
/// command whose input is `input`.
fn skill_shell_answer(input: &Value, decision: &Value) -> Value {
    let text = |key: &str| decision[key].as_str().unwrap_or_default().to_owned();
    match decision["updatedInput"].as_object() {
        _ if decision["behavior"] != "allow" => SkillShellCommand::answer(false, &text("message")),
        Some(updated) if Some(updated) != input.as_object() => SkillShellCommand::answer(
            false,
            "a skill's shell command runs as written; an answer that changes it refuses it",
        ),
        _ => SkillShellCommand::answer(true, "allowed by Harness"),
    }
}

/// Where a tool call's JSON-RPC reply goes; dropped unsent, the CLI gets an error.
#[derive(Debug)]
pub struct CallReply(HostRequest);

impl CallReply {
    pub fn send(self, reply: Value) {
        self.0.respond(Ok(json!({ "mcp_response": reply })));
    }
}

/// The names of a process's external MCP servers, for the log.
fn servers_shown(only: Option<&[String]>) -> String {
    only.map_or_else(
        || "all of the profile's".to_owned(),
        |names| names.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hook answer's decision and reason.
    fn decision_of(answer: &Value) -> (String, String) {
        let output = &answer["hookSpecificOutput"];
        assert_eq!(output["hookEventName"], "PreSkillShellCommand", "{answer}");
        let text = |key: &str| output[key].as_str().unwrap_or_default().to_owned();
        (text("permissionDecision"), text("permissionDecisionReason"))
    }

    #[test]
    fn a_skill_shell_command_gets_the_approvals_decision_as_the_hooks_answer() {
        let input = json!({"command": "echo hi", "skill": "helpers:greet"});
        // What `approvals` answers for an allow with no change, and for a denial.
        let allowed = json!({"behavior": "allow", "updatedInput": input.clone()});
        assert_eq!(
            decision_of(&skill_shell_answer(&input, &allowed)).0,
            "allow"
        );
        let denied =
            json!({"behavior": "deny", "message": "Harness refused `Bash` (rule Bash(echo:*))"});
        let (decision, reason) = decision_of(&skill_shell_answer(&input, &denied));
        assert_eq!(
            (decision.as_str(), reason.as_str()),
            ("deny", "Harness refused `Bash` (rule Bash(echo:*))")
        );
        // A person's allow that changes the command refuses it: the CLI would not run the change.
        let changed = json!({"behavior": "allow", "updatedInput": {"command": "echo bye"}});
        let (decision, reason) = decision_of(&skill_shell_answer(&input, &changed));
        assert_eq!(decision, "deny");
        assert!(reason.contains("runs as written"), "{reason}");
        // Anything but an allow is a denial.
        let odd = json!({"behavior": "maybe"});
        assert_eq!(decision_of(&skill_shell_answer(&input, &odd)).0, "deny");
    }
}
