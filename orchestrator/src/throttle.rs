//! How many turns run on the CLI at once: an adaptive limit that backs off when the Messages API
//! pushes back (429 / 529) and grows again while turns go through.
//!
//! The limit follows AIMD (additive increase, multiplicative decrease, as TCP's congestion
//! window does), in [`Aimd`], which holds no clock and no IO so its tests pass time in:
//! - **Signals** (a *decrease*): a 429 or 529 the model gateway (`crate::gateway`) sees from
//!   upstream. With the gateway off, what the CLI reports instead: an `api_retry` with status 429
//!   or 529, a `rate_limit_event` with status `rejected` (OAuth logins only; the CLI does not
//!   retry it), a final `result` whose `api_error_status` is 429 or 529 (the CLI's retries ran
//!   out); with it on, those are counted but lower nothing (the gateway saw them first). Other
//!   failures (a 400, a dead process, a timeout) say nothing about the API's load and neither
//!   raise nor lower the limit.
//! - **Decrease**: the limit halves (rounded up, never below `min`), at most once per `cooldown`.
//!   The turns in flight when the API starts refusing all report it within the CLI's retry delays
//!   (≈0.5 s, then ≈1 s, doubling): without the window one overload would halve the limit once
//!   per running turn and per retry, down to `min` at once. A signal after the window is new
//!   evidence that the lower limit is still too high.
//! - **A pause**: a 429 or 529 whose `retry-after` names a wait (at most [`MAX_PAUSE`]) also
//!   holds every new turn in line until then: the API said when it will take more, and a turn
//!   started before would only wait in the CLI's retries (or use them up). Running turns and
//!   nested ones go on.
//! - **Increase**: a turn the API answered with no signal on the way is a success; after `limit`
//!   successes in a row the limit grows by one (+1/limit per success, counted in whole turns so
//!   the arithmetic is exact), up to `max`. Recovery is slow on purpose: halving is quick.
//!
//! [`Throttle`] is the shared gate: a turn takes a [`Permit`] before it runs and the permit's
//! drop gives it back, so every exit path (an error, a timeout, an interrupt, a panic) does. A
//! turn that finds the limit reached joins one FIFO line across all threads ([`Queued`]); the
//! order within a thread is the thread queue's (`queue.rs`), so a thread has at most one turn in
//! this line. A lower limit never stops a running turn: the turns over it finish, and no new one
//! starts until `running < limit`.
//!
//! A nested turn (a delegation's child, run from inside its parent's tool call) takes a permit
//! without waiting ([`Throttle::admit_nested`]): its parent holds a permit and waits for it, so
//! waiting in line could deadlock (a limit of 1 held by the parent), and the parent sends no API
//! request while its child runs. It still counts as running and still reports its signals.
//!
//! Not here: the per-thread order (`queue.rs`), process capacity (`pool`), the CLI's own retries
//! (`CLAUDE_CODE_MAX_RETRIES`, `launch`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use claude_cli::{TurnEvent, TurnResult};
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::metrics::ThrottleMetrics;
use crate::sync::lock;

/// The longest a `retry-after` holds new turns back.
pub const MAX_PAUSE: Duration = Duration::from_secs(60);

/// What bounds the limit; from `[rate_limit]` in the config.
#[derive(Clone, Debug)]
pub struct ThrottleSettings {
    /// False: the limit stays at `max` whatever the API says (signals are still counted).
    pub enabled: bool,
    /// The starting limit and its ceiling.
    pub max: usize,
    /// The floor; at least 1, so the daemon always makes progress.
    pub min: usize,
    /// At most one decrease per this window.
    pub cooldown: Duration,
}

/// Why the API is pushing back, as the metrics label it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// `system/api_retry` with status 429 or 529.
    ApiRetry,
    /// `rate_limit_event` with status `rejected`.
    RateLimitRejected,
    /// The final `result` with `api_error_status` 429 or 529.
    ApiError,
    /// A 429 or 529 the model gateway had from upstream.
    Upstream,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::ApiRetry => "api_retry",
            Signal::RateLimitRejected => "rate_limit_rejected",
            Signal::ApiError => "api_error",
            Signal::Upstream => "upstream",
        }
    }
}

