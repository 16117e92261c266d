//! The A2A door against the real CLI, driven by the official A2A Python SDK (a2a-sdk 1.3.0) as an
//! agent framework drives it: the Agent Card, a blocking send, a stream, a task read back, an
//! input-required task (a Bash permission in approvals mode `ask`) answered `allow` (and another
//! `deny`), push
//! notifications to the script's own receiver (token and signature checked) and their config read
//! back, a cancel mid-turn that a subscription to the task sees,
//! and A2A's error codes; the sends in the audit log; all of it again over A2A v0.3's JSON-RPC
//! (the SDK's v0.3 transport). Then, with raw JSON-RPC: another tenant's key finds no such task,
//! and a key without `threads:write` is refused with 403.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use harness_tests::a2a::{python_or_skip, run_client};
use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use orchestrator::config::ApprovalMode;

use crate::tenants::{make_key, OPERATOR};

/// One JSON-RPC call to `/a2a` as `bearer`: (status, body).
async fn rpc(base: &str, bearer: &str, method: &str, params: Value) -> (StatusCode, Value) {
    let body = json!({"jsonrpc": "2.0", "id": "1", "method": method, "params": params});
    let (status, answer, _) =
        crate::support::call(base, Some(bearer), Method::POST, "/a2a", Some(body)).await;
    (status, answer)
}

#[tokio::test]
async fn the_python_sdk_sends_streams_answers_cancels_and_gets_pushes() {
    scenario(
        "the_python_sdk_sends_streams_answers_cancels_and_gets_pushes",
        "1.0",
    )
    .await;
}

/// The same over A2A v0.3's JSON-RPC (`message/send`, …): the SDK's v0.3 transport, chosen by
/// the card's v0.3 interface, and v0.3's pushes (the task).
#[tokio::test]
async fn the_same_over_a2a_v03() {
    scenario("the_same_over_a2a_v03", "0.3").await;
}

