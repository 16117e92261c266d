//! Prometheus metrics: one registry per [`App`](crate::app::App), rendered by `GET /metrics`.
//!
//! Built on `prometheus-client` (the Prometheus project's Rust client). Each daemon owns its own
//! [`Metrics`]; nothing here is global, so several daemons in one process (the tests) never see
//! each other's numbers. The parts that count are owned by what they count and registered here:
//! [`PoolMetrics`] by the pool, [`ToolMetrics`] by the MCP adapter, [`StoreMetrics`] by the store,
//! [`TurnMetrics`] by the app (the pipeline records into it). The pool's counters are read from
//! [`PoolStats`] at scrape time, so `/metrics` and `/api/pool` can never disagree.
//!
//! The body is OpenMetrics text (what Prometheus asks for first); counters end in `_total`.
//!
//! | series | type | labels | meaning |
//! |---|---|---|---|
//! | `harness_pool_hits_total` | counter | | a turn or prewarm found the thread's warm process |
//! | `harness_pool_misses_total` | counter | | a turn or prewarm had to start a process |
//! | `harness_pool_prewarms_total` | counter | | prewarm requests |
//! | `harness_pool_prewarms_skipped_total` | counter | | prewarms that started nothing: every slot held a process used within `pool.prewarm_evicts_after` |
//! | `harness_pool_spawns_total` | counter | | `claude` processes started (a failed `--resume` starts two) |
//! | `harness_pool_resume_fallbacks_total` | counter | | `--resume` failed; a fresh session got the history |
//! | `harness_pool_evictions_total` | counter | `cause`: `expired`, `capacity`, `error`, `replaced` (model change), `shutdown` | processes let go |
//! | `harness_pool_live_processes` | gauge | | `claude` processes alive now |
//! | `harness_process_spawn_seconds` | histogram | | spawn → ready (initialize answered, MCP handshake done) |
//! | `harness_turn_duration_seconds` | histogram | `start`: `warm`, `cold` (see below) | a turn, from the thread's turn to the stored outcome |
//! | `harness_turns_total` | counter | `outcome`: `done`, `error`, `interrupted` | finished turns |
//! | `harness_tool_calls_total` | counter | `tool`, `outcome`: `ok`, `error`, `invalid_input` | tool calls (model and HTTP) |
//! | `harness_tool_call_duration_seconds` | histogram | `tool` | one tool call, validation to result |
//! | `harness_tool_schema_failures_total` | counter | `tool` | inputs rejected by the tool's schema |
//! | `harness_sqlite_query_duration_seconds` | histogram | `query`: the store method | one store call, pool wait included |
//!
//! `start="warm"` is [`SessionStart::Warm`]: the process had already served the thread, so the CLI
//! holds its history. Every other turn is `cold`: the first on its process (a fresh or resumed
//! session), including the first turn after a prewarm, which skips the spawn but still pays the
//! CLI's first-turn cost; `harness_pool_hits_total` tells prewarm hits apart. A turn whose spawn
//! failed is `cold` too.
//!
//! A `tool` label is a registered tool name or `unknown`, so a model inventing names cannot grow
//! the series without bound.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use plugin_contract::{SessionStart, StreamEvent};

use crate::mcp::CallOutcome;
use crate::pool::{Pool, PoolStats};

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every series of one daemon.
pub struct Metrics {
    registry: Registry,
    turns: TurnMetrics,
}