/// The AIMD limit, with time passed in. No locks, no clock.
#[derive(Clone, Debug)]
pub struct Aimd {
    limit: usize,
    min: usize,
    max: usize,
    cooldown: Duration,
    /// Successes since the limit last changed; at `limit` of them it grows by one.
    credit: usize,
    last_decrease: Option<Instant>,
}

impl Aimd {
    /// Starts at `max`: nothing has pushed back yet.
    pub fn new(min: usize, max: usize, cooldown: Duration) -> Aimd {
        let min = min.max(1);
        let max = max.max(min);
        Aimd {
            limit: max,
            min,
            max,
            cooldown,
            credit: 0,
            last_decrease: None,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A signal at `now`: halves the limit (rounded up, floor `min`) unless the last decrease is
    /// less than `cooldown` ago. Returns true when it decreased.
    pub fn back_off(&mut self, now: Instant) -> bool {
        let cooling = self
            .last_decrease
            .is_some_and(|last| now.saturating_duration_since(last) < self.cooldown);
        if cooling {
            return false;
        }
        self.last_decrease = Some(now);
        self.credit = 0;
        let halved = (self.limit - self.limit / 2).max(self.min);
        let changed = halved != self.limit;
        self.limit = halved;
        changed
    }

    /// A turn the API answered without pushing back. Returns true when the limit grew.
    pub fn succeeded(&mut self) -> bool {
        if self.limit >= self.max {
            self.credit = 0;
            return false;
        }
        self.credit += 1;
        if self.credit < self.limit {
            return false;
        }
        self.credit = 0;
        self.limit += 1;
        true
    }
}

/// The shared gate. Cheap to clone: clones share one.
#[derive(Clone)]
pub struct Throttle {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    enabled: bool,
    metrics: ThrottleMetrics,
    /// The model gateway reports the upstream's 429/529 ([`Throttle::upstream`]): the CLI's
    /// reports of the same lower nothing.
    gateway: std::sync::atomic::AtomicBool,
}

struct State {
    aimd: Aimd,
    /// Permits out now (nested ones included), so possibly above the limit after a decrease.
    running: usize,
    /// Turns waiting for a permit, first in line first.
    waiters: VecDeque<Waiter>,
    next_waiter: u64,
    /// No new turn starts before this (the upstream's `retry-after`).
    paused_until: Option<tokio::time::Instant>,
}

struct Waiter {
    id: u64,
    grant: oneshot::Sender<()>,
}

impl State {
    /// True while a `retry-after` holds new turns back.
    fn paused(&mut self) -> bool {
        match self.paused_until {
            Some(until) if tokio::time::Instant::now() < until => true,
            Some(_) => {
                self.paused_until = None;
                false
            }
            None => false,
        }
    }

    /// The limit turns are held to: `max` when the throttle is off.
    fn limit(&self, enabled: bool) -> usize {
        if enabled {
            self.aimd.limit()
        } else {
            self.aimd.max
        }
    }
}

/// How a turn got in: at once, or in line.
pub enum Admission {
    Now(Permit),
    /// The limit is reached: wait with [`Queued::wait`].
    Queued(Queued),
}

impl Throttle {
    pub fn new(settings: &ThrottleSettings, metrics: ThrottleMetrics) -> Throttle {
        let aimd = Aimd::new(settings.min, settings.max, settings.cooldown);
        metrics.set_limit(aimd.limit());
        Throttle {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    aimd,
                    running: 0,
                    waiters: VecDeque::new(),
                    next_waiter: 0,
                    paused_until: None,
                }),
                enabled: settings.enabled,
                metrics,
                gateway: Default::default(),
            }),
        }
    }

    /// The limit now (`/metrics` has it as `harness_turn_concurrency_limit`).
    #[cfg(test)]
    fn limit(&self) -> usize {
        lock(&self.shared.state).limit(self.shared.enabled)
    }

    /// A permit now when nobody is in line and a turn may start; otherwise a place at the end of
    /// the line (first come, first served across threads).
    pub fn admit(&self) -> Admission {
        let shared = &self.shared;
        let mut state = lock(&shared.state);
        let limit = state.limit(shared.enabled);
        if state.waiters.is_empty() && state.running < limit && !state.paused() {
            state.running += 1;
            shared.metrics.set_running(state.running);
            return Admission::Now(self.permit());
        }
        let (grant, granted) = oneshot::channel();
        let id = state.next_waiter;
        state.next_waiter += 1;
        state.waiters.push_back(Waiter { id, grant });
        shared.metrics.throttled(state.waiters.len());
        Admission::Queued(Queued {
            throttle: self.clone(),
            id,
            granted: Some(granted),
            position: state.waiters.len(),
            limit,
            running: state.running,
            since: Instant::now(),
        })
    }

    /// A permit for a turn nested in another turn's tool call, never in line (see the module
    /// doc); it may take `running` above the limit.
    pub fn admit_nested(&self) -> Permit {
        let mut state = lock(&self.shared.state);
        state.running += 1;
        self.shared.metrics.set_running(state.running);
        self.permit()
    }

    fn permit(&self) -> Permit {
        Permit {
            throttle: self.clone(),
            pushed_back: false,
            answered: false,
        }
    }

    /// From now on the model gateway reports the upstream's push-back.
    pub fn watched_by_gateway(&self) {
        (self.shared.gateway).store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The model gateway had a 429 or 529 from upstream: a signal, and with a `retry-after` a
    /// pause of new turns until then (at most [`MAX_PAUSE`]; the throttle on only).
    pub fn upstream(&self, retry_after: Option<Duration>) {
        self.back_off(Signal::Upstream);
        let Some(wait) = retry_after.filter(|w| !w.is_zero() && self.shared.enabled) else {
            return;
        };
        let until = tokio::time::Instant::now() + wait.min(MAX_PAUSE);
        {
            let mut state = lock(&self.shared.state);
            if state.paused_until.is_some_and(|later| later >= until) {
                return;
            }
            state.paused_until = Some(until);
        }
        warn!(
            seconds = wait.min(MAX_PAUSE).as_secs_f64(),
            "The API asks to wait; no new turn starts until then."
        );
        let throttle = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(until).await;
            let mut state = lock(&throttle.shared.state);
            throttle.dispatch(&mut state);
        });
    }

    /// Counts a signal and lowers the limit unless it did so within the cooldown.
    fn back_off(&self, signal: Signal) {
        let shared = &self.shared;
        shared.metrics.signal(signal.as_str());
        if !shared.enabled {
            return;
        }
        let mut state = lock(&shared.state);
        let before = state.aimd.limit();
        if state.aimd.back_off(Instant::now()) {
            let limit = state.aimd.limit();
            shared.metrics.decreased(limit);
            warn!(
                signal = signal.as_str(),
                from = before,
                to = limit,
                running = state.running,
                "The API pushes back; fewer turns at once."
            );
        }
    }

    /// A permit came back; `success`: its turn went through with no signal.
    fn release(&self, success: bool) {
        let shared = &self.shared;
        let mut state = lock(&shared.state);
        state.running = state.running.saturating_sub(1);
        if success && shared.enabled && state.aimd.succeeded() {
            let limit = state.aimd.limit();
            shared.metrics.set_limit(limit);
            info!(limit, "The API keeps up; more turns at once.");
        }
        self.dispatch(&mut state);
    }

    /// Hands permits to the head of the line while the limit allows and nothing pauses it.
    fn dispatch(&self, state: &mut State) {
        let limit = state.limit(self.shared.enabled);
        while state.running < limit && !state.paused() {
            let Some(waiter) = state.waiters.pop_front() else {
                break;
            };
            // A waiter leaves the line (drop) under this same lock, so one still in line still
            // holds its receiver: the send cannot fail.
            if waiter.grant.send(()).is_ok() {
                state.running += 1;
            }
        }
        self.shared.metrics.set_running(state.running);
        self.shared.metrics.set_waiting(state.waiters.len());
    }
}

