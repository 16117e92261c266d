//! The pipeline's series: turns, what they cost, and the throttle in front of them.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::gauge_value;

series! {
    /// Owned by the pipeline: finished turns (latency by warm/cold, outcome), what they cost,
    /// and the messages a budget refused.
    pub struct TurnMetrics {
        tokens: Family<KindLabel, Counter> => "tokens",
            "Tokens the turns used, by kind: input, output, cache_read, cache_write";
        cost_usd: Counter<f64, std::sync::atomic::AtomicU64> => "cost_usd",
            "What the turns cost in USD, as the CLI prices them";
        refused: Family<BudgetLabel, Counter> => "turns_refused",
            "Messages refused with 402 because a budget was spent, by budget: thread, daily";
        duration: Family<StartLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(turn_histogram) => "turn_duration_seconds",
            "Turn latency; start=warm: the process had served the thread before, cold: first turn on its process";
        outcomes: Family<OutcomeLabel, Counter> => "turns", "Finished turns by outcome";
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabel {
    budget: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StartLabel {
    start: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

fn turn_histogram() -> Histogram {
    Histogram::new([
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ])
}

impl TurnMetrics {
    /// Records one finished turn. `warm`: its process had served the thread before (a turn whose
    /// spawn failed is cold). `outcome` is the user message's final status.
    pub fn finished(&self, warm: bool, outcome: &'static str, took: Duration) {
        let start = if warm { "warm" } else { "cold" };
        self.duration
            .get_or_create(&StartLabel { start })
            .observe(took.as_secs_f64());
        self.outcomes.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// Adds what a turn cost: tokens by kind (`input`, `output`, `cache_read`, `cache_write`)
    /// and USD.
    pub fn usage(&self, tokens: &[(&'static str, i64)], cost_usd: f64) {
        for &(kind, count) in tokens {
            self.tokens
                .get_or_create(&KindLabel { kind })
                .inc_by(u64::try_from(count).unwrap_or(0));
        }
        if cost_usd.is_finite() && cost_usd > 0.0 {
            self.cost_usd.inc_by(cost_usd);
        }
    }

    /// Counts a turn a budget refused (`thread` or `daily`).
    pub fn refused(&self, budget: &'static str) {
        self.refused.get_or_create(&BudgetLabel { budget }).inc();
    }
}

series! {
    /// Owned by the pipeline's throttle: the adaptive limit on turns at once, the turns that
    /// waited for it, and the API's push-back as the CLI reports it.
    pub struct ThrottleMetrics {
        limit: Gauge => "turn_concurrency_limit",
            "Turns allowed to run on the CLI at once now (adaptive: lowered when the API answers 429/529)";
        running: Gauge => "turns_running", "Turns holding a place under the concurrency limit now";
        waiting: Gauge => "turns_throttled_waiting",
            "Turns waiting in line for the concurrency limit now";
        throttled: Counter => "turns_throttled",
            "Turns that found the concurrency limit reached and waited";
        wait_seconds: Histogram = Histogram::new([
            0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
        ]) => "turn_throttle_wait_seconds",
            "How long throttled turns waited for the concurrency limit";
        decreases: Counter => "turn_concurrency_decreases",
            "Times the concurrency limit was lowered";
        signals: Family<SignalLabel, Counter> => "backpressure_signals",
            "429/529 retries, rejected rate_limit_events and turns ended by a 429/529, by signal";
        api_retries: Family<StatusLabel, Counter> => "api_retries",
            "api_retry lines from the CLI, by HTTP status";
        rate_limit_events: Family<StatusLabel, Counter> => "rate_limit_events",
            "rate_limit_event lines from the CLI, by status";
        api_errors: Family<StatusLabel, Counter> => "turn_api_errors",
            "Turns whose result carried an API error status after the CLI's retries, by status";
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignalLabel {
    signal: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

/// The `rate_limit_event` statuses labelled as themselves; anything else is `other`.
const RATE_LIMIT_STATUSES: [&str; 3] = ["allowed", "allowed_warning", "rejected"];

/// An HTTP status as a label; outside 100–599 (not a status) it is `other`, so the series stay
/// bounded whatever a line carries.
fn http_status_label(status: u64) -> String {
    if (100..600).contains(&status) {
        status.to_string()
    } else {
        "other".to_owned()
    }
}

impl ThrottleMetrics {
    pub fn set_limit(&self, limit: usize) {
        self.limit.set(gauge_value(limit));
    }
    /// The limit was lowered to `limit`.
    pub fn decreased(&self, limit: usize) {
        self.decreases.inc();
        self.set_limit(limit);
    }
    pub fn set_running(&self, running: usize) {
        self.running.set(gauge_value(running));
    }
    pub fn set_waiting(&self, waiting: usize) {
        self.waiting.set(gauge_value(waiting));
    }
    /// A turn found the limit reached; `waiting` are in line now, it included.
    pub fn throttled(&self, waiting: usize) {
        self.throttled.inc();
        self.set_waiting(waiting);
    }
    /// A turn in line got its permit after `took`.
    pub fn waited(&self, took: Duration) {
        self.wait_seconds.observe(took.as_secs_f64());
    }
    /// `signal`: `upstream`, `api_retry`, `rate_limit_rejected` or `api_error`.
    pub fn signal(&self, signal: &'static str) {
        self.signals.get_or_create(&SignalLabel { signal }).inc();
    }
    /// An `api_retry` line; `None`: no HTTP status (a dropped connection, say).
    pub fn api_retry(&self, status: Option<u64>) {
        let status = status.map_or_else(|| "none".to_owned(), http_status_label);
        self.api_retries
            .get_or_create(&StatusLabel { status })
            .inc();
    }
    pub fn rate_limit_event(&self, status: &str) {
        let status = RATE_LIMIT_STATUSES
            .iter()
            .find(|known| **known == status)
            .copied()
            .unwrap_or("other")
            .to_owned();
        self.rate_limit_events
            .get_or_create(&StatusLabel { status })
            .inc();
    }
    /// A turn's `result` carried `api_error_status`.
    pub fn api_error(&self, status: u16) {
        let status = http_status_label(u64::from(status));
        self.api_errors.get_or_create(&StatusLabel { status }).inc();
    }
}
