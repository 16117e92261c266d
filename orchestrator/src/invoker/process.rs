//! One `claude` child process: spawn, the reader/writer/stderr/reaper tasks, turns, kill and reap.
//!
//! Invariants:
//! - Exactly one task writes stdin (lines from an mpsc queue), so lines never interleave; every
//!   line is built by [`protocol`] with a JSON encoder.
//! - One task reads stdout and never blocks on a handler: control requests from the CLI are
//!   answered by spawned tasks, so the MCP handshake is served while we await our own replies.
//! - One turn at a time: a second turn is written only after the first one's `result`.
//! - The child is its own process group leader; [`CliProcess::kill`] signals the whole group and
//!   the reaper task `wait()`s for it, so nothing is left as an orphan or a zombie.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit};
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, trace, warn, Instrument};

use plugin_contract::{CliSessionId, EventSink, InvokeError, SessionStart, StreamEvent, ThreadId};

use super::protocol::{self, CliMessage, SpawnOptions, TurnResult};
use crate::sync::lock;

/// Longest stdout line we accept (a `tools/list` reply or a long answer can be large).
const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;
/// How much of stderr we keep for error messages.
const STDERR_TAIL_LINES: usize = 20;
/// How long the CLI gets to perform its MCP handshake after the `initialize` reply.
const MCP_HANDSHAKE_WAIT: Duration = Duration::from_secs(5);
/// How long an interrupt waits for the CLI to start a turn it has only queued so far.
const INTERRUPT_WAIT: Duration = Duration::from_secs(10);

/// Where the process's turn is, as far as an interrupt cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TurnPhase {
    Idle,
    /// The user line is written but the CLI has not started the turn (no `system/init` yet). The
    /// CLI's `interrupt` stops only a running turn: a queued one would still run.
    Queued,
    Running,
}

/// Answers the CLI's control requests for our in-process MCP server.
#[async_trait::async_trait]
pub trait ControlHandler: Send + Sync {
    /// Handles one JSON-RPC message from the CLI's MCP client for `server`, on behalf of the
    /// process of `thread`. Returns the JSON-RPC reply (for notifications, an empty result).
    async fn mcp_message(&self, thread: &ThreadId, server: &str, message: Value) -> Value;
}

/// How to start processes: everything that is the same for all threads.
#[derive(Clone, Debug)]
pub struct LaunchConfig {
    pub bin: PathBuf,
    pub config_dir: PathBuf,
    /// Parent of the threads' working directories: each thread runs in a folder of its own
    /// ([`thread_workdir`]), so each is its own CLI project with its own transcripts and memory.
    pub threads_dir: PathBuf,
    /// The child's whole environment: the daemon's own is not inherited.
    pub env: Vec<(String, String)>,
    pub ready_timeout: Duration,
}

/// The working directory of `thread`'s processes: `<threads_dir>/<thread id>`, with anything but
/// ASCII letters, digits, `-` and `_` replaced, so an id can never name another folder.
pub fn thread_workdir(threads_dir: &std::path::Path, thread: &ThreadId) -> PathBuf {
    let name: String = thread
        .as_str()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    threads_dir.join(name)
}

/// How a process ended.
#[derive(Clone, Debug)]
pub struct ExitInfo {
    pub status: String,
    pub code: Option<i32>,
}

/// Why a process could not be started.
#[derive(Debug)]
pub enum SpawnFailure {
    /// `--resume` named a session the CLI does not have.
    MissingSession(String),
    Other(InvokeError),
}

struct Shared {
    thread: ThreadId,
    writer: mpsc::UnboundedSender<String>,
    pending: Mutex<HashMap<String, oneshot::Sender<Result<Value, String>>>>,
    /// The running turn's inbox, if a turn is running.
    turn: Mutex<Option<mpsc::UnboundedSender<CliMessage>>>,
    session_id: Mutex<Option<String>>,
    stderr_tail: Mutex<VecDeque<String>>,
    /// A `result` that arrived with no turn running (a failed `--resume` writes one, then exits).
    stray_result: Mutex<Option<TurnResult>>,
    /// Set once the CLI has fetched our tool list: the process is ready for a fast first turn.
    mcp_ready: watch::Sender<bool>,
    /// Tool calls in flight; the idle timeout does not run while a tool works.
    tool_calls: AtomicUsize,
    phase: watch::Sender<TurnPhase>,
    handler: Arc<dyn ControlHandler>,
    cancel: CancellationToken,
    next_request: AtomicU64,
}

