//! The pool's bookkeeping beside moka, under one lock ([`Shared`]): which processes are live,
//! which are parked spares, how many spares are starting and when the next may, how many spawns
//! wait for a slot, whether the pool is stopping, the cause of the next explicit eviction, and
//! each thread's rhythm of use. Every method is synchronous and short; nobody awaits with the
//! lock held. What the pool does with the answers (spawning, killing, waiting) is the caller's.
//!
//! Generic over the process type so the rules can be tested without processes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use plugin_contract::ThreadId;

use super::admission::UseHistory;
use super::entry::Entry;
use super::EvictionCause;
use crate::sync::lock;

/// What the bookkeeping needs of a process.
pub(super) trait Tracked: Clone {
    fn pid(&self) -> u32;
    fn thread(&self) -> &ThreadId;
}

impl Tracked for Arc<Entry> {
    fn pid(&self) -> u32 {
        self.process.pid()
    }

    fn thread(&self) -> &ThreadId {
        &self.spec.thread
    }
}

/// The state, shared by the pool and moka's eviction listener.
pub(super) struct Shared<E = Arc<Entry>>(Mutex<State<E>>);

impl<E> Shared<E> {
    pub(super) fn new(state: State<E>) -> Shared<E> {
        Shared(Mutex::new(state))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State<E>> {
        lock(&self.0)
    }
}

pub(super) struct State<E = Arc<Entry>> {
    /// Every process started and not yet reaped, by pid (spares included).
    live: HashMap<u32, E>,
    /// Parked spares, oldest first.
    spares: Vec<E>,
    /// How many spares to keep parked (`pool.spares`).
    spare_target: usize,
    /// Spares being started now.
    spares_starting: usize,
    /// No spare is started before this (after a failure to start one).
    spare_retry_at: Instant,
    /// Spawns waiting for a slot now: a slot freed is theirs, not a spare's.
    waiting: usize,
    /// Set by shutdown: no spare is started or parked after it.
    stopping: bool,
    /// The cause to record for the next explicit invalidation of a key.
    causes: HashMap<ThreadId, EvictionCause>,
    /// When threads last used their processes, to choose which to push out.
    pub(super) history: UseHistory,
}

impl<E: Tracked> State<E> {
    pub(super) fn new(spare_target: usize, now: Instant) -> State<E> {
        State {
            live: HashMap::new(),
            spares: Vec::new(),
            spare_target,
            spares_starting: 0,
            spare_retry_at: now,
            waiting: 0,
            stopping: false,
            causes: HashMap::new(),
            history: UseHistory::default(),
        }
    }

    /// A process started: live until [`State::reaped`].
    pub(super) fn started(&mut self, process: E) {
        self.live.insert(process.pid(), process);
    }

    /// A process was reaped: forgotten, as a spare too. True when it was a parked spare.
    pub(super) fn reaped(&mut self, pid: u32) -> bool {
        self.live.remove(&pid);
        let parked = self.spares.iter().position(|s| s.pid() == pid);
        parked.map(|at| self.spares.remove(at)).is_some()
    }

    /// Every live process.
    pub(super) fn live(&self) -> Vec<E> {
        self.live.values().cloned().collect()
    }

    /// The live processes of `thread` (more than one only while an old one is being replaced).
    pub(super) fn live_of(&self, thread: &ThreadId) -> Vec<E> {
        self.live
            .values()
            .filter(|e| e.thread() == thread)
            .cloned()
            .collect()
    }

    pub(super) fn is_spare(&self, pid: u32) -> bool {
        self.spares.iter().any(|s| s.pid() == pid)
    }

    /// Whether to start one more spare now, counted as starting when so: not while stopping,
    /// while a spawn waits for a slot, before the retry time after a failure, or once the parked
    /// and starting ones reach `pool.spares`.
    pub(super) fn start_spare(&mut self, now: Instant) -> bool {
        let wanted = !self.stopping
            && self.waiting == 0
            && now >= self.spare_retry_at
            && self.spares.len() + self.spares_starting < self.spare_target;
        if wanted {
            self.spares_starting += 1;
        }
        wanted
    }

    /// A spare's start ended; `failed`: the next try waits until `now + retry`.
    pub(super) fn spare_start_ended(&mut self, failed: bool, now: Instant, retry: Duration) {
        self.spares_starting = self.spares_starting.saturating_sub(1);
        if failed {
            self.spare_retry_at = now + retry;
        }
    }

    /// Parks a started spare; gives it back when the pool is stopping (it is to be discarded).
    pub(super) fn park(&mut self, spare: E) -> Result<(), E> {
        if self.stopping {
            return Err(spare);
        }
        self.spares.push(spare);
        Ok(())
    }

    /// Takes the oldest parked spare that `fits`.
    pub(super) fn take_spare(&mut self, fits: impl Fn(&E) -> bool) -> Option<E> {
        let at = self.spares.iter().position(fits)?;
        Some(self.spares.remove(at))
    }

