//! Who gets a pool slot, and whose process makes room.
//!
//! A spawn that finds every slot taken waits in line (arrival order) for one. Room is made by
//! pushing out the idle process whose thread is predicted to need it **last**: a thread whose
//! turns came `gap` apart (its own last gap, else the typical gap of all threads) is expected back
//! `gap` after its last turn ended, and any moment while it is less than one more gap late; a
//! thread later than that, or with no gap to go by, is expected back in as long as it has been
//! idle (the longer a process has sat unused, the longer it is likely to stay so). For threads used in a loop this
//! keeps a stable set warm instead of pushing out each process just before its next turn (what
//! plain LRU does: every turn a miss); for threads that went quiet it is LRU.
//!
//! A process expected back within `pool.evict_grace` (one that went idle a moment ago, or whose
//! thread's turns come that close together) is not pushed out for a newcomer until the newcomer
//! has waited `pool.slot_wait`; then the best candidate goes anyway, so no spawn waits longer
//! than that for an idle process. Waits, their time, and pushes past the grace are counted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;
use tracing::{info, warn};

use plugin_contract::ThreadId;

use super::entry::Entry;
use super::{EvictionCause, Pool};

/// How often a spawn waiting for a slot checks for a nested-turn deadlock.
const OVERFLOW_CHECK: Duration = Duration::from_millis(200);

/// A warm process's private memory as measured (CLI 2.1.330: about 118 MiB, `just bench`): the
/// guess for a process starting while none is live to average over.
const TYPICAL_PRIVATE_BYTES: u64 = 128 * 1024 * 1024;

/// Threads whose turn history is kept; beyond it, the history of the threads idle longest goes.
const HISTORY_LIMIT: usize = 4096;

/// The settings of admission.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionSettings {
    /// A process expected back within this is protected from newcomers.
    pub evict_grace: Duration,
    /// How long a newcomer waits for an unprotected process before it pushes out a protected one.
    pub slot_wait: Duration,
}

/// When each thread last finished a turn, and how long it then was between its turns.
#[derive(Default)]
pub(super) struct UseHistory {
    threads: HashMap<ThreadId, Uses>,
    /// A moving average of every thread's gaps: the guess for a thread with none of its own.
    typical_gap: Option<Duration>,
}

#[derive(Clone, Copy, Debug)]
struct Uses {
    last_end: Instant,
    /// From the end of one turn to the start of the next, the last time the thread had two.
    gap: Option<Duration>,
}

impl UseHistory {
    /// A turn of `thread` starts now.
    pub(super) fn started(&mut self, thread: &ThreadId, now: Instant) {
        if let Some(uses) = self.threads.get_mut(thread) {
            let gap = now.saturating_duration_since(uses.last_end);
            uses.gap = Some(gap);
            self.typical_gap = Some(match self.typical_gap {
                Some(typical) => (typical * 7 + gap) / 8,
                None => gap,
            });
        }
    }

    /// A turn of `thread` ended now.
    pub(super) fn ended(&mut self, thread: &ThreadId, now: Instant) {
        let gap = self.threads.get(thread).and_then(|u| u.gap);
        self.threads
            .insert(thread.clone(), Uses { last_end: now, gap });
        if self.threads.len() > HISTORY_LIMIT {
            let mut ends: Vec<Instant> = self.threads.values().map(|u| u.last_end).collect();
            ends.sort_unstable();
            let cut = ends[ends.len() / 2];
            self.threads.retain(|_, u| u.last_end >= cut);
        }
    }

    /// The thread's own last gap, else the typical one.
    fn gap(&self, thread: &ThreadId) -> Option<Duration> {
        self.threads
            .get(thread)
            .and_then(|u| u.gap)
            .or(self.typical_gap)
    }
}

/// How soon a process idle for `idle` is expected back, for a thread whose turns come `gap`
/// apart (if known): `gap` after its last turn; any moment while it is less than one more `gap`
/// overdue (turns jitter); and once later than that, or with no gap known, as long again as it has
/// been idle (it may have gone quiet).
pub(super) fn expected_back_in(idle: Duration, gap: Option<Duration>) -> Duration {
    match gap {
        Some(gap) if idle < gap => gap - idle,
        Some(gap) if idle < gap * 2 => Duration::ZERO,
        _ => idle,
    }
}

/// A process that could make room.
pub(super) struct Candidate<T> {
    pub item: T,
    pub back_in: Duration,
}

/// The candidate to push out: the one expected back last, unless even it is expected within
/// `grace`. Then `Err` with when to look again (`None`: no candidates): the time until it would
/// leave the grace if it only aged, a lower bound (a looping thread's estimate shrinks as it
/// idles, until it is overdue).
pub(super) fn choose<T>(
    candidates: Vec<Candidate<T>>,
    grace: Duration,
) -> Result<Candidate<T>, Option<Duration>> {
    let best = candidates.into_iter().max_by_key(|c| c.back_in);
    match best {
        Some(best) if best.back_in >= grace => Ok(best),
        Some(best) => Err(Some(grace - best.back_in)),
        None => Err(None),
    }
}