/// A live `claude` process serving one thread.
pub struct CliProcess {
    pid: u32,
    options: SpawnOptions,
    start: SessionStart,
    shared: Arc<Shared>,
    exit: watch::Receiver<Option<ExitInfo>>,
    turn_lock: tokio::sync::Mutex<()>,
    busy: AtomicBool,
    /// [`Lease`]s held: checkouts whose turn has not finished. The pool must not push out a
    /// process between checkout and turn, so a leased process counts as busy.
    leases: AtomicUsize,
    /// Set when the pool let go of this process while a turn was running: kill after the turn.
    retired: AtomicBool,
    /// Started beyond the pool's capacity: let go as soon as its first lease ends.
    one_turn: AtomicBool,
    turns: AtomicU64,
    spawned_at: Instant,
    last_used: Mutex<Instant>,
}

impl CliProcess {
    /// Spawns a process and waits until it is ready: the `initialize` reply has come and the CLI
    /// has fetched our tool list. `permit` is a pool slot, released when the process is reaped.
    pub async fn spawn(
        launch: &LaunchConfig,
        thread: ThreadId,
        options: SpawnOptions,
        resume: Option<&CliSessionId>,
        resume_failed: bool,
        handler: Arc<dyn ControlHandler>,
        permit: OwnedSemaphorePermit,
    ) -> Result<Arc<CliProcess>, SpawnFailure> {
        let started = Instant::now();
        let workdir = thread_workdir(&launch.threads_dir, &thread);
        let bin = launch.bin.display().to_string();
        crate::private_fs::create_dir(&workdir).map_err(|err| {
            SpawnFailure::Other(InvokeError::Spawn {
                bin: bin.clone(),
                reason: format!("cannot create {}: {err}", workdir.display()),
            })
        })?;
        let mut cmd = tokio::process::Command::new(&launch.bin);
        cmd.args(protocol::cli_args(&options, resume))
            .current_dir(&workdir)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("CLAUDE_CONFIG_DIR", &launch.config_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        set_parent_death_signal(&mut cmd);
        let mut child = cmd.spawn().map_err(|err| {
            SpawnFailure::Other(InvokeError::Spawn {
                bin: bin.clone(),
                reason: err.to_string(),
            })
        })?;
        let pid = child.id().unwrap_or(0);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(SpawnFailure::Other(InvokeError::Spawn {
                bin,
                reason: "stdio pipes missing".into(),
            }));
        };

        let (writer_tx, writer_rx) = mpsc::unbounded_channel();
        let (exit_tx, exit_rx) = watch::channel(None);
        let shared = Arc::new(Shared {
            thread: thread.clone(),
            writer: writer_tx,
            pending: Mutex::default(),
            turn: Mutex::default(),
            session_id: Mutex::new(resume.map(|s| s.to_string())),
            stderr_tail: Mutex::default(),
            stray_result: Mutex::default(),
            mcp_ready: watch::channel(false).0,
            tool_calls: AtomicUsize::new(0),
            phase: watch::channel(TurnPhase::Idle).0,
            handler,
            cancel: CancellationToken::new(),
            next_request: AtomicU64::new(1),
        });
        let span = tracing::info_span!("cli", thread_id = %thread, pid);
        tokio::spawn(write_stdin(stdin, writer_rx, shared.cancel.clone()).instrument(span.clone()));
        tokio::spawn(read_stdout(stdout, shared.clone()).instrument(span.clone()));
        tokio::spawn(drain_stderr(stderr, shared.clone()).instrument(span.clone()));
        tokio::spawn(
            async move {
                let status = child.wait().await;
                let info = match status {
                    Ok(status) => ExitInfo {
                        status: status.to_string(),
                        code: status.code(),
                    },
                    Err(err) => ExitInfo {
                        status: format!("wait failed: {err}"),
                        code: None,
                    },
                };
                debug!(status = %info.status, "Process reaped.");
                drop(permit);
                let _ = exit_tx.send(Some(info));
            }
            .instrument(span.clone()),
        );

        let start = match resume {
            Some(_) => SessionStart::Resumed,
            None => SessionStart::Fresh { resume_failed },
        };
        let process = Arc::new(CliProcess {
            pid,
            options,
            start,
            shared,
            exit: exit_rx,
            turn_lock: tokio::sync::Mutex::new(()),
            busy: AtomicBool::new(false),
            leases: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            one_turn: AtomicBool::new(false),
            turns: AtomicU64::new(0),
            spawned_at: started,
            last_used: Mutex::new(started),
        });

        match tokio::time::timeout(launch.ready_timeout, process.wait_ready()).await {
            Ok(Ok(())) => {
                info!(thread_id = %thread, pid, ms = started.elapsed().as_millis() as u64, resumed = resume.is_some(), "Process ready.");
                Ok(process)
            }
            Ok(Err(failure)) => {
                process.kill_and_reap().await;
                Err(failure)
            }
            Err(_) => {
                process.kill_and_reap().await;
                Err(SpawnFailure::Other(InvokeError::NotReady(
                    launch.ready_timeout,
                )))
            }
        }
    }

