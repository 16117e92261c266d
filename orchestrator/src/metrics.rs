//! Prometheus metrics: one registry per [`Daemon`](crate::server::Daemon), rendered by
//! `GET /metrics`.
//!
//! Built on `prometheus-client` (the Prometheus project's Rust client). Each daemon owns its own
//! [`Metrics`]; nothing here is global, so several daemons in one process (the tests) never see
//! each other's numbers. This module knows nothing of what it measures: the parts are plain
//! series with methods that take labels, owned and updated by what they count and registered
//! here: [`PoolMetrics`] by the pool, [`ToolMetrics`] by the MCP server, [`StoreMetrics`] by the
//! store, [`TurnMetrics`] by the pipeline, [`ThrottleMetrics`] by its throttle,
//! [`ApprovalMetrics`] by the approvals. `/api/pool` reads the same counters
//! ([`PoolMetrics::counts`]), so it and `/metrics` never disagree.
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
//! | `harness_pool_transcript_restores_total` | counter | | sessions missing from the CLI's config dir written back from the stored transcript before a `--resume` |
//! | `harness_pool_model_switches_total` | counter | | a warm process switched model in place (`set_model`) instead of being replaced |
//! | `harness_pool_spares_parked` | gauge | | spare processes started and waiting for a thread |
//! | `harness_pool_spares_claimed_total` | counter | | new threads that took a parked spare as their process |
//! | `harness_pool_spare_failures_total` | counter | `reason`: `no_answer` (not within 2 s), `process_died`, `other` | spares dropped when a new thread came to take them; the thread's first turn then starts a process |
//! | `harness_pool_evictions_total` | counter | `cause`: `expired`, `capacity`, `error`, `replaced` (other start options, or a model switch the CLI refused), `shutdown` | processes let go |
//! | `harness_pool_live_processes` | gauge | | `claude` processes alive now |
//! | `harness_pool_live_peak` | gauge | | most `claude` processes alive at once since start (spares included) |
//! | `harness_pool_slot_waits_total` | counter | | spawns that found every slot taken and waited for one |
//! | `harness_pool_slot_waiting` | gauge | | spawns waiting for a slot now |
//! | `harness_pool_slot_wait_seconds` | histogram | | how long those spawns waited |
//! | `harness_pool_slot_waits_expired_total` | counter | | waits that reached `pool.slot_wait` and pushed out a process expected back within `pool.evict_grace` |
//! | `harness_process_spawn_seconds` | histogram | | spawn → ready (initialize answered, MCP handshake done) |
//! | `harness_turn_duration_seconds` | histogram | `start`: `warm`, `cold` (see below) | a turn, from the thread's turn to the stored outcome |
//! | `harness_turns_total` | counter | `outcome`: `done`, `error`, `interrupted` | finished turns |
//! | `harness_tokens_total` | counter | `kind`: `input`, `output`, `cache_read`, `cache_write` | tokens the turns used (the CLI's per-turn figures) |
//! | `harness_cost_usd_total` | counter | | what the turns cost in USD, as the CLI prices them |
//! | `harness_turns_refused_total` | counter | `budget`: `thread`, `daily` | messages refused (402) because a budget was spent |
//! | `harness_mcp_requests_total` | counter | `method`: `initialize`, `tools/list`, `tools/call`, `ping` | MCP requests from the CLI's processes over the control channel (the handshake is absent when the CLI took our manifest) |
//! | `harness_tool_calls_total` | counter | `tool`, `outcome`: `ok`, `error`, `invalid_input` | tool calls (model and HTTP) |
//! | `harness_tool_call_duration_seconds` | histogram | `tool` | one tool call, validation to result |
//! | `harness_tool_schema_failures_total` | counter | `tool` | inputs rejected by the tool's schema |
//! | `harness_tool_output_schema_failures_total` | counter | `tool` | structured results that failed the tool's own output schema (answered as an `isError` result naming the path) |
//! | `harness_mcp_http_requests_total` | counter | `method`: `initialize`, `server/discover`, `tools/list`, `tools/call` | requests to the MCP endpoint `/mcp` from outside clients |
//! | `harness_permission_decisions_total` | counter | `decision`: `allow`, `deny`; `by`: `rule`, `person`, `timeout`, `policy`, `interrupt` | tool permissions the CLI asked for (`can_use_tool`), as decided |
//! | `harness_permissions_pending` | gauge | | tool permissions waiting for a person now |
//! | `harness_sqlite_query_duration_seconds` | histogram | `query`: the store method | one store call, pool wait included (on PostgreSQL too: the name predates it and is kept for dashboards) |
//! | `harness_turn_concurrency_limit` | gauge | | turns allowed to run on the CLI at once now (the adaptive limit, `[rate_limit]`) |
//! | `harness_turns_running` | gauge | | turns holding a place under that limit now (nested delegation turns included) |
//! | `harness_turns_throttled_waiting` | gauge | | turns waiting in line for the limit now |
//! | `harness_turns_throttled_total` | counter | | turns that found the limit reached and waited (each emitted `turn_throttled`) |
//! | `harness_turn_throttle_wait_seconds` | histogram | | how long those turns waited |
//! | `harness_turn_concurrency_decreases_total` | counter | | times the limit was lowered (at most one per `rate_limit.cooldown`) |
//! | `harness_backpressure_signals_total` | counter | `signal`: `api_retry`, `rate_limit_rejected`, `api_error` | 429/529 retries, rejected `rate_limit_event`s and turns ended by a 429/529, each counted even inside the cooldown |
//! | `harness_api_retries_total` | counter | `status`: the HTTP status, or `none` (a dropped connection) | `api_retry` lines from the CLI |
//! | `harness_rate_limit_events_total` | counter | `status`: `allowed`, `allowed_warning`, `rejected`, `other` | `rate_limit_event` lines (OAuth logins only) |
//! | `harness_turn_api_errors_total` | counter | `status`: the HTTP status | turns whose `result` carried `api_error_status` (the CLI's retries ran out) |
//!
//! `start="warm"`: the lease reported a warm session: the process had already served the thread, so the CLI
//! holds its history. Every other turn is `cold`: the first on its process (a fresh or resumed
//! session), including the first turn after a prewarm, which skips the spawn but still pays the
//! CLI's first-turn cost; `harness_pool_hits_total` tells prewarm hits apart. A turn whose spawn
//! failed is `cold` too.
//!
//! A `tool` label is a registered tool name or `unknown`, so a model inventing names cannot grow
//! the series without bound.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::Serialize;

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every series of one daemon.
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// Registers the parts, each owned by what it counts.
    pub fn new(
        pool: &PoolMetrics,
        tools: &ToolMetrics,
        store: &StoreMetrics,
        turns: &TurnMetrics,
        approvals: &ApprovalMetrics,
        throttle: &ThrottleMetrics,
    ) -> Metrics {
        let mut registry = Registry::with_prefix("harness");
        pool.register(&mut registry);
        approvals.register(&mut registry);
        turns.register(&mut registry);
        throttle.register(&mut registry);
        tools.register(&mut registry);
        store.register(&mut registry);
        Metrics { registry }
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

/// Owned by the pipeline: turn latency by warm/cold and turn outcomes.
#[derive(Clone, Debug)]
pub struct TurnMetrics {
    duration: Family<StartLabel, Histogram, fn() -> Histogram>,
    outcomes: Family<OutcomeLabel, Counter>,
    tokens: Family<KindLabel, Counter>,
    cost_usd: Counter<f64, std::sync::atomic::AtomicU64>,
    refused: Family<BudgetLabel, Counter>,
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

impl Default for TurnMetrics {
    fn default() -> Self {
        TurnMetrics {
            duration: Family::new_with_constructor(turn_histogram),
            outcomes: Family::default(),
            tokens: Family::default(),
            cost_usd: Counter::default(),
            refused: Family::default(),
        }
    }
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

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "tokens",
            "Tokens the turns used, by kind: input, output, cache_read, cache_write",
            self.tokens.clone(),
        );
        registry.register(
            "cost_usd",
            "What the turns cost in USD, as the CLI prices them",
            self.cost_usd.clone(),
        );
        registry.register(
            "turns_refused",
            "Messages refused with 402 because a budget was spent, by budget: thread, daily",
            self.refused.clone(),
        );
        registry.register(
            "turn_duration_seconds",
            "Turn latency; start=warm: the process had served the thread before, cold: first turn on its process",
            self.duration.clone(),
        );
        registry.register("turns", "Finished turns by outcome", self.outcomes.clone());
    }
}

