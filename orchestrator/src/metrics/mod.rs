//! Prometheus metrics: one registry per [`Daemon`](crate::server::Daemon), rendered by
//! `GET /metrics`.
//!
//! Built on `prometheus-client` (the Prometheus project's Rust client). Each daemon owns its own
//! [`Metrics`]; nothing here is global, so several daemons in one process (the tests) never see
//! each other's numbers. This module knows nothing of what it measures: the parts are plain
//! series with methods that take labels, owned and updated by what they count and registered
//! here: [`PoolMetrics`] by the pool, [`ToolMetrics`] by the MCP server, [`StoreMetrics`] by the
//! store, [`TurnMetrics`] by the pipeline, [`ThrottleMetrics`] by its throttle,
//! [`ApprovalMetrics`] by the approvals, [`GatewayMetrics`] by the model gateway. `/api/pool` reads the same counters
//! ([`PoolMetrics::counts`]), so it and `/metrics` never disagree.
//!
//! One file per part: `pool.rs`, `tools.rs`, `turns.rs` (turns and their throttle),
//! `approvals.rs`, `store.rs`. Each part declares its series once, in a `series!` block: field,
//! how it is built, name and help. To add a series, add its line there, a method that updates
//! it, and its row to the table below (a test fails while the table and `/metrics` disagree).
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
//! | `harness_pool_spare_failures_total` | counter | `reason`: `no_answer` (not within 2 s), `process_died`, `folder_gone` (its folder was deleted), `other` | spares dropped when a new thread came to take them; the thread's first turn then starts a process |
//! | `harness_cli_startup_failures_total` | counter | `reason` (the CLI's `startup_failure_reason`, or `cwd_unavailable` when the folder is gone before it starts), `class`: `caller`, `operator`, `policy`, `transient` | processes the CLI refused to start, by why; none is retried but the transient ones, by the next message |
//! | `harness_pool_walled_processes` | gauge | | live processes whose tree is walled in (`[sandbox]`); each one's walls and limits are in `/api/pool` |
//! | `harness_wall_breaches_total` | counter | `limit`: `memory`, `processes` | processes the walls stopped (`[sandbox]`) |
//! | `harness_pool_evictions_total` | counter | `cause`: `expired`, `capacity`, `memory` (`pool.max_memory_mb`), `error`, `replaced` (other start options, or a model switch the CLI refused), `shutdown`, `lease_lost` (with clustering, a peer took the thread over) | processes let go |
//! | `harness_pool_live_processes` | gauge | | `claude` processes alive now |
//! | `harness_pool_live_peak` | gauge | | most `claude` processes alive at once since start (spares included) |
//! | `harness_pool_pss_bytes` | gauge | | PSS of the live `claude` processes together (`smaps_rollup`), as last sampled |
//! | `harness_pool_private_bytes` | gauge | | their private memory together: what they cost beyond what they share |
//! | `harness_pool_memory_samples_total` | counter | | rounds of reading the processes' memory, off the request path (every 2 s, and when a process is ready) |
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
//! | `harness_model_requests_total` | counter | `status`: the HTTP status the gateway answered with | model requests through the model gateway (its own refusals included) |
//! | `harness_model_tokens_total` | counter | `kind`: `input`, `output`, `cache_read`, `cache_write` | tokens of those requests, metered from the responses as they stream |
//! | `harness_model_cost_usd_total` | counter | | what they cost in USD at the gateway's prices (`gateway.prices`) |
//! | `harness_model_requests_refused_total` | counter | `budget`: `thread`, `key`, `daily` | model requests the gateway refused because a budget was spent |
//! | `harness_model_first_byte_seconds` | histogram | | from a model request's arrival to its response's first byte |
//! | `harness_mcp_requests_total` | counter | `method`: `initialize`, `tools/list`, `tools/call`, `ping` | MCP requests from the CLI's processes over the control channel (the handshake is absent when the CLI took our manifest) |
//! | `harness_tool_calls_total` | counter | `tool`, `outcome`: `ok`, `error`, `invalid_input` | tool calls (model and HTTP) |
//! | `harness_tool_call_duration_seconds` | histogram | `tool` | one tool call, validation to result |
//! | `harness_tool_schema_failures_total` | counter | `tool` | inputs rejected by the tool's schema |
//! | `harness_tool_output_schema_failures_total` | counter | `tool` | structured results that failed the tool's own output schema (answered as an `isError` result naming the path) |
//! | `harness_mcp_http_requests_total` | counter | `method`: `initialize`, `server/discover`, `tools/list`, `tools/call`, `events/list`, `events/poll`, `events/stream`, `events/subscribe`, `events/unsubscribe` | requests to the MCP endpoint `/mcp` from outside clients |
//! | `harness_mcp_event_subscriptions` | gauge | | webhook subscriptions of the MCP Events extension (`events/subscribe`) live now |
//! | `harness_mcp_event_subscriptions_expired_total` | counter | | those that expired: not refreshed within their TTL |
//! | `harness_permission_decisions_total` | counter | `decision`: `allow`, `deny`; `by`: `rule`, `person`, `timeout`, `policy`, `interrupt` | tool permissions the CLI asked for (`can_use_tool`), as decided |
//! | `harness_permissions_pending` | gauge | | tool permissions waiting for a person now |
//! | `harness_sqlite_query_duration_seconds` | histogram | `query`: the store method | one store call, pool wait included (on PostgreSQL too: the name predates it and is kept for dashboards) |
//! | `harness_turn_concurrency_limit` | gauge | | turns allowed to run on the CLI at once now (the adaptive limit, `[rate_limit]`) |
//! | `harness_turns_running` | gauge | | turns holding a place under that limit now (nested delegation turns included) |
//! | `harness_turns_throttled_waiting` | gauge | | turns waiting in line for the limit now |
//! | `harness_turns_throttled_total` | counter | | turns that found the limit reached and waited (each emitted `turn_throttled`) |
//! | `harness_turn_throttle_wait_seconds` | histogram | | how long those turns waited |
//! | `harness_turn_concurrency_decreases_total` | counter | | times the limit was lowered (at most one per `rate_limit.cooldown`) |
//! | `harness_backpressure_signals_total` | counter | `signal`: `upstream`, `api_retry`, `rate_limit_rejected`, `api_error` | 429/529 answers the model gateway had from upstream; the CLI's 429/529 retries, rejected `rate_limit_event`s and turns ended by a 429/529; each counted even inside the cooldown |
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