impl Pool {
    /// A free slot, when the live processes' private memory leaves room for one more
    /// (`pool.max_memory_mb`); never waits.
    pub(super) fn free_slot(&self) -> Option<OwnedSemaphorePermit> {
        match self.memory_allows() {
            true => self.inner.slots.clone().try_acquire_owned().ok(),
            false => None,
        }
    }

    /// True unless `pool.max_memory_mb` is set and the live processes' private memory, with one
    /// more of their average for each process starting and for the next, would pass it. With
    /// nothing live or starting, one process may always start.
    fn memory_allows(&self) -> bool {
        let inner = &self.inner;
        let Some(max) = inner.max_memory else {
            return true;
        };
        let used: Vec<u64> = self.live_memory().iter().map(|m| m.private).collect();
        let held = inner
            .capacity
            .saturating_sub(inner.slots.available_permits());
        let starting = held.saturating_sub(used.len());
        if used.is_empty() && starting == 0 {
            return true;
        }
        let total: u64 = used.iter().sum();
        let average = match used.len() {
            0 => TYPICAL_PRIVATE_BYTES,
            n => total / n as u64,
        };
        total + average * (starting as u64 + 1) <= max
    }

    /// A pool slot: free, or freed by pushing out the idle process expected back last (see the
    /// module's notes), or, when every process is busy, the next one reaped. `true` marks an
    /// overflow slot, whose process lives for one turn.
    pub(super) async fn acquire_slot(&self) -> (OwnedSemaphorePermit, bool) {
        let inner = &self.inner;
        if let Some(permit) = self.free_slot() {
            return (permit, false);
        }
        let arrived = Instant::now();
        inner.state.lock().wait_started();
        inner.metrics.slot_wait_started();
        let outcome = {
            // Arrival order: tokio's mutex is fair.
            let _line = inner.admission_line.lock().await;
            self.wait_for_slot(arrived).await
        };
        inner.state.lock().wait_ended();
        inner.metrics.slot_waited(arrived.elapsed());
        outcome
    }

    async fn wait_for_slot(&self, arrived: Instant) -> (OwnedSemaphorePermit, bool) {
        let inner = &self.inner;
        let deadline = arrived + inner.admission.slot_wait;
        // Once a process is pushed out, its slot comes back when it is reaped: wait for that
        // rather than pushing out another.
        let mut made_room = false;
        loop {
            // Registered before looking, so a process going idle after the look still wakes us.
            let idle = inner.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if let Some(permit) = self.free_slot() {
                return (permit, false);
            }
            // Slots are free but memory is not: room is made the same way.
            let cause = match inner.slots.available_permits() {
                0 => EvictionCause::Capacity,
                _ => EvictionCause::Memory,
            };
            let mut wake = OVERFLOW_CHECK;
            if !made_room {
                // A parked spare is a guess: it goes before any thread's process.
                let spare = inner.state.lock().pop_spare();
                if let Some(spare) = spare {
                    inner.metrics.spare_gone();
                    self.discard_spare(spare);
                    made_room = true;
                    continue;
                }
                let now = Instant::now();
                let grace = if now >= deadline {
                    Duration::ZERO
                } else {
                    inner.admission.evict_grace
                };
                match choose(self.idle_candidates(), grace) {
                    Ok(victim) => {
                        let (thread, _) = victim.item;
                        if victim.back_in < inner.admission.evict_grace {
                            inner.metrics.slot_wait_expired();
                            warn!(thread_id = %thread, waited_ms = arrived.elapsed().as_millis() as u64, "A spawn waited pool.slot_wait for a slot; pushing out a process expected back soon.");
                        } else {
                            info!(thread_id = %thread, back_in_ms = victim.back_in.as_millis() as u64, "Pushing out the idle process expected back last.");
                        }
                        self.remove(&thread, cause).await;
                        made_room = true;
                        continue;
                    }
                    Err(Some(leaves_grace)) => {
                        let until_deadline = deadline.saturating_duration_since(now);
                        wake = wake.min(leaves_grace).min(until_deadline);
                    }
                    Err(None) => {}
                }
            }
            // Every slot is held by a busy, protected or dying process: wait for a slot, for a
            // process to go idle, or for protection to run out. If every process waits on the
            // host, the turn asking may be the one they wait for.
            let memory_bound = cause == EvictionCause::Memory;
            tokio::select! {
                permit = inner.slots.clone().acquire_owned(), if !memory_bound => {
                    if let Ok(permit) = permit {
                        return (permit, false);
                    }
                }
                _ = idle => {}
                _ = tokio::time::sleep(wake) => {
                    if let Some(permit) = self.overflow_slot() {
                        return (permit, true);
                    }
                }
            }
        }
    }

