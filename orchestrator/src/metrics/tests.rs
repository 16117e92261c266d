//! The series as `/metrics` renders them: one snapshot of all of them, the module doc's table
//! checked against it, and a test per part for its labels and values.

use std::collections::BTreeSet;
use std::time::Duration;

use expect_test::expect;

use super::*;

/// The text with each counter's and gauge's samples sorted (a family renders its label sets
/// in hash order; each histogram here has one label set, so its lines keep their order) and
/// the store timer's measured values masked.
fn normalized(text: &str) -> String {
    let mut out = Vec::new();
    let mut samples = Vec::new();
    let mut sort = false;
    for line in text.lines() {
        if line.starts_with('#') {
            if sort {
                samples.sort();
            }
            out.append(&mut samples);
            sort = line.starts_with("# TYPE") && !line.ends_with(" histogram");
            out.push(line.to_owned());
        } else if line.starts_with("harness_sqlite_query_duration_seconds_bucket")
            || line.starts_with("harness_sqlite_query_duration_seconds_sum")
        {
            let (series, _measured) = line.rsplit_once(' ').unwrap();
            samples.push(format!("{series} _"));
        } else {
            samples.push(line.to_owned());
        }
    }
    out.append(&mut samples);
    out.join("\n")
}

/// `/metrics` with a sample in every series, so each one renders with its labels and buckets (a
/// family with no sample renders nothing, not even its `# HELP`).
fn every_series() -> String {
    let (pool, tools, store, turns, approvals, throttle): (
        PoolMetrics,
        ToolMetrics,
        StoreMetrics,
        TurnMetrics,
        ApprovalMetrics,
        ThrottleMetrics,
    ) = Default::default();
    pool.hit();
    pool.miss();
    pool.prewarm();
    pool.prewarm_skipped();
    pool.spawn();
    pool.resume_fallback();
    pool.transcript_restored();
    pool.model_switched();
    pool.spare_parked();
    pool.spare_parked();
    pool.spare_claimed();
    pool.spare_failed("no_answer");
    pool.startup_failed(&claude_cli::StartupFailure {
        reason: "config_file_invalid".into(),
        message: "Configuration error in /cfg/.claude.json".into(),
        file: Some("/cfg/.claude.json".into()),
    });
    pool.ready(Duration::from_millis(400));
    pool.slot_wait_started();
    pool.slot_wait_started();
    pool.slot_waited(Duration::from_millis(1500));
    pool.slot_wait_expired();
    pool.evicted("capacity");
    tools.request("tools/call");
    tools.http_request("tools/list");
    tools.output_schema_failure("time__current_time");
    tools.record(
        "time__current_time",
        ToolOutcome::InvalidInput,
        Duration::from_millis(2),
    );
    drop(store.time("get_thread"));
    turns.finished(true, "done", Duration::from_millis(30));
    turns.usage(&[("input", 120)], 0.25);
    turns.refused("daily");
    approvals.decided("deny", "policy");
    approvals.set_pending(1);
    throttle.set_limit(4);
    throttle.decreased(2);
    throttle.set_running(3);
    throttle.throttled(1);
    throttle.waited(Duration::from_millis(300));
    throttle.signal("api_retry");
    throttle.api_retry(Some(529));
    throttle.rate_limit_event("rejected");
    throttle.api_error(529);
    let gateway = GatewayMetrics::default();
    gateway.request(200, Duration::from_millis(80));
    gateway.usage(&[("input", 120), ("output", 7)], 0.002);
    gateway.refused("thread");
    Metrics::new(
        &pool, &tools, &store, &turns, &approvals, &throttle, &gateway,
    )
    .render()
    .unwrap()
}

