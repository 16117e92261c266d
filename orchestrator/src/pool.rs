//! Warm `claude` processes, one per thread, in a moka cache keyed by [`ThreadId`].
//!
//! Invariants:
//! - The key is our stable thread id, never the CLI's session id (which can change); prewarm and
//!   invoke go through the same [`Pool::checkout`] with the same key.
//! - At most one live process per thread: before a process is spawned for a thread, every older
//!   process of that thread is killed and reaped (the CLI has no session lock, and two processes
//!   on one session silently fork its history).
//! - At most `max_capacity` live processes: a spawn takes a slot, and a slot is freed only when
//!   its process has been reaped. When all slots are taken, the least recently used idle process
//!   is pushed out; if none is idle, the spawn waits.
//! - Creation is single-flight: moka's `try_get_with` runs one spawn per key at a time.
//! - A process is never killed mid-turn by the pool: one that is let go while busy is killed
//!   right after its turn ([`CliProcess::retire`]).
//! - Nested turns cannot deadlock on capacity: when every slot is held by a process that is
//!   inside a tool call (a delegation waiting for its child, say), a spawn takes one of
//!   `max_capacity` overflow slots instead of waiting for a slot that only it could free.
//! - moka does not run eviction listeners when the cache is dropped, so [`Pool::shutdown`] kills
//!   what is left itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moka::future::Cache;
use moka::notification::RemovalCause;
use serde::Serialize;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};

use plugin_contract::{CliSessionId, InvokeError, ThreadId};

use crate::invoker::process::{CliProcess, ControlHandler, LaunchConfig, Lease, SpawnFailure};
use crate::invoker::protocol::SpawnOptions;
use crate::metrics::PoolMetrics;
use crate::sync::lock;

/// Counters an operator can read (see `/api/pool` and `/metrics`).
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Processes alive now (a gauge): up when a spawn succeeds, down when the process is reaped.
    pub live: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub prewarms: AtomicU64,
    /// Prewarms that started nothing: the pool was full of processes used too recently to push
    /// out for a guess.
    pub prewarms_skipped: AtomicU64,
    pub spawns: AtomicU64,
    pub resume_fallbacks: AtomicU64,
    pub evicted_expired: AtomicU64,
    pub evicted_capacity: AtomicU64,
    pub evicted_error: AtomicU64,
    pub evicted_replaced: AtomicU64,
    pub evicted_shutdown: AtomicU64,
}

/// Why a process left the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvictionCause {
    Expired,
    Capacity,
    Error,
    /// Replaced by a process with other spawn options (a model change).
    Replaced,
    Shutdown,
}

/// One live process, for `/api/pool`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    pub thread_id: ThreadId,
    pub model: Option<String>,
    pub pid: u32,
    pub age_ms: u64,
    pub idle_ms: u64,
    pub turns_served: u64,
    pub busy: bool,
    /// Let go by the pool; killed after its running turn.
    pub retired: bool,
    pub session_id: Option<CliSessionId>,
    /// Resident memory (`VmRSS` from `/proc/<pid>/status`), in bytes; `None` when unreadable.
    pub rss_bytes: Option<u64>,
}

type Live = Arc<Mutex<HashMap<u32, Arc<CliProcess>>>>;

/// How often a spawn waiting for a slot checks for a nested-turn deadlock.
const OVERFLOW_CHECK: Duration = Duration::from_millis(200);

pub struct Pool {
    cache: Cache<ThreadId, Arc<CliProcess>>,
    /// The cause to record for the next explicit invalidation of a key.
    pending_causes: Arc<Mutex<HashMap<ThreadId, EvictionCause>>>,
    slots: Arc<Semaphore>,
    /// Slots beyond capacity, only for turns that would otherwise deadlock (see the invariants).
    overflow: Arc<Semaphore>,
    /// Woken when a process may have become idle (a turn ended, a prewarm finished), so a spawn
    /// waiting for a slot looks again for an idle process to push out.
    idle: Notify,
    live: Live,
    launch: LaunchConfig,
    handler: Arc<dyn ControlHandler>,
    stats: Arc<PoolStats>,
    metrics: PoolMetrics,
}

