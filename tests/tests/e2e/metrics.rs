//! What an operator sees: `/metrics` moves as turns, prewarms, failures and tool calls happen, and
//! `/api/pool` shows each live process.

use std::time::Duration;

use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::{eventually, eventually_async, process_exists};

/// The `/metrics` body, after checking its content type.
pub async fn scrape(daemon: &TestDaemon) -> String {
    let response = reqwest::get(format!("{}/metrics", daemon.base))
        .await
        .expect("GET /metrics reaches the daemon");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("ascii content type")
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    response.text().await.expect("a text body")
}

/// The value of one series, e.g. `harness_pool_hits_total` or
/// `harness_turns_total{outcome="done"}`; `None` when the series is absent.
pub(crate) fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?.strip_prefix(' ')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Like [`value`], but a missing series is a test failure that shows the whole body.
#[track_caller]
fn must(text: &str, series: &str) -> f64 {
    value(text, series).unwrap_or_else(|| panic!("no series {series} in\n{text}"))
}

/// Reading `/api/pool` and `/metrics` reads no process's memory (#46): on `main` each read
/// opened every live process's `/proc` files on the request path, and under a load of
/// `/api/pool` reads an unrelated `/healthz` took 603 ms at the median. Now the memory is read
/// in rounds off the request path: a hundred reads of each, sent at once, make no more rounds
/// than the time they took allows (one every 2 s, and one as the process became ready), and
/// every one of them shows the process's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_the_pool_read_no_process_memory() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "a process to read").await;
    let rounds = |text: &str| must(text, "harness_pool_memory_samples_total");
    let before = rounds(&scrape(&daemon).await);
    let started = std::time::Instant::now();
    let reads = (0..100).map(|_| async {
        let (_, pool) = daemon.get("/api/pool").await;
        let text = scrape(&daemon).await;
        (pool, text)
    });
    let answers = futures::future::join_all(reads).await;
    let elapsed = started.elapsed();
    for (pool, text) in &answers {
        assert!(
            pool["processes"][0]["privateBytes"].as_f64() > Some(0.0),
            "{pool}"
        );
        assert!(must(text, "harness_pool_private_bytes") > 0.0);
    }
    let after = rounds(&scrape(&daemon).await);
    let allowed = (elapsed.as_secs_f64() / 2.0).ceil() + 1.0;
    assert!(
        after - before <= allowed,
        "200 reads in {elapsed:?} made {} rounds of memory reads",
        after - before
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_turns_on_one_thread_are_one_miss_then_one_hit() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let before = scrape(&daemon).await;
    assert_eq!(must(&before, "harness_pool_misses_total"), 0.0);
    assert_eq!(must(&before, "harness_pool_live_processes"), 0.0);

    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "first").await;
    daemon.reply(&thread, "second").await;

    let text = scrape(&daemon).await;
    assert_eq!(must(&text, "harness_pool_misses_total"), 1.0);
    assert_eq!(must(&text, "harness_pool_hits_total"), 1.0);
    assert_eq!(must(&text, "harness_pool_spawns_total"), 1.0);
    assert_eq!(must(&text, "harness_pool_live_processes"), 1.0);
    // The one warm process's memory, as `/api/pool` reads it too.
    let private = must(&text, "harness_pool_private_bytes");
    let pss = must(&text, "harness_pool_pss_bytes");
    let (_, pool) = daemon.get("/api/pool").await;
    let shown = pool["processes"][0]["privateBytes"]
        .as_f64()
        .expect("privateBytes");
    assert!(
        private > 10e6 && pss >= private,
        "private {private}, pss {pss}"
    );
    assert!(
        (private - shown).abs() < private / 2.0,
        "/metrics {private} and /api/pool {shown} read the same process"
    );
    assert_eq!(
        must(&before, "harness_pool_private_bytes"),
        0.0,
        "no process, no memory"
    );
    assert_eq!(must(&text, "harness_process_spawn_seconds_count"), 1.0);
    assert_eq!(must(&text, r#"harness_turns_total{outcome="done"}"#), 2.0);
    assert_eq!(
        must(
            &text,
            r#"harness_turn_duration_seconds_count{start="cold"}"#
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            r#"harness_turn_duration_seconds_count{start="warm"}"#
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            r#"harness_sqlite_query_duration_seconds_count{query="end_turn"}"#
        ),
        2.0
    );
    assert!(text.ends_with("# EOF\n"));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_then_a_turn_is_one_prewarm_and_one_hit() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let (status, body) = daemon
        .post("/api/prewarm", json!({"threadId": thread}))
        .await;
    assert_eq!(status, 202, "{body}");
    eventually_async(
        Duration::from_secs(30),
        "the prewarmed process counts as live",
        || async { value(&scrape(&daemon).await, "harness_pool_live_processes") == Some(1.0) },
    )
    .await
    .unwrap();
    daemon.reply(&thread, "after prewarm").await;

    let text = scrape(&daemon).await;
    assert_eq!(must(&text, "harness_pool_prewarms_total"), 1.0);
    assert_eq!(must(&text, "harness_pool_hits_total"), 1.0);
    assert_eq!(
        must(&text, "harness_pool_misses_total"),
        1.0,
        "the prewarm's spawn"
    );
    // The first turn on a prewarmed process is a hit but not `warm` (SessionStart::Warm means the
    // process served the thread before): it still pays the CLI's first-turn cost.
    assert_eq!(
        must(
            &text,
            r#"harness_turn_duration_seconds_count{start="cold"}"#
        ),
        1.0
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_is_an_eviction_with_cause_error() {
    let mock = MockApi::start().await;
    mock.when_prompt_contains("make it fail", Reply::error(400));
    let daemon = TestDaemon::start(&mock, |c| c.claude.max_retries = 0).await;
    let thread = daemon.create_thread().await;
    let (status, body) = daemon.send(&thread, "make it fail").await;
    assert_ne!(status, 200, "{body}");

    eventually_async(
        Duration::from_secs(20),
        "an eviction with cause error",
        || async {
            value(
                &scrape(&daemon).await,
                r#"harness_pool_evictions_total{cause="error"}"#,
            ) == Some(1.0)
        },
    )
    .await
    .unwrap();
    let text = scrape(&daemon).await;
    assert_eq!(must(&text, r#"harness_turns_total{outcome="error"}"#), 1.0);
    assert_eq!(value(&text, r#"harness_turns_total{outcome="done"}"#), None);
    for cause in ["expired", "capacity", "replaced", "shutdown"] {
        assert_eq!(
            must(
                &text,
                &format!(r#"harness_pool_evictions_total{{cause="{cause}"}}"#)
            ),
            0.0
        );
    }
    eventually(
        Duration::from_secs(20),
        "the failed process is reaped",
        || daemon.live_pids().is_empty(),
    )
    .await
    .unwrap();
    assert_eq!(
        must(&scrape(&daemon).await, "harness_pool_live_processes"),
        0.0
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_status_lists_the_live_process_with_its_pid_and_rss() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "one").await;
    daemon.reply(&thread, "two").await;

    let (status, pool) = daemon.get("/api/pool").await;
    assert_eq!(status, 200, "{pool}");
    let processes = pool["processes"].as_array().expect("a process list");
    assert_eq!(processes.len(), 1, "{pool}");
    let process = &processes[0];
    assert_eq!(process["threadId"], thread.as_str());
    let pid = process["pid"].as_u64().expect("a pid") as u32;
    assert!(process_exists(pid), "pid {pid} is a live process");
    assert_eq!(Some(pid), daemon.pid_of(&thread));
    assert!(
        process["rssBytes"]
            .as_u64()
            .is_some_and(|b| b > 1024 * 1024),
        "{process}"
    );
    // What is its own, and its share of what it shares, are within what is resident.
    let (rss, pss, private) = (
        process["rssBytes"].as_u64().unwrap_or_default(),
        process["pssBytes"].as_u64().expect("pssBytes"),
        process["privateBytes"].as_u64().expect("privateBytes"),
    );
    assert!(
        private > 1024 * 1024 && private <= pss && pss <= rss,
        "{process}"
    );
    assert_eq!(process["turnsServed"], 2, "{process}");
    assert!(process["model"].is_null(), "the CLI's default: {process}");
    let (age, idle) = (
        process["ageMs"].as_u64().expect("ageMs"),
        process["idleMs"].as_u64().expect("idleMs"),
    );
    assert!(idle <= age, "{process}");
    assert_eq!(pool["live"], 1);
    assert_eq!(pool["stats"]["hits"], 1);
    assert_eq!(pool["stats"]["misses"], 1);
    daemon.stop().await;
    assert!(!process_exists(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_and_schema_failures_are_counted_by_tool() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let call = "/api/tools/time__current_time/call";

    let (status, ok) = daemon.post(call, json!({"input": {}})).await;
    assert_eq!(status, 200, "{ok}");
    assert!(ok["isError"].is_null(), "{ok}");
    let (status, rejected) = daemon.post(call, json!({"input": {"timezone": 5}})).await;
    assert_eq!(status, 200, "{rejected}");
    assert_eq!(rejected["isError"], true, "{rejected}");

    let text = scrape(&daemon).await;
    let ok_calls = r#"harness_tool_calls_total{tool="time__current_time",outcome="ok"}"#;
    assert_eq!(must(&text, ok_calls), 1.0);
    assert_eq!(
        must(
            &text,
            r#"harness_tool_calls_total{tool="time__current_time",outcome="invalid_input"}"#
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            r#"harness_tool_schema_failures_total{tool="time__current_time"}"#
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            r#"harness_tool_call_duration_seconds_count{tool="time__current_time"}"#
        ),
        2.0
    );

    // The model's calls go through the same counters.
    mock.once_when_prompt_contains(
        "what time is it",
        Reply::tool_use("mcp__harness__time__current_time", json!({})),
    );
    let thread = daemon.create_thread().await;
    let reply = daemon.reply(&thread, "what time is it").await;
    assert!(reply.starts_with("tool said:"), "{reply}");
    assert_eq!(must(&scrape(&daemon).await, ok_calls), 2.0);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_takes_our_mcp_manifest_so_no_handshake_precedes_a_first_turn() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    mock.once_when_prompt_contains(
        "first turn with a tool",
        Reply::tool_use("mcp__harness__time__current_time", json!({})),
    );
    let reply = daemon.reply(&thread, "first turn with a tool").await;
    assert!(
        reply.starts_with("tool said:"),
        "the tool still works: {reply}"
    );
    let first = mock.message_requests().first().cloned().expect("a request");
    assert!(
        first
            .tool_names()
            .iter()
            .any(|t| t == "mcp__harness__time__current_time"),
        "the model was offered our tools: {:?}",
        first.tool_names()
    );
    let text = scrape(&daemon).await;
    let calls = r#"harness_mcp_requests_total{method="tools/call"}"#;
    assert_eq!(
        must(&text, calls),
        1.0,
        "tool calls still go over the channel"
    );
    for handshake in ["initialize", "tools/list"] {
        let series = format!(r#"harness_mcp_requests_total{{method="{handshake}"}}"#);
        assert_eq!(
            value(&text, &series),
            None,
            "the CLI asked {handshake} over the control channel:\n{text}"
        );
    }
    daemon.stop().await;
}

/// A warm turn reads its thread's row once, as its message is accepted, and uses that row to the
/// end (read again only when another turn ran first): before `TurnPlan`, the turn read it again
/// as it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_turn_reads_its_thread_row_once() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "first").await;
    let reads = |text: &str| {
        let series = r#"harness_sqlite_query_duration_seconds_count{query="get_thread"}"#;
        value(text, series).unwrap_or(0.0)
    };
    let before = reads(&scrape(&daemon).await);
    daemon.reply(&thread, "second").await;
    let after = reads(&scrape(&daemon).await);
    assert_eq!(
        after - before,
        1.0,
        "reads of the thread row in a warm turn"
    );
    daemon.stop().await;
}
