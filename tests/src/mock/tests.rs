//! The mock, driven over real HTTP with reqwest.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;

/// A Messages API request body with one user message.
fn body(content: Value, stream: bool) -> Value {
    json!({"model": "claude-test", "max_tokens": 64, "stream": stream,
           "messages": [{"role": "user", "content": content}]})
}

async fn post(mock: &MockApi, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/messages?beta=true", mock.url()))
        .header("x-api-key", "sk-test")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// `(event, data)` pairs of an SSE body.
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|frame| !frame.trim().is_empty())
        .map(|frame| {
            let mut name = None;
            let mut data = None;
            for line in frame.lines() {
                if let Some(rest) = line.strip_prefix("event: ") {
                    name = Some(rest.to_owned());
                } else if let Some(rest) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(rest).unwrap());
                }
            }
            (name.unwrap(), data.unwrap())
        })
        .collect()
}

/// Streams a request and returns the concatenated text deltas.
async fn streamed_text(mock: &MockApi, prompt: &str) -> String {
    let response = post(mock, &body(json!(prompt), true)).await;
    assert_eq!(response.status(), 200);
    sse_events(&response.text().await.unwrap())
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .map(|(_, data)| data["delta"]["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn streamed_text_is_a_well_formed_event_sequence() {
    let mock = MockApi::start().await;
    mock.enqueue(Reply::text("hello from mock"));
    let response = post(&mock, &body(json!("hi"), true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["request-id"], "req_mock_1");
    let events = sse_events(&response.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &events {
        assert_eq!(
            data["type"],
            name.as_str(),
            "the data's type repeats the event name"
        );
    }
    let start = &events[0].1["message"];
    assert_eq!(start["id"], "msg_mock_1");
    assert_eq!(start["model"], "claude-test");
    assert_eq!(start["role"], "assistant");
    assert_eq!(
        events[1].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    let text: String = events[2..5]
        .iter()
        .map(|(_, data)| data["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "hello from mock");
    assert_eq!(events[6].1["delta"]["stop_reason"], "end_turn");
}

#[tokio::test]
async fn rules_beat_the_queue_and_once_rules_are_used_once() {
    let mock = MockApi::start().await;
    mock.enqueue(Reply::text("queued 1"));
    mock.enqueue(Reply::text("queued 2"));
    mock.when_prompt_contains("weather", Reply::text("always sunny"));
    mock.once_when_prompt_contains("joke", Reply::text("one joke"));

    assert_eq!(streamed_text(&mock, "tell a joke").await, "one joke");
    assert_eq!(streamed_text(&mock, "another joke").await, "queued 1");
    assert_eq!(streamed_text(&mock, "the weather?").await, "always sunny");
    assert_eq!(streamed_text(&mock, "weather again").await, "always sunny");
    assert_eq!(streamed_text(&mock, "anything").await, "queued 2");
    assert_eq!(
        streamed_text(&mock, "anything else").await,
        "echo: anything else"
    );

    mock.reset();
    assert!(mock.requests().is_empty());
    assert_eq!(streamed_text(&mock, "weather").await, "echo: weather");
}

#[tokio::test]
async fn default_reply_echoes_or_reports_the_tool_result() {
    let mock = MockApi::start().await;
    let blocks = json!([
        {"type": "text", "text": "<system-reminder>ignore me</system-reminder>"},
        {"type": "text", "text": "what is 2+2?"}
    ]);
    assert_eq!(streamed_text(&mock, "plain").await, "echo: plain");
    let response = post(&mock, &body(blocks, true)).await;
    let text: String = sse_events(&response.text().await.unwrap())
        .iter()
        .filter_map(|(_, data)| data["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "echo: what is 2+2?");

    let tool_turn = json!({"model": "claude-test", "stream": true, "messages": [
        {"role": "user", "content": "use the tool"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_mock_1", "name": "calc", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_mock_1",
                                      "content": [{"type": "text", "text": "4"}]}]}
    ]});
    let response = post(&mock, &tool_turn).await;
    let text: String = sse_events(&response.text().await.unwrap())
        .iter()
        .filter_map(|(_, data)| data["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "tool said: 4");
}

#[tokio::test]
async fn rules_see_tool_result_text() {
    let mock = MockApi::start().await;
    mock.when_prompt_contains("secret-result", Reply::text("matched"));
    let tool_turn = json!({"stream": true, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "secret-result"}]}
    ]});
    let response = post(&mock, &tool_turn).await;
    assert!(response.text().await.unwrap().contains("matched"));
}

#[tokio::test]
async fn tool_use_reply_streams_a_tool_call() {
    let mock = MockApi::start().await;
    mock.enqueue(Reply::tool_use("lookup", json!({"q": "rust"})));
    let response = post(&mock, &body(json!("go"), true)).await;
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(
        events[1].1["content_block"],
        json!({"type": "tool_use", "id": "toolu_mock_1", "name": "lookup", "input": {}})
    );
    let partial = events[2].1["delta"]["partial_json"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(partial).unwrap(),
        json!({"q": "rust"})
    );
    assert_eq!(events[4].1["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn errors_carry_status_and_anthropic_body() {
    let mock = MockApi::start().await;
    mock.enqueue(Reply::error(529));
    mock.enqueue(Reply::Error {
        status: 418,
        kind: "teapot_error".into(),
        message: "short and stout".into(),
    });
    let response = post(&mock, &body(json!("x"), true)).await;
    assert_eq!(response.status(), 529);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "mock 529"}})
    );
    let response = post(&mock, &body(json!("x"), true)).await;
    assert_eq!(response.status(), 418);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["type"],
        "teapot_error"
    );
}

#[tokio::test]
async fn an_outage_answers_every_request_with_its_error_until_it_ends() {
    let mock = MockApi::start().await;
    mock.when_prompt_contains("weather", Reply::text("always sunny"));
    mock.enqueue(Reply::text("queued"));
    let outage = mock.fail_while(529);
    for prompt in ["weather", "anything"] {
        let response = post(&mock, &body(json!(prompt), true)).await;
        assert_eq!(response.status(), 529, "{prompt}: ahead of rules and queue");
        assert_eq!(
            response.json::<Value>().await.unwrap()["error"]["type"],
            "overloaded_error"
        );
    }
    assert_eq!(mock.message_requests().len(), 2, "still recorded");
    outage.end();
    assert_eq!(streamed_text(&mock, "weather").await, "always sunny");
    assert_eq!(
        streamed_text(&mock, "x").await,
        "queued",
        "the queue was kept"
    );

    // An outage that outlived a reset does not end a newer one.
    let old = mock.fail_while(429);
    mock.reset();
    let new = mock.fail_while(429);
    drop(old);
    let response = post(&mock, &body(json!("x"), true)).await;
    assert_eq!(response.status(), 429);
    drop(new);
    assert_eq!(streamed_text(&mock, "y").await, "echo: y");
}

#[tokio::test]
async fn non_streaming_request_gets_a_json_message() {
    let mock = MockApi::start().await;
    let response = post(&mock, &body(json!("ping"), false)).await;
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "echo: ping"}])
    );
}