/// Owned by the pipeline's throttle: the adaptive limit on turns at once, the turns that waited
/// for it, and the API's push-back as the CLI reports it.
#[derive(Clone, Debug)]
pub struct ThrottleMetrics {
    limit: Gauge,
    running: Gauge,
    waiting: Gauge,
    throttled: Counter,
    wait_seconds: Histogram,
    decreases: Counter,
    signals: Family<SignalLabel, Counter>,
    api_retries: Family<StatusLabel, Counter>,
    rate_limit_events: Family<StatusLabel, Counter>,
    api_errors: Family<StatusLabel, Counter>,
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

impl Default for ThrottleMetrics {
    fn default() -> Self {
        ThrottleMetrics {
            limit: Gauge::default(),
            running: Gauge::default(),
            waiting: Gauge::default(),
            throttled: Counter::default(),
            wait_seconds: Histogram::new([
                0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
            ]),
            decreases: Counter::default(),
            signals: Family::default(),
            api_retries: Family::default(),
            rate_limit_events: Family::default(),
            api_errors: Family::default(),
        }
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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
    /// `signal`: `api_retry`, `rate_limit_rejected` or `api_error`.
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

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "turn_concurrency_limit",
            "Turns allowed to run on the CLI at once now (adaptive: lowered when the API answers 429/529)",
            self.limit.clone(),
        );
        registry.register(
            "turns_running",
            "Turns holding a place under the concurrency limit now",
            self.running.clone(),
        );
        registry.register(
            "turns_throttled_waiting",
            "Turns waiting in line for the concurrency limit now",
            self.waiting.clone(),
        );
        registry.register(
            "turns_throttled",
            "Turns that found the concurrency limit reached and waited",
            self.throttled.clone(),
        );
        registry.register(
            "turn_throttle_wait_seconds",
            "How long throttled turns waited for the concurrency limit",
            self.wait_seconds.clone(),
        );
        registry.register(
            "turn_concurrency_decreases",
            "Times the concurrency limit was lowered",
            self.decreases.clone(),
        );
        registry.register(
            "backpressure_signals",
            "429/529 retries, rejected rate_limit_events and turns ended by a 429/529, by signal",
            self.signals.clone(),
        );
        registry.register(
            "api_retries",
            "api_retry lines from the CLI, by HTTP status",
            self.api_retries.clone(),
        );
        registry.register(
            "rate_limit_events",
            "rate_limit_event lines from the CLI, by status",
            self.rate_limit_events.clone(),
        );
        registry.register(
            "turn_api_errors",
            "Turns whose result carried an API error status after the CLI's retries, by status",
            self.api_errors.clone(),
        );
    }
}

