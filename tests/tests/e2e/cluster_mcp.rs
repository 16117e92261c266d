//! Clustering and the threads that do not come through `POST /api/threads/{id}/messages`: a
//! `threads__send` over `/mcp` reaching a node that does not own the thread runs on the owner
//! (its warm process, its lease), with progress and a cancel crossing the nodes; a thread
//! created over MCP, and a delegated child thread, belong to the node that made them. Every
//! write of a node checks the thread's lease, so none of this works on a node without it.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::mcp::McpHttp;
use harness_tests::mock::{MockApi, Reply};

use crate::cluster::{lease, node_id, two_nodes};

/// Long enough that no lease expires during a test.
const TTL: Duration = Duration::from_secs(15);

/// A `tools/call` with a progress token; the answer holds the progress, then the result.
fn call(id: u64, name: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": {"progressToken": format!("p-{id}")}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_send_through_another_node_runs_on_the_owners_warm_process() {
    let mock = MockApi::start().await;
    let (a, b) = two_nodes(&mock, TTL).await;
    let thread = a.create_thread().await;
    assert_eq!(a.reply(&thread, "first").await, "echo: first");
    let pid = a.pid_of(&thread).expect("A's process");

    let mcp = McpHttp::new(&b.base, None);
    let send = json!({"threadId": thread, "content": "over mcp via B", "clientMessageId": "m-1"});
    let answer = mcp.post(call(7, "threads__send", send.clone())).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let result = answer.result();
    assert_eq!(result.get("isError"), None, "{result}");
    let sent = &result["structuredContent"];
    assert_eq!(sent["status"], "done", "{sent}");
    assert_eq!(sent["reply"], "echo: over mcp via B");
    assert_eq!(sent["threadId"], thread.as_str());
    assert_eq!(sent["duplicate"], false);
    // The owner's events reached B's caller as progress.
    let progress: Vec<&Value> = answer
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(
        progress
            .iter()
            .any(|p| p["params"]["message"] == "turn_started"),
        "{answer:?}"
    );
    // Served by A's warm process; B started none.
    assert_eq!(b.spawns(), 0);
    assert_eq!((a.spawns(), a.pid_of(&thread)), (1, Some(pid)));
    assert_eq!(lease(&a, &thread).await, (node_id(&a), 1));

    // The same clientMessageId through B: the first outcome, no second turn.
    let requests = mock.message_requests().len();
    let again = mcp.call_tool(8, "threads__send", send).await;
    let again = &again.result()["structuredContent"];
    assert_eq!(
        (&again["messageId"], &again["reply"], &again["duplicate"]),
        (&sent["messageId"], &sent["reply"], &json!(true))
    );
    assert_eq!(mock.message_requests().len(), requests);

    // A thread created over MCP on B is B's.
    let created = mcp.call_tool(9, "threads__create", json!({})).await;
    let created = created.result()["structuredContent"]["threadId"]
        .as_str()
        .expect("threadId")
        .to_owned();
    assert_eq!(lease(&b, &created).await, (node_id(&b), 1));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_another_node_interrupts_the_owners_turn() {
    let mock = MockApi::start().await;
    let (a, b) = two_nodes(&mock, TTL).await;
    let thread = a.create_thread().await;
    mock.once_when_prompt_contains(
        "take your time",
        Reply::slow_text(["echo: ", "take ", "your time"], Duration::from_secs(60)),
    );
    let mcp = McpHttp::new(&b.base, None);
    let caller = mcp.clone();
    let arguments = json!({"threadId": thread, "content": "take your time"});
    let pending =
        tokio::spawn(async move { caller.post(call(42, "threads__send", arguments)).await });
    mock.wait_for_requests(1, Duration::from_secs(60))
        .await
        .expect("the turn reaches the model");
    let cancel = mcp
        .post(json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 42, "reason": "no longer needed"}
        }))
        .await;
    assert_eq!(cancel.status, StatusCode::ACCEPTED, "{cancel:?}");
    let answer = tokio::time::timeout(Duration::from_secs(30), pending)
        .await
        .expect("the cancelled call answers well before the slow reply ends")
        .expect("the call task");
    let ended = &answer.result()["structuredContent"];
    assert_eq!(ended["status"], "interrupted", "{answer:?}");
    // It ran, and was interrupted, on A.
    assert_eq!((a.spawns(), b.spawns()), (1, 0));
    let messages = crate::support::messages(&a, &thread).await;
    assert_eq!(messages[0]["status"], "interrupted", "{messages:?}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegated_child_thread_belongs_to_its_parents_node() {
    let mock = MockApi::start().await;
    let (a, b) = two_nodes(&mock, TTL).await;
    mock.once_when_prompt_contains(
        "please delegate",
        Reply::tool_use(
            "mcp__harness__delegation__delegate",
            json!({"prompt": "child task on A"}),
        ),
    );
    let parent = a.create_thread().await;
    // Sent through B: the parent's turn runs on A, and so does its child.
    assert_eq!(
        b.reply(&parent, "please delegate this").await,
        "tool said: echo: child task on A"
    );
    let (_, list) = a.get("/api/threads").await;
    let child = list["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["parentId"] == parent.as_str())
        .and_then(|t| t["id"].as_str())
        .expect("the child thread")
        .to_owned();
    assert_eq!(lease(&a, &child).await, (node_id(&a), 1));
    assert!(a.pid_of(&child).is_some(), "the child ran on A");
    assert_eq!((a.spawns(), b.spawns()), (2, 0));
    let messages = crate::support::messages(&b, &child).await;
    let contents: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(contents, ["child task on A", "echo: child task on A"]);
    a.stop().await;
    b.stop().await;
}
