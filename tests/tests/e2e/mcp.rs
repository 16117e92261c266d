//! `/mcp`, Harness as an MCP server: raw JSON-RPC (handshake then calls without a session,
//! `server/discover`, malformed input, Origin and token), output schemas, the thread tools with
//! progress and cancellation, and real clients: rmcp's Rust client, the official Python SDK and
//! the `claude` CLI.

mod conformance;
mod negotiation;
mod tasks;

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{
    modern_meta, python_or_skip, run_python_client, McpHttp, HANDSHAKE_VERSION, MODERN_VERSION,
};
use harness_tests::mock::{MockApi, Reply};
use harness_tests::probe::ProbePlugin;
use harness_tests::util::eventually;

use crate::metrics::{scrape, value};

const TOKEN: &str = "mcp-test-token";

/// A mock, a daemon with the probe tools and no token, and a raw client for its `/mcp`.
async fn start() -> (MockApi, TestDaemon, McpHttp) {
    let mock = MockApi::start().await;
    let daemon =
        TestDaemon::start_with_plugins(&mock, vec![Arc::new(ProbePlugin::default())], |_| {}).await;
    let mcp = McpHttp::new(&daemon.base, None);
    (mock, daemon, mcp)
}

/// Checks one series of `/metrics` text.
#[track_caller]
fn assert_metric(metrics: &str, series: &str, expected: f64) {
    assert_eq!(
        value(metrics, series),
        Some(expected),
        "{series} in\n{metrics}"
    );
}

