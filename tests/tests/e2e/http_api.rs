//! The HTTP API's contract: shapes, statuses and JSON errors.

use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_can_be_created_listed_and_read() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (status, health) = daemon.get("/healthz").await;
    assert_eq!(
        (status.as_u16(), health["status"].as_str()),
        (200, Some("ok"))
    );

    let (status, created) = daemon
        .post(
            "/api/threads",
            json!({"title": "demo", "model": "claude-test-1"}),
        )
        .await;
    assert_eq!(status, 201);
    let id = created["id"].as_str().unwrap();
    assert_eq!(created["title"], "demo");
    assert_eq!(created["model"], "claude-test-1");

    let (_, list) = daemon.get("/api/threads").await;
    assert!(list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["id"] == id));

    let (status, reply) = daemon.send(id, "hi").await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["threadId"], id);
    assert_eq!(reply["message"]["role"], "assistant");
    assert_eq!(reply["message"]["status"], "done");
    assert!(reply["sessionId"].is_string());
    assert_eq!(
        mock.message_requests().last().unwrap().model(),
        Some("claude-test-1"),
        "the thread's model is used"
    );

    let (_, thread) = daemon.get(&format!("/api/threads/{id}")).await;
    let messages = thread["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(
        (messages[0]["role"].as_str(), messages[0]["status"].as_str()),
        (Some("user"), Some("done"))
    );
    assert_eq!(
        messages[1]["replyTo"], messages[0]["id"],
        "the reply is linked to its question"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_json_errors() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.max_body_bytes = 4096;
        c.files.max_message_bytes = 1024;
    })
    .await;
    let thread = daemon.create_thread().await;
    let path = format!("/api/threads/{thread}/messages");
    // A message may carry files: its body may be larger than `max_body_bytes`, by them.
    let message_limit = daemon.config.files.message_body_limit(4096);

    let (status, body) = daemon.send("thr_does_not_exist", "hi").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "thread_not_found");

    let (status, body) = daemon.post_raw(&path, "{\"content\": ").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_json");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("column"),
        "names the position: {body}"
    );

    let (status, body) = daemon.post(&path, json!({"text": "wrong field"})).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("content"),
        "names the field: {body}"
    );

    let (status, body) = daemon.post(&path, json!({"content": "   "})).await;
    assert_eq!(status, 422, "{body}");

    let (status, body) = daemon
        .post(&path, json!({"content": "x".repeat(message_limit)}))
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "body_too_large");
    let (status, body) = daemon
        .post("/api/threads", json!({"title": "x".repeat(4096)}))
        .await;
    assert_eq!(status, 413, "other routes keep max_body_bytes: {body}");

    let (status, body) = daemon
        .post("/api/prewarm", json!({"threadId": "thr_nope"}))
        .await;
    assert_eq!(status, 404, "{body}");
    // A blank model is no model (#46: prewarm took `model: ""`).
    let thread = daemon.create_thread().await;
    for model in ["", "  ", &"m".repeat(201)] {
        let (status, body) = daemon
            .post("/api/prewarm", json!({"threadId": thread, "model": model}))
            .await;
        assert_eq!(status, 422, "{model:?}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("model"),
            "{body}"
        );
    }
    assert!(daemon.pid_of(&thread).is_none(), "nothing started");

    // A NUL in a filter was a 500 from the database (#46), an overlong one a full scan.
    for query in [
        "q=a%00b".to_owned(),
        "tag=x%00".to_owned(),
        format!("q={}", "w".repeat(1001)),
    ] {
        let (status, body) = daemon.get(&format!("/api/threads?{query}")).await;
        assert_eq!(status, 422, "{query}: {body}");
    }

    let (status, body) = daemon.get("/api/nothing-here").await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"].is_string());
    assert!(
        mock.message_requests().is_empty(),
        "no bad request reached the CLI"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_cli_is_a_503_with_the_reason_and_the_message_is_kept() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.claude.bin = "/nonexistent/claude".into()).await;
    let thread = daemon.create_thread().await;
    let (status, body) = daemon.send(&thread, "anyone there?").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "cli_unavailable");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/claude"),
        "{body}"
    );
    let (_, thread_body) = daemon.get(&format!("/api/threads/{thread}")).await;
    let messages = thread_body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "the user's message is kept");
    assert_eq!(messages[0]["content"], "anyone there?");
    assert_eq!(messages[0]["status"], "error");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_when_configured() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some("s3cret".into())).await;
    let (status, body) = daemon.post("/api/threads", json!({})).await;
    assert_eq!(status, 401, "{body}");
    // The challenge says how to authenticate (RFC 9110 §11.6.1); with an error code only when
    // credentials came (RFC 6750 §3).
    let challenge = |token: Option<&str>| {
        let mut request = reqwest::Client::new().get(format!("{}/api/threads", daemon.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401);
            let header = response.headers().get("www-authenticate").cloned();
            header.map(|v| v.to_str().unwrap().to_owned())
        }
    };
    assert_eq!(
        challenge(None).await.as_deref(),
        Some(r#"Bearer realm="harness""#)
    );
    assert_eq!(
        challenge(Some("wrong")).await.as_deref(),
        Some(r#"Bearer realm="harness", error="invalid_token""#)
    );
    let (status, _) = daemon.get("/healthz").await;
    assert_eq!(status, 200, "health needs no token");
    let response = reqwest::Client::new()
        .post(format!("{}/api/threads", daemon.base))
        .bearer_auth("s3cret")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    daemon.stop().await;
}

/// The daemon's `GET /api/openapi.json`.
pub(crate) async fn openapi_doc(daemon: &TestDaemon) -> serde_json::Value {
    let (status, doc) = daemon.get("/api/openapi.json").await;
    assert_eq!(status, 200, "{doc}");
    doc
}

/// What is wrong with `value` as the OpenAPI document's component schema `name` (JSON Schema
/// 2020-12, as OpenAPI 3.1 writes it; `discriminator` and `example` are annotations).
fn problems(doc: &serde_json::Value, name: &str, value: &serde_json::Value) -> Vec<String> {
    let schema = json!({"$ref": format!("#/components/schemas/{name}")});
    schema_problems(doc, &schema, value)
}

/// What is wrong with `value` as `schema`, whose `$ref`s point into `doc`'s components.
pub(crate) fn schema_problems(
    doc: &serde_json::Value,
    schema: &serde_json::Value,
    value: &serde_json::Value,
) -> Vec<String> {
    let root = json!({"allOf": [schema], "components": doc["components"]});
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&root)
        .unwrap_or_else(|err| panic!("{schema} does not compile: {err}"));
    validator
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[track_caller]
pub(crate) fn check_against(doc: &serde_json::Value, name: &str, value: &serde_json::Value) {
    let problems = problems(doc, name, value);
    assert!(problems.is_empty(), "{value} is no {name}: {problems:?}");
}

/// `GET /api/openapi.json` over a socket, and the shapes a real turn (with a tool call) sends,
/// checked against it: the reply, the thread, its tool calls, the pool, and every event on the
/// stream. The payloads the daemon builds with `json!` are documented by hand in
/// `http::openapi::payload`; this is what holds the two together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_turn_matches_the_openapi_document() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let response = reqwest::get(format!("{}/api/openapi.json", daemon.base))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let doc: serde_json::Value = response.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));

    mock.once_when_prompt_contains(
        "what time is it",
        harness_tests::mock::Reply::tool_use("mcp__harness__time__current_time", json!({})),
    );
    let thread = daemon.create_thread().await;
    let (status, reply) = daemon.send(&thread, "what time is it?").await;
    assert_eq!(status, 200, "{reply}");
    check_against(&doc, "TurnReply", &reply);
    let (_, got) = daemon.get(&format!("/api/threads/{thread}")).await;
    check_against(&doc, "ThreadWithMessages", &got);
    let (_, calls) = daemon
        .get(&format!("/api/threads/{thread}/tool-calls"))
        .await;
    assert_eq!(
        calls["toolCalls"].as_array().map(Vec::len),
        Some(1),
        "{calls}"
    );
    check_against(&doc, "ToolCallList", &calls);
    let (_, list) = daemon.get("/api/threads").await;
    check_against(&doc, "ThreadPage", &list);
    let (_, pool) = daemon.get("/api/pool").await;
    check_against(&doc, "PoolStatus", &pool);
    let (status, error) = daemon.get("/api/threads/thr_missing").await;
    assert_eq!(status, 404);
    check_against(&doc, "ErrorBody", &error);

    let mut stream = crate::support::SseClient::connect(&daemon.base, &thread, None).await;
    let events = stream
        .until(
            std::time::Duration::from_secs(10),
            crate::support::is_terminal,
        )
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    for kind in [
        "message_received",
        "turn_started",
        "process_ready",
        "tool_call_started",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    for event in &events {
        check_against(&doc, "ThreadEvent", &event.data);
    }
    // The check has teeth: a `turn_failed` without its fields is refused.
    let mut wrong = events.last().unwrap().data.clone();
    wrong["kind"] = json!("turn_failed");
    wrong["data"] = json!({"messageId": wrong["messageId"]});
    assert!(!problems(&doc, "ThreadEvent", &wrong).is_empty(), "{wrong}");
    daemon.stop().await;
}

/// Titles and model names are bounded, and a model is never empty, with 422 (issue #24: a
/// 900 KB title was taken, and a 150 KB model broke the spawn).
#[tokio::test]
async fn titles_and_models_are_bounded() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let long_title = "t".repeat(501);
    let long_model = "m".repeat(201);
    for body in [
        json!({"title": long_title}),
        json!({"model": ""}),
        json!({"model": "  "}),
        json!({"model": long_model}),
    ] {
        let (status, answer) = daemon.post("/api/threads", body.clone()).await;
        assert_eq!(status, 422, "{body}: {answer}");
    }
    let (status, thread) = daemon
        .post("/api/threads", json!({"title": "t".repeat(500)}))
        .await;
    assert_eq!(status, 201, "{thread}");
    let id = thread["id"].as_str().unwrap();
    let (status, answer) = daemon
        .post(
            &format!("/api/threads/{id}/messages"),
            json!({"content": "hi", "model": ""}),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        mock.message_requests().is_empty(),
        "nothing reached the model"
    );
    daemon.stop().await;
}