/// A place in line for a permit. Dropping it leaves the line (or gives back a permit granted but
/// not yet taken), so a turn interrupted or timed out while waiting frees its place.
pub struct Queued {
    throttle: Throttle,
    id: u64,
    /// Resolves when the permit is granted; `None` once taken.
    granted: Option<oneshot::Receiver<()>>,
    /// 1 = next in line, when the turn joined it.
    pub position: usize,
    /// The limit when the turn joined the line.
    pub limit: usize,
    /// Turns running when the turn joined the line.
    pub running: usize,
    since: Instant,
}

impl Queued {
    /// Waits for the permit.
    pub async fn wait(mut self) -> Permit {
        if let Some(granted) = self.granted.as_mut() {
            // Only a send resolves it: the sender leaves the line only by sending (see
            // `dispatch`), and the throttle lives as long as this handle.
            let _ = granted.await;
        }
        self.granted = None;
        self.throttle.shared.metrics.waited(self.since.elapsed());
        self.throttle.permit()
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.granted.take().is_none() {
            return; // Became a permit.
        }
        let throttle = &self.throttle;
        let mut state = lock(&throttle.shared.state);
        let before = state.waiters.len();
        state.waiters.retain(|w| w.id != self.id);
        if state.waiters.len() == before {
            // Granted and never taken: that permit goes back.
            state.running = state.running.saturating_sub(1);
        }
        throttle.dispatch(&mut state);
    }
}