/// Checks `instance` against `schema` with `jsonschema`; panics naming every violation.
#[track_caller]
fn assert_valid(schema: &Value, instance: &Value) {
    let validator = jsonschema::validator_for(schema).expect("a valid output schema");
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{instance} fails {schema}: {errors:?}");
}

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_handshake_then_calls_without_a_session() {
    let (_mock, daemon, mcp) = start().await;

    let init = mcp.initialize(HANDSHAKE_VERSION).await;
    assert_eq!(init.status, StatusCode::OK, "{init:?}");
    assert_eq!(init.result()["protocolVersion"], HANDSHAKE_VERSION);
    assert_eq!(init.result()["serverInfo"]["name"], "harness");
    assert!(
        init.result()["capabilities"]["tools"].is_object(),
        "{init:?}"
    );
    // A session id, a label that tells this client's calls from others' (`negotiation`).
    let session = init.session_id().unwrap_or_default().to_owned();
    assert!(session.starts_with("mcs_"), "{:?}", init.headers);
    let initialized = mcp
        .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(initialized.status, StatusCode::ACCEPTED, "{initialized:?}");

    // Listed: the plugin tools a caller without a thread can use, and the thread tools.
    let tools = mcp.tools().await;
    for name in [
        "time__current_time",
        "probe__miscount",
        "threads__create",
        "threads__send",
        "threads__get",
        "threads__list",
    ] {
        assert!(
            tools.contains_key(name),
            "{name} missing from {:?}",
            tools.keys()
        );
    }
    assert!(
        !tools.contains_key("delegation__delegate"),
        "a tool that needs a calling thread is left out"
    );
    for name in [
        "time__current_time",
        "threads__create",
        "threads__send",
        "threads__get",
        "threads__list",
    ] {
        assert!(
            tools[name]["outputSchema"].is_object(),
            "{name}: {}",
            tools[name]
        );
    }
    assert!(tools
        .get("probe__order")
        .is_some_and(|t| t.get("outputSchema").is_none()));

    // A call with no session header, validated against the advertised output schema.
    let answer = mcp
        .call_tool(2, "time__current_time", json!({"timezone": "UTC"}))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let result = answer.result();
    assert_eq!(result.get("isError"), None, "{result}");
    assert_eq!(result["structuredContent"]["timezone"], "UTC", "{result}");
    assert_valid(
        &tools["time__current_time"]["outputSchema"],
        &result["structuredContent"],
    );
    assert!(
        !text_of(result).is_empty(),
        "a text block for older clients: {result}"
    );

    // Input validation and defaults are the registry's: a wrong type is an error result.
    let answer = mcp
        .call_tool(3, "time__current_time", json!({"timezone": 5}))
        .await;
    let result = answer.result();
    assert_eq!(result["isError"], true, "{result}");
    assert!(text_of(result).contains("at /timezone"), "{result}");
    // Yet nothing is kept: a session id we never issued (a client that kept one from another
    // server, or made one up) changes nothing, every request stands alone.
    let call = json!({
        "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "time__current_time", "arguments": {}}
    });
    let answer = mcp
        .post_raw(
            call.to_string(),
            &[
                ("mcp-protocol-version", HANDSHAKE_VERSION),
                ("mcp-session-id", "made-up"),
            ],
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert!(
        answer.result()["structuredContent"]["iso"].is_string(),
        "{answer:?}"
    );
    // A tool that is not there (delegation needs a calling thread): invalid params, as the
    // specification says.
    let answer = mcp
        .call_tool(4, "delegation__delegate", json!({"prompt": "x"}))
        .await;
    assert_eq!(answer.last()["error"]["code"], -32602, "{answer:?}");
    assert!(
        answer.last()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tool")),
        "{answer:?}"
    );

    let metrics = scrape(&daemon).await;
    assert_metric(
        &metrics,
        r#"harness_tool_calls_total{tool="time__current_time",outcome="ok"}"#,
        2.0,
    );
    assert_metric(
        &metrics,
        r#"harness_mcp_http_requests_total{method="tools/call"}"#,
        4.0,
    );
    daemon.stop().await;
}

#[tokio::test]
async fn server_discover_and_a_call_with_per_request_metadata() {
    let (_mock, daemon, mcp) = start().await;
    let modern = [
        ("mcp-protocol-version", MODERN_VERSION),
        ("mcp-method", "server/discover"),
    ];

    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta()}});
    let answer = mcp.post_raw(discover.to_string(), &modern).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let versions = &answer.result()["supportedVersions"];
    for version in [MODERN_VERSION, HANDSHAKE_VERSION] {
        assert!(
            versions
                .as_array()
                .is_some_and(|v| v.contains(&json!(version))),
            "{version} not in {versions}"
        );
    }
    assert!(
        answer.result()["capabilities"]["tools"].is_object(),
        "{answer:?}"
    );

    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "time__current_time", "arguments": {"timezone": "UTC"}, "_meta": modern_meta()}
    });
    let answer = mcp
        .post_raw(
            call.to_string(),
            &[
                ("mcp-protocol-version", MODERN_VERSION),
                ("mcp-method", "tools/call"),
                ("mcp-name", "time__current_time"),
            ],
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(
        answer.result()["structuredContent"]["timezone"],
        "UTC",
        "{answer:?}"
    );

    // Without the metadata 2026-07-28 asks for, the request is refused by name, not served.
    let bare = json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {}});
    let answer = mcp.post_raw(bare.to_string(), &modern).await;
    assert!(
        answer.status.is_client_error() || answer.last()["error"].is_object(),
        "{answer:?}"
    );
    assert!(!answer.status.is_server_error(), "{answer:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn malformed_json_rpc_gets_an_error_never_a_5xx() {
    let (_mock, daemon, mcp) = start().await;
    let init = mcp.initialize(HANDSHAKE_VERSION).await;
    assert_eq!(init.status, StatusCode::OK);

    // Not JSON at all: a parse error, in JSON-RPC.
    let answer = mcp
        .post_raw("{not json", &[("mcp-protocol-version", HANDSHAKE_VERSION)])
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    assert_eq!(answer.last()["error"]["code"], -32700, "{answer:?}");
    assert!(
        answer.last()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not JSON")),
        "{answer:?}"
    );
    // JSON, but not a JSON-RPC message.
    let answer = mcp.post(json!({"hello": "world"})).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    assert_eq!(answer.last()["error"]["code"], -32600, "{answer:?}");
    // A method we serve, its params of the wrong shape: invalid params, saying which.
    let answer = mcp
        .post(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": 5}}))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.last()["id"], 7, "{answer:?}");
    assert_eq!(answer.last()["error"]["code"], -32602, "{answer:?}");
    let message = answer.last()["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("invalid params for tools/call: "),
        "{answer:?}"
    );
    // A method nobody serves.
    let answer = mcp
        .post(json!({"jsonrpc": "2.0", "id": 8, "method": "prompts/nonsense"}))
        .await;
    assert!(!answer.status.is_server_error(), "{answer:?}");
    assert_eq!(answer.last()["error"]["code"], -32601, "{answer:?}");
    // Params that are not an object: invalid params, not an invalid request.
    let answer = mcp
        .post(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": [1, 2]}))
        .await;
    assert_eq!(answer.last()["id"], 9, "{answer:?}");
    assert_eq!(answer.last()["error"]["code"], -32602, "{answer:?}");
    // A tool nobody serves: invalid params (the specification's answer), not a tool error.
    let answer = mcp
        .post(json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
                     "params": {"name": "no__such_tool", "arguments": {}}}))
        .await;
    assert_eq!(answer.last()["error"]["code"], -32602, "{answer:?}");
    let message = answer.last()["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("no__such_tool"), "{answer:?}");
    // Every other refusal is JSON-RPC too: other methods (GET and DELETE: there are no sessions
    // nor streams to open or end), a client that takes neither JSON nor SSE, an unknown
    // protocol version.
    let http = reqwest::Client::new();
    let url = format!("{}/mcp", daemon.base);
    let refusals = [
        (http.get(&url).header("accept", "text/event-stream"), 405),
        (http.delete(&url), 405),
        (http.put(&url).json(&json!({})), 405),
        (
            http.post(&url)
                .header("accept", "text/html")
                .json(&json!({"jsonrpc": "2.0", "id": 11, "method": "ping"})),
            406,
        ),
        (
            http.post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "1999-01-01")
                .json(&json!({"jsonrpc": "2.0", "id": 12, "method": "ping"})),
            400,
        ),
    ];
    for (request, status) in refusals {
        let request = request.build().unwrap();
        let what = format!("{} {:?}", request.method(), request.headers().get("accept"));
        let response = http.execute(request).await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{what}");
        let content_type = response.headers().get("content-type").cloned();
        let body = response.text().await.unwrap();
        assert!(
            content_type.is_some_and(|t| t.to_str().unwrap().starts_with("application/json")),
            "{what}: {body}"
        );
        let body: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{what}: {body}"));
        assert_eq!(body["jsonrpc"], "2.0", "{what}: {body}");
        assert!(body["error"]["code"].is_i64(), "{what}: {body}");
        assert!(body["error"]["message"].is_string(), "{what}: {body}");
    }
    daemon.stop().await;
}

