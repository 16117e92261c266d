//! The pool's bookkeeping beside moka, under one lock ([`Shared`]): which processes are live,
//! which are parked spares, how many spares are starting and when the next may, how many spawns
//! wait for a slot, whether the pool is stopping, the cause of the next explicit eviction, and
//! each thread's rhythm of use. Every method is synchronous and short; nobody awaits with the
//! lock held. What the pool does with the answers (spawning, killing, waiting) is the caller's.
//!
//! Generic over the process type so the rules can be tested without processes.

use std::collections::HashMap;
use std::path::PathBuf;
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

/// Whose next thread a spare is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SpareFor {
    /// A new thread in a folder of its own, on the default profile (`pool.spares`).
    Plain,
    /// A new thread of a profile on a worktree of a repository (`pool.workspace_spares`).
    Worktree(WorktreeKey),
}

/// A profile and a repository whose worktree threads get spares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorktreeKey {
    pub profile: String,
    /// The repository's top folder, resolved.
    pub repo: PathBuf,
}

/// A parked spare: what it is for and, for a worktree, the commit its worktree is on.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Parked<E> {
    pub(super) of: SpareFor,
    pub(super) commit: Option<String>,
    pub(super) entry: E,
}

pub(super) struct State<E = Arc<Entry>> {
    /// Every process started and not yet reaped, by pid (spares included).
    live: HashMap<u32, E>,
    /// Parked spares, oldest first.
    spares: Vec<Parked<E>>,
    /// How many plain spares to keep parked (`pool.spares`, more while threads come in bursts).
    pub(super) demand: super::demand::Demand,
    /// The pairs that keep a worktree spare, most recently used first; at most
    /// `pool.workspace_spares`.
    worktree_keys: Vec<WorktreeKey>,
    worktree_target: usize,
    /// Spares being started now.
    starting: Vec<SpareFor>,
    /// No spare is started before this (after a failure to start one).
    spare_retry_at: Instant,
    /// Plain spares are not started at all: the CLI refused to start one for a reason a retry
    /// does not mend. The profile and the CLI's reason, until a process of that profile starts.
    plain_held: Option<(String, String)>,
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
    pub(super) fn new(
        demand: super::demand::Demand,
        worktree_target: usize,
        now: Instant,
    ) -> State<E> {
        State {
            live: HashMap::new(),
            spares: Vec::new(),
            demand,
            worktree_keys: Vec::new(),
            worktree_target,
            starting: Vec::new(),
            spare_retry_at: now,
            plain_held: None,
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
        let parked = self.spares.iter().position(|s| s.entry.pid() == pid);
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
        self.spares.iter().any(|s| s.entry.pid() == pid)
    }

    /// Which spare to start now, if any, counted as starting when so: none while stopping,
    /// while a spawn waits for a slot, or before the retry time after a failure; then a plain
    /// one until the parked and starting ones reach `pool.spares`, then one for each worktree
    /// pair (most recently used first) that has none parked or starting.
    pub(super) fn start_spare(&mut self, now: Instant) -> Option<SpareFor> {
        if self.stopping || self.waiting > 0 || now < self.spare_retry_at {
            return None;
        }
        let has = |of: &SpareFor| {
            self.spares.iter().filter(|s| s.of == *of).count()
                + self.starting.iter().filter(|s| *s == of).count()
        };
        let target = self.demand.startable(now);
        let wanted = if self.plain_held.is_none() && has(&SpareFor::Plain) < target {
            Some(SpareFor::Plain)
        } else {
            self.worktree_keys
                .iter()
                .map(|key| SpareFor::Worktree(key.clone()))
                .find(|of| has(of) == 0)
        };
        if let Some(of) = &wanted {
            self.starting.push(of.clone());
        }
        wanted
    }

    /// A spare's start ended; `failed`: a plain one's next try waits until `now + retry`, and a
    /// worktree pair whose spare failed (its repository gone, say) keeps none until it is used
    /// again.
    pub(super) fn spare_start_ended(
        &mut self,
        of: &SpareFor,
        failed: bool,
        now: Instant,
        retry: Duration,
    ) {
        if let Some(at) = self.starting.iter().position(|s| s == of) {
            self.starting.remove(at);
        }
        match of {
            _ if !failed => {}
            SpareFor::Plain => self.spare_retry_at = now + retry,
            SpareFor::Worktree(key) => self.worktree_keys.retain(|k| k != key),
        }
    }

    /// Starts no plain spare until a process of `profile` starts: the CLI refused one for a
    /// reason (`why`) that a retry does not mend.
    pub(super) fn hold_plain_spares(&mut self, profile: &str, why: String) {
        self.plain_held = Some((profile.to_owned(), why));
    }

    /// A process of `profile` started: plain spares held for it are started again.
    pub(super) fn release_plain_spares(&mut self, profile: &str) {
        if self
            .plain_held
            .as_ref()
            .is_some_and(|(held, _)| held == profile)
        {
            self.plain_held = None;
        }
    }

    /// Why plain spares are held, if they are.
    pub(super) fn plain_spares_held(&self) -> Option<String> {
        self.plain_held.as_ref().map(|(_, why)| why.clone())
    }

    /// Parks a started spare; gives it back when the pool is stopping, or no longer wants a
    /// spare for its worktree pair (it is to be discarded).
    pub(super) fn park(&mut self, spare: Parked<E>) -> Result<(), E> {
        let unwanted = match &spare.of {
            SpareFor::Plain => false,
            SpareFor::Worktree(key) => !self.worktree_keys.contains(key),
        };
        if self.stopping || unwanted {
            return Err(spare.entry);
        }
        self.spares.push(spare);
        Ok(())
    }

    /// Takes the oldest parked spare for `of` that `fits` (given the commit of a worktree
    /// spare).
    pub(super) fn take_spare(
        &mut self,
        of: &SpareFor,
        fits: impl Fn(&E, Option<&str>) -> bool,
    ) -> Option<E> {
        let at = self
            .spares
            .iter()
            .position(|s| s.of == *of && fits(&s.entry, s.commit.as_deref()))?;
        Some(self.spares.remove(at).entry)
    }

    /// A worktree thread of `key` was created: the pair moves to the front of those that keep
    /// a spare, and the pair pushed past `pool.workspace_spares` loses its spares, returned to
    /// be discarded; so do the pair's spares on another commit than `commit` (its base moved:
    /// they fit no thread now).
    pub(super) fn worktree_used(&mut self, key: &WorktreeKey, commit: &str) -> Vec<E> {
        if self.worktree_target == 0 {
            return Vec::new();
        }
        self.worktree_keys.retain(|k| k != key);
        self.worktree_keys.insert(0, key.clone());
        self.worktree_keys.truncate(self.worktree_target);
        let keys = &self.worktree_keys;
        let stale = |s: &Parked<E>| match &s.of {
            SpareFor::Plain => false,
            SpareFor::Worktree(k) => {
                !keys.contains(k) || (k == key && s.commit.as_deref() != Some(commit))
            }
        };
        let (gone, kept) = std::mem::take(&mut self.spares)
            .into_iter()
            .partition(stale);
        self.spares = kept;
        gone.into_iter().map(|s| s.entry).collect()
    }

    /// Takes the newest parked spare, to make room for a spawn.
    /// The plain spares parked beyond what demand wants now, oldest first, no longer parked:
    /// to be discarded.
    pub(super) fn surplus_spares(&mut self, now: Instant) -> Vec<E> {
        let target = self.demand.target(now);
        let plain = self
            .spares
            .iter()
            .filter(|s| s.of == SpareFor::Plain)
            .count();
        let mut surplus = plain.saturating_sub(target);
        let mut gone = Vec::new();
        for spare in std::mem::take(&mut self.spares) {
            if surplus > 0 && spare.of == SpareFor::Plain {
                surplus -= 1;
                gone.push(spare.entry);
            } else {
                self.spares.push(spare);
            }
        }
        gone
    }

    pub(super) fn pop_spare(&mut self) -> Option<E> {
        self.spares.pop().map(|s| s.entry)
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
        let spares = std::mem::take(&mut self.spares);
        (spares.into_iter().map(|s| s.entry).collect(), self.live())
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
    use crate::pool::demand::Demand;

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

    fn plain(entry: Fake) -> Parked<Fake> {
        Parked {
            of: SpareFor::Plain,
            commit: None,
            entry,
        }
    }

    fn key(profile: &str, repo: &str) -> WorktreeKey {
        WorktreeKey {
            profile: profile.into(),
            repo: PathBuf::from(repo),
        }
    }

    fn on_worktree(key: &WorktreeKey, commit: &str, entry: Fake) -> Parked<Fake> {
        Parked {
            of: SpareFor::Worktree(key.clone()),
            commit: Some(commit.into()),
            entry,
        }
    }

    const PLAIN: Option<SpareFor> = Some(SpareFor::Plain);

    #[test]
    fn spares_start_up_to_the_target_and_not_while_a_spawn_waits() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(Demand::new(2, 2), 0, now);
        state.wait_started();
        assert_eq!(
            state.start_spare(now),
            None,
            "a freed slot is the waiting spawn's"
        );
        state.wait_ended();
        assert_eq!(state.start_spare(now), PLAIN);
        assert_eq!(state.start_spare(now), PLAIN);
        assert_eq!(state.start_spare(now), None, "two starting already");
        state.spare_start_ended(&SpareFor::Plain, false, now, RETRY);
        state.started(fake(1, "s1"));
        assert_eq!(state.park(plain(fake(1, "s1"))), Ok(()));
        assert_eq!(state.start_spare(now), None, "one parked, one starting");
    }

    #[test]
    fn a_burst_asks_for_more_spares_and_the_extra_ones_go_when_it_is_forgotten() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(Demand::new(1, 4), 0, now);
        for _ in 0..3 {
            state.demand.created(now);
        }
        assert_eq!(state.start_spare(now), PLAIN, "the floor's, at once");
        assert_eq!(
            state.start_spare(now),
            None,
            "the rest once the burst is over"
        );
        let after = now + crate::pool::demand::BURST;
        for pid in 2..=3 {
            assert_eq!(state.start_spare(after), PLAIN, "spare {pid}");
        }
        assert_eq!(state.start_spare(after), None, "three for a burst of three");
        for pid in 1..=3 {
            state.spare_start_ended(&SpareFor::Plain, false, now, RETRY);
            state.park(plain(fake(pid, "s"))).unwrap();
        }
        assert!(state.surplus_spares(now).is_empty());
        let later = now + crate::pool::demand::WINDOW + Duration::from_secs(1);
        assert_eq!(
            state.surplus_spares(later),
            vec![fake(1, "s"), fake(2, "s")]
        );
        assert_eq!(
            state.pop_spare(),
            Some(fake(3, "s")),
            "the floor's one stays"
        );
    }

