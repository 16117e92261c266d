//! The store's series: how long each of its calls took.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

series! {
    /// Owned by the store: latency of its calls.
    pub struct StoreMetrics {
        duration: Family<QueryLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(query_histogram) => "sqlite_query_duration_seconds",
            "Latency of store calls, by store method";
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueryLabel {
    query: &'static str,
}

fn query_histogram() -> Histogram {
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
    ])
}

impl StoreMetrics {
    /// Starts timing the store call `query`; the time is recorded when the guard drops, so every
    /// return path (errors included) is counted: `let _timer = self.metrics.time("get_thread");`.
    pub fn time(&self, query: &'static str) -> QueryTimer {
        QueryTimer {
            histogram: self.duration.get_or_create_owned(&QueryLabel { query }),
            started: Instant::now(),
        }
    }
}

/// Records the time since [`StoreMetrics::time`] when dropped.
#[must_use = "the time is recorded when the timer drops; bind it to a variable"]
pub struct QueryTimer {
    histogram: Histogram,
    started: Instant,
}

impl Drop for QueryTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}