    async fn wait_ready(&self) -> Result<(), SpawnFailure> {
        let init = self.request(json!({"subtype": "initialize", "hooks": null}));
        let mut exit = self.exit.clone();
        let reply = tokio::select! {
            reply = init => reply,
            _ = exited(&mut exit) => return Err(self.early_exit_failure()),
        };
        if let Err(err) = reply {
            // Usually stdout closed because the process is exiting (a failed `--resume` does that);
            // its exit status and last words say why.
            let mut exit = self.exit.clone();
            if tokio::time::timeout(Duration::from_secs(2), exited(&mut exit))
                .await
                .is_ok()
            {
                return Err(self.early_exit_failure());
            }
            return Err(SpawnFailure::Other(InvokeError::Cli(format!(
                "initialize failed: {err}"
            ))));
        }
        // The CLI runs the MCP handshake by itself right after; the first turn would wait for it.
        let mut ready = self.shared.mcp_ready.subscribe();
        let mut exit = self.exit.clone();
        tokio::select! {
            _ = tokio::time::timeout(MCP_HANDSHAKE_WAIT, ready.wait_for(|r| *r)) => Ok(()),
            _ = exited(&mut exit) => Err(self.early_exit_failure()),
        }
    }

    fn early_exit_failure(&self) -> SpawnFailure {
        let stray = lock(&self.shared.stray_result).clone();
        let tail = self.stderr_tail();
        if stray.as_ref().is_some_and(TurnResult::is_missing_session)
            || tail.contains("No conversation found")
        {
            let reason = stray
                .map(|r| r.error_reason())
                .unwrap_or_else(|| tail.clone());
            return SpawnFailure::MissingSession(reason);
        }
        SpawnFailure::Other(InvokeError::ProcessDied {
            status: self.exit_status(),
            stderr_tail: tail,
        })
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
            .send(protocol::control_request(&id, request))
            .is_err()
        {
            lock(&self.shared.pending).remove(&id);
            return Err("stdin closed".into());
        }
        rx.await
            .unwrap_or_else(|_| Err("process ended before answering".into()))
    }