impl Pool {
    pub fn new(
        launch: LaunchConfig,
        idle_ttl: Duration,
        capacity: u64,
        handler: Arc<dyn ControlHandler>,
    ) -> Pool {
        let stats = Arc::new(PoolStats::default());
        let pending_causes: Arc<Mutex<HashMap<ThreadId, EvictionCause>>> = Arc::default();
        let listener_stats = stats.clone();
        let listener_causes = pending_causes.clone();
        let cache = Cache::builder()
            .max_capacity(capacity)
            .time_to_idle(idle_ttl)
            // Plain LRU: TinyLFU admission could refuse a process we just spawned.
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .eviction_listener(
                move |thread: Arc<ThreadId>, process: Arc<CliProcess>, cause: RemovalCause| {
                    let cause = match cause {
                        RemovalCause::Expired => EvictionCause::Expired,
                        RemovalCause::Size => EvictionCause::Capacity,
                        RemovalCause::Replaced => EvictionCause::Replaced,
                        RemovalCause::Explicit => lock(&listener_causes)
                            .remove(&*thread)
                            .unwrap_or(EvictionCause::Capacity),
                    };
                    listener_stats.count_eviction(cause);
                    info!(thread_id = %thread, pid = process.pid(), ?cause, "Process evicted.");
                    process.retire();
                },
            )
            .build();
        Pool {
            cache,
            pending_causes,
            slots: Arc::new(Semaphore::new(capacity as usize)),
            overflow: Arc::new(Semaphore::new(capacity as usize)),
            idle: Notify::new(),
            live: Live::default(),
            launch,
            handler,
            stats,
            metrics: PoolMetrics::default(),
        }
    }