#[tokio::test]
async fn origin_and_token_guard_the_endpoint() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.auth_token = Some(TOKEN.into());
        c.files.max_message_bytes = 1024;
    })
    .await;

    let none = McpHttp::new(&daemon.base, None)
        .initialize(HANDSHAKE_VERSION)
        .await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED, "{none:?}");
    assert_eq!(
        none.headers
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap()),
        Some(r#"Bearer realm="harness""#)
    );
    let wrong = McpHttp::new(&daemon.base, Some("not-the-token"))
        .initialize(HANDSHAKE_VERSION)
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{wrong:?}");

    let mcp = McpHttp::new(&daemon.base, Some(TOKEN));
    let ok = mcp.initialize(HANDSHAKE_VERSION).await;
    assert_eq!(ok.status, StatusCode::OK, "{ok:?}");
    // A web page elsewhere, even with the token (a DNS-rebinding page would not have it, but the
    // Origin check does not rely on that).
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let evil = mcp
        .post_raw(
            message.to_string(),
            &[
                ("origin", "http://evil.example"),
                ("mcp-protocol-version", HANDSHAKE_VERSION),
            ],
        )
        .await;
    assert_eq!(evil.status, StatusCode::FORBIDDEN, "{evil:?}");
    assert!(evil.body.contains("origin_not_allowed"), "{}", evil.body);
    // A DNS-rebinding page reaches us under a name of its own.
    let rebound = mcp
        .post_raw(
            message.to_string(),
            &[
                ("host", "evil.example"),
                ("mcp-protocol-version", HANDSHAKE_VERSION),
            ],
        )
        .await;
    assert_eq!(rebound.status, StatusCode::FORBIDDEN, "{rebound:?}");
    assert!(
        rebound.body.contains("host_not_allowed"),
        "{}",
        rebound.body
    );
    // A loopback origin of our own is served.
    let own = format!("http://{}", daemon.base.trim_start_matches("http://"));
    let same = mcp
        .post_raw(
            message.to_string(),
            &[
                ("origin", own.as_str()),
                ("mcp-protocol-version", HANDSHAKE_VERSION),
            ],
        )
        .await;
    assert_eq!(same.status, StatusCode::OK, "{same:?}");
    // Bodies are bounded as a message's are (`threads__send` may carry files).
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"time__current_time","arguments":{{"pad":"{}"}}}}}}"#,
        "x".repeat(
            daemon
                .config
                .files
                .message_body_limit(daemon.config.max_body_bytes)
                + 1
        )
    );
    let answer = mcp
        .post_raw(huge, &[("mcp-protocol-version", HANDSHAKE_VERSION)])
        .await;
    assert_eq!(
        answer.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        answer.status
    );
    daemon.stop().await;
}

