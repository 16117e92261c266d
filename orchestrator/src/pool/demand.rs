//! How many plain spares to keep parked: `pool.spares` at least, and more while new threads come
//! in bursts. A burst is the new threads created within [`BURST`] of each other, faster than
//! spares are replaced; the target is the largest burst of the last [`WINDOW`], so the next
//! burst like it finds a spare for each thread. It falls back to `pool.spares` once the window
//! holds no burst, and never passes the ceiling (half of `pool.max_capacity`). With
//! `pool.spares = 0` there are none at all. No IO: the pool asks it, with the time.
//!
//! Spares beyond `pool.spares` start only once a burst is over ([`Demand::startable`]): started
//! during one, they would take the cores its first turns need (measured with `just bench`,
//! "New threads in bursts": a burst of five took 3.1 s per first turn that way).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Threads created this close together count as one burst: about what replacing a spare takes
/// when several start at once on two cores.
pub(super) const BURST: Duration = Duration::from_secs(2);
/// How long a burst is remembered.
pub(super) const WINDOW: Duration = Duration::from_secs(120);

pub(super) struct Demand {
    floor: usize,
    ceiling: usize,
    /// When new threads were created, oldest first, within the window.
    created: VecDeque<Instant>,
}

impl Demand {
    pub(super) fn new(floor: usize, ceiling: usize) -> Demand {
        Demand {
            floor,
            ceiling: ceiling.max(floor),
            created: VecDeque::new(),
        }
    }

    /// A new thread was created (with a spare or without).
    pub(super) fn created(&mut self, now: Instant) {
        if self.floor > 0 {
            self.created.push_back(now);
            self.forget(now);
        }
    }

    /// How many plain spares to keep parked now.
    pub(super) fn target(&mut self, now: Instant) -> usize {
        if self.floor == 0 {
            return 0;
        }
        self.forget(now);
        let times = self.created.make_contiguous();
        let mut burst = 0;
        let mut start = 0;
        for end in 0..times.len() {
            while times[end].duration_since(times[start]) > BURST {
                start += 1;
            }
            burst = burst.max(end - start + 1);
        }
        burst.clamp(self.floor, self.ceiling)
    }

    /// How many plain spares may be parked or starting now: the [`Demand::target`], but only
    /// `pool.spares` while threads are still coming (the last within [`BURST`]).
    pub(super) fn startable(&mut self, now: Instant) -> usize {
        let target = self.target(now);
        let coming = self
            .created
            .back()
            .is_some_and(|last| now.saturating_duration_since(*last) < BURST);
        match coming {
            true => target.min(self.floor),
            false => target,
        }
    }

    fn forget(&mut self, now: Instant) {
        while self
            .created
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > WINDOW)
        {
            self.created.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_raises_the_target_until_it_is_forgotten() {
        let t0 = Instant::now();
        let mut demand = Demand::new(1, 8);
        assert_eq!(demand.target(t0), 1, "the floor with no demand");
        for i in 0..5 {
            demand.created(t0 + Duration::from_millis(100 * i));
        }
        assert_eq!(demand.target(t0 + Duration::from_secs(1)), 5);
        assert_eq!(
            demand.startable(t0 + Duration::from_secs(1)),
            1,
            "not during the burst"
        );
        assert_eq!(
            demand.startable(t0 + Duration::from_secs(3)),
            5,
            "once it is over"
        );
        assert_eq!(demand.target(t0 + WINDOW), 5, "remembered for the window");
        let later = t0 + WINDOW + Duration::from_secs(1);
        assert_eq!(demand.target(later), 1, "back to the floor");
    }

    #[test]
    fn a_steady_stream_slower_than_a_refill_needs_the_floor_only() {
        let t0 = Instant::now();
        let mut demand = Demand::new(1, 8);
        for i in 0..20 {
            demand.created(t0 + Duration::from_secs(3 * i));
        }
        assert_eq!(demand.target(t0 + Duration::from_secs(60)), 1);
        // One every second: two fall within a burst's span.
        let mut demand = Demand::new(1, 8);
        for i in 0..20 {
            demand.created(t0 + Duration::from_secs(i));
        }
        assert_eq!(demand.target(t0 + Duration::from_secs(20)), 3);
    }

    #[test]
    fn the_ceiling_holds_and_zero_means_none() {
        let t0 = Instant::now();
        let mut demand = Demand::new(1, 3);
        for _ in 0..10 {
            demand.created(t0);
        }
        assert_eq!(demand.target(t0), 3);
        let mut off = Demand::new(0, 3);
        off.created(t0);
        assert_eq!(off.target(t0), 0);
    }
}
