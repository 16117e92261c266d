//! Warm `claude` processes, one per thread, in a moka cache keyed by [`ThreadId`]. The pool alone
//! owns a process's life: [`Pool::checkout`] → [`Lease`] → [`Lease::finish`]. The lease says how
//! the session started ([`SessionStart`]), runs the turn ([`Lease::start_turn`]), and its
//! outcome decides whether the process stays warm.
//!
//! Each process's control requests are served here: the MCP handshake and `tools/list` are
//! answered by the [`McpAdapter`] at once; a `tools/call` goes to the running turn as a
//! [`TurnItem::ToolCall`], whose owner runs it with the turn's context and answers.
//!
//! Each process's transcript frames (`--session-mirror`) are stored by a task of their own, and
//! a turn's [`TurnItem::Done`] waits until the frames before its `result` are stored. Before a
//! `--resume` whose session file the CLI's config dir lacks, the stored transcript is written
//! back; only a session with nothing stored falls back to a fresh one (history injected).
//!
//! Invariants:
//! - The key is our stable thread id, never the CLI's session id (which can change); prewarm and
//!   turns go through the same [`Pool::checkout`] with the same key.
//! - At most one live process per thread: before a process is spawned for a thread, every older
//!   process of that thread is killed and reaped (the CLI has no session lock, and two processes
//!   on one session silently fork its history).
//! - At most `max_capacity` live processes: a spawn takes a slot, and a slot is freed only when
//!   its process has been reaped. When all slots are taken, the spawn waits in line and the idle
//!   process expected back last is pushed out (see [`admission`]); if none is idle, it waits.
//! - Creation is single-flight: moka's `try_get_with` runs one spawn per key at a time.
//! - A process is never killed mid-turn by the pool: one that is let go while leased is killed
//!   when its lease ends.
//! - Nested turns cannot deadlock on capacity: when every slot is held by a process waiting on
//!   the host (a tool call: a delegation waiting for its child, say), a spawn takes one of
//!   `max_capacity` overflow slots instead of waiting for a slot that only it could free.
//! - moka does not run eviction listeners when the cache is dropped, so [`Pool::shutdown`] kills
//!   what is left itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use claude_cli::{
    CliProcess, HostRequest, HostRequests, MirrorFrames, OwnTurn, OwnTurns, SpawnError,
    SpawnOptions, Step, StopReport, TurnEvent, TurnEvents, TurnResult,
};
use moka::future::Cache;
use moka::notification::RemovalCause;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn, Instrument};

use plugin_contract::{CliSessionId, SessionStart, ThreadId};

use crate::launch::Launcher;
use crate::mcp::{McpAdapter, Route, ToolCall, SERVER_NAME};
use crate::metrics::{PoolCounts, PoolMetrics};
use crate::store::Store;
use crate::sync::lock;
use crate::turn_error::TurnError;

mod admission;
mod spares;

pub use admission::AdmissionSettings;

/// How long the CLI gets to finish its MCP handshake after the `initialize` reply; the first turn
/// would wait for it otherwise.
const MCP_HANDSHAKE_WAIT: Duration = Duration::from_secs(5);
/// How long after a failure to start a spare the next try waits.
const SPARE_RETRY: Duration = Duration::from_secs(30);
/// How long a turn's end waits for the transcript frames before its `result` to be stored.
const TRANSCRIPT_WAIT: Duration = Duration::from_secs(10);
/// Waits before the second and third try to store a transcript frame (as the SDKs retry).
const TRANSCRIPT_RETRIES: [Duration; 2] = [Duration::from_millis(200), Duration::from_millis(800)];

/// Why a process left the pool, as counted in `harness_pool_evictions_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvictionCause {
    Expired,
    Capacity,
    Error,
    /// Replaced by a process with other spawn options (a model change).
    Replaced,
    Shutdown,
    /// A peer took the thread's lease over (clustering): its process must not serve it again.
    LeaseLost,
}

impl EvictionCause {
    fn label(self) -> &'static str {
        match self {
            EvictionCause::Expired => "expired",
            EvictionCause::Capacity => "capacity",
            EvictionCause::Error => "error",
            EvictionCause::Replaced => "replaced",
            EvictionCause::LeaseLost => "lease_lost",
            EvictionCause::Shutdown => "shutdown",
        }
    }
}

/// One live process, for `/api/pool`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    pub model: Option<String>,
    pub pid: u32,
    pub age_ms: u64,
    pub idle_ms: u64,
    pub turns_served: u64,
    pub busy: bool,
    /// Let go by the pool; killed when its lease ends.
    pub retired: bool,
    /// A parked spare: its `threadId` is the one reserved for the next thread created.
    pub spare: bool,
    #[schema(value_type = Option<String>)]
    pub session_id: Option<CliSessionId>,
    /// Resident memory (`VmRSS` from `/proc/<pid>/status`), in bytes; `None` when unreadable.
    pub rss_bytes: Option<u64>,
    /// Crons and background tasks the CLI reported pending at its last turn's end
    /// (`claude.scheduling_tools`): while any are, the process is never evicted.
    pub pending_work: usize,
}

/// What the pool needs to start processes.
pub struct PoolSettings {
    pub idle_ttl: Duration,
    pub capacity: u64,
    /// A prewarm pushes out only processes idle at least this long.
    pub prewarm_evicts_after: Duration,
    /// Spares to keep parked.
    pub spares: usize,
    pub admission: AdmissionSettings,
}

