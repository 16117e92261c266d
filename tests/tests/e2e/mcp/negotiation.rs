//! What `/mcp` tells a client so that it can adapt, and what it takes from one: a session id on
//! `initialize` that keeps two clients of one credential apart (their cancels stop only their own
//! calls), a `403` challenge naming the scope a tool call lacks (an MCP client's cue to step up),
//! and the protocol version `initialize` negotiates whatever the client asked for.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{McpAnswer, McpHttp, HANDSHAKE_VERSION};
use harness_tests::mock::{MockApi, Reply};
use harness_tests::oauth::Issuer;

use crate::support::call;

const OPERATOR: &str = "the-operator-token";

/// The session id an `initialize` answer hands out; panics with the answer when there is none.
#[track_caller]
fn session_of(init: &McpAnswer) -> String {
    assert_eq!(init.status, StatusCode::OK, "{init:?}");
    init.session_id()
        .unwrap_or_else(|| panic!("no Mcp-Session-Id on {init:?}"))
        .to_owned()
}

/// Two clients on one credential each `initialize` and get their own session id; both echo it.
/// One runs a `threads__send` under JSON-RPC id 42 (a real turn, held at the model); the other's
/// `notifications/cancelled` for 42 stops nothing, the first one's own stops its call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_on_one_credential_cancel_only_their_own_calls() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(OPERATOR.into())).await;
    mock.when_prompt_contains("wait for me", Reply::Hang);
    let anonymous = McpHttp::new(&daemon.base, Some(OPERATOR));
    let a = session_of(&anonymous.initialize(HANDSHAKE_VERSION).await);
    let b = session_of(&anonymous.initialize(HANDSHAKE_VERSION).await);
    assert_ne!(a, b, "each client gets its own session id");
    let (mcp_a, mcp_b) = (anonymous.in_session(&a), anonymous.in_session(&b));
    let created = mcp_a.call_tool(1, "threads__create", json!({})).await;
    let thread = created.result()["structuredContent"]["threadId"]
        .as_str()
        .unwrap_or_else(|| panic!("a thread: {created:?}"))
        .to_owned();
    let send = {
        let mcp_a = mcp_a.clone();
        tokio::spawn(async move {
            mcp_a
                .call_tool(
                    42,
                    "threads__send",
                    json!({"threadId": thread, "content": "wait for me"}),
                )
                .await
        })
    };
    // The call is registered before its turn starts, so it runs once the model is asked.
    mock.wait_for_requests(1, Duration::from_secs(60))
        .await
        .expect("the turn reaches the model");
    let endpoint = daemon.daemon().mcp_endpoint.clone();
    assert_eq!(endpoint.in_flight().len(), 1);

    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 42}});
    assert_eq!(
        mcp_b.post(cancel.clone()).await.status,
        StatusCode::ACCEPTED
    );
    // A cancel acts before its `202`: had it matched A's call, that call would be stopping now.
    assert_eq!(
        endpoint.in_flight().stopping(),
        0,
        "the other client's cancel stopped nothing"
    );
    assert!(!send.is_finished());

    assert_eq!(mcp_a.post(cancel).await.status, StatusCode::ACCEPTED);
    assert_eq!(
        endpoint.in_flight().stopping(),
        1,
        "its own cancel stops it"
    );
    let answer = tokio::time::timeout(Duration::from_secs(30), send)
        .await
        .expect("the cancelled call answers")
        .expect("the call task");
    assert_eq!(
        answer.result()["structuredContent"]["status"],
        "interrupted",
        "{answer:?}"
    );
    daemon.stop().await;
}