/// Dashboards depend on these names, types, help texts, labels and buckets: a change here is a
/// change for them.
#[test]
fn every_series_renders_as_dashboards_expect() {
    expect![[r##"
        # HELP harness_pool_hits Turns and prewarms that found the thread's warm process.
        # TYPE harness_pool_hits counter
        harness_pool_hits_total 1
        # HELP harness_pool_misses Turns and prewarms that had to start a process.
        # TYPE harness_pool_misses counter
        harness_pool_misses_total 1
        # HELP harness_pool_prewarms Prewarm requests.
        # TYPE harness_pool_prewarms counter
        harness_pool_prewarms_total 1
        # HELP harness_pool_prewarms_skipped Prewarms that started nothing: every slot held a process used recently.
        # TYPE harness_pool_prewarms_skipped counter
        harness_pool_prewarms_skipped_total 1
        # HELP harness_pool_spawns claude processes started.
        # TYPE harness_pool_spawns counter
        harness_pool_spawns_total 1
        # HELP harness_pool_resume_fallbacks Spawns whose --resume failed and that started a fresh session instead.
        # TYPE harness_pool_resume_fallbacks counter
        harness_pool_resume_fallbacks_total 1
        # HELP harness_pool_transcript_restores Sessions written back from the stored transcript before a --resume.
        # TYPE harness_pool_transcript_restores counter
        harness_pool_transcript_restores_total 1
        # HELP harness_pool_model_switches Warm processes switched to another model in place (set_model).
        # TYPE harness_pool_model_switches counter
        harness_pool_model_switches_total 1
        # HELP harness_pool_spares_parked Spare processes started and waiting for a thread.
        # TYPE harness_pool_spares_parked gauge
        harness_pool_spares_parked 1
        # HELP harness_pool_spares_claimed New threads that took a parked spare as their process.
        # TYPE harness_pool_spares_claimed counter
        harness_pool_spares_claimed_total 1
        # HELP harness_pool_spare_failures Parked spares dropped when a new thread came to take them, by reason.
        # TYPE harness_pool_spare_failures counter
        harness_pool_spare_failures_total{reason="no_answer"} 1
        # HELP harness_cli_startup_failures claude processes that refused to start, by the CLI's startup_failure_reason and who can fix it (caller, operator, policy, transient).
        # TYPE harness_cli_startup_failures counter
        harness_cli_startup_failures_total{reason="config_file_invalid",class="operator"} 1
        # HELP harness_pool_evictions Processes let go by the pool, by cause (replaced = model change).
        # TYPE harness_pool_evictions counter
        harness_pool_evictions_total{cause="capacity"} 1
        harness_pool_evictions_total{cause="error"} 0
        harness_pool_evictions_total{cause="expired"} 0
        harness_pool_evictions_total{cause="lease_lost"} 0
        harness_pool_evictions_total{cause="memory"} 0
        harness_pool_evictions_total{cause="replaced"} 0
        harness_pool_evictions_total{cause="shutdown"} 0
        # HELP harness_pool_live_processes claude processes alive now.
        # TYPE harness_pool_live_processes gauge
        harness_pool_live_processes 1
        # HELP harness_pool_walled_processes claude processes alive now whose tree is walled in ([sandbox]); each one's walls and limits are in /api/pool.
        # TYPE harness_pool_walled_processes gauge
        harness_pool_walled_processes 0
        # HELP harness_wall_breaches Processes the walls stopped, by the limit their tree reached (memory, processes).
        # TYPE harness_wall_breaches counter
        harness_wall_breaches_total{limit="memory"} 0
        harness_wall_breaches_total{limit="processes"} 0
        # HELP harness_pool_pss_bytes PSS of the live claude processes together (smaps_rollup), as last sampled.
        # TYPE harness_pool_pss_bytes gauge
        harness_pool_pss_bytes 0
        # HELP harness_pool_private_bytes Private memory of the live claude processes together (smaps_rollup), as last sampled.
        # TYPE harness_pool_private_bytes gauge
        harness_pool_private_bytes 0
        # HELP harness_pool_memory_samples Rounds of reading the live processes' memory, off the request path (every 2 s, and when a process is ready).
        # TYPE harness_pool_memory_samples counter
        harness_pool_memory_samples_total 0
        # HELP harness_pool_live_peak Most claude processes alive at once since start (spares included).
        # TYPE harness_pool_live_peak gauge
        harness_pool_live_peak 1
        # HELP harness_pool_slot_waits Spawns that found every pool slot taken and waited for one.
        # TYPE harness_pool_slot_waits counter
        harness_pool_slot_waits_total 1
        # HELP harness_pool_slot_waiting Spawns waiting for a pool slot now.
        # TYPE harness_pool_slot_waiting gauge
        harness_pool_slot_waiting 1
        # HELP harness_pool_slot_wait_seconds How long spawns waited for a pool slot.
        # TYPE harness_pool_slot_wait_seconds histogram
        harness_pool_slot_wait_seconds_sum 1.5
        harness_pool_slot_wait_seconds_count 1
        harness_pool_slot_wait_seconds_bucket{le="0.01"} 0
        harness_pool_slot_wait_seconds_bucket{le="0.05"} 0
        harness_pool_slot_wait_seconds_bucket{le="0.1"} 0
        harness_pool_slot_wait_seconds_bucket{le="0.25"} 0
        harness_pool_slot_wait_seconds_bucket{le="0.5"} 0
        harness_pool_slot_wait_seconds_bucket{le="1.0"} 0
        harness_pool_slot_wait_seconds_bucket{le="2.0"} 1
        harness_pool_slot_wait_seconds_bucket{le="3.0"} 1
        harness_pool_slot_wait_seconds_bucket{le="5.0"} 1
        harness_pool_slot_wait_seconds_bucket{le="10.0"} 1
        harness_pool_slot_wait_seconds_bucket{le="30.0"} 1
        harness_pool_slot_wait_seconds_bucket{le="60.0"} 1
        harness_pool_slot_wait_seconds_bucket{le="+Inf"} 1
        # HELP harness_pool_slot_waits_expired Waits that reached pool.slot_wait and pushed out a process expected back soon.
        # TYPE harness_pool_slot_waits_expired counter
        harness_pool_slot_waits_expired_total 1
        # HELP harness_process_spawn_seconds Time from spawning a claude process to it being ready for a turn.
        # TYPE harness_process_spawn_seconds histogram
        harness_process_spawn_seconds_sum 0.4
        harness_process_spawn_seconds_count 1
        harness_process_spawn_seconds_bucket{le="0.1"} 0
        harness_process_spawn_seconds_bucket{le="0.2"} 0
        harness_process_spawn_seconds_bucket{le="0.3"} 0
        harness_process_spawn_seconds_bucket{le="0.4"} 1
        harness_process_spawn_seconds_bucket{le="0.5"} 1
        harness_process_spawn_seconds_bucket{le="0.6"} 1
        harness_process_spawn_seconds_bucket{le="0.8"} 1
        harness_process_spawn_seconds_bucket{le="1.0"} 1
        harness_process_spawn_seconds_bucket{le="1.5"} 1
        harness_process_spawn_seconds_bucket{le="2.0"} 1
        harness_process_spawn_seconds_bucket{le="3.0"} 1
        harness_process_spawn_seconds_bucket{le="5.0"} 1
        harness_process_spawn_seconds_bucket{le="10.0"} 1
        harness_process_spawn_seconds_bucket{le="30.0"} 1
        harness_process_spawn_seconds_bucket{le="+Inf"} 1
        # HELP harness_permission_decisions Tool permissions the CLI asked for, by decision (allow, deny) and by whom (rule, person, timeout, policy, interrupt).
        # TYPE harness_permission_decisions counter
        harness_permission_decisions_total{decision="deny",by="policy"} 1
        # HELP harness_permissions_pending Tool permissions waiting for a person.
        # TYPE harness_permissions_pending gauge
        harness_permissions_pending 1
        # HELP harness_tokens Tokens the turns used, by kind: input, output, cache_read, cache_write.
        # TYPE harness_tokens counter
        harness_tokens_total{kind="input"} 120
        # HELP harness_cost_usd What the turns cost in USD, as the CLI prices them.
        # TYPE harness_cost_usd counter
        harness_cost_usd_total 0.25
        # HELP harness_turns_refused Messages refused with 402 because a budget was spent, by budget: thread, daily.
        # TYPE harness_turns_refused counter
        harness_turns_refused_total{budget="daily"} 1
        # HELP harness_turn_duration_seconds Turn latency; start=warm: the process had served the thread before, cold: first turn on its process.
        # TYPE harness_turn_duration_seconds histogram
        harness_turn_duration_seconds_sum{start="warm"} 0.03
        harness_turn_duration_seconds_count{start="warm"} 1
        harness_turn_duration_seconds_bucket{le="0.01",start="warm"} 0
        harness_turn_duration_seconds_bucket{le="0.025",start="warm"} 0
        harness_turn_duration_seconds_bucket{le="0.05",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="0.1",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="0.25",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="0.5",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="0.75",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="1.0",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="2.5",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="5.0",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="10.0",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="30.0",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="60.0",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="120.0",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="300.0",start="warm"} 1
        harness_turn_duration_seconds_bucket{le="+Inf",start="warm"} 1
        # HELP harness_turns Finished turns by outcome.
        # TYPE harness_turns counter
        harness_turns_total{outcome="done"} 1
        # HELP harness_turn_concurrency_limit Turns allowed to run on the CLI at once now (adaptive: lowered when the API answers 429/529).
        # TYPE harness_turn_concurrency_limit gauge
        harness_turn_concurrency_limit 2
        # HELP harness_turns_running Turns holding a place under the concurrency limit now.
        # TYPE harness_turns_running gauge
        harness_turns_running 3
        # HELP harness_turns_throttled_waiting Turns waiting in line for the concurrency limit now.
        # TYPE harness_turns_throttled_waiting gauge
        harness_turns_throttled_waiting 1
        # HELP harness_turns_throttled Turns that found the concurrency limit reached and waited.
        # TYPE harness_turns_throttled counter
        harness_turns_throttled_total 1
        # HELP harness_turn_throttle_wait_seconds How long throttled turns waited for the concurrency limit.
        # TYPE harness_turn_throttle_wait_seconds histogram
        harness_turn_throttle_wait_seconds_sum 0.3
        harness_turn_throttle_wait_seconds_count 1
        harness_turn_throttle_wait_seconds_bucket{le="0.01"} 0
        harness_turn_throttle_wait_seconds_bucket{le="0.05"} 0
        harness_turn_throttle_wait_seconds_bucket{le="0.1"} 0
        harness_turn_throttle_wait_seconds_bucket{le="0.25"} 0
        harness_turn_throttle_wait_seconds_bucket{le="0.5"} 1
        harness_turn_throttle_wait_seconds_bucket{le="1.0"} 1
        harness_turn_throttle_wait_seconds_bucket{le="2.0"} 1
        harness_turn_throttle_wait_seconds_bucket{le="5.0"} 1
        harness_turn_throttle_wait_seconds_bucket{le="10.0"} 1
        harness_turn_throttle_wait_seconds_bucket{le="30.0"} 1
        harness_turn_throttle_wait_seconds_bucket{le="60.0"} 1
        harness_turn_throttle_wait_seconds_bucket{le="300.0"} 1
        harness_turn_throttle_wait_seconds_bucket{le="+Inf"} 1
        # HELP harness_turn_concurrency_decreases Times the concurrency limit was lowered.
        # TYPE harness_turn_concurrency_decreases counter
        harness_turn_concurrency_decreases_total 1
        # HELP harness_backpressure_signals 429/529 retries, rejected rate_limit_events and turns ended by a 429/529, by signal.
        # TYPE harness_backpressure_signals counter
        harness_backpressure_signals_total{signal="api_retry"} 1
        # HELP harness_api_retries api_retry lines from the CLI, by HTTP status.
        # TYPE harness_api_retries counter
        harness_api_retries_total{status="529"} 1
        # HELP harness_rate_limit_events rate_limit_event lines from the CLI, by status.
        # TYPE harness_rate_limit_events counter
        harness_rate_limit_events_total{status="rejected"} 1
        # HELP harness_turn_api_errors Turns whose result carried an API error status after the CLI's retries, by status.
        # TYPE harness_turn_api_errors counter
        harness_turn_api_errors_total{status="529"} 1
        # HELP harness_model_requests Model requests through the gateway, by the HTTP status it answered with.
        # TYPE harness_model_requests counter
        harness_model_requests_total{status="200"} 1
        # HELP harness_model_tokens Tokens of the model requests, metered by the gateway from the responses.
        # TYPE harness_model_tokens counter
        harness_model_tokens_total{kind="input"} 120
        harness_model_tokens_total{kind="output"} 7
        # HELP harness_model_cost_usd What the model requests cost in USD at the gateway's prices.
        # TYPE harness_model_cost_usd counter
        harness_model_cost_usd_total 0.002
        # HELP harness_model_requests_refused Model requests the gateway refused because a budget was spent.
        # TYPE harness_model_requests_refused counter
        harness_model_requests_refused_total{budget="thread"} 1
        # HELP harness_model_first_byte_seconds From a model request's arrival to the first byte of its response.
        # TYPE harness_model_first_byte_seconds histogram
        harness_model_first_byte_seconds_sum 0.08
        harness_model_first_byte_seconds_count 1
        harness_model_first_byte_seconds_bucket{le="0.005"} 0
        harness_model_first_byte_seconds_bucket{le="0.01"} 0
        harness_model_first_byte_seconds_bucket{le="0.025"} 0
        harness_model_first_byte_seconds_bucket{le="0.05"} 0
        harness_model_first_byte_seconds_bucket{le="0.1"} 1
        harness_model_first_byte_seconds_bucket{le="0.25"} 1
        harness_model_first_byte_seconds_bucket{le="0.5"} 1
        harness_model_first_byte_seconds_bucket{le="1.0"} 1
        harness_model_first_byte_seconds_bucket{le="2.5"} 1
        harness_model_first_byte_seconds_bucket{le="5.0"} 1
        harness_model_first_byte_seconds_bucket{le="10.0"} 1
        harness_model_first_byte_seconds_bucket{le="30.0"} 1
        harness_model_first_byte_seconds_bucket{le="+Inf"} 1
        # HELP harness_mcp_requests MCP requests from the CLI processes over the control channel, by method.
        # TYPE harness_mcp_requests counter
        harness_mcp_requests_total{method="tools/call"} 1
        # HELP harness_tool_calls Tool calls by tool and outcome.
        # TYPE harness_tool_calls counter
        harness_tool_calls_total{tool="time__current_time",outcome="invalid_input"} 1
        # HELP harness_tool_call_duration_seconds Tool call latency, from validation to result.
        # TYPE harness_tool_call_duration_seconds histogram
        harness_tool_call_duration_seconds_sum{tool="time__current_time"} 0.002
        harness_tool_call_duration_seconds_count{tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="0.0005",tool="time__current_time"} 0
        harness_tool_call_duration_seconds_bucket{le="0.001",tool="time__current_time"} 0
        harness_tool_call_duration_seconds_bucket{le="0.0025",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="0.005",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="0.01",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="0.025",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="0.05",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="0.1",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="0.25",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="0.5",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="1.0",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="2.5",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="5.0",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="10.0",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="30.0",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="120.0",tool="time__current_time"} 1
        harness_tool_call_duration_seconds_bucket{le="+Inf",tool="time__current_time"} 1
        # HELP harness_tool_schema_failures Tool inputs rejected by the tool's input schema.
        # TYPE harness_tool_schema_failures counter
        harness_tool_schema_failures_total{tool="time__current_time"} 1
        # HELP harness_tool_output_schema_failures Structured tool results that failed the tool's own output schema.
        # TYPE harness_tool_output_schema_failures counter
        harness_tool_output_schema_failures_total{tool="time__current_time"} 1
        # HELP harness_mcp_http_requests Requests to the MCP endpoint /mcp from outside clients, by method.
        # TYPE harness_mcp_http_requests counter
        harness_mcp_http_requests_total{method="tools/list"} 1
        # HELP harness_mcp_event_subscriptions Webhook subscriptions (MCP Events, events/subscribe) live now.
        # TYPE harness_mcp_event_subscriptions gauge
        harness_mcp_event_subscriptions 0
        # HELP harness_mcp_event_subscriptions_expired Webhook subscriptions (MCP Events) that expired, not refreshed within their TTL.
        # TYPE harness_mcp_event_subscriptions_expired counter
        harness_mcp_event_subscriptions_expired_total 0
        # HELP harness_sqlite_query_duration_seconds Latency of store calls, by store method.
        # TYPE harness_sqlite_query_duration_seconds histogram
        harness_sqlite_query_duration_seconds_sum{query="get_thread"} _
        harness_sqlite_query_duration_seconds_count{query="get_thread"} 1
        harness_sqlite_query_duration_seconds_bucket{le="0.0001",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.00025",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.0005",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.001",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.0025",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.005",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.01",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.025",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.05",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.1",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="0.25",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="1.0",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="5.0",query="get_thread"} _
        harness_sqlite_query_duration_seconds_bucket{le="+Inf",query="get_thread"} _
        # EOF"##]].assert_eq(&normalized(&every_series()));
}

/// The module doc's table is the reference of the series: it lists each one `/metrics` renders,
/// with its type, and no other.
#[test]
fn the_doc_table_lists_every_series() {
    let rendered: BTreeSet<(String, String)> = every_series()
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|line| {
            let (name, kind) = line.split_once(' ').unwrap();
            let name = match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_owned(),
            };
            (name, kind.to_owned())
        })
        .collect();
    let documented: BTreeSet<(String, String)> = include_str!("mod.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .filter(|row| row.starts_with("harness_"))
        .map(|row| {
            let mut cells = row.split(" | ");
            let name = cells.next().unwrap().trim_end_matches('`');
            (name.to_owned(), cells.next().unwrap().to_owned())
        })
        .collect();
    assert_eq!(documented, rendered);
}

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
        &Default::default(),
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
        &Default::default(),
    )
    .render()
    .unwrap();
    assert!(
        text.contains(r#"harness_permission_decisions_total{decision="deny",by="policy"} 2"#),
        "{text}"
    );
    assert!(text.contains(r#"harness_permission_decisions_total{decision="allow",by="person"} 1"#));
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
    let text = Metrics::new(
        &pool,
        &tools,
        &store,
        &turns,
        &approvals,
        &throttle,
        &Default::default(),
    )
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
