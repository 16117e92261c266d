//! Warm `claude` processes, one per thread, in a moka cache keyed by [`ThreadId`]. The pool alone
//! owns a process's life: [`Pool::checkout`] → [`Lease`] → [`Lease::finish`]. The lease says how
//! the session started ([`SessionStart`]), runs the turn ([`Lease::start_turn`]), and its
//! outcome decides whether the process stays warm.
//!
//! A process is started from a [`ProcessSpec`] (thread, folder, options, session to resume),
//! which the launcher builds once from the thread's row; a warm process serves a turn only when
//! its spec fits the turn's, and spares are claimed by spec.
//!
//! Files:
//! - `mod.rs`: the pool; checkout, prewarm, eviction, shutdown.
//! - `entry.rs`: one process as the pool sees it ([`entry::Entry`]): its spec, leases, turns.
//! - `state.rs`: the bookkeeping beside moka (live processes, spares, waiting spawns, eviction
//!   causes, use history), under one lock, in synchronous methods tested without processes.
//! - `spawn.rs`: starting a process, its tasks (`watch_walls`: its walls' limits) and its reaper.
//! - `lease.rs`: what a checked-out process offers a turn ([`Lease`], [`LeasedTurn`],
//!   [`TurnItem`]).
//! - `host.rs`: each process's control requests, answered by the [`McpAdapter`] at once or handed
//!   to the running turn (a `tools/call` as a [`TurnItem::ToolCall`]), and the turns the CLI
//!   starts by itself ([`CliTurn`]).
//! - `transcript.rs`: each process's transcript frames stored; a turn's [`TurnItem::Done`] waits
//!   for them, and a `--resume` the CLI's config dir lacks writes them back.
//! - `at_risk.rs`: the frames the store refused, held per thread and written first next time;
//!   what became of them is a turn's [`TurnItem::Transcript`] notes.
//! - `admission.rs`: who gets a slot, and whose process makes room.
//! - `spares.rs`: processes parked ahead of need for threads not created yet.
//! - `status.rs`: the status API's view ([`ProcessInfo`]).
//!
//! Invariants:
//! - The key is our stable thread id, never the CLI's session id (which can change); prewarm and
//!   turns go through the same [`Pool::checkout`] with the same key.
//! - At most one live process per thread: before a process is spawned for a thread, every older
//!   process of that thread is killed and reaped (the CLI has no session lock, and two processes
//!   on one session silently fork its history).
//! - At most `max_capacity` live processes (spares included), overflow aside (below): a spawn
//!   takes a slot, and a slot is freed only when its process has been reaped. When all slots
//!   are taken, the spawn waits in line and the idle process expected back last is pushed out
//!   (see [`admission`]); if none is idle, it waits.
//! - Creation is single-flight: moka's `try_get_with` runs one spawn per key at a time.
//! - A process is never killed mid-turn by the pool: one that is let go while leased is killed
//!   when its lease ends.
//! - Nested turns cannot deadlock on capacity: when every slot is held by a process waiting on
//!   the host (a tool call: a delegation waiting for its child, say), a spawn takes one of
//!   `max_capacity` overflow slots instead of waiting for a slot that only it could free. An
//!   overflow process lives for one turn; so at most 2 × `max_capacity` processes live at once.
//! - moka does not run eviction listeners when the cache is dropped, so [`Pool::shutdown`] kills
//!   what is left itself, spares included.
//! - A process that no longer pairs (`CliProcess::pairs` false) takes no further turn and is
//!   retired at once.
//! - A prewarm pushes out only processes idle at least `pool.prewarm_evicts_after`.
//! - A transcript frame the store refuses is never skipped: it is held, with the thread's frames
//!   after it, and written before any later one (`at_risk.rs`).
//!
//! A turn asking for another model, permission mode or set of its profile's MCP servers switches
//! the warm process in place (`set_model`, `set_permission_mode`, `mcp_set_servers`); only a
//! refusal replaces it. Any other difference of spec (a different `--json-schema` or folder,
//! say) means a new process. With `claude.scheduling_tools`, the `Stop` hook's report of pending crons and
//! background tasks keeps a process from eviction; without it, a turn the CLI starts by itself
//! retires the process.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moka::future::Cache;
use moka::notification::RemovalCause;
use serde::Serialize;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use plugin_contract::{CliSessionId, ThreadId};

use crate::budget::Meter;
use crate::launch::{
    AgentProfile, Fit, Launcher, ProcessSpec, ProfileInfo, Switchable, UnknownProfile,
};
use crate::mcp::McpAdapter;
use crate::metrics::{PoolCounts, PoolMetrics};
use crate::store::Store;
use crate::store::ThreadRow;
use crate::sync::lock;
use crate::turn_error::TurnError;
use crate::workspace::Workspaces;

