//! The audit log (#28): every change asked of `/api` (and `/mcp`'s `threads__create` and
//! `threads__send`) is written once answered, with who, what, which thread, the status and from
//! where; reads are not; a request a peer forwarded is left
//! to the node that received it; `GET /api/audit` pages newest first.

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::McpHttp;
use harness_tests::mock::MockApi;
use orchestrator::cluster::FORWARDED_HEADER;

async fn entries(daemon: &TestDaemon, query: &str) -> Vec<Value> {
    let (status, body) = daemon.get(&format!("/api/audit{query}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["entries"].as_array().cloned().unwrap_or_default()
}

/// Each entry's action, status and thread: what the tests compare.
pub(crate) fn summary(entries: &[Value]) -> Vec<(String, i64, Value)> {
    entries
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or_default().to_owned(),
                e["status"].as_i64().unwrap_or_default(),
                e["threadId"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_is_written_with_who_what_and_from_where_and_reads_are_not() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    assert_eq!(daemon.reply(&thread, "hello").await, "echo: hello");
    let (status, _) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = daemon
        .post("/api/threads/thr_nope/messages", json!({"content": "x"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A request a peer forwarded: the peer wrote its entry.
    let forwarded = reqwest::Client::new()
        .post(format!("{}/api/threads/{thread}/interrupt", daemon.base))
        .header(FORWARDED_HEADER, "node_peer")
        .send()
        .await
        .unwrap();
    assert_eq!(forwarded.status(), StatusCode::OK);

    let all = entries(&daemon, "").await;
    let summary = summary(&all);
    assert_eq!(
        summary,
        [
            (
                "POST /api/threads/{id}/messages".into(),
                404,
                json!("thr_nope")
            ),
            ("POST /api/threads/{id}/messages".into(), 200, json!(thread)),
            ("POST /api/threads".into(), 201, Value::Null),
        ],
        "{all:#?}"
    );
    for entry in &all {
        assert_eq!(entry["subject"], "operator", "{entry}");
        assert!(
            entry["remote"]
                .as_str()
                .is_some_and(|r| r.starts_with("127.0.0.1:")),
            "{entry}"
        );
    }
    assert_eq!(all[1]["path"], format!("/api/threads/{thread}/messages"));

    let first = all[0]["id"].as_i64().expect("an id");
    let page = entries(&daemon, &format!("?limit=1&before={first}")).await;
    assert_eq!(page.len(), 1);
    assert_eq!(page[0]["id"], all[1]["id"]);
    let (status, _) = daemon.get("/api/audit?limit=0").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // `/mcp`'s calls that change something are written too; its reads are not.
    let mcp = McpHttp::new(&daemon.base, None);
    let created = mcp.call_tool(1, "threads__create", json!({})).await;
    let made = created.result()["structuredContent"]["threadId"]
        .as_str()
        .expect("a thread")
        .to_owned();
    let sent = mcp
        .call_tool(
            2,
            "threads__send",
            json!({"threadId": made, "content": "hi"}),
        )
        .await;
    assert_eq!(sent.result()["structuredContent"]["status"], "done");
    let listed = mcp.call_tool(3, "threads__list", json!({})).await;
    assert_eq!(listed.result().get("isError"), None);
    let newest: Vec<(Value, Value, Value)> = entries(&daemon, "?limit=2")
        .await
        .iter()
        .map(|e| {
            (
                e["action"].clone(),
                e["threadId"].clone(),
                e["path"].clone(),
            )
        })
        .collect();
    assert_eq!(
        newest,
        [
            (json!("mcp threads__send"), json!(made), json!("/mcp")),
            (json!("mcp threads__create"), json!(made), json!("/mcp")),
        ]
    );
}
