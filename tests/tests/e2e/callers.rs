//! Who is calling (#28, design first): the caller a request was authorized as is stored on the
//! user message it sends, over `/api` and `/mcp`; a person's answer to a permission names who
//! answered; a request a peer forwards carries its caller, signed with the token the nodes
//! share, and the owner records that caller, or refuses a header it cannot verify. (Schedules
//! and delegated children: `schedules.rs`.)

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::client::ApiClient;
use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::McpHttp;
use harness_tests::mock::MockApi;
use orchestrator::caller::{Caller, Scope, CALLER_HEADER};
use orchestrator::cluster::FORWARDED_HEADER;

/// The thread's user messages' callers, in order (`null` where none was stored).
async fn callers(daemon: &TestDaemon, thread: &str) -> Vec<Value> {
    let (status, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["caller"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_is_stored_with_each_message_it_sends() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    assert_eq!(
        daemon.reply(&thread, "over the api").await,
        "echo: over the api"
    );
    let mcp = McpHttp::new(&daemon.base, None);
    let sent = mcp
        .call_tool(
            1,
            "threads__send",
            json!({"threadId": thread, "content": "over mcp"}),
        )
        .await;
    assert_eq!(
        sent.result()["structuredContent"]["status"],
        "done",
        "{}",
        sent.last()
    );
    assert_eq!(
        callers(&daemon, &thread).await,
        [
            json!({"subject": "operator", "tenant": null}),
            json!({"subject": "operator", "tenant": null}),
        ]
    );
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    let reply = &body["messages"][1];
    assert_eq!(reply["role"], "assistant");
    assert_eq!(reply.get("caller"), None, "a reply has no caller: {reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_caller_is_recorded_when_it_verifies_and_refused_when_it_does_not() {
    let mock = MockApi::start().await;
    let token = "the-token-the-nodes-share";
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(token.into())).await;
    let api = ApiClient::with_bearer_token(&daemon.base, token);
    // The thread is Acme's, the tenant of the caller the peer forwards.
    let (status, key) = api
        .post(
            "/api/keys",
            json!({"tenant": "acme", "scopes": ["threads:write"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{key}");
    let acme = ApiClient::with_bearer_token(&daemon.base, key["key"].as_str().expect("a key"));
    let thread = acme.create_thread().await;
    let client = reqwest::Client::new();
    let path = format!("/api/threads/{thread}/messages");
    let someone = Caller {
        subject: "key_from_a_peer".into(),
        tenant: Some("acme".into()),
        scopes: vec![Scope::ThreadsWrite],
    };
    let send = |caller_header: String, content: &str| {
        client
            .post(format!("{}{path}", daemon.base))
            .bearer_auth(token)
            .header(FORWARDED_HEADER, "node_peer")
            .header(CALLER_HEADER, caller_header)
            .json(&json!({"content": content}))
            .send()
    };

    // Signed with the shared token for this request: recorded as that caller.
    let signed = someone.forwarded(token.as_bytes(), "POST", &path);
    let answer = send(signed.clone(), "from a peer").await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    // Signed with another key, for another path, or changed: 401, and nothing stored.
    let wrong_key = someone.forwarded(b"another token", "POST", &path);
    let wrong_path = someone.forwarded(token.as_bytes(), "POST", "/api/threads/other/messages");
    // The same header with the caller's part changed by one character.
    let (body, rest) = signed.split_once('.').expect("three parts");
    let flipped = if body.starts_with('e') { 'f' } else { 'e' };
    let changed = format!("{flipped}{}.{rest}", &body[1..]);
    for refused in [wrong_key, wrong_path, changed, "junk".into()] {
        let answer = send(refused.clone(), "must not be stored").await.unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{refused}");
    }
    let (status, thread_now) = api.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(status, StatusCode::OK, "{thread_now}");
    let users: Vec<&Value> = thread_now["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(users.len(), 1, "{thread_now}");
    assert_eq!(
        users[0]["caller"],
        json!({"subject": "key_from_a_peer", "tenant": "acme"})
    );
}
