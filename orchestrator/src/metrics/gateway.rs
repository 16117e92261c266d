//! The model gateway's series: each model request, what it used and cost, and its refusals.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

series! {
    /// Owned by the model gateway: every request a child sent the Messages API through it.
    pub struct GatewayMetrics {
        requests: Family<StatusLabel, Counter> => "model_requests",
            "Model requests through the gateway, by the HTTP status it answered with";
        tokens: Family<KindLabel, Counter> => "model_tokens",
            "Tokens of the model requests, metered by the gateway from the responses";
        cost_usd: Counter<f64, AtomicU64> => "model_cost_usd",
            "What the model requests cost in USD at the gateway's prices";
        refused: Family<BudgetLabel, Counter> => "model_requests_refused",
            "Model requests the gateway refused because a budget was spent";
        first_byte: Histogram = Histogram::new([
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ]) => "model_first_byte_seconds",
            "From a model request's arrival to the first byte of its response";
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabel {
    budget: &'static str,
}

impl GatewayMetrics {
    /// One request answered with `status`, its response's first byte after `first_byte`.
    pub fn request(&self, status: u16, first_byte: Duration) {
        self.requests.get_or_create(&StatusLabel { status }).inc();
        self.first_byte.observe(first_byte.as_secs_f64());
    }

    /// What one request used: tokens by kind, and its cost.
    pub fn usage(&self, tokens: &[(&'static str, u64)], cost_usd: f64) {
        for (kind, n) in tokens {
            self.tokens.get_or_create(&KindLabel { kind }).inc_by(*n);
        }
        if cost_usd.is_finite() && cost_usd > 0.0 {
            self.cost_usd.inc_by(cost_usd);
        }
    }

    /// A request refused because `budget` (`thread`, `key`, `daily`) was spent.
    pub fn refused(&self, budget: &'static str) {
        self.refused.get_or_create(&BudgetLabel { budget }).inc();
    }
}
