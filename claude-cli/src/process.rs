//! One `claude` child process: spawn and `initialize`, the reader/writer/stderr/reaper tasks,
//! turns as streams of events, our control requests, kill and reap.
//!
//! Invariants:
//! - Exactly one task writes stdin (lines from an mpsc queue), so lines never interleave; every
//!   line is built by [`protocol`] with a JSON encoder.
//! - One task reads stdout and never blocks on the host: the CLI's control requests go out on a
//!   channel ([`HostRequests`]) with their reply handles, so the CLI's own MCP handshake is
//!   served while we await our `initialize`.
//! - One turn at a time: a second turn is written only after the first one's `result`.
//! - Every line of a turn goes to the turn it belongs to: ours (the `command_lifecycle` that
//!   starts it names the uuid we wrote) or one the CLI started by itself (a cron, a wake-up, a
//!   background task's notice), which is handed to the host as a [`CliTurn`].
//! - A turn of ours ends only with a `result` that names its own message; [`CliProcess::pairs`]
//!   turns false, for good, when one does not (`CliError::Unpaired`), when a `result` comes with
//!   no turn running, or when nobody takes a [`CliTurn`].
//! - The child is its own process group leader (killed by `PR_SET_PDEATHSIG` if we die);
//!   [`CliProcess::kill`] signals the whole group and the reaper task `wait()`s for it, so
//!   nothing is left as an orphan or a zombie.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::protocol::{self, SpawnOptions, TranscriptMirror, TurnEvent, TurnResult, UserContent};
use crate::CliError;

mod command;

pub use command::Confine;
mod pipes;
mod reader;
mod start;

/// Longest stdout line we accept (a `tools/list` reply or a long answer can be large).
const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;
/// How much of stderr we keep for error messages.
const STDERR_TAIL_LINES: usize = 20;
/// How long an interrupt waits for the CLI to start a turn it has only queued so far.
const INTERRUPT_WAIT: Duration = Duration::from_secs(10);

/// Where and how to start one process.
#[derive(Clone, Debug)]
pub struct Launch {
    pub bin: PathBuf,
    /// `CLAUDE_CONFIG_DIR`: transcripts and settings.
    pub config_dir: PathBuf,
    /// The working directory: the CLI's "project".
    pub workdir: PathBuf,
    /// The child's whole environment: the host's own is not inherited.
    pub env: Vec<(String, String)>,
    /// Bound on spawn → `initialize` answered.
    pub ready_timeout: Duration,
    /// In-process MCP servers, declared in `initialize`.
    pub sdk_mcp_servers: Vec<protocol::SdkMcpServer>,
    /// External MCP servers, added with `mcp_set_servers` right after `initialize`.
    pub external_mcp_servers: Option<protocol::ExternalMcpServers>,
    /// Sub-agent definitions for the CLI's `Agent` tool, declared in `initialize` (`agents`).
    pub agents: Option<Value>,
    /// The hooks registered in `initialize`: with `stop`, at the end of every turn the CLI sends
    /// a `hook_callback` whose input lists its pending `background_tasks` and `session_crons` (see
    /// [`StopReport`]); with `skill_shell`, one before each shell command of a skill
    /// ([`protocol::SkillShellCommand`]).
    pub hooks: protocol::Hooks,
    /// What walls the process in before it runs (the host's sandbox), if anything.
    pub confine: Option<Arc<dyn Confine>>,
    /// Managed settings (policy) for this process, delivered in its `initialize` request
    /// (`--await-initialize --managed-settings-in-initialize`): what `managed-settings.json`
    /// would say, without touching the machine's own policy folder.
    pub managed_settings: Option<Value>,
}

/// A started process: the handle, its control requests, and its answer to `initialize`.
pub struct Started {
    pub process: Arc<CliProcess>,
    pub requests: HostRequests,
    /// The CLI's `initialize` response (`sdk_mcp_manifests_parked`, `pid`, `models`, …).
    pub initialize: Value,
    /// The process's `transcript_mirror` frames in stdout order (only with `--session-mirror`),
    /// whether a turn runs or not: the last ones come after stdin closes. Ends at stdout's EOF.
    pub mirror: MirrorFrames,
    /// Turns the CLI starts by itself, in order. Dropped, such a turn makes the process stop
    /// pairing ([`CliProcess::pairs`]).
    pub cli_turns: CliTurns,
}