/// One running turn's share of the limit; dropping it gives it back. The turn reports what it
/// sees ([`Self::observe`], [`Self::observe_result`]) so the limit can follow the API.
pub struct Permit {
    throttle: Throttle,
    /// The turn saw a signal: it does not count as a success.
    pushed_back: bool,
    /// The API answered the turn (a `result` without an API error status).
    answered: bool,
}

impl Permit {
    /// Counts the event in the metrics and lowers the limit when it is a signal.
    pub fn observe(&mut self, event: &TurnEvent) {
        let metrics = &self.throttle.shared.metrics;
        match event {
            TurnEvent::ApiRetry(claude_cli::ApiRetry { status, .. }) => {
                metrics.api_retry(*status);
                if matches!(status, Some(429 | 529)) {
                    self.push_back(Signal::ApiRetry);
                }
            }
            TurnEvent::RateLimit(claude_cli::RateLimit { status, .. }) => {
                metrics.rate_limit_event(status);
                if status == "rejected" {
                    self.push_back(Signal::RateLimitRejected);
                }
            }
            _ => {}
        }
    }

    /// The turn's `result`: an API error status 429/529 is a signal; an answer with no signal on
    /// the way makes the turn a success when the permit goes back.
    pub fn observe_result(&mut self, result: &TurnResult) {
        match result.api_error_status {
            Some(status) => {
                self.throttle.shared.metrics.api_error(status);
                if matches!(status, 429 | 529) {
                    self.push_back(Signal::ApiError);
                }
            }
            None => self.answered = true,
        }
    }

    fn push_back(&mut self, signal: Signal) {
        self.pushed_back = true;
        let shared = &self.throttle.shared;
        if shared.gateway.load(std::sync::atomic::Ordering::Relaxed) {
            // The gateway saw it first and lowered the limit then.
            shared.metrics.signal(signal.as_str());
        } else {
            self.throttle.back_off(signal);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.throttle.release(self.answered && !self.pushed_back);
    }
}

#[cfg(test)]
mod tests;