#[tokio::test]
async fn a_result_failing_its_output_schema_is_an_error_naming_the_path() {
    let (_mock, daemon, mcp) = start().await;

    let answer = mcp.call_tool(1, "probe__miscount", json!({})).await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "an error result, not a protocol error: {answer:?}"
    );
    let result = answer.result();
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    let text = text_of(result);
    assert!(text.contains("output schema"), "{text}");
    assert!(
        text.contains(r#"at /count: "many" is not of type "integer""#),
        "{text}"
    );

    let metrics = scrape(&daemon).await;
    assert_metric(
        &metrics,
        r#"harness_tool_output_schema_failures_total{tool="probe__miscount"}"#,
        1.0,
    );
    daemon.stop().await;
}

#[tokio::test]
async fn threads_are_created_sent_to_and_read_over_mcp() {
    let (mock, daemon, mcp) = start().await;
    let tools = mcp.tools().await;
    let structured = |answer: &harness_tests::mcp::McpAnswer, tool: &str| -> Value {
        let result = answer.result();
        assert_eq!(result.get("isError"), None, "{tool}: {result}");
        assert_valid(&tools[tool]["outputSchema"], &result["structuredContent"]);
        result["structuredContent"].clone()
    };

    let created = mcp
        .call_tool(1, "threads__create", json!({"title": "over mcp"}))
        .await;
    let created = structured(&created, "threads__create");
    let thread = created["threadId"].as_str().expect("threadId").to_owned();
    assert_eq!(created["title"], "over mcp");

    let send = json!({"threadId": thread, "content": "hello over mcp", "clientMessageId": "c-1"});
    let sent = mcp.call_tool(2, "threads__send", send.clone()).await;
    let sent = structured(&sent, "threads__send");
    assert_eq!(sent["threadId"], thread.as_str());
    assert_eq!(sent["status"], "done");
    assert_eq!(sent["reply"], "echo: hello over mcp");
    assert_eq!(sent["duplicate"], false);
    // The same clientMessageId: the first reply, no second turn.
    let again = mcp.call_tool(3, "threads__send", send).await;
    let again = structured(&again, "threads__send");
    assert_eq!(again["messageId"], sent["messageId"]);
    assert_eq!(again["reply"], sent["reply"]);
    assert_eq!(again["duplicate"], true);
    assert_eq!(mock.message_requests().len(), 1, "one turn ran");

    let got = mcp
        .call_tool(4, "threads__get", json!({"threadId": thread}))
        .await;
    let got = structured(&got, "threads__get");
    let contents: Vec<&str> = got["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(contents, ["hello over mcp", "echo: hello over mcp"]);

    let newer = mcp.call_tool(5, "threads__create", json!({})).await;
    let newer = structured(&newer, "threads__create")["threadId"].clone();
    let listed = mcp.call_tool(6, "threads__list", json!({})).await;
    let listed = structured(&listed, "threads__list");
    let ids: Vec<&Value> = listed["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| &t["threadId"])
        .collect();
    assert_eq!(ids, [&newer, &json!(thread)], "newest first");

    // Bad input is an error result with a clear message.
    let missing = mcp
        .call_tool(
            7,
            "threads__send",
            json!({"threadId": "no-such-thread", "content": "x"}),
        )
        .await;
    assert_eq!(missing.result()["isError"], true, "{missing:?}");
    assert!(
        text_of(missing.result()).contains("not found"),
        "{missing:?}"
    );
    let empty = mcp
        .call_tool(8, "threads__send", json!({"threadId": thread}))
        .await;
    assert_eq!(empty.result()["isError"], true, "{empty:?}");
    assert!(text_of(empty.result()).contains("content"), "{empty:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn a_long_send_reports_progress_and_a_cancel_on_another_post_interrupts_it() {
    let (mock, daemon, mcp) = start().await;
    mock.when_prompt_contains("wait for me", Reply::Hang);
    let created = mcp.call_tool(1, "threads__create", json!({})).await;
    let thread = created.result()["structuredContent"]["threadId"]
        .as_str()
        .expect("id")
        .to_owned();

    let caller = mcp.clone();
    let send_thread = thread.clone();
    let call = tokio::spawn(async move {
        caller
            .post(json!({
                "jsonrpc": "2.0", "id": 42, "method": "tools/call",
                "params": {
                    "name": "threads__send",
                    "arguments": {"threadId": send_thread, "content": "wait for me"},
                    "_meta": {"progressToken": "p-42"}
                }
            }))
            .await
    });
    mock.wait_for_requests(1, Duration::from_secs(60))
        .await
        .expect("the turn reaches the model");
    let endpoint = daemon.daemon().mcp_endpoint.clone();
    assert_eq!(endpoint.in_flight().len(), 1);

    // The cancel comes on a POST of its own, as it must from a stateless client.
    let started = Instant::now();
    let cancel = mcp
        .post(json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 42, "reason": "the user gave up"}
        }))
        .await;
    assert_eq!(cancel.status, StatusCode::ACCEPTED, "{cancel:?}");
    let answer = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the cancelled call answers")
        .expect("the call task");
    let took = started.elapsed();
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let progress: Vec<&Value> = answer
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(
        !progress.is_empty(),
        "no progress before the result: {answer:?}"
    );
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "p-42"),
        "{progress:?}"
    );
    assert!(
        progress
            .iter()
            .any(|p| p["params"]["message"] == "turn_started"),
        "{progress:?}"
    );
    let result = &answer.last()["result"];
    assert_eq!(
        result["structuredContent"]["status"], "interrupted",
        "{answer:?} after {took:?}"
    );
    assert_eq!(result["structuredContent"]["threadId"], thread.as_str());
    eventually(
        Duration::from_secs(5),
        "the call leaves the in-flight map",
        || endpoint.in_flight().is_empty(),
    )
    .await
    .expect("nothing is kept past its call");

    // A cancel for a call that is not running is taken and does nothing.
    let stray = mcp
        .post(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 42}}))
        .await;
    assert_eq!(stray.status, StatusCode::ACCEPTED, "{stray:?}");
    daemon.stop().await;
}