/// The pool. Cheap to clone: clones share one pool.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    cache: Cache<ThreadId, Arc<Entry>>,
    /// The cause to record for the next explicit invalidation of a key.
    pending_causes: Arc<Mutex<HashMap<ThreadId, EvictionCause>>>,
    slots: Arc<Semaphore>,
    /// Slots beyond capacity, only for turns that would otherwise deadlock (see the invariants).
    overflow: Arc<Semaphore>,
    /// Woken when a process may have become idle (a turn ended, a prewarm finished), so a spawn
    /// waiting for a slot looks again for an idle process to push out.
    idle: Notify,
    /// Spawns waiting for a slot queue here, in arrival order.
    admission_line: tokio::sync::Mutex<()>,
    /// Spawns waiting for a slot now (spares are not started while any does).
    waiting: AtomicUsize,
    admission: AdmissionSettings,
    /// When threads last used their processes, to choose which to push out.
    history: Mutex<admission::UseHistory>,
    live: Mutex<HashMap<u32, Arc<Entry>>>,
    launcher: Launcher,
    mcp: Arc<McpAdapter>,
    /// Where the processes' transcript frames are kept, and restored from.
    store: Store,
    metrics: PoolMetrics,
    prewarm_evicts_after: Duration,
    /// Parked spares, oldest first.
    spares: Mutex<Vec<Arc<Entry>>>,
    spare_target: usize,
    spares_starting: AtomicUsize,
    /// No spare is started before this (after a failure to start one).
    spare_retry_at: Mutex<Instant>,
    /// Set by shutdown: no spare is parked after it.
    stopping: AtomicBool,
    /// Every task of every process (its IO, its control requests, its reaper).
    tasks: TaskTracker,
    /// Turns the CLIs start by themselves, for the pipeline (`claude.scheduling_tools`);
    /// the receiver is taken once ([`Pool::take_cli_turns`]).
    cli_turns: mpsc::UnboundedSender<CliTurn>,
    cli_turns_rx: Mutex<Option<mpsc::UnboundedReceiver<CliTurn>>>,
    /// How often a process with pending work is touched, so it does not expire idle.
    keep_alive_every: Duration,
}

/// A turn a thread's CLI started by itself (a cron firing, a `ScheduleWakeup`, a background
/// task's notice), with a lease on its process: [`Lease::adopt`] its events to run it like a
/// turn of ours, then end the lease.
pub struct CliTurn {
    pub thread: ThreadId,
    /// Why the CLI started it ([`OwnTurn::source`]).
    pub source: String,
    pub lease: Lease,
    pub events: TurnEvents,
}

/// A process as the pool sees it: the CLI process and the pool's bookkeeping around it.
struct Entry {
    process: Arc<CliProcess>,
    thread: ThreadId,
    /// The options the process was started with; its model may have changed since.
    options: SpawnOptions,
    /// The model the process uses now (`set_model` changes it in place).
    model: Mutex<Option<String>>,
    start: SessionStart,
    /// Checkouts whose lease has not ended. A leased process counts as busy: the pool must not
    /// push it out between checkout and turn.
    leases: AtomicUsize,
    /// Let go by the pool while leased: killed when the last lease ends.
    retired: AtomicBool,
    /// Started beyond the pool's capacity: let go as soon as its first lease ends.
    one_turn: AtomicBool,
    turns: AtomicU64,
    last_used: Mutex<Instant>,
    /// Where the process's tool calls go while a turn runs.
    calls: Arc<Inboxes>,
    /// How many of the process's transcript frames have been stored (or given up on).
    transcript_stored: watch::Receiver<u64>,
}

impl Entry {
    /// A process the pool starts keeping books on: unleased, no turn served, used now.
    fn new(
        process: Arc<CliProcess>,
        thread: ThreadId,
        options: SpawnOptions,
        model: Option<String>,
        start: SessionStart,
        calls: Arc<Inboxes>,
        transcript_stored: watch::Receiver<u64>,
    ) -> Entry {
        Entry {
            process,
            thread,
            options,
            model: Mutex::new(model),
            start,
            leases: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            one_turn: AtomicBool::new(false),
            turns: AtomicU64::new(0),
            last_used: Mutex::new(Instant::now()),
            calls,
            transcript_stored,
        }
    }

    /// Waits until every transcript frame the process has written so far is stored: called at
    /// a turn's `result`, it makes the turn's transcript durable before the turn is.
    async fn transcript_stored(&self) {
        let written = self.process.mirror_frames_received();
        let mut stored = self.transcript_stored.clone();
        // An error means the store task ended: the frames ran out, every one was handled.
        let waited =
            tokio::time::timeout(TRANSCRIPT_WAIT, stored.wait_for(|n| *n >= written)).await;
        if waited.is_err() {
            warn!(thread_id = %self.thread, pid = self.process.pid(), written, "Transcript frames not stored in time; the turn ends without waiting for them.");
        }
    }

    /// Whether a turn asking for `options` can run on this process as it is.
    fn fits(&self, options: &SpawnOptions) -> Fit {
        // How the session began (a fork of another) does not matter once the process runs.
        let same_start = SpawnOptions {
            model: options.model.clone(),
            fork_session: options.fork_session,
            ..self.options.clone()
        } == *options;
        if !same_start {
            Fit::No
        } else if *lock(&self.model) == options.model {
            Fit::Yes
        } else {
            Fit::OtherModel
        }
    }

    fn is_busy(&self) -> bool {
        self.leases.load(Ordering::SeqCst) > 0 || self.process.in_turn()
    }

    fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }

    /// The CLI holds crons or background tasks of the thread (its last `Stop` report): pushing
    /// the process out would drop them, so it is never chosen for eviction.
    fn has_pending_work(&self) -> bool {
        self.calls.pending_work.load(Ordering::SeqCst) > 0
    }

    /// Fit for another turn: running, not let go, and its results still answer our messages
    /// ([`CliProcess::pairs`]).
    fn usable(&self) -> bool {
        !self.is_retired() && !self.process.has_exited() && self.process.pairs()
    }

    fn idle_for(&self) -> Duration {
        if self.is_busy() {
            Duration::ZERO
        } else {
            lock(&self.last_used).elapsed()
        }
    }

    fn session_start(&self) -> SessionStart {
        if self.turns.load(Ordering::Relaxed) > 0 {
            SessionStart::Warm
        } else {
            self.start
        }
    }

    /// Lets go of the process: killed now if unleased, or when its last lease ends.
    fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.kill_if_retired_and_unused();
    }

    fn kill_if_retired_and_unused(&self) {
        if self.is_retired() && self.leases.load(Ordering::SeqCst) == 0 {
            self.process.kill();
        }
    }

    /// Takes a lease, or `None` when the pool already let go of the process (or it exited).
    fn lease(self: &Arc<Self>, pool: &Pool) -> Option<Lease> {
        // Increment, then look: `retire` stores, then looks. With SeqCst at least one of the two
        // sees the other, so a process is never killed under a live lease.
        self.leases.fetch_add(1, Ordering::SeqCst);
        let lease = Lease {
            entry: self.clone(),
            pool: pool.clone(),
            finished: false,
        };
        if !self.usable() {
            return None;
        }
        Some(lease)
    }
}

impl Pool {
    pub fn new(
        settings: PoolSettings,
        launcher: Launcher,
        mcp: Arc<McpAdapter>,
        store: Store,
    ) -> Pool {
        let metrics = PoolMetrics::default();
        let (cli_turns, cli_turns_rx) = mpsc::unbounded_channel();
        let pending_causes: Arc<Mutex<HashMap<ThreadId, EvictionCause>>> = Arc::default();
        let listener_metrics = metrics.clone();
        let listener_causes = pending_causes.clone();
        // No size bound in the cache: the slots bound the live processes, and admission chooses
        // whom to push out (moka's own size eviction would push out its LRU entry behind our back).
        let cache = Cache::builder()
            .time_to_idle(settings.idle_ttl)
            .eviction_listener(
                move |thread: Arc<ThreadId>, entry: Arc<Entry>, cause: RemovalCause| {
                    let cause = match cause {
                        RemovalCause::Expired => EvictionCause::Expired,
                        RemovalCause::Size => EvictionCause::Capacity,
                        RemovalCause::Replaced => EvictionCause::Replaced,
                        RemovalCause::Explicit => lock(&listener_causes)
                            .remove(&*thread)
                            .unwrap_or(EvictionCause::Capacity),
                    };
                    listener_metrics.evicted(cause.label());
                    info!(thread_id = %thread, pid = entry.process.pid(), ?cause, "Process evicted.");
                    entry.retire();
                },
            )
            .build();
        let capacity = usize::try_from(settings.capacity).unwrap_or(usize::MAX);
        Pool {
            inner: Arc::new(Inner {
                cache,
                pending_causes,
                slots: Arc::new(Semaphore::new(capacity)),
                overflow: Arc::new(Semaphore::new(capacity)),
                idle: Notify::new(),
                admission_line: tokio::sync::Mutex::new(()),
                waiting: AtomicUsize::new(0),
                admission: settings.admission,
                history: Mutex::default(),
                live: Mutex::default(),
                launcher,
                mcp,
                store,
                metrics,
                prewarm_evicts_after: settings.prewarm_evicts_after,
                spares: Mutex::default(),
                spare_target: settings.spares,
                spares_starting: AtomicUsize::new(0),
                spare_retry_at: Mutex::new(Instant::now()),
                stopping: AtomicBool::new(false),
                tasks: TaskTracker::new(),
                cli_turns,
                cli_turns_rx: Mutex::new(Some(cli_turns_rx)),
                keep_alive_every: settings.idle_ttl / 2,
            }),
        }
    }

    /// The turns the CLIs start by themselves, once (the pipeline runs them). Until taken, and
    /// without `claude.scheduling_tools`, such a turn retires its process instead.
    pub fn take_cli_turns(&self) -> Option<mpsc::UnboundedReceiver<CliTurn>> {
        lock(&self.inner.cli_turns_rx).take()
    }

    /// Makes `session` of thread `from` resumable by processes of thread `to` (a fork); false
    /// when the CLI no longer has it.
    pub fn copy_session(
        &self,
        from: &ThreadId,
        to: &ThreadId,
        session: &CliSessionId,
    ) -> std::io::Result<bool> {
        self.inner.launcher.copy_session(from, to, session)
    }

    /// The options of a process for `model` (the default model when `None`).
    pub fn options(&self, model: Option<String>) -> SpawnOptions {
        self.inner.launcher.options(model)
    }

    /// The thread's warm process if its options match, else a new one (resuming `resume` when
    /// given), leased: the pool does not push it out until the lease ends.
    pub async fn checkout(
        &self,
        thread: &ThreadId,
        options: &SpawnOptions,
        resume: Option<&CliSessionId>,
    ) -> Result<Lease, TurnError> {
        lock(&self.inner.history).started(thread, Instant::now());
        self.checkout_with(thread, options, resume, None).await
    }