/// A turn the CLI started by itself: a cron firing, a `ScheduleWakeup`, the notice of a
/// background task that finished. Its events end with its `result` like ours do; nobody's
/// message is behind it.
pub struct CliTurn {
    /// Why the CLI started it: its `wakeup_source` (`schedule_wakeup` for a cron, `loop_wakeup`
    /// for a `ScheduleWakeup`), or `task_notification` for a turn with no lifecycle line.
    pub source: String,
    pub events: TurnEvents,
}

/// The [`CliTurn`]s of one process, in the order the CLI started them.
pub type CliTurns = mpsc::UnboundedReceiver<CliTurn>;

/// What the CLI's `Stop` hook reports at the end of a turn: the work it will still start turns
/// for by itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopReport {
    /// Background tasks still running (`background_tasks`).
    pub background_tasks: usize,
    /// Crons of the session (`session_crons`), recurring or not yet fired.
    pub crons: usize,
}

impl StopReport {
    /// The report in a `hook_callback` request for the `Stop` hook, if it is one.
    pub fn from_request(request: &Value) -> Option<StopReport> {
        let input = &request["input"];
        if input["hook_event_name"] != "Stop" {
            return None;
        }
        let count = |key: &str| input[key].as_array().map_or(0, Vec::len);
        Some(StopReport {
            background_tasks: count("background_tasks"),
            crons: count("session_crons"),
        })
    }
}

/// The `transcript_mirror` frames of one process, in the order the CLI wrote them.
pub type MirrorFrames = mpsc::UnboundedReceiver<TranscriptMirror>;

/// Why a process could not be started.
#[derive(Debug)]
pub enum SpawnError {
    /// `--resume` named a session the CLI does not have.
    MissingSession(String),
    Failed(CliError),
}

/// A control request from the CLI, waiting for the host's answer. Answer it with
/// [`HostRequest::respond`]; dropped unanswered, it answers an error, so the CLI never waits for
/// ever. While it lives, the process counts as waiting on the host.
pub struct HostRequest {
    pub request_id: String,
    /// `mcp_message`, `can_use_tool`, `hook_callback`, …
    pub subtype: String,
    /// The whole `request` object.
    pub request: Value,
    /// True when the CLI asked while running a turn it started by itself ([`CliTurn`]).
    pub in_cli_turn: bool,
    reply: Option<Reply>,
}

struct Reply {
    writer: mpsc::UnboundedSender<String>,
    waiting: Arc<AtomicUsize>,
}