use prometheus_client::registry::Registry;

/// Declares one part's series once. Each line is a field, how it is built (`Default` when no
/// `= …` is given) and, for a series, `=> "name", "help"`: the name after the `harness_` prefix
/// (a counter renders with `_total`) and its `# HELP` text (the encoder adds the final period).
/// A line without `=>` is a plain field that is not rendered:
///
/// ```text
/// hits: Counter => "pool_hits", "Turns and prewarms that found the thread's warm process";
/// evictions: Family<CauseLabel, Counter> = evictions_at_zero() => "pool_evictions", "…";
/// slot_wait_micros: Arc<AtomicU64>;
/// ```
///
/// Generates the struct, its `Default` and `register`, which registers the series in the order
/// listed: the order `/metrics` renders them in.
macro_rules! series {
    (@init) => { Default::default() };
    (@init $init:expr) => { $init };
    (
        $(#[$doc:meta])*
        pub struct $part:ident {
            $(
                $(#[$field_doc:meta])*
                $field:ident: $type:ty $(= $init:expr)? $(=> $name:literal, $help:literal)?;
            )*
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $part {
            $($(#[$field_doc])* $field: $type,)*
        }

        impl Default for $part {
            fn default() -> Self {
                $part { $($field: series!(@init $($init)?),)* }
            }
        }

        impl $part {
            pub(super) fn register(&self, registry: &mut prometheus_client::registry::Registry) {
                $($(registry.register($name, $help, self.$field.clone());)?)*
            }
        }
    };
}

mod approvals;
mod gateway;
mod pool;
mod store;
mod tools;
mod turns;

pub use approvals::ApprovalMetrics;
pub use gateway::GatewayMetrics;
pub use pool::{EvictionCounts, PoolCounts, PoolMetrics, EVICTION_CAUSES};
pub use store::{QueryTimer, StoreMetrics};
pub use tools::{ToolMetrics, ToolOutcome};
pub use turns::{ThrottleMetrics, TurnMetrics};

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
        gateway: &GatewayMetrics,
    ) -> Metrics {
        let mut registry = Registry::with_prefix("harness");
        pool.register(&mut registry);
        approvals.register(&mut registry);
        turns.register(&mut registry);
        throttle.register(&mut registry);
        gateway.register(&mut registry);
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

/// A count as a gauge's value; a gauge is an `i64`.
fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