    /// The thread's warm process if its options match, else a new one (resuming `resume` when
    /// given), leased: the pool does not push it out until the lease is dropped.
    pub async fn checkout(
        &self,
        thread: &ThreadId,
        options: &SpawnOptions,
        resume: Option<&CliSessionId>,
        mut slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Lease, InvokeError> {
        for _ in 0..3 {
            if let Some(process) = self.cache.get(thread).await {
                if !process.has_exited() && !process.is_retired() && process.options() == options {
                    if let Some(lease) = process.lease() {
                        self.stats.hits.fetch_add(1, Ordering::Relaxed);
                        return Ok(lease);
                    }
                }
                let cause = if process.options() != options {
                    EvictionCause::Replaced
                } else {
                    EvictionCause::Error
                };
                self.remove(thread, cause).await;
            }
            let spawned = self
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
            if spawned.options() == options {
                // `None`: pushed out by a spawn waiting for a slot before we got to it; again.
                if let Some(lease) = spawned.lease() {
                    return Ok(lease);
                }
            }
        }
        Err(InvokeError::Cli(
            "could not settle on a process for the thread (options kept changing)".into(),
        ))
    }

    async fn spawn_for(
        &self,
        thread: ThreadId,
        options: SpawnOptions,
        resume: Option<CliSessionId>,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Arc<CliProcess>, InvokeError> {
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        self.reap_thread(&thread).await;
        let first = self
            .spawn_one(&thread, &options, resume.as_ref(), false, slot)
            .await;
        match first {
            Ok(process) => Ok(process),
            Err(SpawnFailure::MissingSession(reason)) => {
                warn!(thread_id = %thread, session_id = ?resume, %reason, "Resume failed; starting a fresh session, history will be injected.");
                self.stats.resume_fallbacks.fetch_add(1, Ordering::Relaxed);
                match self.spawn_one(&thread, &options, None, true, None).await {
                    Ok(process) => Ok(process),
                    Err(SpawnFailure::MissingSession(reason)) => Err(InvokeError::Cli(reason)),
                    Err(SpawnFailure::Other(err)) => Err(err),
                }
            }
            Err(SpawnFailure::Other(err)) => Err(err),
        }
    }

    async fn spawn_one(
        &self,
        thread: &ThreadId,
        options: &SpawnOptions,
        resume: Option<&CliSessionId>,
        resume_failed: bool,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Arc<CliProcess>, SpawnFailure> {
        let (permit, overflow) = match slot {
            Some(permit) => (permit, false),
            None => self.acquire_slot().await,
        };
        self.stats.spawns.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let process = CliProcess::spawn(
            &self.launch,
            thread.clone(),
            options.clone(),
            resume,
            resume_failed,
            self.handler.clone(),
            permit,
        )
        .await?;
        self.metrics.spawned(started.elapsed());
        if overflow {
            process.retire_after_turn();
        }
        lock(&self.live).insert(process.pid(), process.clone());
        self.stats.live.fetch_add(1, Ordering::Relaxed);
        let live = self.live.clone();
        let stats = self.stats.clone();
        let watched = process.clone();
        tokio::spawn(async move {
            watched.wait_exit().await;
            lock(&live).remove(&watched.pid());
            stats.live.fetch_sub(1, Ordering::Relaxed);
        });
        Ok(process)
    }

    /// Kills every live process of `thread` (after its running turn, if any) and waits for each to
    /// be reaped.
    async fn reap_thread(&self, thread: &ThreadId) {
        let old: Vec<Arc<CliProcess>> = lock(&self.live)
            .values()
            .filter(|p| p.thread() == thread)
            .cloned()
            .collect();
        for process in old {
            process.retire();
            process.wait_exit().await;
        }
    }

    /// A pool slot: free, or freed by pushing out the least recently used idle process, or (when
    /// every process is busy) the next one to be reaped. `true` marks an overflow slot, whose
    /// process lives for one turn.
    async fn acquire_slot(&self) -> (OwnedSemaphorePermit, bool) {
        loop {
            // Registered before looking, so a process going idle after the look still wakes us.
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                return (permit, false);
            }
            let victim = self
                .cache
                .iter()
                .filter(|(_, p)| !p.is_busy())
                .max_by_key(|(_, p)| p.idle_for())
                .map(|(thread, process)| ((*thread).clone(), process));
            match victim {
                Some((thread, process)) => {
                    self.remove(&thread, EvictionCause::Capacity).await;
                    process.wait_exit().await;
                }
                None => {
                    // Every slot is held by a busy or dying process: wait for one to be reaped,
                    // or for one to finish its turn and become a candidate. If all of them are
                    // waiting on tools, the turn asking may be the one they wait for.
                    tokio::select! {
                        permit = self.slots.clone().acquire_owned() => {
                            if let Ok(permit) = permit {
                                return (permit, false);
                            }
                        }
                        _ = idle => {}
                        _ = tokio::time::sleep(OVERFLOW_CHECK) => {
                            if let Some(permit) = self.overflow_slot() {
                                return (permit, true);
                            }
                        }
                    }
                }
            }
        }
    }

    /// A slot for a prewarm, which is a guess: free, or freed by pushing out the process idle
    /// longest if it has been idle at least `evicts_after`. `None` when every slot holds a
    /// process used more recently (or busy): the prewarm is then skipped, never waiting.
    pub async fn prewarm_slot(&self, evicts_after: Duration) -> Option<OwnedSemaphorePermit> {
        for _ in 0..3 {
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                return Some(permit);
            }
            let victim = self
                .cache
                .iter()
                .filter(|(_, p)| !p.is_busy() && p.idle_for() >= evicts_after)
                .max_by_key(|(_, p)| p.idle_for())
                .map(|(thread, process)| ((*thread).clone(), process))?;
            self.remove(&victim.0, EvictionCause::Capacity).await;
            victim.1.wait_exit().await;
        }
        None
    }

    /// An overflow slot, when every live process is inside a tool call.
    fn overflow_slot(&self) -> Option<OwnedSemaphorePermit> {
        let live: Vec<Arc<CliProcess>> = lock(&self.live)
            .values()
            .filter(|p| !p.has_exited())
            .cloned()
            .collect();
        if live.is_empty() || !live.iter().all(|p| p.in_tool_call()) {
            return None;
        }
        let permit = self.overflow.clone().try_acquire_owned().ok()?;
        warn!(
            live = live.len(),
            "Every pool slot waits on a tool call; starting a process beyond capacity."
        );
        Some(permit)
    }

    async fn remove(&self, thread: &ThreadId, cause: EvictionCause) {
        lock(&self.pending_causes).insert(thread.clone(), cause);
        self.cache.invalidate(thread).await;
        lock(&self.pending_causes).remove(thread);
    }

    /// Evicts and kills the thread's process after a failed turn, and waits until it is reaped, so
    /// the next turn starts clean (and resumes the session).
    pub async fn discard(&self, process: &Arc<CliProcess>, cause: EvictionCause) {
        let thread = process.thread().clone();
        if let Some(current) = self.cache.get(&thread).await {
            if Arc::ptr_eq(&current, process) {
                self.remove(&thread, cause).await;
            }
        }
        process.retire();
        process.kill_and_reap().await;
    }

    /// Resets the thread's idle timer after a turn; the process is now a candidate for a spawn
    /// that waits for a slot.
    pub async fn touch(&self, thread: &ThreadId) {
        let _ = self.cache.get(thread).await;
        self.idle.notify_waiters();
    }

    /// The thread's warm process, if any, without starting one.
    pub async fn peek(&self, thread: &ThreadId) -> Option<Arc<CliProcess>> {
        self.cache.get(thread).await
    }

    pub fn note_prewarm(&self) {
        self.stats.prewarms.fetch_add(1, Ordering::Relaxed);
    }

    pub fn note_prewarm_skipped(&self) {
        self.stats.prewarms_skipped.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> &PoolStats {
        &self.stats
    }

    /// The counters, shared: `/metrics` reads them at scrape time.
    pub fn stats_handle(&self) -> Arc<PoolStats> {
        self.stats.clone()
    }

    /// The spawn-time histogram, registered by [`crate::metrics::Metrics`].
    pub fn metrics(&self) -> &PoolMetrics {
        &self.metrics
    }

    /// Runs moka's pending maintenance, so idle processes expire on time even with no traffic.
    pub async fn run_maintenance(&self) {
        self.cache.run_pending_tasks().await;
    }

    /// Every live process, for the status API.
    pub fn snapshot(&self) -> Vec<ProcessInfo> {
        let live: Vec<Arc<CliProcess>> = lock(&self.live).values().cloned().collect();
        let mut list: Vec<ProcessInfo> = live
            .iter()
            .filter(|p| !p.has_exited())
            .map(|p| ProcessInfo {
                thread_id: p.thread().clone(),
                model: p.options().model.clone(),
                pid: p.pid(),
                age_ms: p.age().as_millis() as u64,
                idle_ms: p.idle_for().as_millis() as u64,
                turns_served: p.turns_served(),
                busy: p.is_busy(),
                retired: p.is_retired(),
                session_id: p.session_id(),
                rss_bytes: rss_bytes(p.pid()),
            })
            .collect();
        list.sort_by_key(|p| p.pid);
        list
    }

    /// Pids of live processes.
    pub fn live_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = lock(&self.live)
            .values()
            .filter(|p| !p.has_exited())
            .map(|p| p.pid())
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Kills every process, busy or not, and waits until all are reaped.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<CliProcess>> = lock(&self.live).values().cloned().collect();
        for process in &all {
            self.stats.count_eviction(EvictionCause::Shutdown);
            process.retire();
            process.kill();
        }
        for process in &all {
            process.wait_exit().await;
        }
        info!(killed = all.len(), "All CLI processes stopped.");
    }
}

impl PoolStats {
    fn count_eviction(&self, cause: EvictionCause) {
        let counter = match cause {
            EvictionCause::Expired => &self.evicted_expired,
            EvictionCause::Capacity => &self.evicted_capacity,
            EvictionCause::Error => &self.evicted_error,
            EvictionCause::Replaced => &self.evicted_replaced,
            EvictionCause::Shutdown => &self.evicted_shutdown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
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
