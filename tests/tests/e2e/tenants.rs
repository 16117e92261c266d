//! Tenants and API keys (#28): a key reaches its tenant's threads and schedules and nothing
//! else. Another tenant's thread is answered exactly as one that does not exist, on every path
//! (`/api`, its SSE stream, approvals, forks, `/mcp`'s tools, a body's `threadId`, and through a
//! peer that forwards); a missing scope is `403` naming it; a key's limits hold: requests per
//! minute (`429` with `Retry-After`), turns at once, and a daily budget that twelve concurrent
//! sends cannot overshoot by more than one turn.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::McpHttp;
use harness_tests::mock::{MockApi, Reply};
use orchestrator::caller::{Caller, Scope, CALLER_HEADER};
use orchestrator::cluster::FORWARDED_HEADER;
use orchestrator::config::ApprovalMode;
use orchestrator::http::access::{Need, NEEDS};

pub(crate) const OPERATOR: &str = "the-operator-token";

/// A request as one bearer: (status, JSON body, headers).
async fn call(
    base: &str,
    bearer: &str,
    method: Method,
    path: impl Into<String>,
    body: Option<Value>,
) -> (StatusCode, Value, reqwest::header::HeaderMap) {
    super::support::call(base, Some(bearer), method, path, body).await
}

/// A key of `tenant` with `scopes` (and `limits`: `dailyUsd`, `rpm`, …), made by the operator:
/// (the key, its id).
pub(crate) async fn make_key(
    base: &str,
    tenant: &str,
    scopes: &[&str],
    limits: Value,
) -> (String, String) {
    let mut body = json!({"tenant": tenant, "scopes": scopes});
    if let (Some(body), Some(limits)) = (body.as_object_mut(), limits.as_object()) {
        body.extend(limits.clone());
    }
    let (status, made, _) = call(base, OPERATOR, Method::POST, "/api/keys", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let key = made["key"].as_str().expect("the key").to_owned();
    (key, made["id"].as_str().expect("its id").to_owned())
}

const WRITER: &[&str] = &["threads:read", "threads:write", "approvals"];

/// A thread `bearer` creates: its id.
async fn create_thread(base: &str, bearer: &str) -> String {
    let (status, body, _) = call(base, bearer, Method::POST, "/api/threads", Some(json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_str().expect("an id").to_owned()
}

/// Every route behind the token has its own scope in `access::NEEDS`: a new route cannot fall
/// through to `admin` unnoticed, and no entry names a route that is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_behind_the_token_names_its_scope() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let doc = super::http_api::openapi_doc(&daemon).await;
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("an item") {
            if operation.get("security").is_some() {
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    let listed: Vec<(String, String)> = NEEDS
        .iter()
        // The document names axum's catch-all `{*path}` as `{path}`.
        .map(|(m, p, _)| (m.to_string(), p.replace("{*", "{")))
        .collect();
    let missing: Vec<_> = documented.iter().filter(|r| !listed.contains(r)).collect();
    let stale: Vec<_> = listed.iter().filter(|r| !documented.contains(r)).collect();
    assert!(missing.is_empty(), "routes with no scope: {missing:?}");
    assert!(
        stale.is_empty(),
        "scopes of routes that are not there: {stale:?}"
    );
    assert!(NEEDS.iter().any(|(_, _, n)| *n == Need::Caller), "/api/me");
}

/// What another tenant asks of a thread, and what the same request gets for a thread that
/// does not exist: the two answers must be the same `404`.
struct Attempt {
    method: Method,
    /// With `{T}` for the thread, `{S}` for the schedule, `{M}` for a message, `{R}` for a
    /// permission request, `{F}` for an uploaded file.
    path: &'static str,
    body: Option<Value>,
}

fn attempt(method: Method, path: &'static str, body: Option<Value>) -> Attempt {
    Attempt { method, path, body }
}

/// The ids an attempt's path and body are filled with.
struct Ids<'a> {
    thread: &'a str,
    schedule: &'a str,
    message: &'a str,
    request: &'a str,
    file: &'a str,
}

fn fill(text: &str, ids: &Ids<'_>) -> String {
    text.replace("{T}", ids.thread)
        .replace("{S}", ids.schedule)
        .replace("{M}", ids.message)
        .replace("{R}", ids.request)
        .replace("{F}", ids.file)
}

impl Attempt {
    async fn run(&self, base: &str, bearer: &str, ids: &Ids<'_>) -> (StatusCode, Value) {
        let body = self
            .body
            .as_ref()
            .map(|b| serde_json::from_str(&fill(&b.to_string(), ids)).expect("JSON"));
        let (status, body, _) = call(
            base,
            bearer,
            self.method.clone(),
            &fill(self.path, ids),
            body,
        )
        .await;
        (status, body)
    }
}

/// Every `/api` path that names a thread or a schedule, as another tenant would try it.
fn api_attempts() -> Vec<Attempt> {
    use Method as M;
    vec![
        attempt(M::GET, "/api/threads/{T}", None),
        attempt(
            M::PATCH,
            "/api/threads/{T}",
            Some(json!({"title": "mine now"})),
        ),
        attempt(
            M::POST,
            "/api/threads/{T}/messages",
            Some(json!({"content": "hello"})),
        ),
        attempt(
            M::POST,
            "/api/threads/{T}/messages?wait=false",
            Some(json!({"content": "queued"})),
        ),
        attempt(M::POST, "/api/threads/{T}/interrupt", None),
        attempt(M::POST, "/api/threads/{T}/fork", Some(json!({}))),
        attempt(M::POST, "/api/threads/{T}/archive", None),
        attempt(M::GET, "/api/threads/{T}/diff", None),
        attempt(M::GET, "/api/threads/{T}/events", None),
        attempt(M::GET, "/api/threads/{T}/events?after=0", None),
        attempt(M::GET, "/api/threads/{T}/messages/{M}/outcomes", None),
        attempt(M::GET, "/api/threads/{T}/messages/{M}/model-requests", None),
        attempt(M::GET, "/api/threads/{T}/tool-calls", None),
        attempt(M::GET, "/api/threads/{T}/files", None),
        attempt(M::GET, "/api/threads/{T}/files/notes.txt", None),
        attempt(M::GET, "/api/files/{F}", None),
        attempt(M::GET, "/api/threads/{T}/permissions", None),
        attempt(M::GET, "/api/threads/{T}/permissions?all=true", None),
        attempt(
            M::POST,
            "/api/threads/{T}/permissions/{R}",
            Some(json!({"decision": "allow"})),
        ),
        attempt(M::POST, "/api/prewarm", Some(json!({"threadId": "{T}"}))),
        attempt(
            M::POST,
            "/api/tools/time__current_time/call",
            Some(json!({"threadId": "{T}", "input": {}})),
        ),
        attempt(
            M::POST,
            "/api/schedules",
            Some(json!({"cron": "0 0 1 1 *", "threadId": "{T}", "prompt": "mine"})),
        ),
        attempt(M::GET, "/api/schedules/{S}", None),
        attempt(
            M::PATCH,
            "/api/schedules/{S}",
            Some(json!({"prompt": "mine"})),
        ),
        attempt(M::POST, "/api/schedules/{S}/pause", None),
        attempt(M::POST, "/api/schedules/{S}/resume", None),
        attempt(M::POST, "/api/schedules/{S}/run", None),
        attempt(M::GET, "/api/schedules/{S}/runs", None),
        attempt(M::DELETE, "/api/schedules/{S}", None),
    ]
}

/// The `/mcp` tool calls that name a thread.
fn mcp_attempts(thread: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("threads__get", json!({"threadId": thread})),
        (
            "threads__send",
            json!({"threadId": thread, "content": "hello"}),
        ),
        (
            "threads__send",
            json!({"threadId": thread, "content": "again", "clientMessageId": "c-1"}),
        ),
    ]
}

/// Acme's thread, with a finished turn, a pending permission and a schedule; Globex tries every
/// path on them and gets what a thread that does not exist gets; nothing of Acme's changed;
/// Acme (and an admin key) can do each of those things.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_key_finds_nothing_of_a_thread_on_any_path() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.auth_token = Some(OPERATOR.into());
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Ask;
    })
    .await;
    let base = daemon.base.clone();
    let (acme, _) = make_key(&base, "acme", WRITER, json!({})).await;
    let (globex, _) = make_key(&base, "globex", WRITER, json!({})).await;
    let (admin, _) = make_key(&base, "ops", &["admin"], json!({})).await;

    let thread = create_thread(&base, &acme).await;
    let (status, sent, _) = call(
        &base,
        &acme,
        Method::POST,
        &format!("/api/threads/{thread}/messages"),
        Some(json!({"content": "first"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    let message = sent["userMessageId"].as_str().expect("its id").to_owned();
    // A turn that waits for a person: its permission request is pending.
    mock.once_when_prompt_contains(
        "run it",
        Reply::tool_use(
            "Bash",
            json!({"command": "touch tenants-test", "description": "d"}),
        ),
    );
    let (status, queued, _) = call(
        &base,
        &acme,
        Method::POST,
        &format!("/api/threads/{thread}/messages?wait=false"),
        Some(json!({"content": "run it"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let request = pending_request(&base, &acme, &thread).await;
    let (status, schedule, _) = call(
        &base,
        &acme,
        Method::POST,
        "/api/schedules",
        Some(json!({"cron": "0 0 1 1 *", "threadId": thread, "prompt": "yearly"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{schedule}");
    let schedule = schedule["id"].as_str().expect("an id").to_owned();
    let uploaded = reqwest::Client::new()
        .post(format!("{base}/api/files"))
        .bearer_auth(&acme)
        .header("content-type", "image/png")
        .body(harness_tests::media::PNG)
        .send()
        .await
        .expect("an upload");
    assert_eq!(uploaded.status(), StatusCode::CREATED);
    let file: Value = uploaded.json().await.expect("its JSON");
    let file = file["id"].as_str().expect("an id").to_owned();
    let before = call(
        &base,
        &acme,
        Method::GET,
        &format!("/api/threads/{thread}"),
        None,
    )
    .await
    .1;

    let theirs = Ids {
        thread: &thread,
        schedule: &schedule,
        message: &message,
        request: &request,
        file: &file,
    };
    let nobodys = Ids {
        thread: "thr_00000000000000000000000000",
        schedule: "sch_nobodys",
        message: &message,
        request: &request,
        file: "file_00000000000000000000000000000000",
    };
    let mut tried = 0;
    for attempt in api_attempts() {
        let (status, body) = attempt.run(&base, &globex, &theirs).await;
        let (none_status, none_body) = attempt.run(&base, &globex, &nobodys).await;
        let what = format!("{} {}", attempt.method, attempt.path);
        assert!(
            status == StatusCode::NOT_FOUND || status == StatusCode::UNPROCESSABLE_ENTITY,
            "{what}: {status} {body}"
        );
        assert_eq!(status, none_status, "{what}: as for no thread");
        assert_eq!(
            body["error"]["code"], none_body["error"]["code"],
            "{what}: {body} / {none_body}"
        );
        let text = body.to_string();
        assert!(
            !text.contains("first") && !text.contains("yearly"),
            "{what}: {text}"
        );
        tried += 1;
    }
    // A percent-encoded id is the same thread to the handler, and to the check.
    let encoded = format!("/api/threads/%{:02X}{}", b't', &thread[1..]);
    let (status, body, _) = call(&base, &globex, Method::GET, &encoded, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{encoded}: {body}");
    tried += 1;

    let mcp = McpHttp::new(&base, Some(&globex));
    for (id, (tool, arguments)) in (1..).zip(mcp_attempts(&thread)) {
        let answer = mcp.call_tool(id, tool, arguments).await;
        let result = answer.result();
        assert_eq!(result["isError"], true, "{tool}: {result}");
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("not found"), "{tool}: {text}");
        tried += 1;
    }
    let listed = mcp.call_tool(9, "threads__list", json!({})).await;
    assert!(
        !listed.result().to_string().contains(&thread),
        "threads__list"
    );
    let (_, listed, _) = call(&base, &globex, Method::GET, "/api/threads", None).await;
    assert!(!listed.to_string().contains(&thread), "GET /api/threads");
    let (_, listed, _) = call(&base, &globex, Method::GET, "/api/schedules", None).await;
    assert!(
        !listed.to_string().contains(&schedule),
        "GET /api/schedules"
    );
    tried += 3;
    assert!(tried >= 30, "{tried} attempts");

    // Nothing of Acme's changed: the title, the messages, the pending request, the schedule.
    let after = call(
        &base,
        &acme,
        Method::GET,
        &format!("/api/threads/{thread}"),
        None,
    )
    .await
    .1;
    assert_eq!(after["title"], before["title"]);
    assert_eq!(
        after["messages"], before["messages"],
        "no message was added or cut"
    );
    assert_eq!(after.get("archivedAt"), None);
    assert_eq!(pending_request(&base, &acme, &thread).await, request);
    let (status, kept, _) = call(
        &base,
        &acme,
        Method::GET,
        &format!("/api/schedules/{schedule}"),
        None,
    )
    .await;
    assert_eq!(
        (status, &kept["prompt"], &kept["enabled"]),
        (StatusCode::OK, &json!("yearly"), &json!(true))
    );

    // Acme can do each thing Globex could not; an admin key sees it too.
    owner_can_do_it_all(&base, &acme, &thread, &message, &request).await;
    let (status, _, _) = call(
        &base,
        &admin,
        Method::GET,
        &format!("/api/threads/{thread}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "admin sees every tenant's");
    let (_, listed, _) = call(&base, &acme, Method::GET, "/api/threads", None).await;
    let ids: Vec<&str> = listed["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert!(ids.contains(&thread.as_str()), "{ids:?}");
    assert!(
        listed["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .all(|t| t["tenant"] == "acme"),
        "acme lists acme's only: {listed}"
    );
    daemon.stop().await;
}

/// The first pending permission request of the thread, once there is one.
async fn pending_request(base: &str, bearer: &str, thread: &str) -> String {
    let path = format!("/api/threads/{thread}/permissions");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body, _) = call(base, bearer, Method::GET, &path, None).await;
        if let Some(id) = body["permissions"][0]["requestId"].as_str() {
            return id.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pending permission: {body}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The thread's last reply, once it has `n` replies.
async fn nth_reply(base: &str, bearer: &str, thread: &str, n: usize) -> String {
    let path = format!("/api/threads/{thread}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body, _) = call(base, bearer, Method::GET, &path, None).await;
        let replies: Vec<&str> = body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["content"].as_str())
            .collect();
        if replies.len() >= n {
            return replies[n - 1].to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no reply {n}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The owner reads the thread and its stream, answers its permission, forks it, sends to it
/// over `/api` and `/mcp`.
async fn owner_can_do_it_all(base: &str, key: &str, thread: &str, message: &str, request: &str) {
    let get = |path: String| async move { call(base, key, Method::GET, &path, None).await.0 };
    for path in [
        format!("/api/threads/{thread}"),
        format!("/api/threads/{thread}/tool-calls"),
        format!("/api/threads/{thread}/files"),
        format!("/api/threads/{thread}/permissions"),
        format!("/api/threads/{thread}/messages/{message}/outcomes"),
        format!("/api/threads/{thread}/messages/{message}/model-requests"),
    ] {
        assert_eq!(get(path.clone()).await, StatusCode::OK, "{path}");
    }
    let events = reqwest::Client::new()
        .get(format!("{base}/api/threads/{thread}/events"))
        .bearer_auth(key)
        .send()
        .await
        .expect("the stream opens");
    assert_eq!(events.status(), StatusCode::OK);
    drop(events);
    let (status, answered, _) = call(
        base,
        key,
        Method::POST,
        &format!("/api/threads/{thread}/permissions/{request}"),
        Some(json!({"decision": "deny", "message": "not now"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    let (status, fork, _) = call(
        base,
        key,
        Method::POST,
        &format!("/api/threads/{thread}/fork"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    assert_eq!(
        fork["tenant"], "acme",
        "a fork stays with its tenant: {fork}"
    );
    let mcp = McpHttp::new(base, Some(key));
    let got = mcp
        .call_tool(1, "threads__get", json!({"threadId": thread}))
        .await;
    assert_ne!(got.result()["isError"], true, "{}", got.result());
    assert_eq!(got.result()["structuredContent"]["threadId"], thread);
    let sent = mcp
        .call_tool(
            2,
            "threads__send",
            json!({"threadId": thread, "content": "over mcp"}),
        )
        .await;
    assert_eq!(
        sent.result()["structuredContent"]["status"],
        "done",
        "{}",
        sent.result()
    );
}

/// A missing scope is `403` naming it, in the body and in the challenge, over `/api`, `/metrics`
/// and `/mcp` (a tool call that changes something); `/api/me` says who the caller is; a revoked
/// key is `401`; the audit log names the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_scope_is_403_naming_it() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(OPERATOR.into())).await;
    let base = daemon.base.clone();
    let (reader, reader_id) = make_key(&base, "acme", &["threads:read"], json!({})).await;
    let (writer, writer_id) =
        make_key(&base, "acme", &["threads:read", "threads:write"], json!({})).await;
    let thread = create_thread(&base, &writer).await;

    let (status, me, _) = call(&base, &reader, Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        me,
        json!({"subject": reader_id, "tenant": "acme", "scopes": ["threads:read"]})
    );
    let (status, _, _) = call(
        &base,
        &reader,
        Method::GET,
        &format!("/api/threads/{thread}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "reading is in scope");
    for (method, path, body, scope) in [
        (
            Method::POST,
            "/api/threads".to_owned(),
            Some(json!({})),
            "threads:write",
        ),
        (
            Method::POST,
            format!("/api/threads/{thread}/messages"),
            Some(json!({"content": "hi"})),
            "threads:write",
        ),
        (
            Method::POST,
            format!("/api/threads/{thread}/permissions/req_1"),
            Some(json!({"decision": "allow"})),
            "approvals",
        ),
        (Method::GET, "/api/audit".to_owned(), None, "admin"),
        (Method::GET, "/api/keys".to_owned(), None, "admin"),
        (
            Method::GET,
            "/api/webhooks/deliveries".to_owned(),
            None,
            "admin",
        ),
        (Method::GET, "/api/pool".to_owned(), None, "metrics"),
        (Method::GET, "/metrics".to_owned(), None, "metrics"),
    ] {
        let (status, body, headers) = call(&base, &reader, method.clone(), &path, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], "forbidden");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("`{scope}`")),
            "{method} {path}: {message}"
        );
        // RFC 6750 §3.1, in the header too; no metadata: a key's scopes are fixed when it is made.
        assert_eq!(
            headers["www-authenticate"],
            format!(r#"Bearer realm="harness", scope="{scope}", error="insufficient_scope""#),
            "{method} {path}"
        );
    }
    // Over `/mcp`, before the call runs: `403` with the challenge an MCP client steps up on.
    let mcp = McpHttp::new(&base, Some(&reader));
    let refused = mcp
        .call_tool(
            1,
            "threads__send",
            json!({"threadId": thread, "content": "hi"}),
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{refused:?}");
    assert_eq!(
        refused.headers["www-authenticate"],
        r#"Bearer realm="harness", scope="threads:write", error="insufficient_scope""#
    );
    assert!(
        refused.last()["error"]["message"]
            .to_string()
            .contains("`threads:write`"),
        "{refused:?}"
    );
    let listed = mcp.call_tool(2, "threads__list", json!({})).await;
    assert!(
        listed.result().to_string().contains(&thread),
        "reading over mcp is in scope"
    );

    // The audit log names the key that changed something, and the refusal.
    let (_, audit, _) = call(&base, OPERATOR, Method::GET, "/api/audit", None).await;
    let entries = audit["entries"].as_array().expect("entries");
    assert!(
        entries.iter().any(|e| e["subject"] == writer_id.as_str()
            && e["action"] == "POST /api/threads"
            && e["status"] == 201),
        "{audit}"
    );
    assert!(
        entries
            .iter()
            .any(|e| e["subject"] == reader_id.as_str() && e["status"] == 403),
        "refusals are recorded: {audit}"
    );

    let (status, revoked, _) = call(
        &base,
        OPERATOR,
        Method::DELETE,
        &format!("/api/keys/{reader_id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert!(revoked["revokedAt"].is_string(), "{revoked}");
    let (status, _, headers) = call(&base, &reader, Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers.contains_key("www-authenticate"));
    let (_, keys, _) = call(&base, OPERATOR, Method::GET, "/api/keys", None).await;
    assert!(
        !keys.to_string().contains(&reader[3..]),
        "no key is ever listed: {keys}"
    );
    daemon.stop().await;
}

/// A key's requests per minute: a burst of `rpm`, then `429` with `Retry-After`, for that key
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_past_its_requests_per_minute_gets_429_with_retry_after() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(OPERATOR.into())).await;
    let base = daemon.base.clone();
    let (limited, _) = make_key(&base, "acme", WRITER, json!({"rpm": 3})).await;
    let (other, _) = make_key(&base, "acme", WRITER, json!({})).await;
    for n in 0..3 {
        let (status, _, _) = call(&base, &limited, Method::GET, "/api/me", None).await;
        assert_eq!(status, StatusCode::OK, "request {n} of 3");
    }
    let (status, body, headers) = call(&base, &limited, Method::GET, "/api/threads", None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "rate_limited");
    let wait: u64 = headers["retry-after"]
        .to_str()
        .expect("text")
        .parse()
        .expect("whole seconds");
    assert!((1..=20).contains(&wait), "one request every 20 s: {wait}");
    let (status, _, _) = call(&base, &other, Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK, "another key is not limited");
    let (status, _, _) = call(&base, OPERATOR, Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK, "nor the operator");
    daemon.stop().await;
}

/// Twelve threads send at once on one key with a daily budget: each turn holds its estimate in
/// the key's budget while it runs, so the key's spending passes its limit by at most one turn;
/// a turn no key sent is not charged to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_sends_on_one_keys_budget_spend_at_most_one_turn_beyond_it() {
    let mock = MockApi::start().await;
    let turn = super::usage::one_turns_cost(&mock).await;
    let limit = turn * 3.5;
    let daemon = TestDaemon::start(&mock, |c| {
        c.auth_token = Some(OPERATOR.into());
        c.budget.turn_estimate_usd = turn;
    })
    .await;
    let base = daemon.base.clone();
    let (key, key_id) = make_key(&base, "acme", WRITER, json!({"dailyUsd": limit})).await;
    let mut threads = Vec::new();
    for _ in 0..12 {
        threads.push(create_thread(&base, &key).await);
    }
    let answers = futures::future::join_all(threads.iter().map(|thread| {
        call(
            &base,
            &key,
            Method::POST,
            format!("/api/threads/{thread}/messages"),
            Some(json!({"content": "all at once"})),
        )
    }))
    .await;
    let ran = answers.iter().filter(|a| a.0 == StatusCode::OK).count();
    let refused = answers
        .iter()
        .filter(|a| a.0 == StatusCode::PAYMENT_REQUIRED && a.1["error"]["budget"] == "key")
        .count();
    assert_eq!(ran + refused, 12, "{answers:?}");
    assert!(
        (1..=4).contains(&ran),
        "{ran} of 12 ran on 3.5 turns' worth"
    );

    let spent: f64 = {
        let mut spent = 0.0;
        for thread in &threads {
            let (_, body, _) = call(
                &base,
                &key,
                Method::GET,
                &format!("/api/threads/{thread}"),
                None,
            )
            .await;
            spent += body["usage"]["costUsd"].as_f64().unwrap_or(0.0);
        }
        spent
    };
    assert!(
        spent <= limit + turn * 1.5,
        "key {key_id} spent {spent:.6} USD on a {limit:.6} budget (one turn: {turn:.6})"
    );
    let (_, keys, _) = call(&base, OPERATOR, Method::GET, "/api/keys", None).await;
    let listed = keys["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["id"] == key_id.as_str())
        .expect("the key is listed");
    let charged = listed["spentTodayUsd"].as_f64().expect("spentTodayUsd");
    assert!(
        (charged - spent).abs() < 1e-9,
        "charged {charged}, its threads cost {spent}"
    );
    // The operator's turns are not the key's.
    let own = create_thread(&base, OPERATOR).await;
    let (status, body, _) = call(
        &base,
        OPERATOR,
        Method::POST,
        &format!("/api/threads/{own}/messages"),
        Some(json!({"content": "not on the key"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    daemon.stop().await;
}

/// Sends `text` without waiting for its turn.
async fn queue(base: &str, key: &str, thread: &str, text: &str) -> StatusCode {
    let path = format!("/api/threads/{thread}/messages?wait=false");
    call(
        base,
        key,
        Method::POST,
        path,
        Some(json!({"content": text})),
    )
    .await
    .0
}

/// A key with one turn at a time: its second turn waits until the first ends, while a turn of
/// another key runs meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_turns_at_once_wait_for_each_other_and_no_one_else() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(OPERATOR.into())).await;
    let base = daemon.base.clone();
    let (one, _) = make_key(&base, "acme", WRITER, json!({"maxConcurrentTurns": 1})).await;
    let (free, _) = make_key(&base, "acme", WRITER, json!({})).await;
    let (first, second, control) = (
        create_thread(&base, &one).await,
        create_thread(&base, &one).await,
        create_thread(&base, &free).await,
    );
    mock.once_when_prompt_contains("hold on", Reply::Hang);
    assert_eq!(
        queue(&base, &one, &first, "hold on").await,
        StatusCode::ACCEPTED
    );
    mock.wait_for_requests(1, Duration::from_secs(60))
        .await
        .expect("the first turn reaches the model");
    assert_eq!(
        queue(&base, &one, &second, "second in line").await,
        StatusCode::ACCEPTED
    );
    // Another key's turn, sent after it, runs to its end meanwhile.
    let (status, body, _) = call(
        &base,
        &free,
        Method::POST,
        &format!("/api/threads/{control}/messages"),
        Some(json!({"content": "not waiting"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A turn that starts says so before it asks for its process; the key's second has not.
    let events = super::support::stored_events(&daemon, &second).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert!(
        !kinds.contains(&"turn_started"),
        "the key's second turn started while its first ran: {kinds:?}"
    );
    assert!(kinds.contains(&"message_received"), "{kinds:?}");
    let (status, _, _) = call(
        &base,
        &one,
        Method::POST,
        &format!("/api/threads/{first}/interrupt"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        nth_reply(&base, &one, &second, 1).await,
        "echo: second in line"
    );
    daemon.stop().await;
}

/// Through a peer: Globex's requests for Acme's thread get `404` on the node they reach, and a
/// forwarded request carrying Globex as its caller gets `404` from the owner itself; Acme's go
/// through the peer to the owner's warm process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_peer_another_tenant_still_finds_nothing() {
    let mock = MockApi::start().await;
    let (a, b) = super::cluster::two_nodes(&mock, Duration::from_secs(15)).await;
    // No token on these nodes: the operator is whoever names no key, and a key is its tenant.
    let (acme, _) = make_key(&a.base, "acme", WRITER, json!({})).await;
    let (globex, globex_id) = make_key(&a.base, "globex", WRITER, json!({})).await;
    let thread = create_thread(&a.base, &acme).await;
    let (status, body, _) = call(
        &a.base,
        &acme,
        Method::POST,
        &format!("/api/threads/{thread}/messages"),
        Some(json!({"content": "owned by a"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let ids = Ids {
        thread: &thread,
        schedule: "sch_none",
        message: "msg_none",
        request: "req_none",
        file: "file_none",
    };
    for attempt in [
        attempt(Method::GET, "/api/threads/{T}", None),
        attempt(
            Method::POST,
            "/api/threads/{T}/messages",
            Some(json!({"content": "x"})),
        ),
        attempt(Method::POST, "/api/threads/{T}/interrupt", None),
        attempt(Method::POST, "/api/threads/{T}/archive", None),
        attempt(
            Method::POST,
            "/api/prewarm",
            Some(json!({"threadId": "{T}"})),
        ),
    ] {
        let (status, body) = attempt.run(&b.base, &globex, &ids).await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "via b: {} {}: {body}",
            attempt.method,
            attempt.path
        );
    }
    let mcp = McpHttp::new(&b.base, Some(&globex));
    let sent = mcp
        .call_tool(
            1,
            "threads__send",
            json!({"threadId": thread, "content": "x"}),
        )
        .await;
    assert!(
        sent.result().to_string().contains("not found"),
        "{}",
        sent.result()
    );

    // The owner checks a forwarded caller too: a peer's request for Globex is refused there.
    let path = format!("/api/threads/{thread}/messages");
    let as_globex = Caller {
        subject: globex_id,
        tenant: Some("globex".into()),
        scopes: vec![Scope::ThreadsRead, Scope::ThreadsWrite],
    };
    let forwarded = reqwest::Client::new()
        .post(format!("{}{path}", a.base))
        .header(FORWARDED_HEADER, "1")
        .header(CALLER_HEADER, as_globex.forwarded(b"", "POST", &path))
        .json(&json!({"content": "forwarded"}))
        .send()
        .await
        .expect("a answers");
    assert_eq!(forwarded.status(), StatusCode::NOT_FOUND);

    // Acme, through b, reaches its thread on a.
    let (status, body, _) = call(
        &b.base,
        &acme,
        Method::POST,
        &format!("/api/threads/{thread}/messages"),
        Some(json!({"content": "through b"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["message"]["content"], "echo: through b");
    a.stop().await;
    b.stop().await;
}

/// Two keys' clients run a `threads__send` under the same JSON-RPC id: one's
/// `notifications/cancelled` stops its own call only (with one shared token, neither could be
/// told apart and a cancel matching both stopped neither).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_over_mcp_stops_only_its_own_callers_call() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(OPERATOR.into())).await;
    let base = daemon.base.clone();
    let (a, _) = make_key(&base, "acme", WRITER, json!({})).await;
    let (b, _) = make_key(&base, "acme", WRITER, json!({})).await;
    mock.when_prompt_contains("wait for me", Reply::Hang);
    let thread = create_thread(&base, &a).await;
    let mcp_a = McpHttp::new(&base, Some(&a));
    let mcp_b = McpHttp::new(&base, Some(&b));
    let send = {
        let (mcp_a, thread) = (mcp_a.clone(), thread.clone());
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
    mock.wait_for_requests(1, Duration::from_secs(60))
        .await
        .expect("the turn reaches the model");
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 42}});
    let endpoint = daemon.daemon().mcp_endpoint.clone();
    assert_eq!(
        mcp_b.post(cancel.clone()).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        endpoint.in_flight().len(),
        1,
        "another key's cancel stopped nothing"
    );
    assert!(!send.is_finished());
    assert_eq!(mcp_a.post(cancel).await.status, StatusCode::ACCEPTED);
    let answer = tokio::time::timeout(Duration::from_secs(30), send)
        .await
        .expect("the cancelled call answers")
        .expect("the call task");
    assert_eq!(
        answer.result()["structuredContent"]["status"],
        "interrupted"
    );
    daemon.stop().await;
}

/// A child thread a tenant's turn delegates to belongs to that tenant, and acts for its key:
/// the key lists it, another tenant's key finds nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegated_child_belongs_to_its_parents_tenant() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(OPERATOR.into())).await;
    let base = daemon.base.clone();
    let (acme, acme_id) = make_key(&base, "acme", WRITER, json!({})).await;
    let (globex, _) = make_key(&base, "globex", WRITER, json!({})).await;
    mock.once_when_prompt_contains(
        "please delegate",
        Reply::tool_use(
            "mcp__harness__delegation__delegate",
            json!({"prompt": "child task"}),
        ),
    );
    let parent = create_thread(&base, &acme).await;
    let (status, body, _) = call(
        &base,
        &acme,
        Method::POST,
        format!("/api/threads/{parent}/messages"),
        Some(json!({"content": "please delegate this"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, listed, _) = call(&base, &acme, Method::GET, "/api/threads", None).await;
    let child = listed["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["parentId"] == parent.as_str())
        .unwrap_or_else(|| panic!("acme lists the child: {listed}"));
    assert_eq!(child["tenant"], "acme");
    let child = child["id"].as_str().expect("an id").to_owned();
    let (_, child_body, _) = call(
        &base,
        &acme,
        Method::GET,
        format!("/api/threads/{child}"),
        None,
    )
    .await;
    assert_eq!(
        child_body["messages"][0]["caller"],
        json!({"subject": acme_id, "tenant": "acme"}),
        "the child acts for the parent's caller: {child_body}"
    );
    let (status, _, _) = call(
        &base,
        &globex,
        Method::GET,
        format!("/api/threads/{child}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    daemon.stop().await;
}

/// A key's daily budget is metered as its turns run: a turn whose model calls a tool after
/// every answer stops within one model request of the key's $0.05, refused by the model
/// gateway with the key named, though the thread itself has no budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_turn_stops_within_one_request_of_its_keys_daily_budget() {
    const DAILY: f64 = 0.05;
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.auth_token = Some(OPERATOR.into());
        c.turn.max_tool_calls = 100;
    })
    .await;
    super::gateway::script_a_runaway(&mock);
    let base = daemon.base.clone();
    let (key, key_id) = make_key(&base, "acme", WRITER, json!({"dailyUsd": DAILY})).await;
    let thread = create_thread(&base, &key).await;
    let (status, body, _) = call(
        &base,
        &key,
        Method::POST,
        format!("/api/threads/{thread}/messages"),
        Some(json!({"content": "loop forever"})),
    )
    .await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    assert_eq!(body["error"]["budget"], "key", "{body}");
    let message = body["error"]["messageId"].as_str().unwrap().to_owned();
    let (_, record, _) = call(
        &base,
        &key,
        Method::GET,
        format!("/api/threads/{thread}/messages/{message}/model-requests"),
        None,
    )
    .await;
    let requests = record["modelRequests"].as_array().unwrap();
    let (refused, went) = requests.split_last().unwrap();
    assert_eq!(refused["status"], 402, "{record}");
    let cost = |r: &Value| r["costUsd"].as_f64().unwrap();
    let spent: f64 = went.iter().map(cost).sum();
    assert!(
        spent >= DAILY && spent - cost(&went[went.len() - 1]) < DAILY,
        "{record}"
    );
    let (_, keys, _) = call(&base, OPERATOR, Method::GET, "/api/keys", None).await;
    let listed = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == key_id.as_str())
        .cloned()
        .unwrap();
    let charged = listed["spentTodayUsd"].as_f64().unwrap();
    assert!(
        charged >= DAILY && charged < DAILY + cost(&went[0]) * 1.01,
        "{listed}"
    );
    daemon.stop().await;
}