impl HostRequest {
    pub fn respond(mut self, outcome: Result<Value, String>) {
        if let Some(reply) = self.reply.take() {
            let _ = reply
                .writer
                .send(protocol::control_response(&self.request_id, &outcome));
            reply.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for HostRequest {
    fn drop(&mut self) {
        if let Some(reply) = self.reply.take() {
            let outcome = Err(format!("the host did not answer {}", self.subtype));
            let _ = reply
                .writer
                .send(protocol::control_response(&self.request_id, &outcome));
            reply.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl std::fmt::Debug for HostRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRequest")
            .field("request_id", &self.request_id)
            .field("subtype", &self.subtype)
            .finish_non_exhaustive()
    }
}

/// The CLI's control requests of one process, in arrival order.
pub type HostRequests = mpsc::UnboundedReceiver<HostRequest>;

/// Where the process's turn is, as far as an interrupt cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TurnPhase {
    Idle,
    /// The user line is written but the CLI has not started the turn (no `system/init` yet). The
    /// CLI's `interrupt` stops only a running turn: a queued one would still run.
    Queued,
    Running,
}

/// How a process ended.
#[derive(Clone, Debug)]
struct ExitInfo {
    status: String,
}

/// What the reader task shares with the process handle.
struct Shared {
    writer: mpsc::UnboundedSender<String>,
    /// Where the CLI's control requests go; let go at EOF, which ends the host's request stream.
    host: Mutex<Option<mpsc::UnboundedSender<HostRequest>>>,
    /// Our control requests waiting for the CLI's answer.
    pending: Mutex<HashMap<String, oneshot::Sender<Result<Value, String>>>>,
    /// The inbox of our turn, while one is written and not ended.
    turn: Mutex<Option<mpsc::UnboundedSender<TurnLine>>>,
    /// The uuid of our turn while it is written and not ended.
    written: Mutex<Option<String>>,
    /// Whose turn the CLI is running.
    runner: Mutex<Runner>,
    /// Set at the first `command_lifecycle` line: this CLI says which command a turn runs.
    reports_lifecycle: AtomicBool,
    /// Where the turns the CLI starts by itself go; `None` once the host let go.
    cli_turns: Mutex<Option<mpsc::UnboundedSender<CliTurn>>>,
    session_id: Mutex<Option<String>>,
    /// The permission mode the CLI said is in effect at its latest turn's `system/init`.
    permission_mode: Mutex<Option<String>>,
    stderr_tail: Mutex<VecDeque<String>>,
    /// A `result` that arrived with no turn running (a failed `--resume` writes one, then exits).
    stray_result: Mutex<Option<TurnResult>>,
    /// The reaper's report, for the turns the reader starts ([`CliTurn`]).
    exit: watch::Receiver<Option<ExitInfo>>,
    /// Set once the stream cannot be trusted to pair results with turns: the CLI started a turn
    /// of its own that the host did not take, wrote a `result` with no turn running, or ended a
    /// turn of ours with a `result` that names another message.
    unpaired: watch::Sender<bool>,
    /// The CLI's control requests not answered yet.
    waiting_on_host: Arc<AtomicUsize>,
    /// Where `transcript_mirror` frames go; let go at EOF, which ends the host's frame stream.
    mirror: Mutex<Option<mpsc::UnboundedSender<TranscriptMirror>>>,
    /// Frames read so far. A frame is counted before any later line is handed on, so once a
    /// turn's `result` is seen this covers every frame written before it.
    mirror_frames: AtomicU64,
    phase: watch::Sender<TurnPhase>,
    next_request: AtomicU64,
}

/// Whose turn the CLI is running.
enum Runner {
    Idle,
    /// Ours (the lines go to [`Shared::turn`]).
    Ours,
    /// One it started by itself; the lines go to that turn's inbox.
    Own(mpsc::UnboundedSender<TurnLine>),
}

/// What the reader hands the running turn.
enum TurnLine {
    Events(Vec<TurnEvent>, Option<crate::ModelCall>),
    Result(Box<TurnResult>),
}

/// A live `claude` process.
pub struct CliProcess {
    pid: u32,
    shared: Arc<Shared>,
    exit: watch::Receiver<Option<ExitInfo>>,
    turn_lock: Arc<tokio::sync::Mutex<()>>,
    /// Stops the writer and the stderr drain when the process is let go.
    cancel: CancellationToken,
    spawned_at: Instant,
    /// The names of the servers given at `initialize` (ours): `mcp_set_servers` sets the whole
    /// set of servers, so each such request names them too.
    sdk_servers: Vec<String>,
}

impl CliProcess {
    /// Spawns a process (resuming `resume` when given) and waits until it answered `initialize`.
    /// The CLI's control requests, from its MCP handshake on, arrive on the returned channel:
    /// start serving it at once. Every task of the process is spawned on `tasks`.
    pub async fn spawn(
        launch: &Launch,
        options: &SpawnOptions,
        resume: Option<&str>,
        tasks: &TaskTracker,
    ) -> Result<Started, SpawnError> {
        let started = Instant::now();
        let (child, pipes) = start::child(launch, options, resume)?;
        let pid = child.id().unwrap_or(0);
        let wired = start::wire(child, pipes, pid, resume, tasks);
        let process = Arc::new(CliProcess {
            pid,
            shared: wired.shared,
            exit: wired.exit,
            turn_lock: Arc::default(),
            cancel: wired.cancel,
            spawned_at: started,
            sdk_servers: launch
                .sdk_mcp_servers
                .iter()
                .map(|s| s.name.clone())
                .collect(),
        });
        start::ready(process, launch, resume, wired.outlets).await
    }

    async fn initialize(&self, request: Value) -> Result<Value, SpawnError> {
        let mut init = std::pin::pin!(self.request(request));
        let mut exit = self.exit.clone();
        let reply = tokio::select! {
            reply = &mut init => reply,
            _ = exited(&mut exit) => {
                // Its last lines (a start-up failure's `result`) may still be on their way: the
                // request ends at stdout's EOF, once the reader has read them.
                let _ = tokio::time::timeout(Duration::from_secs(1), init).await;
                return Err(self.early_exit_failure());
            }
        };
        match reply {
            Ok(reply) => Ok(reply),
            Err(err) => Err(self.initialize_failed(err).await),
        }
    }

    /// Adds the external MCP servers (`mcp_set_servers`) at start. A refused request fails the
    /// spawn.
    async fn add_external_servers(
        &self,
        servers: &protocol::ExternalMcpServers,
    ) -> Result<(), SpawnError> {
        self.set_external_servers(servers).await.map_err(|err| {
            SpawnError::Failed(CliError::Refused(format!("mcp_set_servers failed: {err}")))
        })
    }

    /// Makes `servers` the process's external MCP servers (`mcp_set_servers`): those missing
    /// start, those not named stop. The request sets the process's whole set of servers, so it
    /// names the servers given at `initialize` (ours) too, which stay as they are. A server the
    /// CLI could not start is logged, by name, with the CLI's reason; the process goes on
    /// without its tools. `Err` with the CLI's reason when it refuses the request.
    pub async fn set_external_servers(
        &self,
        servers: &protocol::ExternalMcpServers,
    ) -> Result<(), String> {
        let mut all = servers.0.as_object().cloned().unwrap_or_default();
        for name in &self.sdk_servers {
            all.insert(
                name.clone(),
                serde_json::json!({"type": "sdk", "name": name}),
            );
        }
        let request = serde_json::json!({"subtype": "mcp_set_servers", "servers": all});
        let reply = self.request(request).await?;
        if let Some(errors) = reply.get("errors").and_then(Value::as_object) {
            for (server, error) in errors {
                warn!(pid = self.pid, %server, %error, "An external MCP server did not start.");
            }
        }
        Ok(())
    }

    /// Why `initialize` got no answer. Usually stdout closed because the process is exiting (a
    /// failed `--resume` does that): its exit status and last words say why.
    async fn initialize_failed(&self, err: String) -> SpawnError {
        let mut exit = self.exit.clone();
        if tokio::time::timeout(Duration::from_secs(2), exited(&mut exit))
            .await
            .is_ok()
        {
            return self.early_exit_failure();
        }
        SpawnError::Failed(CliError::Refused(format!("initialize failed: {err}")))
    }

    fn early_exit_failure(&self) -> SpawnError {
        let stray = lock(&self.shared.stray_result).clone();
        let tail = self.stderr_tail();
        if stray.as_ref().is_some_and(TurnResult::is_missing_session)
            || tail.contains("No conversation found")
        {
            let reason = stray
                .map(|r| r.error_reason())
                .unwrap_or_else(|| tail.clone());
            return SpawnError::MissingSession(reason);
        }
        if let Some(failure) = stray.as_ref().and_then(TurnResult::startup_failure) {
            return SpawnError::Failed(CliError::StartupFailed(failure));
        }
        SpawnError::Failed(self.died_now())
    }

    /// Sends a control request and waits for the CLI's answer.
    pub async fn request(&self, request: Value) -> Result<Value, String> {
        let n = self.shared.next_request.fetch_add(1, Ordering::Relaxed);
        let id = format!(
            "req_{n}_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id.clone(), tx);
        if self
            .shared
            .writer
            .send(protocol::control_request(&id, &request))
            .is_err()
        {
            lock(&self.shared.pending).remove(&id);
            return Err("stdin closed".into());
        }
        rx.await
            .unwrap_or_else(|_| Err("process ended before answering".into()))
    }

    /// Writes `prompt` as a turn and returns its events. The turn holds the process until the
    /// returned stream is dropped; a second call waits for it. A prompt with a file reference left
    /// ([`UserContent::unresolved`]) is refused: the host resolves its files first.
    pub async fn turn(&self, prompt: &UserContent) -> Result<TurnEvents, CliError> {
        if prompt.unresolved() {
            return Err(CliError::Refused(
                "the prompt names a stored file that was not resolved to its bytes".into(),
            ));
        }
        let guard = self.turn_lock.clone().lock_owned().await;
        let (tx, rx) = mpsc::unbounded_channel();
        let uuid = uuid::Uuid::new_v4().to_string();
        *lock(&self.shared.turn) = Some(tx);
        *lock(&self.shared.written) = Some(uuid.clone());
        self.shared.phase.send_replace(TurnPhase::Queued);
        let events = TurnEvents {
            tools: HashMap::new(),
            rx,
            buffered: VecDeque::new(),
            shared: self.shared.clone(),
            exit: self.exit.clone(),
            ours: Some((uuid.clone(), guard)),
        };
        if self
            .shared
            .writer
            .send(protocol::user_turn(prompt, &uuid))
            .is_err()
            || self.has_exited()
        {
            return Err(self.died().await);
        }
        Ok(events)
    }

    /// Asks the CLI to stop the running turn. The turn then ends with an error `result` and the
    /// process stays usable. Returns false when no turn was running.
    ///
    /// A turn written to stdin but not yet started by the CLI is first waited for: the CLI answers
    /// an interrupt then with `still_queued: [<our turn>]` and runs the turn anyway.
    pub async fn interrupt(&self) -> Result<bool, String> {
        let mut phase = self.shared.phase.subscribe();
        let mut exit = self.exit.clone();
        let waited = tokio::select! {
            seen = tokio::time::timeout(INTERRUPT_WAIT, phase.wait_for(|p| *p != TurnPhase::Queued)) => {
                match seen {
                    Ok(Ok(phase)) => *phase,
                    Ok(Err(_)) => return Err("the process has gone".into()),
                    // Still queued: ask anyway.
                    Err(_) => TurnPhase::Queued,
                }
            }
            _ = exited(&mut exit) => return Err("the process has exited".into()),
        };
        if waited == TurnPhase::Idle {
            return Ok(false);
        }
        self.request(json!({"subtype": "interrupt"}))
            .await
            .map(|_| true)
    }

    /// Asks the CLI to stop the turn it started by itself ([`CliTurn`]); it then ends with an
    /// error `result` and the process stays usable. Returns false when none is running.
    pub async fn interrupt_cli_turn(&self) -> Result<bool, String> {
        if !matches!(*lock(&self.shared.runner), Runner::Own(_)) {
            return Ok(false);
        }
        self.request(json!({"subtype": "interrupt"}))
            .await
            .map(|_| true)
    }

    /// False once the stream stopped pairing: a turn the CLI started by itself that nobody took
    /// ([`Started::cli_turns`] dropped), a `result` with no turn running, or one of ours ending
    /// with a `result` for another message. Such a process must not take another turn.
    pub fn pairs(&self) -> bool {
        !*self.shared.unpaired.borrow()
    }

    /// Resolves once [`Self::pairs`] turns false (never, for a process that only runs our turns).
    pub async fn wait_unpaired(&self) {
        let mut unpaired = self.shared.unpaired.subscribe();
        // Err only when the sender is gone, which it is not while `self` holds it.
        let _ = unpaired.wait_for(|u| *u).await;
    }

    /// True while a turn of ours is written and has not ended, or the CLI runs one of its own.
    pub fn in_turn(&self) -> bool {
        *self.shared.phase.borrow() != TurnPhase::Idle
            || matches!(*lock(&self.shared.runner), Runner::Own(_))
    }

    /// True while one of the CLI's control requests waits for the host's answer: the CLI is
    /// silent because it waits for us.
    pub fn waiting_on_host(&self) -> bool {
        self.shared.waiting_on_host.load(Ordering::SeqCst) > 0
    }

    /// Sends SIGKILL to the process group. Idempotent; the reaper task collects the exit status.
    pub fn kill(&self) {
        self.cancel.cancel();
        if self.has_exited() || self.pid == 0 {
            return;
        }
        let pgid = nix::unistd::Pid::from_raw(self.pid as i32);
        if let Err(err) = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL) {
            debug!(pid = self.pid, %err, "killpg failed; the process is probably gone already.");
        }
    }

    /// Kills the process group and waits until the process has been reaped.
    pub async fn kill_and_reap(&self) {
        self.kill();
        self.wait_exit().await;
    }

    pub async fn wait_exit(&self) {
        let mut exit = self.exit.clone();
        exited(&mut exit).await;
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }
    pub fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }
    pub fn age(&self) -> Duration {
        self.spawned_at.elapsed()
    }
    /// The CLI session id, as last reported (the resumed one until the CLI says otherwise).
    pub fn session_id(&self) -> Option<String> {
        lock(&self.shared.session_id).clone()
    }
    /// The permission mode the CLI said is in effect at the start of its latest turn (its
    /// `system/init`); `None` before its first turn.
    pub fn permission_mode(&self) -> Option<String> {
        lock(&self.shared.permission_mode).clone()
    }

    /// How many `transcript_mirror` frames the process has written so far. Read after a turn's
    /// result, it counts every frame of that turn: a host that has stored that many frames has
    /// stored the turn.
    pub fn mirror_frames_received(&self) -> u64 {
        self.shared.mirror_frames.load(Ordering::SeqCst)
    }
    pub fn exit_status(&self) -> String {
        self.exit
            .borrow()
            .as_ref()
            .map(|e| e.status.clone())
            .unwrap_or_else(|| "still running".into())
    }
    pub fn stderr_tail(&self) -> String {
        lock(&self.shared.stderr_tail)
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The error for a process that went away: waits up to a second for the exit status so the
    /// message can say how it ended.
    async fn died(&self) -> CliError {
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(Duration::from_secs(1), exited(&mut exit)).await;
        self.died_now()
    }

    fn died_now(&self) -> CliError {
        CliError::ProcessDied {
            status: self.exit_status(),
            stderr_tail: self.stderr_tail(),
        }
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        // The last handle is gone: nothing can use the process any more.
        self.kill();
    }
}

/// The events of one turn, ending with its `result` ([`TurnEvents::next`] gives
/// `Ok(Step::Done)`). Dropping one of ours lets the next turn of ours start.
pub struct TurnEvents {
    rx: mpsc::UnboundedReceiver<TurnLine>,
    buffered: VecDeque<Step>,
    shared: Arc<Shared>,
    exit: watch::Receiver<Option<ExitInfo>>,
    /// Our turn: the uuid of its user line, and the turn lock it holds. `None` for a turn the CLI
    /// started by itself ([`CliTurn`]).
    ours: Option<(String, tokio::sync::OwnedMutexGuard<()>)>,
    /// The names of the tools the turn called, by use id: its results are named after them.
    tools: HashMap<String, String>,
}

/// One step of a turn.
#[derive(Debug)]
pub enum Step {
    Event(TurnEvent),
    /// An `assistant` line: the model response it is part of (before its events).
    ModelCall(crate::ModelCall),
    /// The CLI wrote a line that carries nothing to report: it is alive.
    Alive,
    Done(Box<TurnResult>),
}

impl TurnEvents {
    /// The turn's next event, or its result. An error when the process went away mid-turn.
    pub async fn next(&mut self) -> Result<Step, CliError> {
        loop {
            if let Some(step) = self.buffered.pop_front() {
                return Ok(step);
            }
            let mut exit = self.exit.clone();
            let line = tokio::select! {
                line = self.rx.recv() => line,
                _ = exited(&mut exit) => None,
            };
            match line {
                Some(TurnLine::Events(events, None)) if events.is_empty() => {
                    return Ok(Step::Alive)
                }
                Some(TurnLine::Events(events, call)) => {
                    self.buffered.extend(call.map(Step::ModelCall));
                    for event in events {
                        let event = self.named(event);
                        self.buffered.push_back(Step::Event(event));
                    }
                }
                Some(TurnLine::Result(result)) => {
                    // The CLI names the messages a result answers (every `result` of a turn we
                    // wrote does, errors and interrupts included); one that does not name ours
                    // ends a turn the CLI started by itself. The lines are routed by turn, so
                    // this is the last wall, not the first.
                    let Some((uuid, _)) = &self.ours else {
                        return Ok(Step::Done(result));
                    };
                    if !result.user_message_uuids.contains(uuid) {
                        warn!(expected = %uuid, got = ?result.user_message_uuids, "Result names another message; the stream no longer pairs.");
                        self.shared.unpaired.send_replace(true);
                        return Err(CliError::Unpaired {
                            got: result.user_message_uuids,
                        });
                    }
                    return Ok(Step::Done(result));
                }
                None => return Err(self.died().await),
            }
        }
    }

    /// `event`, a tool's result named after its call.
    fn named(&mut self, mut event: TurnEvent) -> TurnEvent {
        match &mut event {
            TurnEvent::ToolCallStarted(call) => {
                (self.tools).insert(call.tool_use_id.clone(), call.name.clone());
            }
            TurnEvent::ToolCallFinished(done) => {
                done.name = self.tools.get(&done.tool_use_id).cloned();
            }
            _ => {}
        }
        event
    }

    async fn died(&self) -> CliError {
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(Duration::from_secs(1), exited(&mut exit)).await;
        CliError::ProcessDied {
            status: self
                .exit
                .borrow()
                .as_ref()
                .map(|e| e.status.clone())
                .unwrap_or_else(|| "still running".into()),
            stderr_tail: lock(&self.shared.stderr_tail)
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

impl Drop for TurnEvents {
    fn drop(&mut self) {
        if self.ours.is_some() {
            *lock(&self.shared.turn) = None;
            *lock(&self.shared.written) = None;
            self.shared.phase.send_replace(TurnPhase::Idle);
        }
    }
}

/// A poison-tolerant lock for short sections: a panic elsewhere must not wedge the process.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Resolves once the reaper has recorded the exit. Returns nothing, so no watch guard is held
/// across the caller's next await.
async fn exited(exit: &mut watch::Receiver<Option<ExitInfo>>) {
    let _ = exit.wait_for(Option::is_some).await;
}