    #[test]
    fn a_failed_spare_start_holds_the_next_back() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(Demand::new(1, 1), 0, now);
        assert_eq!(state.start_spare(now), PLAIN);
        state.spare_start_ended(&SpareFor::Plain, true, now, RETRY);
        assert_eq!(state.start_spare(now + RETRY / 2), None);
        assert_eq!(state.start_spare(now + RETRY), PLAIN);
    }

    #[test]
    fn a_reaped_spare_is_forgotten_and_no_spare_is_parked_after_stop() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(Demand::new(3, 3), 0, now);
        for (pid, thread) in [(1, "s1"), (2, "s2"), (3, "t")] {
            state.started(fake(pid, thread));
        }
        state.park(plain(fake(1, "s1"))).unwrap();
        state.park(plain(fake(2, "s2"))).unwrap();
        assert!(state.reaped(1), "a parked spare");
        assert!(!state.reaped(3), "a thread's process");
        assert!(!state.is_spare(1));
        assert_eq!(state.live(), vec![fake(2, "s2")]);
        let (spares, live) = state.stop();
        assert_eq!((spares, live), (vec![fake(2, "s2")], vec![fake(2, "s2")]));
        assert_eq!(state.park(plain(fake(4, "s4"))), Err(fake(4, "s4")));
        assert_eq!(state.start_spare(now), None);
    }

    #[test]
    fn spares_are_taken_oldest_first_by_fit_and_popped_newest_first() {
        let mut state = State::<Fake>::new(Demand::new(3, 3), 0, Instant::now());
        for (pid, thread) in [(1, "a"), (2, "b"), (3, "a")] {
            state.park(plain(fake(pid, thread))).unwrap();
        }
        let a = ThreadId::from_string("a");
        let is_a = |s: &Fake, _: Option<&str>| s.1 == a;
        assert_eq!(state.take_spare(&SpareFor::Plain, is_a), Some(fake(1, "a")));
        assert_eq!(state.pop_spare(), Some(fake(3, "a")));
        assert_eq!(state.take_spare(&SpareFor::Plain, is_a), None);
    }

    #[test]
    fn the_worktree_pairs_used_last_get_a_spare_each_after_the_plain_ones() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(Demand::new(1, 1), 2, now);
        let (a, b, c) = (key("p", "/a"), key("p", "/b"), key("q", "/a"));
        assert_eq!(state.start_spare(now), PLAIN);
        assert_eq!(state.start_spare(now), None, "no pair used yet");
        assert!(state.worktree_used(&a, "c1").is_empty());
        assert_eq!(state.start_spare(now), Some(SpareFor::Worktree(a.clone())));
        assert_eq!(state.start_spare(now), None, "one each");
        state.spare_start_ended(&SpareFor::Worktree(a.clone()), false, now, RETRY);
        state.park(on_worktree(&a, "c1", fake(1, "s1"))).unwrap();
        state.worktree_used(&b, "c1");
        assert_eq!(state.start_spare(now), Some(SpareFor::Worktree(b.clone())));
        // A third pair pushes out the one used longest ago, and its spare with it.
        assert_eq!(state.worktree_used(&c, "c1"), vec![fake(1, "s1")]);
        // B's spare, started before, is not wanted once it is ready.
        state.worktree_used(&a, "c1");
        assert_eq!(
            state.park(on_worktree(&b, "c1", fake(2, "s2"))),
            Err(fake(2, "s2"))
        );
    }

    #[test]
    fn a_worktree_spare_is_taken_for_its_pair_and_commit_and_dropped_when_the_base_moves() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(Demand::new(0, 0), 1, now);
        let a = key("p", "/a");
        state.worktree_used(&a, "c1");
        state.park(on_worktree(&a, "c1", fake(1, "s1"))).unwrap();
        state.park(on_worktree(&a, "c1", fake(2, "s2"))).unwrap();
        let on = |commit: &'static str| move |_: &Fake, c: Option<&str>| c == Some(commit);
        assert_eq!(state.take_spare(&SpareFor::Plain, on("c1")), None);
        let other = SpareFor::Worktree(key("q", "/a"));
        assert_eq!(state.take_spare(&other, on("c1")), None, "another profile");
        let of_a = SpareFor::Worktree(a.clone());
        assert_eq!(state.take_spare(&of_a, on("c2")), None, "another commit");
        assert_eq!(state.take_spare(&of_a, on("c1")), Some(fake(1, "s1")));
        assert_eq!(state.worktree_used(&a, "c2"), vec![fake(2, "s2")]);
    }

    #[test]
    fn a_worktree_pair_whose_spare_fails_keeps_none_until_used_again() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(Demand::new(0, 0), 1, now);
        let a = key("p", "/a");
        state.worktree_used(&a, "c1");
        let of_a = state.start_spare(now).expect("a spare for the pair");
        state.spare_start_ended(&of_a, true, now, RETRY);
        assert_eq!(state.start_spare(now), None);
        state.worktree_used(&a, "c1");
        assert_eq!(state.start_spare(now), Some(of_a));
    }

    #[test]
    fn no_worktree_spares_when_they_are_off() {
        let now = Instant::now();
        let mut state = State::<Fake>::new(Demand::new(0, 0), 0, now);
        state.worktree_used(&key("p", "/a"), "c1");
        assert_eq!(state.start_spare(now), None);
    }

    #[test]
    fn the_live_processes_of_a_thread_are_found_by_thread() {
        let mut state = State::<Fake>::new(Demand::new(0, 0), 0, Instant::now());
        state.started(fake(1, "t"));
        state.started(fake(2, "t"));
        state.started(fake(3, "u"));
        let mut of_t = state.live_of(&ThreadId::from_string("t"));
        of_t.sort_by_key(|f| f.0);
        assert_eq!(of_t, vec![fake(1, "t"), fake(2, "t")]);
    }

    #[test]
    fn an_explicit_eviction_is_counted_under_the_cause_set_for_it_once() {
        let mut state = State::<Fake>::new(Demand::new(0, 0), 0, Instant::now());
        let t = ThreadId::from_string("t");
        state.set_cause(&t, EvictionCause::LeaseLost);
        assert_eq!(state.take_cause(&t), EvictionCause::LeaseLost);
        assert_eq!(state.take_cause(&t), EvictionCause::Capacity);
    }
}
