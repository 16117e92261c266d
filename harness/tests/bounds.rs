//! Bounded under abuse, on the real binary: what one request may cost the daemon, and what
//! held connections may take from it.
//!
//! An `outputSchema` of nested `not`/`allOf`/`items` under 1 KB made the daemon's meta-schema
//! check (`jsonschema` 0.30) grow a cache by hundreds of MB per new depth, never given back
//! (45 MB → 3.77 GB after 9 requests). Twenty distinct such schemas must now cost it less than
//! 50 MB in all.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;

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

/// A schema under 1 KB, distinct for distinct `(depth, turn)`.
fn nested(depth: usize, turn: usize) -> Value {
    harness_tests::util::nested_schema(depth, turn, "a")
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

/// Under a limit of 256 open files, 300 half-sent request heads once gave 297 `Accept failed`
/// warnings and 28 s in which nobody was answered, and 1,024 held event streams shut out every
/// request. Now streams past `http.max_streams` get 503, half-sent heads make room for newer
/// connections, and `/healthz` and a warm turn answer throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_streams_and_half_sent_heads_do_not_shut_the_door() {
    let dir = TempDir::new().expect("a temporary folder");
    let mock = MockApi::start().await;
    let launch = Launch {
        open_files: Some(256),
        config: "[http]\nmax_streams = 20\n",
        ..Launch::with_grace(5)
    };
    let daemon = Harness::start(dir.path(), &mock, &launch).await;
    let log = daemon.log_text();
    assert!(log.contains("http.max_connections lowered"), "{log}");
    let (_, thread) = daemon.client.post("/api/threads", json!({})).await;
    let thread = thread["id"].as_str().expect("an id").to_owned();
    let turn = |text: &'static str| {
        let (daemon, thread) = (&daemon, &thread);
        async move {
            let path = format!("/api/threads/{thread}/messages");
            let (status, reply) = daemon.client.post(&path, json!({"content": text})).await;
            assert_eq!(status, 200, "{reply}");
        }
    };
    turn("warm up").await;

    // Forty event streams: twenty are served and held, twenty refused.
    let http = reqwest::Client::new();
    let url = format!("{}/api/threads/{thread}/events", daemon.client.base());
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..40 {
        let response = http.get(&url).send().await.expect("the daemon answers");
        match response.status().as_u16() {
            200 => held.push(response),
            503 => {
                let body: Value = response.json().await.expect("a JSON body");
                assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
                refused += 1;
            }
            other => panic!("a stream got {other}"),
        }
    }
    assert_eq!((held.len(), refused), (20, 20));

    // Three hundred request heads, half-sent and held.
    let addr = daemon
        .client
        .base()
        .trim_start_matches("http://")
        .to_owned();
    let mut heads = Vec::new();
    for _ in 0..300 {
        let mut socket = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("a connection");
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .expect("half a head");
        heads.push(socket);
    }
    let healthz = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("a client")
        .get(format!("{}/healthz", daemon.client.base()))
        .send()
        .await;
    assert_eq!(
        healthz.map(|r| r.status().as_u16()).ok(),
        Some(200),
        "{}",
        daemon.log_text()
    );
    turn("still here").await;
    drop((held, heads));
    daemon.stop().await;
}

/// At the default level an `/mcp` request once wrote three lines (rmcp's own at info); now it
/// writes one, and a flood of refused streams writes no ERROR line per answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_request_is_one_log_line_and_refusals_no_errors() {
    let dir = TempDir::new().expect("a temporary folder");
    let mock = MockApi::start().await;
    let launch = Launch {
        // The daemon's own default level.
        env: &[("RUST_LOG", "")],
        config: "[http]\nmax_streams = 1\n",
        ..Launch::with_grace(5)
    };
    let daemon = Harness::start(dir.path(), &mock, &launch).await;
    let before = daemon.log_text().lines().count();
    let http = reqwest::Client::new();
    let mcp = format!("{}/mcp", daemon.client.base());
    for (id, method) in [(1, "ping"), (2, "tools/list")] {
        let answer = http
            .post(&mcp)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method}))
            .send()
            .await
            .expect("an answer");
        assert_eq!(answer.status(), 200);
    }
    let (_, thread) = daemon.client.post("/api/threads", json!({})).await;
    let url = format!(
        "{}/api/threads/{}/events",
        daemon.client.base(),
        thread["id"].as_str().expect("an id")
    );
    let held = http.get(&url).send().await.expect("a stream");
    for _ in 0..20 {
        let refused = http.get(&url).send().await.expect("an answer");
        assert_eq!(refused.status(), 503);
    }
    let log = daemon.log_text();
    let new: Vec<&str> = log.lines().skip(before).collect();
    let mcp_lines: Vec<&&str> = new.iter().filter(|l| l.contains("MCP request.")).collect();
    assert_eq!(mcp_lines.len(), 2, "{}", new.join("\n"));
    assert!(
        !new.iter().any(|l| l.contains("rmcp")),
        "{}",
        new.join("\n")
    );
    assert!(
        !new.iter().any(|l| l.contains("\"ERROR\"")),
        "{}",
        new.join("\n")
    );
    drop(held);
    daemon.stop().await;
}