/// A cancel of a call whose message still waits behind another caller's turn withdraws that
/// message (it never reaches the model), and the turn ahead goes on. Once, it interrupted the
/// running turn, another caller's, and its own message ran later all the same.
#[tokio::test]
async fn cancelling_a_queued_send_withdraws_it_and_spares_the_turn_ahead() {
    let (mock, daemon, mcp) = start().await;
    let created = mcp.call_tool(1, "threads__create", json!({})).await;
    let thread = created.result()["structuredContent"]["threadId"]
        .as_str()
        .expect("id")
        .to_owned();
    mock.once_when_prompt_contains(
        "the long one",
        Reply::slow_text(["first ", "second ", "done"], Duration::from_millis(600)),
    );
    let send = |id: u64, content: &'static str| {
        let (caller, thread) = (mcp.clone(), thread.clone());
        tokio::spawn(async move {
            caller
                .post(json!({
                    "jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "threads__send",
                               "arguments": {"threadId": thread, "content": content}}
                }))
                .await
        })
    };
    let ahead = send(50, "the long one");
    mock.wait_for_requests(1, Duration::from_secs(60))
        .await
        .expect("the first turn reaches the model");
    let queued = send(51, "the queued one");
    let endpoint = daemon.daemon().mcp_endpoint.clone();
    eventually(Duration::from_secs(10), "both calls run", || {
        endpoint.in_flight().len() == 2
    })
    .await
    .expect("two calls");
    let cancel = mcp
        .post(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": 51}}),
        )
        .await;
    assert_eq!(cancel.status, StatusCode::ACCEPTED, "{cancel:?}");
    let withdrawn = tokio::time::timeout(Duration::from_secs(30), queued)
        .await
        .expect("the cancelled call answers")
        .expect("the call task");
    assert_eq!(
        withdrawn.last()["result"]["structuredContent"]["status"],
        "interrupted",
        "{withdrawn:?}"
    );
    let finished = tokio::time::timeout(Duration::from_secs(60), ahead)
        .await
        .expect("the turn ahead answers")
        .expect("the call task");
    let reply = &finished.last()["result"]["structuredContent"];
    assert_eq!(reply["status"], "done", "{finished:?}");
    assert_eq!(reply["reply"], "first second done", "{finished:?}");
    let asked: Vec<String> = mock
        .message_requests()
        .iter()
        .map(|r| r.last_user_text())
        .collect();
    assert!(
        !asked.iter().any(|t| t.contains("the queued one")),
        "the withdrawn message reached the model: {asked:?}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn rmcp_client_lists_and_calls() {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt;

    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(TOKEN.into())).await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", daemon.base))
            .auth_header(TOKEN),
    );
    let client = ().serve(transport).await.expect("the rmcp client connects");
    let info = client.peer_info().expect("server info after the handshake");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("harness")
    );

    let tools = client.list_all_tools().await.expect("tools/list");
    let time = tools
        .iter()
        .find(|t| t.name == "time__current_time")
        .expect("the time tool is listed");
    let schema = Value::Object(
        time.output_schema
            .as_deref()
            .cloned()
            .expect("an output schema"),
    );
    let arguments = json!({"timezone": "Europe/Paris"});
    let result = client
        .call_tool(
            CallToolRequestParams::new("time__current_time")
                .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("tools/call");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let structured = result
        .structured_content
        .clone()
        .expect("structured content");
    assert_eq!(structured["timezone"], "Europe/Paris");
    assert_valid(&schema, &structured);

    let created = client
        .call_tool(CallToolRequestParams::new("threads__create"))
        .await
        .expect("threads__create");
    let thread = created.structured_content.expect("structured")["threadId"].clone();
    assert!(thread.as_str().is_some_and(|t| !t.is_empty()), "{thread}");
    client.cancel().await.expect("the client closes");
    daemon.stop().await;
}