impl Metrics {
    /// Registers the parts owned elsewhere next to the turn metrics owned here.
    pub fn new(pool: &Pool, tools: &ToolMetrics, store: &StoreMetrics) -> Metrics {
        let mut registry = Registry::with_prefix("harness");
        registry.register_collector(Box::new(PoolCollector {
            stats: pool.stats_handle(),
        }));
        registry.register(
            "process_spawn_seconds",
            "Time from spawning a claude process to it being ready for a turn",
            pool.metrics().spawn_seconds.clone(),
        );
        let turns = TurnMetrics::default();
        registry.register(
            "turn_duration_seconds",
            "Turn latency; start=warm: the process had served the thread before, cold: first turn on its process",
            turns.duration.clone(),
        );
        registry.register("turns", "Finished turns by outcome", turns.outcomes.clone());
        registry.register(
            "tool_calls",
            "Tool calls by tool and outcome",
            tools.calls.clone(),
        );
        registry.register(
            "tool_call_duration_seconds",
            "Tool call latency, from validation to result",
            tools.duration.clone(),
        );
        registry.register(
            "tool_schema_failures",
            "Tool inputs rejected by the tool's input schema",
            tools.schema_failures.clone(),
        );
        registry.register(
            "sqlite_query_duration_seconds",
            "Latency of store calls, by store method",
            store.duration.clone(),
        );
        Metrics { registry, turns }
    }

    pub fn turns(&self) -> &TurnMetrics {
        &self.turns
    }