    /// Idle cached processes, with when each is expected back.
    fn idle_candidates(&self) -> Vec<Candidate<(ThreadId, Arc<Entry>)>> {
        let state = self.inner.state.lock();
        self.inner
            .cache
            .iter()
            .filter(|(_, e)| !e.is_busy() && !e.is_retired() && !e.has_pending_work())
            .map(|(thread, entry)| {
                let back_in = expected_back_in(entry.idle_for(), state.history.gap(&thread));
                Candidate {
                    item: ((*thread).clone(), entry),
                    back_in,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_thread_without_history_is_expected_back_in_its_idle_time() {
        assert_eq!(expected_back_in(secs(7), None), secs(7));
    }

    #[test]
    fn a_looping_thread_is_expected_back_one_gap_after_its_turn() {
        assert_eq!(expected_back_in(secs(2), Some(secs(10))), secs(8));
        // A little late: any moment now.
        assert_eq!(expected_back_in(secs(15), Some(secs(10))), Duration::ZERO);
        // Long overdue: the gap says nothing any more.
        assert_eq!(expected_back_in(secs(30), Some(secs(10))), secs(30));
    }

    #[test]
    fn protected_candidates_say_when_the_first_leaves_the_grace() {
        let c = |back_in| Candidate { item: (), back_in };
        assert!(matches!(
            choose(vec![c(secs(1)), c(secs(3))], secs(2)),
            Ok(Candidate { back_in, .. }) if back_in == secs(3)
        ));
        assert_eq!(
            choose(vec![c(secs(1)), c(Duration::from_millis(1500))], secs(2)).err(),
            Some(Some(Duration::from_millis(500)))
        );
        assert_eq!(
            choose(Vec::<Candidate<()>>::new(), secs(2)).err(),
            Some(None)
        );
    }

    #[test]
    fn history_records_the_gap_between_turns() {
        let mut h = UseHistory::default();
        let t = ThreadId::from_string("t");
        let start = Instant::now();
        h.ended(&t, start);
        assert_eq!(h.gap(&t), None);
        h.started(&t, start + secs(4));
        h.ended(&t, start + secs(5));
        assert_eq!(h.gap(&t), Some(secs(4)));
    }

    #[test]
    fn history_stays_bounded() {
        let mut h = UseHistory::default();
        let start = Instant::now();
        for i in 0..(HISTORY_LIMIT as u64 + 10) {
            h.ended(
                &ThreadId::from_string(format!("t{i}")),
                start + Duration::from_millis(i),
            );
        }
        assert!(h.threads.len() <= HISTORY_LIMIT);
        // The newest stays.
        let newest = ThreadId::from_string(format!("t{}", HISTORY_LIMIT + 9));
        assert!(h.threads.contains_key(&newest));
    }

    /// A simulated pool of `capacity` under `threads` threads used one after another in a loop,
    /// one turn at a time: the hit rate of choosing by expected return against plain LRU.
    /// Hits over the rounds after the first (which only meets each thread); a hit takes 50 ms, a
    /// miss (a spawn) 500 ms.
    fn loop_hit_rate(capacity: usize, threads: usize, rounds: usize, lru: bool) -> f64 {
        let mut history = UseHistory::default();
        let base = Instant::now();
        // thread -> last_end of its resident process
        let mut resident: HashMap<usize, Instant> = HashMap::new();
        let (mut hits, mut turns) = (0, 0);
        let mut now = base;
        for round in 0..rounds {
            for t in 0..threads {
                let id = ThreadId::from_string(format!("t{t}"));
                history.started(&id, now);
                let hit = resident.contains_key(&t);
                if round > 0 {
                    turns += 1;
                    hits += usize::from(hit);
                }
                if !hit && resident.len() >= capacity {
                    let candidates = resident
                        .iter()
                        .map(|(&other, &end)| {
                            let idle = now - end;
                            let other_id = ThreadId::from_string(format!("t{other}"));
                            let back_in = if lru {
                                idle
                            } else {
                                expected_back_in(idle, history.gap(&other_id))
                            };
                            Candidate {
                                item: other,
                                back_in,
                            }
                        })
                        .collect();
                    let victim = choose(candidates, Duration::ZERO).ok().unwrap().item;
                    resident.remove(&victim);
                }
                now += Duration::from_millis(if hit { 50 } else { 500 });
                history.ended(&id, now);
                resident.insert(t, now);
            }
        }
        hits as f64 / turns as f64
    }

    #[test]
    fn threads_in_a_loop_larger_than_the_pool_keep_a_warm_set() {
        // The best any policy can do is about capacity / threads (here 0.5).
        let ours = loop_hit_rate(8, 16, 20, false);
        let lru = loop_hit_rate(8, 16, 20, true);
        assert_eq!(lru, 0.0, "plain LRU misses every turn of a loop");
        assert!(ours >= 0.40, "hit rate {ours}");
        // The first rounds, before each thread's rhythm is known, lean on the typical gap.
        let early = loop_hit_rate(16, 32, 3, false);
        assert!(early >= 0.33, "hit rate over the first rounds {early}");
    }
}