    /// Runs one turn: writes the prompt, streams events, returns the `result`.
    pub async fn turn(
        &self,
        prompt: &str,
        on_event: Option<&EventSink>,
        idle_timeout: Duration,
        deadline: tokio::time::Instant,
        max_tool_calls: u32,
    ) -> Result<TurnResult, InvokeError> {
        let _turn = self.turn_lock.lock().await;
        self.busy.store(true, Ordering::SeqCst);
        let outcome = self
            .run_turn(prompt, on_event, idle_timeout, deadline, max_tool_calls)
            .await;
        *lock(&self.shared.turn) = None;
        self.shared.phase.send_replace(TurnPhase::Idle);
        self.turns.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_used) = Instant::now();
        self.busy.store(false, Ordering::SeqCst);
        self.kill_if_retired_and_unused();
        outcome
    }

    async fn run_turn(
        &self,
        prompt: &str,
        on_event: Option<&EventSink>,
        idle_timeout: Duration,
        deadline: tokio::time::Instant,
        max_tool_calls: u32,
    ) -> Result<TurnResult, InvokeError> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        *lock(&self.shared.turn) = Some(tx);
        self.shared.phase.send_replace(TurnPhase::Queued);
        let uuid = uuid::Uuid::new_v4().to_string();
        if self
            .shared
            .writer
            .send(protocol::user_turn(prompt, &uuid))
            .is_err()
            || self.has_exited()
        {
            return Err(self.died().await);
        }
        let mut exit = self.exit.clone();
        let mut last_output = tokio::time::Instant::now();
        let mut tool_calls: u32 = 0;
        let mut over_limit = false;
        loop {
            let idle_at = last_output + idle_timeout;
            tokio::select! {
                message = rx.recv() => {
                    let Some(message) = message else { return Err(self.died().await) };
                    last_output = tokio::time::Instant::now();
                    match message {
                        CliMessage::Result(result) => {
                            if !result.user_message_uuids.is_empty() && !result.user_message_uuids.contains(&uuid) {
                                warn!(expected = %uuid, got = ?result.user_message_uuids, "Result names another message.");
                            }
                            if over_limit {
                                return Err(InvokeError::ToolCallLimit(max_tool_calls));
                            }
                            return Ok(result);
                        }
                        CliMessage::Turn(line) => {
                            tool_calls += line
                                .events
                                .iter()
                                .filter(|e| matches!(e, StreamEvent::ToolCallStarted { .. }))
                                .count() as u32;
                            if tool_calls > max_tool_calls && !over_limit {
                                over_limit = true;
                                warn!(tool_calls, limit = max_tool_calls, "Too many tool calls in one turn; stopping it.");
                                // The answer is not awaited: the turn's `result` is what counts.
                                let id = format!("req_limit_{}", uuid::Uuid::new_v4().simple());
                                let _ = self.shared.writer.send(protocol::control_request(
                                    &id,
                                    json!({"subtype": "interrupt"}),
                                ));
                            }
                            if let Some(sink) = on_event {
                                line.events.into_iter().for_each(|event| sink(event));
                            }
                        }
                        _ => {}
                    }
                }
                _ = exited(&mut exit) => return Err(self.died().await),
                _ = tokio::time::sleep_until(idle_at) => {
                    if self.shared.tool_calls.load(Ordering::SeqCst) > 0 {
                        last_output = tokio::time::Instant::now();
                        continue;
                    }
                    return Err(InvokeError::IdleTimeout(idle_timeout));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    // Only the caller knows the turn's total (it started the clock); it fills it in.
                    return Err(InvokeError::TurnTimeout(Duration::ZERO));
                }
            }
        }
    }

    /// The error for a process that went away mid-turn: waits up to a second for the exit status
    /// so the message can say how it ended.
    async fn died(&self) -> InvokeError {
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(Duration::from_secs(1), exit.wait_for(Option::is_some)).await;
        InvokeError::ProcessDied {
            status: self.exit_status(),
            stderr_tail: self.stderr_tail(),
        }
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

    /// Sends SIGKILL to the process group. Idempotent; the reaper task collects the exit status.
    pub fn kill(&self) {
        self.shared.cancel.cancel();
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
        let _ = exit.wait_for(Option::is_some).await;
    }

    /// Lets go of the process: killed now if idle, or right after its running turn.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.kill_if_retired_and_unused();
    }

    /// Claims the process for a turn, or `None` when the pool has already let go of it (or it
    /// exited). While the lease lives the process counts as busy; a process retired meanwhile is
    /// killed when the last lease goes.
    pub fn lease(self: &Arc<Self>) -> Option<Lease> {
        // Increment, then look: `retire` stores, then looks. With SeqCst at least one of the two
        // sees the other, so a process is never killed under a live lease.
        self.leases.fetch_add(1, Ordering::SeqCst);
        let lease = Lease(self.clone());
        if self.is_retired() || self.has_exited() {
            return None;
        }
        Some(lease)
    }

    fn kill_if_retired_and_unused(&self) {
        if self.retired.load(Ordering::SeqCst) && !self.is_busy() {
            self.kill();
        }
    }

    /// Marks the process to be let go once its first lease ends (an over-capacity process).
    pub fn retire_after_turn(&self) {
        self.one_turn.store(true, Ordering::SeqCst);
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }
    pub fn thread(&self) -> &ThreadId {
        &self.shared.thread
    }
    pub fn options(&self) -> &SpawnOptions {
        &self.options
    }
    pub fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }
    /// Running a turn, or leased for one.
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst) || self.leases.load(Ordering::SeqCst) > 0
    }
    /// True while the process waits on one of our tools (which may be waiting on another turn).
    pub fn in_tool_call(&self) -> bool {
        self.shared.tool_calls.load(Ordering::SeqCst) > 0
    }
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }
    pub fn turns_served(&self) -> u64 {
        self.turns.load(Ordering::Relaxed)
    }
    pub fn age(&self) -> Duration {
        self.spawned_at.elapsed()
    }
    pub fn idle_for(&self) -> Duration {
        if self.is_busy() {
            Duration::ZERO
        } else {
            lock(&self.last_used).elapsed()
        }
    }
    /// How the next turn on this process starts: warm once it has served a turn.
    pub fn session_start(&self) -> SessionStart {
        if self.turns_served() > 0 {
            SessionStart::Warm
        } else {
            self.start
        }
    }
    pub fn session_id(&self) -> Option<CliSessionId> {
        lock(&self.shared.session_id)
            .clone()
            .map(CliSessionId::from_string)
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
}

