//! The pool's series, and [`PoolCounts`], the same counters as `/api/pool` shows them.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use serde::Serialize;

series! {
    /// Owned by the pool: its counters, the live gauge and the spawn-time histogram.
    pub struct PoolMetrics {
        hits: Counter => "pool_hits", "Turns and prewarms that found the thread's warm process";
        misses: Counter => "pool_misses", "Turns and prewarms that had to start a process";
        prewarms: Counter => "pool_prewarms", "Prewarm requests";
        prewarms_skipped: Counter => "pool_prewarms_skipped",
            "Prewarms that started nothing: every slot held a process used recently";
        spawns: Counter => "pool_spawns", "claude processes started";
        resume_fallbacks: Counter => "pool_resume_fallbacks",
            "Spawns whose --resume failed and that started a fresh session instead";
        transcript_restores: Counter => "pool_transcript_restores",
            "Sessions written back from the stored transcript before a --resume";
        model_switches: Counter => "pool_model_switches",
            "Warm processes switched to another model in place (set_model)";
        spares_parked: Gauge => "pool_spares_parked",
            "Spare processes started and waiting for a thread";
        spares_claimed: Counter => "pool_spares_claimed",
            "New threads that took a parked spare as their process";
        spare_failures: Family<ReasonLabel, Counter> => "pool_spare_failures",
            "Parked spares dropped when a new thread came to take them, by reason";
        startup_failures: Family<StartupLabel, Counter> => "cli_startup_failures",
            "claude processes that refused to start, by the CLI's startup_failure_reason and who can fix it (caller, operator, policy, transient)";
        evictions: Family<CauseLabel, Counter> = evictions_at_zero() => "pool_evictions",
            "Processes let go by the pool, by cause (replaced = model change)";
        live: Gauge => "pool_live_processes", "claude processes alive now";
        walled: Gauge => "pool_walled_processes",
            "claude processes alive now whose tree is walled in ([sandbox]); each one's walls and limits are in /api/pool";
        wall_breaches: Family<LimitLabel, Counter> = breaches_at_zero() => "wall_breaches",
            "Processes the walls stopped, by the limit their tree reached (memory, processes)";
        pss_bytes: Gauge => "pool_pss_bytes",
            "PSS of the live claude processes together (smaps_rollup), as last sampled";
        private_bytes: Gauge => "pool_private_bytes",
            "Private memory of the live claude processes together (smaps_rollup), as last sampled";
        memory_samples: Counter => "pool_memory_samples",
            "Rounds of reading the live processes' memory, off the request path (every 2 s, and when a process is ready)";
        live_peak: Gauge => "pool_live_peak",
            "Most claude processes alive at once since start (spares included)";
        slot_waits: Counter => "pool_slot_waits",
            "Spawns that found every pool slot taken and waited for one";
        slot_waiting: Gauge => "pool_slot_waiting", "Spawns waiting for a pool slot now";
        slot_wait_seconds: Histogram = Histogram::new([
            0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
        ]) => "pool_slot_wait_seconds", "How long spawns waited for a pool slot";
        slot_waits_expired: Counter => "pool_slot_waits_expired",
            "Waits that reached pool.slot_wait and pushed out a process expected back soon";
        spawn_seconds: Histogram = Histogram::new([
            0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0,
        ]) => "process_spawn_seconds",
            "Time from spawning a claude process to it being ready for a turn";
        /// The sum of the waits, for `/api/pool` (the histogram keeps it for `/metrics`).
        slot_wait_micros: Arc<AtomicU64>;
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// Why a parked spare was dropped when a new thread came to take it.
const SPARE_FAILURES: [&str; 3] = ["no_answer", "process_died", "folder_gone"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StartupLabel {
    reason: String,
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: &'static str,
}

/// The limits of a walled tree, as labelled.
pub const WALL_LIMITS: [&str; 2] = ["memory", "processes"];

fn breaches_at_zero() -> Family<LimitLabel, Counter> {
    let breaches = Family::<LimitLabel, Counter>::default();
    for limit in WALL_LIMITS {
        let _ = breaches.get_or_create(&LimitLabel { limit });
    }
    breaches
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    cause: &'static str,
}

/// The eviction causes, as labelled.
pub const EVICTION_CAUSES: [&str; 7] = [
    "expired",
    "capacity",
    "memory",
    "error",
    "replaced",
    "shutdown",
    "lease_lost",
];

/// Every cause present at zero from the start, so a dashboard sees each one.
fn evictions_at_zero() -> Family<CauseLabel, Counter> {
    let evictions = Family::<CauseLabel, Counter>::default();
    for cause in EVICTION_CAUSES {
        let _ = evictions.get_or_create(&CauseLabel { cause });
    }
    evictions
}

/// The pool's counters at one moment, for `/api/pool` (its `stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolCounts {
    pub live: u64,
    pub hits: u64,
    pub misses: u64,
    pub prewarms: u64,
    pub prewarms_skipped: u64,
    pub spawns: u64,
    pub resume_fallbacks: u64,
    /// Sessions written back from the stored transcript before a `--resume`.
    pub transcript_restores: u64,
    pub model_switches: u64,
    /// Spares started and waiting for a thread now.
    pub spares_parked: u64,
    /// New threads that took a parked spare as their process.
    pub spares_claimed: u64,
    /// Spares dropped when a new thread came to take them (no answer, or exited).
    pub spare_failures: u64,
    pub evictions: EvictionCounts,
    /// Most processes alive at once since start (spares included).
    pub live_peak: u64,
    /// Spawns that found every slot taken and waited for one.
    pub slot_waits: u64,
    /// Spawns waiting for a slot now.
    pub slot_waiting: u64,
    /// Their waits added up, in milliseconds.
    pub slot_wait_ms: u64,
    /// Waits that reached `pool.slot_wait` and pushed out a process expected back soon.
    pub slot_waits_expired: u64,
}

/// Processes let go, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EvictionCounts {
    pub expired: u64,
    pub capacity: u64,
    /// Pushed out to keep private memory under `pool.max_memory_mb`.
    pub memory: u64,
    pub error: u64,
    pub replaced: u64,
    pub shutdown: u64,
    /// With clustering, a peer took the thread over.
    #[serde(rename = "leaseLost")]
    pub lease_lost: u64,
}

impl PoolMetrics {
    /// A turn or prewarm found the thread's warm process.
    pub fn hit(&self) {
        self.hits.inc();
    }
    /// A turn or prewarm had to start a process.
    pub fn miss(&self) {
        self.misses.inc();
    }
    pub fn prewarm(&self) {
        self.prewarms.inc();
    }
    pub fn prewarm_skipped(&self) {
        self.prewarms_skipped.inc();
    }
    /// A process was started (a failed `--resume` starts two).
    pub fn spawn(&self) {
        self.spawns.inc();
    }
    pub fn resume_fallback(&self) {
        self.resume_fallbacks.inc();
    }
    /// A session missing from the CLI's config dir was written back from the store.
    pub fn transcript_restored(&self) {
        self.transcript_restores.inc();
    }
    /// A warm process changed its model in place instead of being replaced.
    pub fn model_switched(&self) {
        self.model_switches.inc();
    }
    /// A spare is parked; it stops counting when claimed ([`Self::spare_claimed`]) or gone
    /// ([`Self::spare_gone`]).
    pub fn spare_parked(&self) {
        self.spares_parked.inc();
    }
    pub fn spare_claimed(&self) {
        self.spares_parked.dec();
        self.spares_claimed.inc();
    }
    pub fn spare_gone(&self) {
        self.spares_parked.dec();
    }
    /// A parked spare was dropped when a thread came to take it; `reason` is one of
    /// [`SPARE_FAILURES`].
    pub fn spare_failed(&self, reason: &str) {
        let reason = SPARE_FAILURES
            .iter()
            .find(|known| **known == reason)
            .copied()
            .unwrap_or("other");
        self.spare_failures
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }
    /// A process refused to start and said why.
    pub fn startup_failed(&self, failure: &claude_cli::StartupFailure) {
        let label = StartupLabel {
            reason: failure.reason.clone(),
            class: failure.class().as_str(),
        };
        self.startup_failures.get_or_create(&label).inc();
    }
    /// A process became ready `took` after it was spawned; it counts as live until
    /// [`Self::reaped`].
    pub fn ready(&self, took: Duration) {
        self.spawn_seconds.observe(took.as_secs_f64());
        let live = self.live.inc() + 1;
        // A gauge has no max: raise it until it holds the largest value seen.
        let mut peak = self.live_peak.get();
        while live > peak {
            match self.live_peak.inner().compare_exchange(
                peak,
                live,
                AtomicOrdering::Relaxed,
                AtomicOrdering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => peak = now,
            }
        }
    }
    /// What the live processes take together, as read from `/proc` now.
    /// The live processes' memory was read again.
    pub fn memory_sampled(&self) {
        self.memory_samples.inc();
    }
    pub fn memory(&self, pss: u64, private: u64) {
        self.pss_bytes.set(i64::try_from(pss).unwrap_or(i64::MAX));
        self.private_bytes
            .set(i64::try_from(private).unwrap_or(i64::MAX));
    }
    /// A spawn found every slot taken and waits for one ([`Self::slot_waited`] when it has it).
    pub fn slot_wait_started(&self) {
        self.slot_waiting.inc();
    }
    /// A spawn found every slot taken and waited `took` for one.
    pub fn slot_waited(&self, took: Duration) {
        self.slot_waiting.dec();
        self.slot_waits.inc();
        self.slot_wait_seconds.observe(took.as_secs_f64());
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.slot_wait_micros
            .fetch_add(micros, AtomicOrdering::Relaxed);
    }
    /// A wait reached `pool.slot_wait` and pushed out a process expected back soon.
    pub fn slot_wait_expired(&self) {
        self.slot_waits_expired.inc();
    }
    pub fn reaped(&self) {
        self.live.dec();
    }
    /// A walled process started (`true`) or was reaped (`false`).
    pub fn walled(&self, alive: bool) {
        if alive {
            self.walled.inc();
        } else {
            self.walled.dec();
        }
    }
    /// The walls stopped a process; `limit` is one of [`WALL_LIMITS`].
    pub fn wall_breach(&self, limit: &str) {
        let limit = WALL_LIMITS
            .into_iter()
            .find(|known| *known == limit)
            .unwrap_or("memory");
        self.wall_breaches
            .get_or_create(&LimitLabel { limit })
            .inc();
    }
    /// A process was let go; `cause` is one of [`EVICTION_CAUSES`].
    pub fn evicted(&self, cause: &'static str) {
        self.evictions.get_or_create(&CauseLabel { cause }).inc();
    }

    pub fn counts(&self) -> PoolCounts {
        let evicted = |cause| self.evictions.get_or_create(&CauseLabel { cause }).get();
        PoolCounts {
            live: u64::try_from(self.live.get()).unwrap_or(0),
            hits: self.hits.get(),
            misses: self.misses.get(),
            prewarms: self.prewarms.get(),
            prewarms_skipped: self.prewarms_skipped.get(),
            spawns: self.spawns.get(),
            resume_fallbacks: self.resume_fallbacks.get(),
            transcript_restores: self.transcript_restores.get(),
            model_switches: self.model_switches.get(),
            spares_parked: u64::try_from(self.spares_parked.get()).unwrap_or(0),
            spares_claimed: self.spares_claimed.get(),
            spare_failures: {
                let failures = &self.spare_failures;
                SPARE_FAILURES
                    .iter()
                    .chain(["other"].iter())
                    .map(|reason| failures.get_or_create(&ReasonLabel { reason }).get())
                    .sum()
            },
            evictions: EvictionCounts {
                expired: evicted("expired"),
                capacity: evicted("capacity"),
                memory: evicted("memory"),
                error: evicted("error"),
                replaced: evicted("replaced"),
                shutdown: evicted("shutdown"),
                lease_lost: evicted("lease_lost"),
            },
            live_peak: u64::try_from(self.live_peak.get()).unwrap_or(0),
            slot_waits: self.slot_waits.get(),
            slot_waiting: u64::try_from(self.slot_waiting.get()).unwrap_or(0),
            slot_wait_ms: self.slot_wait_micros.load(AtomicOrdering::Relaxed) / 1000,
            slot_waits_expired: self.slot_waits_expired.get(),
        }
    }
}