#[tokio::test]
async fn drop_connection_is_a_client_error_and_the_mock_keeps_serving() {
    let mock = MockApi::start().await;
    mock.enqueue(Reply::DropConnection);
    let result = reqwest::Client::new()
        .post(format!("{}/v1/messages", mock.url()))
        .json(&body(json!("x"), true))
        .send()
        .await;
    assert!(
        result.is_err(),
        "expected a connection error, got {result:?}"
    );
    assert_eq!(
        streamed_text(&mock, "still there?").await,
        "echo: still there?"
    );
}

#[tokio::test]
async fn requests_are_recorded_with_bodies() {
    let mock = MockApi::start().await;
    streamed_text(&mock, "first").await;
    let client = reqwest::Client::new();
    let counted = client
        .post(format!("{}/v1/messages/count_tokens", mock.url()))
        .json(&json!({"messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        counted.json::<Value>().await.unwrap(),
        json!({"input_tokens": 5})
    );
    let missing = client
        .get(format!("{}/v1/models", mock.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    streamed_text(&mock, "second").await;

    let all = mock.requests();
    let paths: Vec<(&str, &str)> = all
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        paths,
        vec![
            ("POST", "/v1/messages"),
            ("POST", "/v1/messages/count_tokens"),
            ("GET", "/v1/models"),
            ("POST", "/v1/messages")
        ]
    );
    assert_eq!(all[0].query.as_deref(), Some("beta=true"));
    assert_eq!(all[0].header("x-api-key"), Some("sk-test"));
    assert!(all[0].at <= all[3].at);

    let messages = mock
        .wait_for_requests(2, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].last_user_text(), "first");
    assert_eq!(messages[1].body["messages"][0]["content"], "second");
    assert_eq!(messages[1].model(), Some("claude-test"));

    let err = mock
        .wait_for_requests(3, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("got 2"), "{err}");
}

#[tokio::test]
async fn slow_text_arrives_in_pieces() {
    let mock = MockApi::start().await;
    mock.enqueue(Reply::slow_text(
        ["a", "b", "c"],
        Duration::from_millis(100),
    ));
    let started = std::time::Instant::now();
    let response = post(&mock, &body(json!("x"), true)).await;
    let text: String = sse_events(&response.text().await.unwrap())
        .iter()
        .filter_map(|(_, data)| data["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "abc");
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn held_replies_end_when_the_mock_is_dropped() {
    let mock = MockApi::start().await;
    mock.enqueue(Reply::Hang);
    mock.enqueue(Reply::StallAfterStart);
    let hung = tokio::spawn(post_raw(mock.url(), body(json!("hang"), true)));
    mock.wait_for_requests(1, Duration::from_secs(5))
        .await
        .unwrap();

    // The stalled reply starts: status and the first two events arrive, then nothing.
    let mut stalled = post(&mock, &body(json!("stall"), true)).await;
    assert_eq!(stalled.status(), 200);
    let mut seen = String::new();
    while sse_events(&seen).len() < 2 {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stalled.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let names: Vec<String> = sse_events(&seen)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, vec!["message_start", "content_block_start"]);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), stalled.chunk())
            .await
            .is_err()
    );
    assert!(!hung.is_finished());

    drop(mock);
    let hung = tokio::time::timeout(Duration::from_secs(5), hung)
        .await
        .unwrap()
        .unwrap();
    assert!(
        hung.is_err(),
        "the hung request fails once the mock is gone: {hung:?}"
    );
    let rest = tokio::time::timeout(Duration::from_secs(5), stalled.chunk())
        .await
        .unwrap();
    assert!(
        rest.is_err(),
        "the stalled body fails once the mock is gone: {rest:?}"
    );
}

async fn post_raw(url: String, body: Value) -> Result<reqwest::Response, reqwest::Error> {
    reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .json(&body)
        .send()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_requests_each_get_their_own_answer() {
    let mock = MockApi::start().await;
    mock.when_prompt_contains(
        "slow",
        Reply::slow_text(["s", "l", "o", "w"], Duration::from_millis(20)),
    );
    let client = reqwest::Client::new();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let client = client.clone();
        let url = format!("{}/v1/messages", mock.url());
        tasks.spawn(async move {
            let prompt = if i % 4 == 0 {
                format!("slow {i}")
            } else {
                format!("fast {i}")
            };
            let response = client
                .post(url)
                .json(&body(json!(prompt), true))
                .send()
                .await
                .unwrap();
            let text: String = sse_events(&response.text().await.unwrap())
                .iter()
                .filter_map(|(_, data)| data["delta"]["text"].as_str().map(str::to_owned))
                .collect();
            (prompt, text)
        });
    }
    let results = tokio::time::timeout(Duration::from_secs(20), tasks.join_all())
        .await
        .unwrap();
    assert_eq!(results.len(), 40);
    for (prompt, text) in results {
        let expected = if prompt.starts_with("slow") {
            "slow".to_owned()
        } else {
            format!("echo: {prompt}")
        };
        assert_eq!(text, expected);
    }
    let numbers: std::collections::BTreeSet<String> = mock
        .message_requests()
        .iter()
        .map(RecordedRequest::last_user_text)
        .collect();
    assert_eq!(numbers.len(), 40);
}