    async fn checkout_with(
        &self,
        thread: &ThreadId,
        options: &SpawnOptions,
        resume: Option<&CliSessionId>,
        mut slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Lease, TurnError> {
        let inner = &self.inner;
        for _ in 0..3 {
            if let Some(entry) = inner.cache.get(thread).await {
                let alive = entry.usable();
                let fit = entry.fits(options);
                if alive && fit != Fit::No {
                    if let Some(lease) = entry.lease(self) {
                        if fit == Fit::Yes {
                            inner.metrics.hit();
                            return Ok(lease);
                        }
                        match lease.switch_model(options.model.clone()).await {
                            Ok(()) => {
                                inner.metrics.hit();
                                inner.metrics.model_switched();
                                return Ok(lease);
                            }
                            Err(reason) => {
                                warn!(thread_id = %thread, model = ?options.model, %reason, "The CLI refused the model switch; starting a process for the model.");
                                // Dropped unfinished: the process is let go.
                                drop(lease);
                            }
                        }
                    }
                }
                let cause = if fit == Fit::Yes {
                    EvictionCause::Error
                } else {
                    EvictionCause::Replaced
                };
                self.remove(thread, cause).await;
            }
            let spawned = inner
                .cache
                .try_get_with(
                    thread.clone(),
                    self.spawn_for(
                        thread.clone(),
                        options.clone(),
                        resume.cloned(),
                        slot.take(),
                    ),
                )
                .await
                .map_err(|err| (*err).clone())?;
            if spawned.fits(options) == Fit::Yes {
                // `None`: pushed out by a spawn waiting for a slot before we got to it; again.
                if let Some(lease) = spawned.lease(self) {
                    return Ok(lease);
                }
            }
        }
        Err(TurnError::Cli(
            "could not settle on a process for the thread (options kept changing)".into(),
        ))
    }

    /// Starts the thread's process ahead of its first message, unless it is warm already. A
    /// prewarm is a guess: it pushes out only processes idle at least
    /// `pool.prewarm_evicts_after`, and is skipped (`Ok(false)`) when there are none.
    pub async fn prewarm(
        &self,
        thread: &ThreadId,
        options: &SpawnOptions,
        resume: Option<&CliSessionId>,
    ) -> Result<bool, TurnError> {
        self.inner.metrics.prewarm();
        let warm = self
            .inner
            .cache
            .get(thread)
            .await
            .is_some_and(|e| e.usable() && e.fits(options) == Fit::Yes);
        let slot = if warm {
            None
        } else {
            match self.prewarm_slot().await {
                Some(slot) => Some(slot),
                None => {
                    self.inner.metrics.prewarm_skipped();
                    info!(thread_id = %thread, "Prewarm skipped: every pool slot holds a process used recently.");
                    return Ok(false);
                }
            }
        };
        // The lease ends here: the process waits idle for the thread's first message, its
        // first-turn work partly done.
        let lease = self.checkout_with(thread, options, resume, slot).await?;
        if lease.entry.turns.load(Ordering::Relaxed) == 0 {
            spares::warm_up(&lease.entry).await;
        }
        lease.finish(Finish::Keep).await;
        Ok(true)
    }

    async fn spawn_for(
        &self,
        thread: ThreadId,
        options: SpawnOptions,
        resume: Option<CliSessionId>,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Arc<Entry>, TurnError> {
        self.inner.metrics.miss();
        self.reap_thread(&thread).await;
        if let Some(session) = &resume {
            self.restore_session(&thread, session).await;
        }
        match self
            .spawn_one(&thread, &options, resume.as_ref(), false, slot)
            .await
        {
            Ok(entry) => Ok(entry),
            Err(SpawnError::MissingSession(reason)) => {
                warn!(thread_id = %thread, session_id = ?resume, %reason, "Resume failed; starting a fresh session, history will be injected.");
                self.inner.metrics.resume_fallback();
                match self.spawn_one(&thread, &options, None, true, None).await {
                    Ok(entry) => Ok(entry),
                    Err(SpawnError::MissingSession(reason)) => Err(TurnError::Cli(reason)),
                    Err(SpawnError::Failed(err)) => Err(err.into()),
                }
            }
            Err(SpawnError::Failed(err)) => Err(err.into()),
        }
    }

    /// Makes `session` resumable by `thread`'s processes when the CLI's config dir does not have
    /// it (another node, a wiped `data_dir/claude`, a fork whose parent's file is gone): writes
    /// the stored transcript back. With nothing stored, or on failure, the resume fails as
    /// before and the fresh session with injected history follows.
    ///
    /// With clustering the copy here may also be older than the stored one: the thread moved to
    /// a peer, went on there, and came back. It is rewritten when it lacks the last entry stored
    /// for its file.
    async fn restore_session(&self, thread: &ThreadId, session: &CliSessionId) {
        let inner = &self.inner;
        let here = inner.launcher.has_session(thread, session);
        if here && inner.store.node_id().is_none() {
            return;
        }
        let entries = match inner.store.session_transcript(session).await {
            Ok(entries) if entries.is_empty() => {
                debug!(thread_id = %thread, session_id = %session, "No stored transcript for the session.");
                return;
            }
            Ok(entries) => entries,
            Err(err) => {
                warn!(thread_id = %thread, session_id = %session, error = %err, "Could not read the stored transcript.");
                return;
            }
        };
        let count = entries.len();
        let (launcher, owner, id) = (inner.launcher.clone(), thread.clone(), session.clone());
        // Files of up to megabytes, synced: off the async workers.
        let written = tokio::task::spawn_blocking(move || {
            if here {
                let main = format!("{}.jsonl", id.as_str());
                let last = entries.iter().rev().find(|e| e.file == main);
                match last.and_then(|e| e.uuid.as_deref()) {
                    Some(uuid) if !launcher.session_has_entry(&owner, &id, uuid)? => {}
                    // Up to date (or nothing to tell by): kept as it is.
                    _ => return Ok(None),
                }
            }
            let lines = entries.iter().map(|e| (e.file.as_str(), e.line.as_str()));
            launcher.restore_transcript(&owner, lines).map(Some)
        })
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string())));
        match written {
            Ok(None) => {}
            Ok(Some(files)) => {
                inner.metrics.transcript_restored();
                info!(thread_id = %thread, session_id = %session, entries = count, files, "Session restored from the stored transcript.");
            }
            Err(err) => {
                warn!(thread_id = %thread, session_id = %session, error = %err, "Could not write the stored transcript back.");
            }
        }
    }

    async fn spawn_one(
        &self,
        thread: &ThreadId,
        options: &SpawnOptions,
        resume: Option<&CliSessionId>,
        resume_failed: bool,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Arc<Entry>, SpawnError> {
        let inner = &self.inner;
        let (permit, overflow) = match slot {
            Some(permit) => (permit, false),
            None => self.acquire_slot().await,
        };
        let launch = inner
            .launcher
            .launch(thread)
            .map_err(|err| self.folder_error(err))?;
        let start = match resume {
            Some(_) => SessionStart::Resumed,
            None => SessionStart::Fresh { resume_failed },
        };
        let resume_id = resume.map(CliSessionId::as_str);
        self.start_process(&launch, thread, options, resume_id, start, overflow, permit)
            .await
    }

    fn folder_error(&self, err: std::io::Error) -> SpawnError {
        SpawnError::Failed(claude_cli::CliError::Spawn {
            bin: self.inner.launcher.bin().display().to_string(),
            reason: format!("cannot create the process's folder: {err}"),
        })
    }

    /// Starts a process, serves its control requests, waits for its MCP handshake unless the
    /// CLI took our manifest, and registers it as live (holding `permit` until it is reaped).
    #[allow(clippy::too_many_arguments)]
    async fn start_process(
        &self,
        launch: &claude_cli::Launch,
        thread: &ThreadId,
        options: &SpawnOptions,
        resume: Option<&str>,
        start: SessionStart,
        overflow: bool,
        permit: OwnedSemaphorePermit,
    ) -> Result<Arc<Entry>, SpawnError> {
        let inner = &self.inner;
        inner.metrics.spawn();
        let started = Instant::now();
        let started_process = CliProcess::spawn(launch, options, resume, &inner.tasks).await?;
        let (process, requests) = (started_process.process, started_process.requests);
        let (stored_tx, transcript_stored) = watch::channel(0);
        // With our manifest parked, the CLI answers its own MCP handshake: nothing to wait for.
        let parked = started_process.initialize["sdk_mcp_manifests_parked"][SERVER_NAME]
            .as_str()
            .map(str::to_owned);
        let calls: Arc<Inboxes> = Arc::default();
        let (ready_tx, mut ready) = watch::channel(false);
        let span = tracing::info_span!("cli", thread_id = %thread, pid = process.pid());
        inner.tasks.spawn(
            store_transcript(
                thread.clone(),
                started_process.mirror,
                inner.store.clone(),
                stored_tx,
            )
            .instrument(span.clone()),
        );
        inner.tasks.spawn(
            serve_host_requests(
                thread.clone(),
                requests,
                inner.mcp.clone(),
                calls.clone(),
                ready_tx,
            )
            .instrument(span),
        );
        // Without a parked manifest the CLI runs its MCP handshake right after `initialize`; a
        // first turn would wait for it.
        let handshake = async {
            if parked.as_deref() != Some("parked") {
                debug!(thread_id = %thread, manifest = ?parked, "The CLI did not take our MCP manifest; waiting for its handshake.");
                let _ = tokio::time::timeout(MCP_HANDSHAKE_WAIT, ready.wait_for(|r| *r)).await;
            }
        };
        tokio::select! {
            _ = handshake => {}
            _ = process.wait_exit() => {
                return Err(SpawnError::Failed(claude_cli::CliError::ProcessDied {
                    status: process.exit_status(),
                    stderr_tail: process.stderr_tail(),
                }));
            }
        }
        inner.metrics.ready(started.elapsed());
        info!(thread_id = %thread, pid = process.pid(), ms = started.elapsed().as_millis() as u64, resumed = resume.is_some(), "Process ready.");
        let entry = Arc::new(Entry::new(
            process,
            thread.clone(),
            options.clone(),
            options.model.clone(),
            start,
            calls,
            transcript_stored,
        ));
        entry.one_turn.store(overflow, Ordering::SeqCst);
        lock(&inner.live).insert(entry.process.pid(), entry.clone());
        inner.tasks.spawn(
            self.clone()
                .serve_own_turns(entry.clone(), started_process.own_turns),
        );
        let pool = self.clone();
        let watched = entry.clone();
        inner.tasks.spawn(async move {
            tokio::select! {
                _ = watched.process.wait_exit() => {}
                _ = watched.process.wait_unpaired() => {
                    // The CLI ran a turn nobody sent (containment keeps the tools that start
                    // one off): its output answers no message of ours, so the process goes
                    // (now if idle; a running turn fails with `Unpaired` and discards it).
                    warn!(thread_id = %watched.thread, pid = watched.process.pid(), "The CLI ran a turn of its own; retiring the process.");
                    watched.retire();
                    watched.process.wait_exit().await;
                }
            }
            let pid = watched.process.pid();
            lock(&pool.inner.live).remove(&pid);
            let mut spares = lock(&pool.inner.spares);
            if let Some(at) = spares.iter().position(|s| s.process.pid() == pid) {
                spares.remove(at);
                pool.inner.metrics.spare_gone();
            }
            drop(spares);
            pool.inner.metrics.reaped();
            // The slot is free only once the process is gone.
            drop(permit);
        });
        Ok(entry)
    }

    /// Hands each turn `entry`'s CLI starts by itself to the pipeline, with a lease on the
    /// process, until the process ends; and while the CLI reports pending crons or background
    /// tasks, keeps the process from expiring idle. Without `claude.scheduling_tools` (or with
    /// nobody taking [`Pool::take_cli_turns`]) such a turn means containment failed: the process
    /// is retired.
    async fn serve_own_turns(self, entry: Arc<Entry>, mut own_turns: OwnTurns) {
        let scheduling = self.inner.launcher.scheduling_tools();
        let mut keep_alive = tokio::time::interval(self.inner.keep_alive_every);
        keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let own: OwnTurn = tokio::select! {
                own = own_turns.recv() => match own {
                    Some(own) => own,
                    None => return,
                },
                _ = keep_alive.tick() => {
                    if entry.calls.pending_work.load(Ordering::SeqCst) > 0 {
                        // Reading resets the time-to-idle of the thread's entry (if it is this).
                        let _ = self.inner.cache.get(&entry.thread).await;
                    }
                    continue;
                }
                _ = entry.process.wait_exit() => return,
            };
            let lease = match (scheduling, entry.lease(&self)) {
                (true, Some(lease)) => lease,
                _ => {
                    warn!(thread_id = %entry.thread, pid = entry.process.pid(), source = %own.source, "The CLI started a turn of its own; retiring the process.");
                    entry.retire();
                    return;
                }
            };
            let turn = CliTurn {
                thread: entry.thread.clone(),
                source: own.source,
                lease,
                events: own.events,
            };
            if let Err(refused) = self.inner.cli_turns.send(turn) {
                warn!(thread_id = %entry.thread, "Nobody runs the CLI's own turns; retiring the process.");
                drop(refused);
                entry.retire();
                return;
            }
        }
    }

    /// Kills every live process of `thread` (after its lease, if any) and waits for each to be
    /// reaped.
    async fn reap_thread(&self, thread: &ThreadId) {
        let old: Vec<Arc<Entry>> = lock(&self.inner.live)
            .values()
            .filter(|e| &e.thread == thread)
            .cloned()
            .collect();
        for entry in old {
            entry.retire();
            entry.process.wait_exit().await;
        }
    }

    /// The cached process idle longest, if it has been idle at least `at_least`.
    fn longest_idle(&self, at_least: Duration) -> Option<(ThreadId, Arc<Entry>)> {
        self.inner
            .cache
            .iter()
            .filter(|(_, e)| !e.is_busy() && !e.has_pending_work() && e.idle_for() >= at_least)
            .max_by_key(|(_, e)| e.idle_for())
            .map(|(thread, entry)| ((*thread).clone(), entry))
    }

    /// A slot for a prewarm: free, or freed by pushing out the process idle longest if it has
    /// been idle at least `prewarm_evicts_after`; `None` otherwise, never waiting.
    async fn prewarm_slot(&self) -> Option<OwnedSemaphorePermit> {
        for _ in 0..3 {
            if let Ok(permit) = self.inner.slots.clone().try_acquire_owned() {
                return Some(permit);
            }
            let (thread, entry) = self.longest_idle(self.inner.prewarm_evicts_after)?;
            self.remove(&thread, EvictionCause::Capacity).await;
            entry.process.wait_exit().await;
        }
        None
    }

    /// An overflow slot, when every live process waits on the host (a tool call).
    fn overflow_slot(&self) -> Option<OwnedSemaphorePermit> {
        let live: Vec<Arc<Entry>> = lock(&self.inner.live)
            .values()
            .filter(|e| !e.process.has_exited())
            .cloned()
            .collect();
        if live.is_empty() || !live.iter().all(|e| e.process.waiting_on_host()) {
            return None;
        }
        let permit = self.inner.overflow.clone().try_acquire_owned().ok()?;
        warn!(
            live = live.len(),
            "Every pool slot waits on a tool call; starting a process beyond capacity."
        );
        Some(permit)
    }

    async fn remove(&self, thread: &ThreadId, cause: EvictionCause) {
        lock(&self.inner.pending_causes).insert(thread.clone(), cause);
        self.inner.cache.invalidate(thread).await;
        lock(&self.inner.pending_causes).remove(thread);
    }

    /// Evicts the thread's process and kills it (a running turn ends with the process): another
    /// node owns the thread now. Nothing happens when the thread has none.
    pub async fn evict_thread(&self, thread: &ThreadId) {
        self.remove(thread, EvictionCause::LeaseLost).await;
        self.reap_thread(thread).await;
    }

    /// Asks the thread's running turn to stop. `Ok(false)` when no turn is running.
    pub async fn interrupt(&self, thread: &ThreadId) -> Result<bool, TurnError> {
        match self.inner.cache.get(thread).await {
            Some(entry) if entry.is_busy() => {
                entry.process.interrupt().await.map_err(TurnError::Cli)
            }
            _ => Ok(false),
        }
    }

    /// The counters, for `/api/pool`.
    pub fn counts(&self) -> PoolCounts {
        self.inner.metrics.counts()
    }

    /// The pool's series, registered in `/metrics`.
    pub fn metrics(&self) -> &PoolMetrics {
        &self.inner.metrics
    }

    /// Runs moka's pending maintenance, so idle processes expire on time even with no traffic.
    pub async fn run_maintenance(&self) {
        self.inner.cache.run_pending_tasks().await;
        self.ensure_spares();
    }

    /// Every live process, for the status API.
    pub fn snapshot(&self) -> Vec<ProcessInfo> {
        let live: Vec<Arc<Entry>> = lock(&self.inner.live).values().cloned().collect();
        let mut list: Vec<ProcessInfo> = live
            .iter()
            .filter(|e| !e.process.has_exited())
            .map(|e| ProcessInfo {
                thread_id: e.thread.clone(),
                model: lock(&e.model).clone(),
                pid: e.process.pid(),
                age_ms: millis(e.process.age()),
                idle_ms: millis(e.idle_for()),
                turns_served: e.turns.load(Ordering::Relaxed),
                busy: e.is_busy(),
                retired: e.is_retired(),
                spare: lock(&self.inner.spares).iter().any(|s| Arc::ptr_eq(s, e)),
                session_id: e.process.session_id().map(CliSessionId::from_string),
                rss_bytes: rss_bytes(e.process.pid()),
                pending_work: e.calls.pending_work.load(Ordering::SeqCst),
            })
            .collect();
        list.sort_by_key(|p| p.pid);
        list
    }

    /// Pids of live processes.
    pub fn live_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = lock(&self.inner.live)
            .values()
            .filter(|e| !e.process.has_exited())
            .map(|e| e.process.pid())
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Kills every process, leased or not, and waits until all are reaped and their tasks ended;
    /// `false` when some task was still running 2 s after the last process was gone.
    pub async fn shutdown(&self) -> bool {
        self.inner.stopping.store(true, Ordering::SeqCst);
        let spares: Vec<Arc<Entry>> = lock(&self.inner.spares).drain(..).collect();
        for spare in spares {
            self.inner.metrics.spare_gone();
            self.discard_spare(spare);
        }
        let all: Vec<Arc<Entry>> = lock(&self.inner.live).values().cloned().collect();
        for entry in &all {
            self.inner.metrics.evicted(EvictionCause::Shutdown.label());
            entry.retired.store(true, Ordering::SeqCst);
            entry.process.kill();
        }
        for entry in &all {
            entry.process.wait_exit().await;
        }
        self.inner.tasks.close();
        let ended = tokio::time::timeout(Duration::from_secs(2), self.inner.tasks.wait())
            .await
            .is_ok();
        if !ended {
            warn!("Some process tasks did not end after their processes were killed.");
        }
        info!(killed = all.len(), "All CLI processes stopped.");
        ended
    }
}

