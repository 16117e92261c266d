//! The MCP conformance suite against `/mcp`: every server scenario passes but those that need
//! the suite's reference fixtures (its `test_*` tools, resources, prompts, logging, completion),
//! listed with why in `tests/src/mcp/conformance-baseline.yml`. A regression fails, and so does
//! a listed scenario that starts to pass.

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::conformance;
use harness_tests::mock::MockApi;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_finds_no_failure_beyond_the_baseline() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let url = format!("{}/mcp", daemon.base);
    let ran = tokio::task::spawn_blocking(move || conformance(&url))
        .await
        .expect("the suite's task")
        .unwrap_or_else(|err| panic!("the conformance suite: {err:#}"));
    let summary = ran
        .output
        .split("=== SUMMARY ===")
        .nth(1)
        .unwrap_or(&ran.output);
    assert!(ran.held, "failures beyond the baseline:\n{summary}");
    assert!(
        summary.contains("server-initialize: 1 passed"),
        "the handshake scenario ran and passed:\n{summary}"
    );
    daemon.stop().await;
}