/// A process claimed for one turn (see [`CliProcess::lease`]); derefs to the process.
pub struct Lease(Arc<CliProcess>);

impl Lease {
    pub fn process(&self) -> &Arc<CliProcess> {
        &self.0
    }
}

impl std::ops::Deref for Lease {
    type Target = CliProcess;
    fn deref(&self) -> &CliProcess {
        &self.0
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.leases.fetch_sub(1, Ordering::SeqCst);
        if self.0.one_turn.load(Ordering::SeqCst) {
            self.0.retire();
        }
        self.0.kill_if_retired_and_unused();
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        // The last handle is gone: nothing can use the process any more.
        self.kill();
    }
}

/// Resolves once the reaper has recorded the exit. Returns nothing, so no watch guard is held
/// across the caller's next await.
async fn exited(exit: &mut watch::Receiver<Option<ExitInfo>>) {
    let _ = exit.wait_for(Option::is_some).await;
}

/// Kill children if the daemon dies without cleaning up (SIGKILL, crash).
fn set_parent_death_signal(cmd: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
}

async fn write_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut lines: mpsc::UnboundedReceiver<String>,
    cancel: CancellationToken,
) {
    loop {
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = cancel.cancelled() => None,
        };
        let Some(mut line) = line else { break };
        trace!(line = %line, "stdin");
        line.push('\n');
        if let Err(err) = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        }
        .await
        {
            debug!(%err, "stdin closed.");
            break;
        }
    }
}