    /// The OpenMetrics text exposition, `# EOF` included.
    pub fn render(&self) -> Result<String, fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Turn latency by warm/cold and turn outcomes.
#[derive(Clone, Debug)]
pub struct TurnMetrics {
    duration: Family<StartLabel, Histogram, fn() -> Histogram>,
    outcomes: Family<OutcomeLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StartLabel {
    start: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

impl Default for TurnMetrics {
    fn default() -> Self {
        TurnMetrics {
            duration: Family::new_with_constructor(turn_histogram),
            outcomes: Family::default(),
        }
    }
}

impl TurnMetrics {
    /// Records one finished turn. `start` is `None` when no process got the turn (its spawn
    /// failed), which counts as cold. `outcome` is the user message's final status.
    pub fn finished(&self, start: Option<SessionStart>, outcome: &'static str, took: Duration) {
        let start = if start.is_some_and(SessionStart::is_warm) {
            "warm"
        } else {
            "cold"
        };
        self.duration
            .get_or_create(&StartLabel { start })
            .observe(took.as_secs_f64());
        self.outcomes.get_or_create(&OutcomeLabel { outcome }).inc();
    }
}

/// What one turn's event stream showed, for its summary line and metrics. Cheap to clone; the
/// event sink holds one clone, the pipeline another.
#[derive(Clone, Debug, Default)]
pub struct TurnTally {
    tool_calls: Arc<AtomicU64>,
    start: Arc<Mutex<Option<SessionStart>>>,
}

impl TurnTally {
    /// Call with every event of the turn.
    pub fn observe(&self, event: &StreamEvent) {
        match event {
            StreamEvent::ToolCallStarted { .. } => {
                self.tool_calls.fetch_add(1, Ordering::Relaxed);
            }
            StreamEvent::TurnStarted { start, .. } => {
                *self.start.lock().unwrap_or_else(|e| e.into_inner()) = Some(*start);
            }
            _ => {}
        }
    }

    /// Tool calls the model started in this turn.
    pub fn tool_calls(&self) -> u64 {
        self.tool_calls.load(Ordering::Relaxed)
    }

    /// How the turn's process started; `None` until a process took the turn.
    pub fn start(&self) -> Option<SessionStart> {
        *self.start.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `warm` or `cold`, for log lines; `cold` when no process took the turn.
    pub fn start_label(&self) -> &'static str {
        if self.start().is_some_and(SessionStart::is_warm) {
            "warm"
        } else {
            "cold"
        }
    }
}

/// Owned by the pool: the spawn-time histogram. Counters live in [`PoolStats`].
#[derive(Clone, Debug)]
pub struct PoolMetrics {
    spawn_seconds: Histogram,
}

impl Default for PoolMetrics {
    fn default() -> Self {
        PoolMetrics {
            spawn_seconds: Histogram::new([
                0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0,
            ]),
        }
    }
}

impl PoolMetrics {
    /// A process became ready `took` after it was spawned.
    pub fn spawned(&self, took: Duration) {
        self.spawn_seconds.observe(took.as_secs_f64());
    }
}

/// Reads [`PoolStats`] at scrape time.
#[derive(Debug)]
struct PoolCollector {
    stats: Arc<PoolStats>,
}

impl prometheus_client::collector::Collector for PoolCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let stats = &self.stats;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let counters: [(&str, &str, u64); 6] = [
            (
                "pool_hits",
                "Turns and prewarms that found the thread's warm process",
                n(&stats.hits),
            ),
            (
                "pool_misses",
                "Turns and prewarms that had to start a process",
                n(&stats.misses),
            ),
            ("pool_prewarms", "Prewarm requests", n(&stats.prewarms)),
            (
                "pool_prewarms_skipped",
                "Prewarms that started nothing: every slot held a process used recently",
                n(&stats.prewarms_skipped),
            ),
            ("pool_spawns", "claude processes started", n(&stats.spawns)),
            (
                "pool_resume_fallbacks",
                "Spawns whose --resume failed and that started a fresh session instead",
                n(&stats.resume_fallbacks),
            ),
        ];
        for (name, help, value) in counters {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(metric)?;
        }
        let mut evictions = encoder.encode_descriptor(
            "pool_evictions",
            "Processes let go by the pool, by cause (replaced = model change)",
            None,
            MetricType::Counter,
        )?;
        for (cause, counter) in [
            ("expired", &stats.evicted_expired),
            ("capacity", &stats.evicted_capacity),
            ("error", &stats.evicted_error),
            ("replaced", &stats.evicted_replaced),
            ("shutdown", &stats.evicted_shutdown),
        ] {
            let labels = [("cause", cause)];
            ConstCounter::new(n(counter)).encode(evictions.encode_family(&labels)?)?;
        }
        let live = encoder.encode_descriptor(
            "pool_live_processes",
            "claude processes alive now",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::try_from(n(&stats.live)).unwrap_or(i64::MAX)).encode(live)?;
        Ok(())
    }
}

/// Owned by the MCP adapter: every tool call, from the model or the HTTP API.
#[derive(Clone, Debug)]
pub struct ToolMetrics {
    calls: Family<ToolOutcomeLabels, Counter>,
    duration: Family<ToolLabel, Histogram, fn() -> Histogram>,
    schema_failures: Family<ToolLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcomeLabels {
    tool: String,
    outcome: &'static str,
}

impl Default for ToolMetrics {
    fn default() -> Self {
        ToolMetrics {
            calls: Family::default(),
            duration: Family::new_with_constructor(tool_histogram),
            schema_failures: Family::default(),
        }
    }
}

impl ToolMetrics {
    /// Records one call of `tool` (`known` = a registered name; others count as `unknown`).
    pub fn record(&self, tool: &str, known: bool, outcome: &CallOutcome) {
        let tool = if known { tool } else { "unknown" }.to_owned();
        let result = if outcome.violations.is_some() {
            "invalid_input"
        } else if outcome.is_error {
            "error"
        } else {
            "ok"
        };
        self.calls
            .get_or_create(&ToolOutcomeLabels {
                tool: tool.clone(),
                outcome: result,
            })
            .inc();
        if outcome.violations.is_some() {
            self.schema_failures
                .get_or_create(&ToolLabel { tool: tool.clone() })
                .inc();
        }
        self.duration
            .get_or_create(&ToolLabel { tool })
            .observe(outcome.duration.as_secs_f64());
    }
}

/// Owned by the store: latency of its calls.
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    duration: Family<QueryLabel, Histogram, fn() -> Histogram>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueryLabel {
    query: &'static str,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            duration: Family::new_with_constructor(sqlite_histogram),
        }
    }
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

fn turn_histogram() -> Histogram {
    Histogram::new([
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ])
}

fn tool_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        120.0,
    ])
}