/// Owned by the approvals: every tool-permission decision, by what was decided and by whom, and
/// the requests a person has not answered yet.
#[derive(Clone, Debug, Default)]
pub struct ApprovalMetrics {
    decisions: Family<DecisionLabel, Counter>,
    pending: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabel {
    decision: &'static str,
    by: &'static str,
}

impl ApprovalMetrics {
    /// `decision`: `allow` or `deny`; `by`: `rule`, `person`, `timeout`, `policy`, `interrupt`.
    pub fn decided(&self, decision: &'static str, by: &'static str) {
        self.decisions
            .get_or_create(&DecisionLabel { decision, by })
            .inc();
    }

    /// How many decisions of this kind so far.
    pub fn count(&self, decision: &'static str, by: &'static str) -> u64 {
        self.decisions
            .get_or_create(&DecisionLabel { decision, by })
            .get()
    }

    pub fn set_pending(&self, pending: usize) {
        self.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "permission_decisions",
            "Tool permissions the CLI asked for, by decision (allow, deny) and by whom (rule, person, timeout, policy, interrupt)",
            self.decisions.clone(),
        );
        registry.register(
            "permissions_pending",
            "Tool permissions waiting for a person",
            self.pending.clone(),
        );
    }
}

/// Owned by the pool: its counters, the live gauge and the spawn-time histogram.
#[derive(Clone, Debug)]
pub struct PoolMetrics {
    hits: Counter,
    misses: Counter,
    prewarms: Counter,
    prewarms_skipped: Counter,
    spawns: Counter,
    resume_fallbacks: Counter,
    transcript_restores: Counter,
    model_switches: Counter,
    spares_parked: Gauge,
    spares_claimed: Counter,
    spare_failures: Family<ReasonLabel, Counter>,
    evictions: Family<CauseLabel, Counter>,
    live: Gauge,
    live_peak: Gauge,
    spawn_seconds: Histogram,
    slot_waits: Counter,
    slot_waiting: Gauge,
    slot_waits_expired: Counter,
    slot_wait_seconds: Histogram,
    /// The sum of the waits, for `/api/pool` (the histogram keeps it for `/metrics`).
    slot_wait_micros: Arc<AtomicU64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// Why a parked spare was dropped when a new thread came to take it.
const SPARE_FAILURES: [&str; 2] = ["no_answer", "process_died"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    cause: &'static str,
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
    pub error: u64,
    pub replaced: u64,
    pub shutdown: u64,
}

/// The eviction causes, as labelled.
pub const EVICTION_CAUSES: [&str; 5] = ["expired", "capacity", "error", "replaced", "shutdown"];

impl Default for PoolMetrics {
    fn default() -> Self {
        let evictions = Family::<CauseLabel, Counter>::default();
        for cause in EVICTION_CAUSES {
            // Present at zero from the start, so a dashboard sees every cause.
            let _ = evictions.get_or_create(&CauseLabel { cause });
        }
        PoolMetrics {
            hits: Counter::default(),
            misses: Counter::default(),
            prewarms: Counter::default(),
            prewarms_skipped: Counter::default(),
            spawns: Counter::default(),
            resume_fallbacks: Counter::default(),
            transcript_restores: Counter::default(),
            model_switches: Counter::default(),
            spares_parked: Gauge::default(),
            spares_claimed: Counter::default(),
            spare_failures: Family::default(),
            evictions,
            live: Gauge::default(),
            live_peak: Gauge::default(),
            spawn_seconds: Histogram::new([
                0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0,
            ]),
            slot_waits: Counter::default(),
            slot_waiting: Gauge::default(),
            slot_waits_expired: Counter::default(),
            slot_wait_seconds: Histogram::new([
                0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
            ]),
            slot_wait_micros: Arc::default(),
        }
    }
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
                error: evicted("error"),
                replaced: evicted("replaced"),
                shutdown: evicted("shutdown"),
            },
            live_peak: u64::try_from(self.live_peak.get()).unwrap_or(0),
            slot_waits: self.slot_waits.get(),
            slot_waiting: u64::try_from(self.slot_waiting.get()).unwrap_or(0),
            slot_wait_ms: self.slot_wait_micros.load(AtomicOrdering::Relaxed) / 1000,
            slot_waits_expired: self.slot_waits_expired.get(),
        }
    }

    fn register(&self, registry: &mut Registry) {
        let counters = [
            (
                "pool_hits",
                "Turns and prewarms that found the thread's warm process",
                &self.hits,
            ),
            (
                "pool_misses",
                "Turns and prewarms that had to start a process",
                &self.misses,
            ),
            ("pool_prewarms", "Prewarm requests", &self.prewarms),
            (
                "pool_prewarms_skipped",
                "Prewarms that started nothing: every slot held a process used recently",
                &self.prewarms_skipped,
            ),
            ("pool_spawns", "claude processes started", &self.spawns),
            (
                "pool_resume_fallbacks",
                "Spawns whose --resume failed and that started a fresh session instead",
                &self.resume_fallbacks,
            ),
            (
                "pool_transcript_restores",
                "Sessions written back from the stored transcript before a --resume",
                &self.transcript_restores,
            ),
            (
                "pool_model_switches",
                "Warm processes switched to another model in place (set_model)",
                &self.model_switches,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        registry.register(
            "pool_spares_parked",
            "Spare processes started and waiting for a thread",
            self.spares_parked.clone(),
        );
        registry.register(
            "pool_spares_claimed",
            "New threads that took a parked spare as their process",
            self.spares_claimed.clone(),
        );
        registry.register(
            "pool_spare_failures",
            "Parked spares dropped when a new thread came to take them, by reason",
            self.spare_failures.clone(),
        );
        registry.register(
            "pool_evictions",
            "Processes let go by the pool, by cause (replaced = model change)",
            self.evictions.clone(),
        );
        registry.register(
            "pool_live_processes",
            "claude processes alive now",
            self.live.clone(),
        );
        registry.register(
            "pool_live_peak",
            "Most claude processes alive at once since start (spares included)",
            self.live_peak.clone(),
        );
        registry.register(
            "pool_slot_waits",
            "Spawns that found every pool slot taken and waited for one",
            self.slot_waits.clone(),
        );
        registry.register(
            "pool_slot_waiting",
            "Spawns waiting for a pool slot now",
            self.slot_waiting.clone(),
        );
        registry.register(
            "pool_slot_wait_seconds",
            "How long spawns waited for a pool slot",
            self.slot_wait_seconds.clone(),
        );
        registry.register(
            "pool_slot_waits_expired",
            "Waits that reached pool.slot_wait and pushed out a process expected back soon",
            self.slot_waits_expired.clone(),
        );
        registry.register(
            "process_spawn_seconds",
            "Time from spawning a claude process to it being ready for a turn",
            self.spawn_seconds.clone(),
        );
    }
}

/// Owned by the MCP server: every tool call, from the model or the HTTP API.
#[derive(Clone, Debug)]
pub struct ToolMetrics {
    /// MCP requests from the CLI's processes, by method.
    requests: Family<MethodLabel, Counter>,
    calls: Family<ToolOutcomeLabels, Counter>,
    duration: Family<ToolLabel, Histogram, fn() -> Histogram>,
    schema_failures: Family<ToolLabel, Counter>,
    /// Structured results that broke the tool's own output schema.
    output_schema_failures: Family<ToolLabel, Counter>,
    /// Requests to `/mcp` from outside MCP clients, by method.
    http_requests: Family<MethodLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabel {
    method: &'static str,
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

/// How a tool call ended, as labelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolOutcome {
    Ok,
    Error,
    /// The input failed the tool's schema (also counted in `tool_schema_failures`).
    InvalidInput,
}

impl Default for ToolMetrics {
    fn default() -> Self {
        ToolMetrics {
            requests: Family::default(),
            calls: Family::default(),
            duration: Family::new_with_constructor(tool_histogram),
            schema_failures: Family::default(),
            output_schema_failures: Family::default(),
            http_requests: Family::default(),
        }
    }
}

impl ToolMetrics {
    /// Counts one MCP request from a process (`initialize`, `tools/list`, `tools/call`, `ping`).
    pub fn request(&self, method: &'static str) {
        self.requests.get_or_create(&MethodLabel { method }).inc();
    }

    /// Counts one request to the MCP endpoint `/mcp`.
    pub fn http_request(&self, method: &'static str) {
        self.http_requests
            .get_or_create(&MethodLabel { method })
            .inc();
    }

    /// Counts a structured result that failed the tool's own output schema.
    pub fn output_schema_failure(&self, tool: &str) {
        self.output_schema_failures
            .get_or_create(&ToolLabel {
                tool: tool.to_owned(),
            })
            .inc();
    }

    /// Records one call. `tool` is a registered name or `unknown`, so a model inventing names
    /// cannot grow the series without bound.
    pub fn record(&self, tool: &str, outcome: ToolOutcome, took: Duration) {
        let label = match outcome {
            ToolOutcome::Ok => "ok",
            ToolOutcome::Error => "error",
            ToolOutcome::InvalidInput => "invalid_input",
        };
        self.calls
            .get_or_create(&ToolOutcomeLabels {
                tool: tool.to_owned(),
                outcome: label,
            })
            .inc();
        if outcome == ToolOutcome::InvalidInput {
            self.schema_failures
                .get_or_create(&ToolLabel {
                    tool: tool.to_owned(),
                })
                .inc();
        }
        self.duration
            .get_or_create(&ToolLabel {
                tool: tool.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "mcp_requests",
            "MCP requests from the CLI processes over the control channel, by method",
            self.requests.clone(),
        );
        registry.register(
            "tool_calls",
            "Tool calls by tool and outcome",
            self.calls.clone(),
        );
        registry.register(
            "tool_call_duration_seconds",
            "Tool call latency, from validation to result",
            self.duration.clone(),
        );
        registry.register(
            "tool_schema_failures",
            "Tool inputs rejected by the tool's input schema",
            self.schema_failures.clone(),
        );
        registry.register(
            "tool_output_schema_failures",
            "Structured tool results that failed the tool's own output schema",
            self.output_schema_failures.clone(),
        );
        registry.register(
            "mcp_http_requests",
            "Requests to the MCP endpoint /mcp from outside clients, by method",
            self.http_requests.clone(),
        );
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

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "sqlite_query_duration_seconds",
            "Latency of store calls, by store method",
            self.duration.clone(),
        );
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

    fn render(
        pool: &PoolMetrics,
        tools: &ToolMetrics,
        store: &StoreMetrics,
        turns: &TurnMetrics,
    ) -> String {
        Metrics::new(
            pool,
            tools,
            store,
            turns,
            &ApprovalMetrics::default(),
            &ThrottleMetrics::default(),
        )
        .render()
        .unwrap()
    }

    #[test]
    fn permission_decisions_are_counted_by_decision_and_by_whom() {
        let approvals = ApprovalMetrics::default();
        approvals.decided("deny", "policy");
        approvals.decided("deny", "policy");
        approvals.decided("allow", "person");
        approvals.set_pending(1);
        let (pool, tools, store, turns) = Default::default();
        let text = Metrics::new(
            &pool,
            &tools,
            &store,
            &turns,
            &approvals,
            &ThrottleMetrics::default(),
        )
        .render()
        .unwrap();
        assert!(
            text.contains(r#"harness_permission_decisions_total{decision="deny",by="policy"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"harness_permission_decisions_total{decision="allow",by="person"} 1"#)
        );
        assert!(text.contains("harness_permissions_pending 1"));
    }

    #[test]
    fn throttle_series_render_with_bounded_labels() {
        let throttle = ThrottleMetrics::default();
        throttle.set_limit(4);
        throttle.decreased(2);
        throttle.set_running(3);
        throttle.throttled(1);
        throttle.waited(Duration::from_millis(300));
        throttle.signal("api_retry");
        throttle.api_retry(Some(529));
        throttle.api_retry(None);
        throttle.api_retry(Some(70_000));
        throttle.rate_limit_event("rejected");
        throttle.rate_limit_event("something_new");
        throttle.api_error(529);
        let (pool, tools, store, turns, approvals) = Default::default();
        let text = Metrics::new(&pool, &tools, &store, &turns, &approvals, &throttle)
            .render()
            .unwrap();
        for line in [
            "harness_turn_concurrency_limit 2",
            "harness_turns_running 3",
            "harness_turns_throttled_waiting 1",
            "harness_turns_throttled_total 1",
            "harness_turn_throttle_wait_seconds_count 1",
            "harness_turn_concurrency_decreases_total 1",
            r#"harness_backpressure_signals_total{signal="api_retry"} 1"#,
            r#"harness_api_retries_total{status="529"} 1"#,
            r#"harness_api_retries_total{status="none"} 1"#,
            r#"harness_api_retries_total{status="other"} 1"#,
            r#"harness_rate_limit_events_total{status="rejected"} 1"#,
            r#"harness_rate_limit_events_total{status="other"} 1"#,
            r#"harness_turn_api_errors_total{status="529"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn tool_calls_are_counted_by_tool_and_outcome() {
        let tools = ToolMetrics::default();
        let took = Duration::from_millis(2);
        tools.record("time__current_time", ToolOutcome::Ok, took);
        tools.record("time__current_time", ToolOutcome::InvalidInput, took);
        tools.record("unknown", ToolOutcome::Error, took);
        tools.record("unknown", ToolOutcome::Error, took);
        let text = render(
            &PoolMetrics::default(),
            &tools,
            &StoreMetrics::default(),
            &TurnMetrics::default(),
        );
        for line in [
            r#"harness_tool_calls_total{tool="time__current_time",outcome="ok"} 1"#,
            r#"harness_tool_calls_total{tool="time__current_time",outcome="invalid_input"} 1"#,
            r#"harness_tool_calls_total{tool="unknown",outcome="error"} 2"#,
            r#"harness_tool_schema_failures_total{tool="time__current_time"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn turns_store_timers_and_pool_counters_render() {
        let (pool, tools, store, turns) = (
            PoolMetrics::default(),
            ToolMetrics::default(),
            StoreMetrics::default(),
            TurnMetrics::default(),
        );
        turns.finished(true, "done", Duration::from_millis(30));
        turns.finished(false, "error", Duration::from_millis(600));
        turns.finished(false, "error", Duration::from_millis(5));
        turns.usage(&[("input", 120), ("cache_read", 30)], 0.25);
        turns.usage(&[("input", 5)], 0.5);
        turns.refused("daily");
        drop(store.time("get_thread"));
        pool.hit();
        pool.ready(Duration::from_millis(400));
        pool.evicted("capacity");
        let text = render(&pool, &tools, &store, &turns);
        for line in [
            r#"harness_turns_total{outcome="done"} 1"#,
            r#"harness_turns_total{outcome="error"} 2"#,
            r#"harness_tokens_total{kind="input"} 125"#,
            r#"harness_tokens_total{kind="cache_read"} 30"#,
            "harness_cost_usd_total 0.75",
            r#"harness_turns_refused_total{budget="daily"} 1"#,
            r#"harness_turn_duration_seconds_count{start="warm"} 1"#,
            r#"harness_turn_duration_seconds_count{start="cold"} 2"#,
            r#"harness_turn_duration_seconds_bucket{le="0.05",start="warm"} 1"#,
            r#"harness_sqlite_query_duration_seconds_count{query="get_thread"} 1"#,
            "harness_pool_hits_total 1",
            "harness_pool_misses_total 0",
            r#"harness_pool_evictions_total{cause="capacity"} 1"#,
            r#"harness_pool_evictions_total{cause="error"} 0"#,
            "harness_pool_live_processes 1",
            "harness_process_spawn_seconds_count 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        let counts = pool.counts();
        assert_eq!(
            (counts.hits, counts.live, counts.evictions.capacity),
            (1, 1, 1)
        );
    }
}