/// The `WWW-Authenticate` of an answer.
fn challenge(answer: &McpAnswer) -> String {
    answer
        .headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Checks a refused `tools/call`: `403`, a JSON-RPC error with the request's id naming the
/// scope, and a challenge for it; returns the challenge.
#[track_caller]
fn assert_refused_for_write(answer: &McpAnswer, id: u64) -> String {
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{answer:?}");
    let said = challenge(answer);
    assert!(
        said.starts_with("Bearer ")
            && said.contains(r#"error="insufficient_scope""#)
            && said.contains(r#"scope="threads:write""#),
        "{said}"
    );
    let error = &answer.last()["error"];
    assert_eq!(answer.last()["id"], id, "{answer:?}");
    assert_eq!(error["data"]["scope"], "threads:write", "{answer:?}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("`threads:write`")),
        "{answer:?}"
    );
    said
}

/// A token that may read but not write: its `/mcp` call of a tool that changes something is
/// `403` with `WWW-Authenticate: Bearer error="insufficient_scope", scope="threads:write"` (for
/// an OAuth token, with the resource metadata to step up at; for a key, whose scopes are fixed,
/// without), before the call runs; its reading calls still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_without_its_scope_is_403_with_a_challenge() {
    let issuer = Issuer::start("alice").await.expect("the OAuth issuer runs");
    let mock = MockApi::start().await;
    let url = issuer.url.clone();
    let daemon = TestDaemon::start(&mock, move |c| {
        c.auth_token = Some(OPERATOR.into());
        c.oauth.issuer = Some(url);
    })
    .await;
    let base = daemon.base.clone();
    let token = issuer
        .token_for(&format!("{base}/mcp"), "threads:read")
        .await
        .expect("a read-only token");
    let (status, made, _) = call(
        &base,
        Some(OPERATOR),
        Method::POST,
        "/api/keys",
        Some(json!({"tenant": "alice", "scopes": ["threads:read"]})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let key = made["key"].as_str().expect("the key").to_owned();

    for (who, bearer) in [("oauth", token.as_str()), ("key", key.as_str())] {
        let mcp = McpHttp::new(&base, Some(bearer));
        let refused = mcp.call_tool(7, "threads__create", json!({})).await;
        let said = assert_refused_for_write(&refused, 7);
        let metadata =
            format!(r#"resource_metadata="{base}/.well-known/oauth-protected-resource/mcp""#);
        assert_eq!(said.contains(&metadata), who == "oauth", "{who}: {said}");
        let listed = mcp.call_tool(8, "threads__list", json!({})).await;
        assert_eq!(listed.status, StatusCode::OK, "{who}: {listed:?}");
        assert_ne!(listed.result()["isError"], true, "{who}: {listed:?}");
    }
    let (_, threads, _) = call(&base, Some(OPERATOR), Method::GET, "/api/threads", None).await;
    assert_eq!(threads["threads"], json!([]), "nothing was created");
    daemon.stop().await;
}

/// `initialize` with a header that is not the body's version.
async fn initialize_with(mcp: &McpHttp, version: &str, header: &str) -> McpAnswer {
    let message = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "harness-tests", "version": "0"}
        }
    });
    mcp.post_raw(message.to_string(), &[("mcp-protocol-version", header)])
        .await
}

/// `initialize` negotiates (MCP lifecycle): a version from the future is answered with the newest
/// this server speaks over a handshake, a known one with itself, whatever `MCP-Protocol-Version`
/// header came with it (the header names the version of the requests after `initialize`). On
/// those, an unknown header version is still `400`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_negotiates_whatever_version_and_header_it_names() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let mcp = McpHttp::new(&daemon.base, None);

    let future = mcp.initialize("2099-01-01").await;
    assert_eq!(future.status, StatusCode::OK, "{future:?}");
    assert_eq!(future.result()["protocolVersion"], HANDSHAKE_VERSION);
    for (body, header, negotiated) in [
        ("2099-01-01", "2099-01-01", HANDSHAKE_VERSION),
        ("2099-01-01", HANDSHAKE_VERSION, HANDSHAKE_VERSION),
        (HANDSHAKE_VERSION, "2025-06-18", HANDSHAKE_VERSION),
        ("2025-06-18", HANDSHAKE_VERSION, "2025-06-18"),
        ("2025-06-18", "1999-01-01", "2025-06-18"),
    ] {
        let answer = initialize_with(&mcp, body, header).await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{body} / {header}: {answer:?}"
        );
        assert_eq!(
            answer.result()["protocolVersion"],
            negotiated,
            "{body} / {header}"
        );
    }

    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let unknown = mcp
        .post_raw(ping.clone(), &[("mcp-protocol-version", "2099-01-01")])
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{unknown:?}");
    let error: &Value = &unknown.last()["error"];
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("2099-01-01")),
        "{unknown:?}"
    );
    let known = mcp
        .post_raw(ping, &[("mcp-protocol-version", HANDSHAKE_VERSION)])
        .await;
    assert_eq!(known.status, StatusCode::OK, "{known:?}");
    daemon.stop().await;
}