#[tokio::test]
async fn the_python_sdk_speaks_both_generations() {
    let Some(python) = python_or_skip("the_python_sdk_speaks_both_generations").await else {
        return;
    };
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(TOKEN.into())).await;
    let config =
        json!({"url": format!("{}/mcp", daemon.base), "token": TOKEN, "modes": ["legacy", "auto"]});
    let report = run_python_client(python, config)
        .await
        .expect("the Python client runs");
    assert_eq!(report["sdkVersion"], "2.3.0", "{report}");
    assert_eq!(
        report["legacy"]["protocolVersion"], HANDSHAKE_VERSION,
        "{report}"
    );
    assert_eq!(
        report["auto"]["protocolVersion"], MODERN_VERSION,
        "auto mode discovers: {report}"
    );
    assert_eq!(
        report["legacy"]["sessionEchoed"], true,
        "the SDK sends back the session id its `initialize` got: {report}"
    );
    assert_eq!(
        report["auto"]["sessionIssued"], false,
        "`server/discover` hands out none: {report}"
    );
    for mode in ["legacy", "auto"] {
        let run = &report[mode];
        assert_eq!(run["serverName"], "harness", "{mode}: {run}");
        let with_schema: Vec<&str> = run["withOutputSchema"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for tool in [
            "threads__create",
            "threads__send",
            "threads__get",
            "threads__list",
            "time__current_time",
        ] {
            assert!(
                with_schema.contains(&tool),
                "{mode}: {tool} has no output schema: {run}"
            );
        }
        assert_eq!(run["time"]["timezone"], "UTC", "{mode}: {run}");
        assert_eq!(run["send"]["status"], "done", "{mode}: {run}");
        let hello = format!("hello from python {mode}");
        assert_eq!(
            run["send"]["reply"],
            format!("echo: {hello}"),
            "{mode}: {run}"
        );
        assert_eq!(
            run["messages"],
            json!([hello, format!("echo: {hello}")]),
            "{mode}: {run}"
        );
        assert!(
            run["progress"]
                .as_array()
                .is_some_and(|p| p.contains(&json!("turn_started"))),
            "{mode}: progress reached the callback: {run}"
        );
    }
    daemon.stop().await;
}

