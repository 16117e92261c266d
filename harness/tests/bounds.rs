//! Bounded under abuse, on the real binary: what one request may cost the daemon.
//!
//! An `outputSchema` of nested `not`/`allOf`/`items` under 1 KB made the daemon's meta-schema
//! check (`jsonschema` 0.30) grow a cache by hundreds of MB per new depth, never given back
//! (45 MB → 3.77 GB after 9 requests). Twenty distinct such schemas must now cost it less than
//! 50 MB in all.

mod support;

use serde_json::{json, Value};
use tempfile::TempDir;

use harness_tests::mock::MockApi;
use support::{Harness, Launch};

/// `VmRSS` of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    line.split_whitespace()
        .nth(1)
        .and_then(|kib| kib.parse().ok())
        .expect("a number of KiB")
}

/// A schema with a string nested `depth` levels deep in `not`, `allOf` and `items`, in the
/// order `turn` picks: distinct shapes for distinct `(depth, turn)`.
fn nested(depth: usize, turn: usize) -> Value {
    let mut schema = json!({"type": "string"});
    for level in 0..depth {
        schema = match (level + turn) % 3 {
            0 => json!({ "not": schema }),
            1 => json!({ "allOf": [schema] }),
            _ => json!({ "items": schema }),
        };
    }
    json!({"type": "object", "properties": {"a": schema}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_output_schemas_cost_the_daemon_no_more_than_their_size() {
    let dir = TempDir::new().expect("a temporary folder");
    let mock = MockApi::start().await;
    let daemon = Harness::start(dir.path(), &mock, &Launch::with_grace(5)).await;
    // One schema first, so what any first check builds once is counted before.
    let (status, _) = daemon
        .client
        .post("/api/threads", json!({"outputSchema": nested(2, 0)}))
        .await;
    assert_eq!(status, 201);
    let before = rss_kib(daemon.pid());
    for (depth, turn) in (12..32).zip(0..) {
        let schema = nested(depth, turn);
        assert!(schema.to_string().len() < 1024, "each under 1 KB");
        let (status, thread) = daemon
            .client
            .post("/api/threads", json!({"outputSchema": schema}))
            .await;
        assert_eq!(status, 201, "{thread}");
    }
    for (depth, turn) in (40..60).zip(0..) {
        let (status, refused) = daemon
            .client
            .post("/api/threads", json!({"outputSchema": nested(depth, turn)}))
            .await;
        assert_eq!(status, 422, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("levels deep; at most 32"), "{message}");
    }
    let grown_mib = rss_kib(daemon.pid()).saturating_sub(before) / 1024;
    assert!(
        grown_mib < 50,
        "40 schemas under 1 KB grew the daemon by {grown_mib} MiB"
    );
    daemon.stop().await;
}