/// `POST …/interrupt?clientMessageId=`: a message still waiting in line is withdrawn (it never
/// runs), one that names no waiting or running message stops nothing, and the turn ahead goes
/// on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_is_withdrawn_by_its_client_id_and_the_turn_ahead_goes_on() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    mock.once_when_prompt_contains(
        "slow one",
        harness_tests::mock::Reply::slow_text(
            ["a ", "b ", "c"],
            std::time::Duration::from_millis(500),
        ),
    );
    let path = format!("/api/threads/{thread}/messages?wait=false");
    for (content, client) in [("slow one", "c-1"), ("queued one", "c-2")] {
        let (status, body) = daemon
            .post(
                &path,
                json!({"content": content, "clientMessageId": client}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
    }
    mock.wait_for_requests(1, std::time::Duration::from_secs(60))
        .await
        .expect("the first turn runs");
    let stop = |client: &'static str| {
        let (daemon, thread) = (&daemon, &thread);
        async move {
            let (status, body) = daemon
                .post(
                    &format!("/api/threads/{thread}/interrupt?clientMessageId={client}"),
                    json!({}),
                )
                .await;
            assert_eq!(status, 200, "{body}");
            (body["interrupted"].clone(), body["withdrawn"].clone())
        }
    };
    assert_eq!(stop("c-2").await, (json!(false), json!(true)));
    assert_eq!(stop("nobody").await, (json!(false), json!(false)));
    assert_eq!(daemon.reply(&thread, "after").await, "echo: after");
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    let statuses: Vec<(String, String)> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| {
            let content = m["content"].as_str().unwrap_or_default().to_owned();
            (content, m["status"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let status_of = |c: &str| {
        statuses
            .iter()
            .find(|(t, _)| t == c)
            .map(|(_, s)| s.as_str())
    };
    assert_eq!(status_of("slow one"), Some("done"), "{statuses:?}");
    assert_eq!(status_of("queued one"), Some("interrupted"), "{statuses:?}");
    let asked: Vec<String> = mock
        .message_requests()
        .iter()
        .map(|r| r.last_user_text())
        .collect();
    assert!(!asked.iter().any(|t| t.contains("queued one")), "{asked:?}");
    daemon.stop().await;
}

/// The document says what the server does: every operation names the 400 it gives for bad JSON,
/// query or path, and every one with a body its 415 and 422; and for bodies on each side of the
/// documented bounds (title and model lengths, blank strings, negative budgets, empty content),
/// the server takes what the schema allows and refuses what it does not, with a status the
/// operation documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_and_the_server_agree_on_what_is_taken() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let doc = openapi_doc(&daemon).await;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("an item") {
            let responses = &operation["responses"];
            assert!(responses.get("400").is_some(), "{method} {path}: no 400");
            if operation.get("requestBody").is_some() && path != "/mcp" {
                for status in ["415", "422"] {
                    assert!(
                        responses.get(status).is_some(),
                        "{method} {path}: no {status}"
                    );
                }
            }
        }
    }
    let documented = |path: &str, status: u16| {
        doc["paths"][path]["post"]["responses"]
            .get(status.to_string())
            .is_some()
    };
    let thread = daemon.create_thread().await;
    let long = |n: usize| "m".repeat(n);
    let bodies = [
        json!({"title": long(500)}),
        json!({"title": long(501)}),
        json!({"model": "claude-x"}),
        json!({"model": ""}),
        json!({"model": "   "}),
        json!({"model": long(200)}),
        json!({"model": long(201)}),
        json!({"maxBudgetUsd": 0.0}),
        json!({"maxBudgetUsd": -0.5}),
    ];
    for body in bodies {
        let allowed = problems(&doc, "CreateThread", &body).is_empty();
        let (status, answer) = daemon.post("/api/threads", body.clone()).await;
        assert_eq!(allowed, status.is_success(), "{body}: {status} {answer}");
        assert!(
            documented("/api/threads", status.as_u16()),
            "{body}: {status}"
        );
    }
    let path = format!("/api/threads/{thread}/messages?wait=false");
    for body in [
        json!({"content": "hello"}),
        json!({"content": ""}),
        json!({"content": "  \n "}),
        json!({"content": "hi", "model": ""}),
    ] {
        let allowed = problems(&doc, "PostMessage", &body).is_empty();
        let (status, answer) = daemon.post(&path, body.clone()).await;
        assert_eq!(allowed, status.is_success(), "{body}: {status} {answer}");
        let documented = doc["paths"]["/api/threads/{id}/messages"]["post"]["responses"]
            .get(status.as_u16().to_string())
            .is_some();
        assert!(documented, "{body}: {status}");
    }
    daemon.stop().await;
}