mod admission;
mod at_risk;
mod demand;
mod entry;
mod host;
mod lease;
mod spares;
mod spawn;
mod state;
mod status;
mod transcript;

pub use admission::AdmissionSettings;
pub use at_risk::TranscriptNote;
pub use entry::Born;
pub use host::CliTurn;
pub use lease::{
    Adopted, CallReply, Finish, Lease, LeasedTurn, PendingCall, PermissionRequest, TurnItem,
};
pub use state::WorktreeKey;
pub use status::{rss_bytes, ProcessInfo, MEMORY_SAMPLE_EVERY};

use entry::Entry;
use state::{Shared, State};

/// How long after a failure to start a spare the next try waits.
const SPARE_RETRY: Duration = Duration::from_secs(30);

/// Why a process left the pool, as counted in `harness_pool_evictions_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvictionCause {
    Expired,
    Capacity,
    /// Pushed out to keep the processes' private memory under `pool.max_memory_mb`.
    Memory,
    Error,
    /// Replaced by a process with other spawn options (a model change).
    Replaced,
    Shutdown,
    /// A peer took the thread's lease over (clustering): its process must not serve it again.
    LeaseLost,
}

impl EvictionCause {
    /// Every cause, each once.
    #[cfg(test)]
    const ALL: [EvictionCause; 7] = [
        EvictionCause::Expired,
        EvictionCause::Capacity,
        EvictionCause::Memory,
        EvictionCause::Error,
        EvictionCause::Replaced,
        EvictionCause::Shutdown,
        EvictionCause::LeaseLost,
    ];

    fn label(self) -> &'static str {
        match self {
            EvictionCause::Expired => "expired",
            EvictionCause::Capacity => "capacity",
            EvictionCause::Memory => "memory",
            EvictionCause::Error => "error",
            EvictionCause::Replaced => "replaced",
            EvictionCause::LeaseLost => "lease_lost",
            EvictionCause::Shutdown => "shutdown",
        }
    }
}

/// What the pool needs to start processes.
pub struct PoolSettings {
    pub idle_ttl: Duration,
    pub capacity: u64,
    /// Most private memory (bytes) the live processes may hold together (`pool.max_memory_mb`).
    pub max_memory: Option<u64>,
    /// A prewarm pushes out only processes idle at least this long.
    pub prewarm_evicts_after: Duration,
    /// Plain spares to keep parked (`pool.spares`).
    pub spares: usize,
    /// (profile, repository) pairs that keep a worktree spare (`pool.workspace_spares`).
    pub workspace_spares: usize,
    pub admission: AdmissionSettings,
}

/// The pool. Cheap to clone: clones share one pool.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    cache: Cache<ThreadId, Arc<Entry>>,
    /// The bookkeeping beside the cache, under one lock (see [`state`]).
    state: Arc<Shared>,
    slots: Arc<Semaphore>,
    /// How many slots there are (`pool.max_capacity`).
    capacity: usize,
    /// `pool.max_memory_mb`, in bytes.
    max_memory: Option<u64>,
    /// Slots beyond capacity, only for turns that would otherwise deadlock (see the invariants).
    overflow: Arc<Semaphore>,
    /// Woken when a process may have become idle (a turn ended, a prewarm finished), so a spawn
    /// waiting for a slot looks again for an idle process to push out.
    idle: Notify,
    /// Spawns waiting for a slot queue here, in arrival order.
    admission_line: tokio::sync::Mutex<()>,
    admission: AdmissionSettings,
    launcher: Launcher,
    /// Where worktree spares park their worktrees.
    workspaces: Workspaces,
    mcp: Arc<McpAdapter>,
    /// Where the processes' transcript frames are kept, and restored from.
    store: Store,
    /// Each thread's transcript frames on their way to the store, those it refused held.
    at_risk: Arc<at_risk::AtRisk>,
    metrics: PoolMetrics,
    prewarm_evicts_after: Duration,
    /// Every task of every process (its IO, its control requests, its reaper).
    tasks: TaskTracker,
    /// Turns the CLIs start by themselves, for the pipeline (`claude.scheduling_tools`);
    /// the receiver is taken once ([`Pool::take_cli_turns`]).
    cli_turns: mpsc::UnboundedSender<CliTurn>,
    cli_turns_rx: Mutex<Option<mpsc::UnboundedReceiver<CliTurn>>>,
    /// What the walls stopped, by thread, for the pipeline to record; taken once
    /// ([`Pool::take_breaches`]).
    breaches: mpsc::UnboundedSender<(ThreadId, walls::Breach)>,
    breaches_rx: Mutex<Option<mpsc::UnboundedReceiver<(ThreadId, walls::Breach)>>>,
    /// How often a process with pending work is touched, so it does not expire idle.
    keep_alive_every: Duration,
}

