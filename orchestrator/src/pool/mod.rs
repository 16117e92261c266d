//! Warm `claude` processes, one per thread, in a moka cache keyed by [`ThreadId`]. The pool alone
//! owns a process's life: [`Pool::checkout`] → [`Lease`] → [`Lease::finish`]. The lease says how
//! the session started ([`SessionStart`]), runs the turn ([`Lease::start_turn`]), and its
//! outcome decides whether the process stays warm.
//!
//! Files:
//! - `mod.rs`: the pool and its bookkeeping on each process; checkout, prewarm, eviction,
//!   shutdown, and the status API's view.
//! - `spawn.rs`: starting a process, its tasks and its reaper.
//! - `lease.rs`: what a checked-out process offers a turn ([`Lease`], [`LeasedTurn`],
//!   [`TurnItem`]).
//! - `host.rs`: each process's control requests, answered by the [`McpAdapter`] at once or handed
//!   to the running turn (a `tools/call` as a [`TurnItem::ToolCall`]), and the turns the CLI
//!   starts by itself ([`CliTurn`]).
//! - `transcript.rs`: each process's transcript frames stored; a turn's [`TurnItem::Done`] waits
//!   for them, and a `--resume` the CLI's config dir lacks writes them back.
//! - `admission.rs`: who gets a slot, and whose process makes room.
//! - `spares.rs`: processes parked ahead of need for threads not created yet.
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
//!   what is left itself, spares included.
//! - A process that no longer pairs (`CliProcess::pairs` false) takes no further turn and is
//!   retired at once.
//! - A prewarm pushes out only processes idle at least `pool.prewarm_evicts_after`.
//!
//! A turn asking for another model switches the warm process in place (`set_model`); only a
//! refusal replaces it. Any other start option (a different `--json-schema`, say) means a new
//! process. With `claude.scheduling_tools`, the `Stop` hook's report of pending crons and
//! background tasks keeps a process from eviction; without it, a turn the CLI starts by itself
//! retires the process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use claude_cli::{CliProcess, SpawnOptions};
use moka::future::Cache;
use moka::notification::RemovalCause;
use serde::Serialize;
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use plugin_contract::{CliSessionId, SessionStart, ThreadId};

use crate::launch::Launcher;
use crate::mcp::McpAdapter;
use crate::metrics::{PoolCounts, PoolMetrics};
use crate::store::Store;
use crate::sync::lock;
use crate::turn_error::TurnError;

mod admission;
mod host;
mod lease;
mod spares;
mod spawn;
mod transcript;

pub use admission::AdmissionSettings;
pub use host::CliTurn;
pub use lease::{CallReply, Finish, Lease, LeasedTurn, PendingCall, PermissionRequest, TurnItem};

use lease::HostCall;

/// How long after a failure to start a spare the next try waits.
const SPARE_RETRY: Duration = Duration::from_secs(30);

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
        let lease = Lease::new(self.clone(), pool.clone());
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
        if lease.entry().turns.load(Ordering::Relaxed) == 0 {
            spares::warm_up(lease.entry()).await;
        }
        lease.finish(Finish::Keep).await;
        Ok(true)
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