/// How a process fits a turn's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fit {
    Yes,
    /// Everything but the model: `set_model` can switch it in place.
    OtherModel,
    No,
}

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
    /// How the session of this turn started: warm once the process has served a turn.
    pub fn session_start(&self) -> SessionStart {
        self.entry.session_start()
    }

    pub fn pid(&self) -> u32 {
        self.entry.process.pid()
    }

    /// The CLI session id the process reports.
    pub fn session_id(&self) -> Option<CliSessionId> {
        self.entry
            .process
            .session_id()
            .map(CliSessionId::from_string)
    }

    /// Switches the process to `model` in place (the CLI's `set_model`; it may send the model a
    /// one-token probe first). `Err` with the CLI's reason when it refuses.
    async fn switch_model(&self, model: Option<String>) -> Result<(), String> {
        let reply = self
            .entry
            .process
            .request(json!({"subtype": "set_model", "model": model}))
            .await?;
        let now = reply.get("model").cloned().unwrap_or(Value::Null);
        info!(thread_id = %self.entry.thread, model = ?model, %now, "Model switched in place.");
        *lock(&self.entry.model) = model;
        Ok(())
    }

    /// Writes `prompt` as a turn; its events and tool calls come from the returned stream.
    pub async fn start_turn(&self, prompt: &str) -> Result<LeasedTurn<'_>, TurnError> {
        let (tx, calls) = mpsc::unbounded_channel();
        *lock(&self.entry.calls.ours) = Some(tx);
        match self.entry.process.turn(prompt).await {
            Ok(events) => Ok(LeasedTurn {
                events,
                calls,
                entry: &self.entry,
                pool: &self.pool,
                own: false,
            }),
            Err(err) => {
                *lock(&self.entry.calls.ours) = None;
                Err(err.into())
            }
        }
    }

    /// Takes over a turn the CLI started by itself on this lease's process: its events and
    /// control requests come from the returned stream, as a turn of ours would.
    pub fn adopt(&self, events: TurnEvents) -> LeasedTurn<'_> {
        let (tx, calls) = mpsc::unbounded_channel();
        *lock(&self.entry.calls.own) = Some(tx);
        LeasedTurn {
            events,
            calls,
            entry: &self.entry,
            pool: &self.pool,
            own: true,
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
                let _ = self.pool.inner.cache.get(&entry.thread).await;
                self.pool.inner.idle.notify_waiters();
            }
            Finish::Discard => {
                if let Some(current) = self.pool.inner.cache.get(&entry.thread).await {
                    if Arc::ptr_eq(&current, &entry) {
                        self.pool.remove(&entry.thread, EvictionCause::Error).await;
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

/// One running turn on a leased process.
pub struct LeasedTurn<'a> {
    events: TurnEvents,
    calls: mpsc::UnboundedReceiver<HostCall>,
    entry: &'a Arc<Entry>,
    pool: &'a Pool,
    /// A turn the CLI started by itself ([`CliTurn`]), not one of ours.
    own: bool,
}

/// Where a process's control requests go: the turn of ours that runs, or the turn the CLI
/// started by itself (the CLI runs one at a time, and says which with each request).
#[derive(Default)]
struct Inboxes {
    ours: Mutex<Option<mpsc::UnboundedSender<HostCall>>>,
    own: Mutex<Option<mpsc::UnboundedSender<HostCall>>>,
    /// Crons and background tasks the CLI reported pending at its last turn's end (`Stop`
    /// hook): a process with any is not evicted, since its thread's work is in it.
    pending_work: AtomicUsize,
}

impl Inboxes {
    fn slot(&self, own: bool) -> &Mutex<Option<mpsc::UnboundedSender<HostCall>>> {
        if own {
            &self.own
        } else {
            &self.ours
        }
    }
}

/// What a running turn produced next.
#[derive(Debug)]
pub enum TurnItem {
    Event(TurnEvent),
    /// The CLI wrote something with nothing to report: it is alive.
    Alive,
    /// The model called one of our tools: run it and answer ([`CallReply::send`]).
    ToolCall(PendingCall),
    /// The CLI asks whether a tool may run: decide and answer
    /// ([`PermissionRequest::answer`]).
    Permission(PermissionRequest),
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
                process.interrupt_own_turn().await
            } else {
                process.interrupt().await
            };
        });
    }

    /// The next item; an error when the process went away mid-turn.
    pub async fn next(&mut self) -> Result<TurnItem, TurnError> {
        tokio::select! {
            biased;
            Some(call) = self.calls.recv() => Ok(match call {
                HostCall::Tool(call) => TurnItem::ToolCall(call),
                HostCall::Permission(request) => TurnItem::Permission(request),
            }),
            step = self.events.next() => match step? {
                Step::Event(event) => Ok(TurnItem::Event(event)),
                Step::Alive => Ok(TurnItem::Alive),
                Step::Done(result) => {
                    // The frames before a `result` are the turn's transcript: stored first.
                    self.entry.transcript_stored().await;
                    Ok(TurnItem::Done(result))
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
        lock(&self.pool.inner.history).ended(&self.entry.thread, now);
    }
}

/// A `tools/call` of the running turn: the call, and where its answer goes.
#[derive(Debug)]
pub struct PendingCall {
    call: ToolCall,
    request: HostRequest,
}

impl PendingCall {
    pub fn into_parts(self) -> (ToolCall, CallReply) {
        (self.call, CallReply(self.request))
    }
}

/// What a process's control requests hand to its running turn.
#[derive(Debug)]
enum HostCall {
    Tool(PendingCall),
    Permission(PermissionRequest),
}

/// A `can_use_tool` request of the running turn; dropped unanswered, the CLI gets an error (and
/// does not run the tool).
#[derive(Debug)]
pub struct PermissionRequest(HostRequest);

impl PermissionRequest {
    pub fn request_id(&self) -> &str {
        &self.0.request_id
    }

    fn field(&self, key: &str) -> Option<&Value> {
        self.0.request.get(key)
    }

    pub fn tool_name(&self) -> &str {
        self.field("tool_name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    pub fn input(&self) -> Value {
        self.field("input").cloned().unwrap_or_else(|| json!({}))
    }

    pub fn tool_use_id(&self) -> Option<&str> {
        self.field("tool_use_id").and_then(Value::as_str)
    }

    /// Sends the decision: `{"behavior": "allow", "updatedInput"}` or
    /// `{"behavior": "deny", "message"}`.
    pub fn answer(self, response: Value) {
        self.0.respond(Ok(response));
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

/// Serves one process's control requests until it exits: MCP messages the adapter can answer
/// at once are answered here; tool calls and tool permissions go to the running turn.
async fn serve_host_requests(
    thread: ThreadId,
    mut requests: HostRequests,
    mcp: Arc<McpAdapter>,
    calls: Arc<Inboxes>,
    ready: watch::Sender<bool>,
) {
    while let Some(request) = requests.recv().await {
        if request.subtype == "can_use_tool" {
            let slot = calls.slot(request.in_own_turn);
            let refused = to_turn(slot, HostCall::Permission(PermissionRequest(request)));
            if let Some(HostCall::Permission(request)) = refused {
                let message = "no turn is running on this process; nothing was run";
                request.answer(json!({"behavior": "deny", "message": message}));
            }
            continue;
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
            continue;
        }
        if request.subtype != "mcp_message" {
            warn!(subtype = %request.subtype, "Unsupported control request from the CLI.");
            let reason = format!("unsupported control request: {}", request.subtype);
            request.respond(Err(reason));
            continue;
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
        match mcp.route(&thread, &server, message) {
            Route::Reply(reply) => request.respond(Ok(json!({ "mcp_response": reply }))),
            Route::Listed(reply) => {
                request.respond(Ok(json!({ "mcp_response": reply })));
                let _ = ready.send(true);
            }
            Route::Call(call) => {
                let slot = calls.slot(request.in_own_turn);
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
}

/// Stores one process's transcript frames, in order, until its stdout ends; counts each frame
/// handled in `stored`, which a turn's end waits on. A frame that cannot be stored after three
/// tries is logged and skipped: the turn is not failed for it (a later restore misses it, and
/// with nothing stored the fallback injects the history).
async fn store_transcript(
    thread: ThreadId,
    mut frames: MirrorFrames,
    store: Store,
    stored: watch::Sender<u64>,
) {
    while let Some(frame) = frames.recv().await {
        match (frame.session_id(), frame.project_relative_path()) {
            (Some(session), Some(file)) => {
                let session = CliSessionId::from_string(session);
                let mut waits = TRANSCRIPT_RETRIES.iter();
                loop {
                    match store
                        .append_transcript(&thread, &session, &file, &frame.entries)
                        .await
                    {
                        Ok(_) => break,
                        Err(err) => match waits.next() {
                            Some(wait) => tokio::time::sleep(*wait).await,
                            None => {
                                warn!(session_id = %session, entries = frame.entries.len(), error = %err, "Could not store a transcript frame; a restore of the session will miss it.");
                                break;
                            }
                        },
                    }
                }
            }
            _ => {
                warn!(file = %frame.file_path, "Skipped a transcript frame outside the CLI's projects folder.")
            }
        }
        stored.send_modify(|n| *n += 1);
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

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `VmRSS` of `pid` in bytes, from `/proc/<pid>/status` (Linux); `None` when the process is gone
/// or the line is missing.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut fields = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") | None => Some(value * 1024),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tclaude\nVmPeak:\t  300 kB\nVmRSS:\t  223456 kB\nThreads:\t12\n";
        assert_eq!(parse_vm_rss(status), Some(223_456 * 1024));
        assert_eq!(parse_vm_rss("Name:\tkthreadd\n"), None);
        assert!(rss_bytes(std::process::id()).is_some_and(|b| b > 0));
        assert_eq!(rss_bytes(u32::MAX), None);
    }
}