    /// Takes the newest parked spare, to make room for a spawn.
    pub(super) fn pop_spare(&mut self) -> Option<E> {
        self.spares.pop()
    }

    /// A spawn starts waiting for a slot.
    pub(super) fn wait_started(&mut self) {
        self.waiting += 1;
    }

    pub(super) fn wait_ended(&mut self) {
        self.waiting = self.waiting.saturating_sub(1);
    }

    /// Shutdown: no spare from now on. Returns the parked spares, no longer parked, and every
    /// live process (the spares among them).
    pub(super) fn stop(&mut self) -> (Vec<E>, Vec<E>) {
        self.stopping = true;
        (std::mem::take(&mut self.spares), self.live())
    }

    /// The cause to record when `thread`'s key is next invalidated explicitly.
    pub(super) fn set_cause(&mut self, thread: &ThreadId, cause: EvictionCause) {
        self.causes.insert(thread.clone(), cause);
    }

    /// The cause of an explicit invalidation of `thread`'s key: the one set, else `Capacity`.
    pub(super) fn take_cause(&mut self, thread: &ThreadId) -> EvictionCause {
        self.causes
            .remove(thread)
            .unwrap_or(EvictionCause::Capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Fake(u32, ThreadId);

    impl Tracked for Fake {
        fn pid(&self) -> u32 {
            self.0
        }
        fn thread(&self) -> &ThreadId {
            &self.1
        }
    }

    fn fake(pid: u32, thread: &str) -> Fake {
        Fake(pid, ThreadId::from_string(thread))
    }

    const RETRY: Duration = Duration::from_secs(30);

    #[test]
    fn spares_start_up_to_the_target_and_not_while_a_spawn_waits() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(2, now);
        state.wait_started();
        assert!(
            !state.start_spare(now),
            "a freed slot is the waiting spawn's"
        );
        state.wait_ended();
        assert!(state.start_spare(now));
        assert!(state.start_spare(now));
        assert!(!state.start_spare(now), "two starting already");
        state.spare_start_ended(false, now, RETRY);
        state.started(fake(1, "s1"));
        assert_eq!(state.park(fake(1, "s1")), Ok(()));
        assert!(!state.start_spare(now), "one parked, one starting");
    }

    #[test]
    fn a_failed_spare_start_holds_the_next_back() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(1, now);
        assert!(state.start_spare(now));
        state.spare_start_ended(true, now, RETRY);
        assert!(!state.start_spare(now + RETRY / 2));
        assert!(state.start_spare(now + RETRY));
    }

    #[test]
    fn a_reaped_spare_is_forgotten_and_no_spare_is_parked_after_stop() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(3, now);
        for (pid, thread) in [(1, "s1"), (2, "s2"), (3, "t")] {
            state.started(fake(pid, thread));
        }
        state.park(fake(1, "s1")).unwrap();
        state.park(fake(2, "s2")).unwrap();
        assert!(state.reaped(1), "a parked spare");
        assert!(!state.reaped(3), "a thread's process");
        assert!(!state.is_spare(1));
        assert_eq!(state.live(), vec![fake(2, "s2")]);
        let (spares, live) = state.stop();
        assert_eq!((spares, live), (vec![fake(2, "s2")], vec![fake(2, "s2")]));
        assert_eq!(state.park(fake(4, "s4")), Err(fake(4, "s4")));
        assert!(!state.start_spare(now));
    }

    #[test]
    fn spares_are_taken_oldest_first_by_fit_and_popped_newest_first() {
        let mut state = State::<Fake>::new(3, Instant::now());
        for (pid, thread) in [(1, "a"), (2, "b"), (3, "a")] {
            state.park(fake(pid, thread)).unwrap();
        }
        let a = ThreadId::from_string("a");
        assert_eq!(state.take_spare(|s| s.1 == a), Some(fake(1, "a")));
        assert_eq!(state.pop_spare(), Some(fake(3, "a")));
        assert_eq!(state.take_spare(|s| s.1 == a), None);
    }

    #[test]
    fn the_live_processes_of_a_thread_are_found_by_thread() {
        let mut state = State::<Fake>::new(0, Instant::now());
        state.started(fake(1, "t"));
        state.started(fake(2, "t"));
        state.started(fake(3, "u"));
        let mut of_t = state.live_of(&ThreadId::from_string("t"));
        of_t.sort_by_key(|f| f.0);
        assert_eq!(of_t, vec![fake(1, "t"), fake(2, "t")]);
    }

    #[test]
    fn an_explicit_eviction_is_counted_under_the_cause_set_for_it_once() {
        let mut state = State::<Fake>::new(0, Instant::now());
        let t = ThreadId::from_string("t");
        state.set_cause(&t, EvictionCause::LeaseLost);
        assert_eq!(state.take_cause(&t), EvictionCause::LeaseLost);
        assert_eq!(state.take_cause(&t), EvictionCause::Capacity);
    }
}