#[tokio::test]
async fn the_claude_cli_calls_a_harness_tool_over_http() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(TOKEN.into())).await;
    mock.once_when_prompt_contains(
        "what time is it",
        Reply::tool_use(
            "mcp__harness__time__current_time",
            json!({"timezone": "UTC"}),
        ),
    );
    let mcp_config = json!({"mcpServers": {"harness": {
        "type": "http",
        "url": format!("{}/mcp", daemon.base),
        "headers": {"Authorization": format!("Bearer {TOKEN}")}
    }}});
    let work = tempfile::tempdir().expect("temp dir");
    let config_dir = work.path().join("claude");
    std::fs::create_dir_all(&config_dir).expect("config dir");
    let claude = tokio::task::spawn_blocking(harness_tests::cli::claude_bin)
        .await
        .expect("installer task")
        .expect("the claude CLI is installed by test support");
    let mut cmd = tokio::process::Command::new(claude);
    cmd.args([
        "-p",
        "what time is it in UTC?",
        "--output-format",
        "json",
        "--strict-mcp-config",
        "--max-turns",
        "3",
    ])
    .arg("--mcp-config")
    .arg(mcp_config.to_string())
    .args(["--allowedTools", "mcp__harness__time__current_time"])
    .current_dir(work.path())
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    for key in harness_tests::cli::stray_cli_env() {
        cmd.env_remove(key);
    }
    cmd.envs(harness_tests::cli::cli_env(&mock.url()))
        .env("CLAUDE_CONFIG_DIR", &config_dir)
        .env("ENABLE_TOOL_SEARCH", "false")
        .env("CLAUDE_CODE_MAX_RETRIES", "0");
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .expect("the CLI finishes within 90 s")
        .expect("the CLI runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stdout}\n{stderr}", out.status);

    // The model saw our tools under the server name the CLI gave us, and called one.
    let requests = mock.message_requests();
    let first = requests.first().expect("the CLI asked the model");
    let names = first.tool_names();
    for tool in [
        "mcp__harness__time__current_time",
        "mcp__harness__threads__send",
    ] {
        assert!(
            names.iter().any(|n| n == tool),
            "{tool} not offered: {names:?}"
        );
    }
    let results: Vec<_> = requests.iter().flat_map(|r| r.tool_results()).collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(!results[0].is_error, "{results:?}");
    assert!(results[0].text.contains("UTC"), "{results:?}");
    let reply: Value = serde_json::from_str(stdout.trim()).expect("the CLI prints JSON");
    assert!(
        reply["result"]
            .as_str()
            .is_some_and(|r| r.starts_with("tool said:")),
        "{reply}"
    );
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", daemon.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET /metrics answers")
        .text()
        .await
        .expect("metrics text");
    assert_metric(
        &metrics,
        r#"harness_tool_calls_total{tool="time__current_time",outcome="ok"}"#,
        1.0,
    );
    daemon.stop().await;
}

/// A profile's HTTP MCP server: another daemon's `/mcp`, its bearer token a secret read from a
/// file. The profile's thread's model calls its tool through the CLI; the token is on no
/// command line and in no API answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_http_mcp_server_is_reached_with_its_secret_header() {
    const PEER_TOKEN: &str = "peer-token-7d1e-never-shown";
    let mock = MockApi::start().await;
    let peer = TestDaemon::start(&mock, |c| c.auth_token = Some(PEER_TOKEN.into())).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("peer-token");
    std::fs::write(&token_file, format!("Bearer {PEER_TOKEN}\n")).unwrap();
    let url = format!("{}/mcp", peer.base);
    let daemon = TestDaemon::start(&mock, |c| {
        let mut server = orchestrator::config::McpServerConfig {
            url: Some(url),
            ..Default::default()
        };
        server.secrets.insert(
            "Authorization".into(),
            format!("file:{}", token_file.display()),
        );
        let mut profile = orchestrator::config::ProfileConfig::default();
        profile.mcp_servers.insert("peer".into(), server);
        c.profiles.insert("remote".into(), profile);
    })
    .await;
    let (_, thread) = daemon
        .post("/api/threads", json!({"profile": "remote"}))
        .await;
    let thread = thread["id"].as_str().unwrap().to_owned();
    mock.once_when_prompt_contains(
        "ask the peer",
        Reply::tool_use("mcp__peer__time__current_time", json!({})),
    );
    let (status, body) = daemon.send(&thread, "ask the peer").await;
    assert_eq!(status, 200, "{body}");
    let asked = mock.message_requests();
    let results: Vec<_> = asked.iter().flat_map(|r| r.tool_results()).collect();
    assert!(
        results
            .iter()
            .any(|r| !r.is_error && r.text.contains("timezone")),
        "the peer's tool answered: {results:?}"
    );
    let pid = daemon.pid_of(&thread).unwrap();
    let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(!String::from_utf8_lossy(&argv).contains(PEER_TOKEN));
    let (_, profiles) = daemon.get("/api/profiles").await;
    assert!(!profiles.to_string().contains(PEER_TOKEN), "{profiles}");
    daemon.stop().await;
    peer.stop().await;
}