/// The whole flow with the SDK speaking `dialect` (`1.0` or `0.3`).
async fn scenario(test: &str, dialect: &str) {
    let Some(python) = python_or_skip(test).await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.once_when_prompt_contains(
        "please run the tool",
        Reply::tool_use(
            "Bash",
            json!({"command": "touch a2a-allowed", "description": "d"}),
        ),
    );
    mock.once_when_prompt_contains(
        "please run the other tool",
        Reply::tool_use(
            "Bash",
            json!({"command": "touch a2a-denied", "description": "d"}),
        ),
    );
    mock.when_prompt_contains(
        "take your time",
        Reply::slow_text(["slow ", "reply"], Duration::from_secs(30)),
    );
    let daemon = TestDaemon::start(&mock, |c| {
        c.auth_token = Some(OPERATOR.into());
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Ask;
        // The script's push receiver listens on 127.0.0.1.
        c.webhooks.allow_private_targets = true;
    })
    .await;
    let config = json!({
        "base": daemon.base,
        "token": OPERATOR,
        "pushTokens": ["first-push-token-0123", "second-push-token-456"],
        "dialect": dialect,
    });
    let report = run_client(python, config)
        .await
        .expect("the A2A client runs");
    eprintln!("{report:#}");
    assert_eq!(report["sdkVersion"], "1.3.0", "{report}");
    let (transport, push_kind) = match dialect {
        "0.3" => ("CompatJsonRpcTransport", "task"),
        _ => ("JsonRpcTransport", "statusUpdate"),
    };
    assert_eq!(report["transport"], transport, "{report}");
    assert_eq!(
        report["inputRequired"]["pushKinds"],
        json!([push_kind]),
        "{report}"
    );
    if dialect == "0.3" {
        let legacy = &report["cardV03"];
        assert_eq!(legacy["url"], format!("{}/a2a", daemon.base), "{legacy}");
        assert_eq!(legacy["version"], "0.3.0", "{legacy}");
    }

    let card = &report["card"];
    assert_eq!(card["url"], format!("{}/a2a", daemon.base), "{card}");
    assert_eq!(card["binding"], "JSONRPC");
    assert_eq!(
        (&card["streaming"], &card["push"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(card["schemes"], json!(["bearer"]));
    assert_eq!(
        card["anonymousSkills"],
        json!(["harness"]),
        "a generic card"
    );
    let skills = card["skills"].as_array().expect("skills");
    assert!(skills.contains(&json!("standard")), "each profile: {card}");
    assert!(skills.contains(&json!("lean")), "each profile: {card}");

    let send = &report["send"];
    assert_eq!(send["state"], "TASK_STATE_COMPLETED", "{send}");
    assert_eq!(send["reply"], "echo: hello over a2a", "{send}");
    let (task, context) = (
        send["taskId"].as_str().expect("task id"),
        send["contextId"].as_str().expect("context id"),
    );
    assert!(task.starts_with("msg_"), "a task is a turn: {task}");
    let path = format!("/api/threads/{context}");
    let (status, thread, _) =
        crate::support::call(&daemon.base, Some(OPERATOR), Method::GET, path, None).await;
    assert_eq!(status, StatusCode::OK, "a context is a thread: {thread}");
    assert_eq!(
        thread["messages"][0]["id"], task,
        "its first message is the task: {thread}"
    );

    let stream = &report["stream"];
    assert_eq!(stream["kinds"][0], "task", "{stream}");
    let states = stream["states"].as_array().expect("states");
    assert_eq!(
        states.last(),
        Some(&json!("TASK_STATE_COMPLETED")),
        "{stream}"
    );
    assert_eq!(
        stream["contextIds"],
        json!([context]),
        "the same thread: {stream}"
    );
    assert!(
        stream["texts"]
            .as_array()
            .expect("texts")
            .contains(&json!("echo: stream this one")),
        "the reply streamed: {stream}"
    );

    assert_eq!(
        report["get"],
        json!({"state": "TASK_STATE_COMPLETED", "id": task})
    );

    let asked = &report["inputRequired"];
    assert_eq!(asked["askedState"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    assert!(
        asked["askedText"]
            .as_str()
            .unwrap_or_default()
            .contains("Bash"),
        "{asked}"
    );
    assert_eq!(asked["answeredState"], "TASK_STATE_COMPLETED", "{asked}");
    assert_eq!(
        asked["answeredId"], asked["taskId"],
        "the same task: {asked}"
    );
    assert!(asked["reply"].is_string(), "{asked}");
    assert_eq!(
        asked["askedPush"], true,
        "input-required pushed, token and signature: {asked}"
    );
    assert_eq!(
        asked["donePush"], true,
        "completed pushed to the second config: {asked}"
    );
    assert_eq!(asked["donePushForgedFails"], true, "{asked}");
    assert_eq!(asked["readBackUrl"], asked["registeredUrl"], "{asked}");
    assert_eq!(
        asked["listedUrls"],
        json!([asked["registeredUrl"]]),
        "{asked}"
    );
    let tool_ran = mock
        .message_requests()
        .iter()
        .any(|r| !r.tool_results().is_empty());
    assert!(
        tool_ran,
        "the allowed tool ran and its result reached the model"
    );

    let deny = &report["deny"];
    assert_eq!(deny["askedState"], "TASK_STATE_INPUT_REQUIRED", "{deny}");
    assert_eq!(
        deny["state"], "TASK_STATE_COMPLETED",
        "the model read the denial: {deny}"
    );
    let path = format!(
        "/api/threads/{}/permissions?all=true",
        deny["contextId"].as_str().unwrap_or_default()
    );
    let (status, decided, _) =
        crate::support::call(&daemon.base, Some(OPERATOR), Method::GET, path, None).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["permissions"][0]["status"], "denied", "{decided}");
    assert_eq!(
        decided["permissions"][0]["decidedBy"], "person",
        "{decided}"
    );

    let cancel = &report["cancel"];
    assert_eq!(cancel["startedState"], "TASK_STATE_WORKING", "{cancel}");
    assert_eq!(cancel["state"], "TASK_STATE_CANCELED", "{cancel}");
    assert_eq!(cancel["subscribedKinds"][0], "task", "{cancel}");
    assert_eq!(
        cancel["subscribedLast"], "TASK_STATE_CANCELED",
        "the subscription ends with the cancel: {cancel}"
    );

    assert_eq!(
        report["errors"],
        json!({"unknownTask": "TaskNotFound", "cancelEnded": "TaskNotCancelable"})
    );

    // What changed something is in the audit log, with its thread.
    let (status, audit, _) = crate::support::call(
        &daemon.base,
        Some(OPERATOR),
        Method::GET,
        "/api/audit",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    let entries = audit["entries"].as_array().expect("entries");
    let sent = entries
        .iter()
        .filter(|e| e["action"] == "a2a SendMessage" && e["threadId"] == context)
        .count();
    assert_eq!(sent, 1, "the first send, audited: {audit}");
    assert!(
        entries
            .iter()
            .any(|e| e["action"] == "a2a SendStreamingMessage"
                && e["threadId"] == context
                && e["path"] == "/a2a"),
        "{audit}"
    );
    assert!(
        !entries.iter().any(|e| e["action"] == "a2a GetTask"),
        "reading is not audited: {audit}"
    );

    // Another tenant's key: no such task. A reader: 403 on a send.
    let (other, _) = make_key(
        &daemon.base,
        "other",
        &["threads:read", "threads:write"],
        json!({}),
    )
    .await;
    let (status, answer) = rpc(&daemon.base, &other, "GetTask", json!({"id": task})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    let (reader, _) = make_key(&daemon.base, "other", &["threads:read"], json!({})).await;
    let message =
        json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
    let (status, answer) = rpc(&daemon.base, &reader, "SendMessage", message).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    let (status, answer) = rpc(&daemon.base, "hk_not-a-key", "GetTask", json!({"id": task})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    daemon.stop().await;
}