async fn read_stdout(stdout: tokio::process::ChildStdout, shared: Arc<Shared>) {
    let mut lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE_BYTES));
    while let Some(line) = lines.next().await {
        let line = match line {
            Ok(line) => line,
            Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => {
                warn!(max = MAX_LINE_BYTES, "Skipped an oversized stdout line.");
                continue;
            }
            Err(err) => {
                warn!(%err, "stdout read failed.");
                break;
            }
        };
        trace!(line = %line, "stdout");
        if !line.trim_start().starts_with('{') {
            if !line.trim().is_empty() {
                debug!(line = %line, "Skipped a non-JSON stdout line.");
            }
            continue;
        }
        match protocol::decode(&line) {
            Ok(message) => dispatch(&shared, message),
            Err(err) => warn!(%err, "Skipped an undecodable stdout line."),
        }
    }
    // EOF: wake everyone waiting on this process.
    *lock(&shared.turn) = None;
    lock(&shared.pending).clear();
}

fn dispatch(shared: &Arc<Shared>, message: CliMessage) {
    match message {
        CliMessage::ControlResponse {
            request_id,
            outcome,
        } => {
            if let Some(tx) = lock(&shared.pending).remove(&request_id) {
                let _ = tx.send(outcome);
            }
        }
        CliMessage::ControlRequest {
            request_id,
            subtype,
            request,
        } => {
            let shared = shared.clone();
            tokio::spawn(
                async move {
                    let line = answer_control(&shared, &request_id, &subtype, request).await;
                    let _ = shared.writer.send(line);
                }
                .in_current_span(),
            );
        }
        CliMessage::ControlCancel { request_id } => debug!(%request_id, "CLI cancelled a request."),
        CliMessage::Result(result) => {
            if let Some(id) = &result.session_id {
                *lock(&shared.session_id) = Some(id.clone());
            }
            let turn = lock(&shared.turn).clone();
            match turn {
                Some(tx) => {
                    let _ = tx.send(CliMessage::Result(result));
                }
                None => *lock(&shared.stray_result) = Some(result),
            }
        }
        CliMessage::Turn(line) => {
            if line.starts_turn {
                shared.phase.send_if_modified(|phase| {
                    let queued = *phase == TurnPhase::Queued;
                    if queued {
                        *phase = TurnPhase::Running;
                    }
                    queued
                });
            }
            if let Some(id) = &line.session_id {
                let mut current = lock(&shared.session_id);
                if current.as_deref() != Some(id) {
                    debug!(session_id = %id, "CLI reported a session id.");
                    *current = Some(id.clone());
                }
            }
            if let Some(tx) = lock(&shared.turn).as_ref() {
                let _ = tx.send(CliMessage::Turn(line));
            }
        }
        CliMessage::Ignored { .. } => {}
    }
}

async fn answer_control(
    shared: &Shared,
    request_id: &str,
    subtype: &str,
    request: Value,
) -> String {
    if subtype != "mcp_message" {
        warn!(subtype, "Unsupported control request from the CLI.");
        return protocol::control_error(
            request_id,
            &format!("unsupported control request: {subtype}"),
        );
    }
    let server = request
        .get("server_name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let message = request.get("message").cloned().unwrap_or(Value::Null);
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let is_call = method == "tools/call";
    if is_call {
        shared.tool_calls.fetch_add(1, Ordering::SeqCst);
    }
    let reply = tokio::select! {
        reply = shared.handler.mcp_message(&shared.thread, &server, message) => Some(reply),
        _ = shared.cancel.cancelled() => None,
    };
    if is_call {
        shared.tool_calls.fetch_sub(1, Ordering::SeqCst);
    }
    if method == "tools/list" {
        let _ = shared.mcp_ready.send(true);
    }
    match reply {
        Some(reply) => protocol::control_success(request_id, json!({"mcp_response": reply})),
        None => protocol::control_error(request_id, "process is shutting down"),
    }
}

async fn drain_stderr(stderr: tokio::process::ChildStderr, shared: Arc<Shared>) {
    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(64 * 1024));
    while let Some(line) = lines.next().await {
        let Ok(line) = line else { continue };
        debug!(line = %line, "stderr");
        let mut tail = lock(&shared.stderr_tail);
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}