impl Pool {
    pub fn new(
        settings: PoolSettings,
        launcher: Launcher,
        workspaces: Workspaces,
        mcp: Arc<McpAdapter>,
        store: Store,
    ) -> Pool {
        let metrics = PoolMetrics::default();
        let (cli_turns, cli_turns_rx) = mpsc::unbounded_channel();
        let (breaches, breaches_rx) = mpsc::unbounded_channel();
        // More spares than half the pool would be guesses crowding out threads.
        let ceiling = usize::try_from(settings.capacity / 2).unwrap_or(usize::MAX);
        let state = Arc::new(Shared::new(State::new(
            demand::Demand::new(settings.spares, ceiling),
            settings.workspace_spares,
            Instant::now(),
        )));
        let listener_metrics = metrics.clone();
        let listener_state = state.clone();
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
                        RemovalCause::Explicit => listener_state.lock().take_cause(&thread),
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
                state,
                slots: Arc::new(Semaphore::new(capacity)),
                capacity,
                max_memory: settings.max_memory,
                overflow: Arc::new(Semaphore::new(capacity)),
                idle: Notify::new(),
                admission_line: tokio::sync::Mutex::new(()),
                admission: settings.admission,
                launcher,
                workspaces,
                mcp,
                store,
                at_risk: Arc::default(),
                metrics,
                prewarm_evicts_after: settings.prewarm_evicts_after,
                tasks: TaskTracker::new(),
                cli_turns,
                cli_turns_rx: Mutex::new(Some(cli_turns_rx)),
                breaches,
                breaches_rx: Mutex::new(Some(breaches_rx)),
                keep_alive_every: settings.idle_ttl / 2,
            }),
        }
    }

    /// The turns the CLIs start by themselves, once (the pipeline runs them). Until taken, and
    /// without `claude.scheduling_tools`, such a turn retires its process instead.
    pub fn take_cli_turns(&self) -> Option<mpsc::UnboundedReceiver<CliTurn>> {
        lock(&self.inner.cli_turns_rx).take()
    }

    /// What the walls stopped, by thread, as it happens; `None` once taken.
    pub fn take_breaches(&self) -> Option<mpsc::UnboundedReceiver<(ThreadId, walls::Breach)>> {
        lock(&self.inner.breaches_rx).take()
    }

    /// How the pool starts processes: each thread's spec and launch (the bench replays a new
    /// thread's to break a cold turn down).
    pub fn launcher(&self) -> &Launcher {
        &self.inner.launcher
    }

    /// Makes `session`, made by a process of `from`, resumable by processes of `to` (a fork,
    /// whose folder is another CLI project); false when the CLI no longer has it.
    pub fn copy_session(
        &self,
        from: &ProcessSpec,
        to: &ProcessSpec,
        session: &CliSessionId,
    ) -> std::io::Result<bool> {
        self.inner.launcher.copy_session(from, to, session)
    }

    /// Removes what is on disk of a deleted thread (see [`Launcher::forget`]).
    pub fn forget_folders(&self, thread: &ThreadRow) -> std::io::Result<()> {
        self.inner.launcher.forget(thread)
    }

    /// The spec of `thread`'s process on `model` (see [`Launcher::spec`]).
    pub fn spec(
        &self,
        thread: &ThreadRow,
        model: Option<String>,
    ) -> Result<ProcessSpec, UnknownProfile> {
        self.inner.launcher.spec(thread, model)
    }

    /// The profile `name` (the default when `None`).
    pub fn profile(&self, name: Option<&str>) -> Result<Arc<AgentProfile>, UnknownProfile> {
        self.inner.launcher.profile(name)
    }

    /// Makes the profile `name` from `table`, with the tools its client runs
    /// ([`Launcher::make_profile`]).
    pub fn make_profile(
        &self,
        name: &str,
        table: &crate::config::ProfileConfig,
        denies: &[String],
        client_tools: Arc<crate::mcp::ClientTools>,
    ) -> Result<Arc<AgentProfile>, crate::config::ConfigError> {
        self.inner
            .launcher
            .make_profile(name, table, denies, client_tools)
    }

    /// What `GET /api/profiles` shows: every profile, by name.
    pub fn profiles(&self) -> Vec<ProfileInfo> {
        self.inner
            .launcher
            .profiles()
            .map(|p| p.info().clone())
            .collect()
    }

    /// The thread's warm process if it fits `spec`, else a new one started from it, leased: the
    /// pool does not push it out until the lease ends. The process's model requests count in
    /// `meter`'s turn from the moment it is leased ([`Lease::meter_with`]), a switch in place
    /// (which may send the model a probe) included.
    pub async fn checkout(&self, spec: &ProcessSpec, meter: &Meter) -> Result<Lease, TurnError> {
        self.inner
            .state
            .lock()
            .history
            .started(&spec.thread, Instant::now());
        self.checkout_with(spec, None, Some(meter)).await
    }

    async fn checkout_with(
        &self,
        spec: &ProcessSpec,
        mut slot: Option<OwnedSemaphorePermit>,
        meter: Option<&Meter>,
    ) -> Result<Lease, TurnError> {
        let leased = |lease: Lease| {
            if let Some(meter) = meter {
                lease.meter_with(meter.clone());
            }
            lease
        };
        let inner = &self.inner;
        let thread = &spec.thread;
        for _ in 0..3 {
            if let Some(entry) = inner.cache.get(thread).await {
                // A process whose folder was deleted under it (and perhaps made again) would run
                // the turn in the deleted one: it goes, and a process starts in the folder as it
                // is now (or says `cwd_unavailable`).
                let alive = entry.usable() && entry.in_its_folder();
                let fit = entry.fits(spec);
                if alive && fit != Fit::No {
                    if let Some(lease) = entry.lease(self).map(leased) {
                        if fit == Fit::Yes {
                            inner.metrics.hit();
                            return Ok(lease);
                        }
                        match lease.switch(&Switchable::of(spec)).await {
                            Ok(model_changed) => {
                                inner.metrics.hit();
                                if model_changed {
                                    inner.metrics.model_switched();
                                }
                                return Ok(lease);
                            }
                            Err(reason) => {
                                warn!(thread_id = %thread, model = ?spec.options.model, mode = ?spec.options.permission_mode, %reason, "The CLI refused a switch in place; starting a process for the turn.");
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
                .try_get_with(thread.clone(), self.spawn_for(spec.clone(), slot.take()))
                .await
                .map_err(|err| (*err).clone())?;
            if spawned.fits(spec) == Fit::Yes {
                // `None`: pushed out by a spawn waiting for a slot before we got to it; again.
                if let Some(lease) = spawned.lease(self).map(leased) {
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
    pub async fn prewarm(&self, spec: &ProcessSpec) -> Result<bool, TurnError> {
        let thread = &spec.thread;
        self.inner.metrics.prewarm();
        let warm = self
            .inner
            .cache
            .get(thread)
            .await
            .is_some_and(|e| e.usable() && e.fits(spec) == Fit::Yes);
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
        let lease = self.checkout_with(spec, slot, None).await?;
        if lease.entry().turns.load(Ordering::Relaxed) == 0 {
            spares::warm_up(lease.entry()).await;
        }
        lease.finish(Finish::Keep).await;
        Ok(true)
    }

    /// Kills every live process of `thread` (after its lease, if any) and waits for each to be
    /// reaped.
    async fn reap_thread(&self, thread: &ThreadId) {
        let old = self.inner.state.lock().live_of(thread);
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
            if let Some(permit) = self.free_slot() {
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
        let live: Vec<Arc<Entry>> = self
            .inner
            .state
            .lock()
            .live()
            .into_iter()
            .filter(|e| !e.process.has_exited())
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
        self.inner.state.lock().set_cause(thread, cause);
        self.inner.cache.invalidate(thread).await;
        // Not invalidated (no process cached): the cause is not kept for a later one.
        self.inner.state.lock().take_cause(thread);
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

    /// Why no plain spare is started, when the CLI refused one for a reason a retry does not
    /// mend (a policy, a broken configuration); `None` otherwise.
    pub fn spares_held(&self) -> Option<String> {
        self.inner.state.lock().plain_spares_held()
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

    /// Kills every process, leased or not, and waits until all are reaped and their tasks ended;
    /// `false` when some task was still running 2 s after the last process was gone.
    pub async fn shutdown(&self) -> bool {
        let (spares, all) = self.inner.state.lock().stop();
        for spare in spares {
            self.inner.metrics.spare_gone();
            self.discard_spare(spare);
        }
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

#[cfg(test)]
mod cause_tests {
    use super::EvictionCause;
    use crate::metrics::EVICTION_CAUSES;

    /// Every cause the pool emits is a label `/metrics` shows at zero from the start (#46: the
    /// pool emitted `lease_lost`, which the list lacked).
    #[test]
    fn every_eviction_cause_is_a_known_label() {
        let labels: Vec<&str> = EvictionCause::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(labels, EVICTION_CAUSES);
    }
}