fn sqlite_histogram() -> Histogram {
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_with(tools: &ToolMetrics, store: &StoreMetrics, turns: &TurnMetrics) -> Registry {
        let mut registry = Registry::with_prefix("harness");
        registry.register("tool_calls", "t", tools.calls.clone());
        registry.register("tool_schema_failures", "t", tools.schema_failures.clone());
        registry.register("sqlite_query_duration_seconds", "t", store.duration.clone());
        registry.register("turns", "t", turns.outcomes.clone());
        registry.register("turn_duration_seconds", "t", turns.duration.clone());
        registry.register_collector(Box::new(PoolCollector {
            stats: Arc::new(PoolStats::default()),
        }));
        registry
    }

    fn render(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    fn outcome(is_error: bool, invalid: bool) -> CallOutcome {
        CallOutcome {
            result: serde_json::json!({}),
            is_error,
            duration: Duration::from_millis(2),
            violations: invalid.then(Vec::new),
        }
    }

    #[test]
    fn tool_calls_are_counted_by_tool_and_outcome_and_unknown_names_are_folded() {
        let (tools, store, turns) = (
            ToolMetrics::default(),
            StoreMetrics::default(),
            TurnMetrics::default(),
        );
        tools.record("time__current_time", true, &outcome(false, false));
        tools.record("time__current_time", true, &outcome(true, true));
        tools.record("made_up", false, &outcome(true, false));
        tools.record("also_made_up", false, &outcome(true, false));
        let text = render(&registry_with(&tools, &store, &turns));
        for line in [
            r#"harness_tool_calls_total{tool="time__current_time",outcome="ok"} 1"#,
            r#"harness_tool_calls_total{tool="time__current_time",outcome="invalid_input"} 1"#,
            r#"harness_tool_calls_total{tool="unknown",outcome="error"} 2"#,
            r#"harness_tool_schema_failures_total{tool="time__current_time"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
        assert!(!text.contains("made_up"), "{text}");
    }

    #[test]
    fn turns_store_timers_and_pool_collector_render() {
        let (tools, store, turns) = (
            ToolMetrics::default(),
            StoreMetrics::default(),
            TurnMetrics::default(),
        );
        turns.finished(Some(SessionStart::Warm), "done", Duration::from_millis(30));
        turns.finished(
            Some(SessionStart::Fresh {
                resume_failed: false,
            }),
            "error",
            Duration::from_millis(600),
        );
        turns.finished(None, "error", Duration::from_millis(5));
        drop(store.time("get_thread"));
        let text = render(&registry_with(&tools, &store, &turns));
        for line in [
            r#"harness_turns_total{outcome="done"} 1"#,
            r#"harness_turns_total{outcome="error"} 2"#,
            r#"harness_turn_duration_seconds_count{start="warm"} 1"#,
            r#"harness_turn_duration_seconds_count{start="cold"} 2"#,
            r#"harness_turn_duration_seconds_bucket{le="0.05",start="warm"} 1"#,
            r#"harness_sqlite_query_duration_seconds_count{query="get_thread"} 1"#,
            "harness_pool_hits_total 0",
            r#"harness_pool_evictions_total{cause="error"} 0"#,
            "harness_pool_live_processes 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn tally_counts_tool_calls_and_remembers_the_start() {
        let tally = TurnTally::default();
        assert_eq!((tally.tool_calls(), tally.start_label()), (0, "cold"));
        tally.observe(&StreamEvent::TurnStarted {
            start: SessionStart::Warm,
            pid: Some(1),
        });
        for id in ["a", "b"] {
            tally.clone().observe(&StreamEvent::ToolCallStarted {
                tool_use_id: id.into(),
                name: "t".into(),
                input: serde_json::json!({}),
            });
        }
        assert_eq!((tally.tool_calls(), tally.start_label()), (2, "warm"));
    }
}
