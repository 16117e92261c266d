//! Structured output against the real CLI: a thread created with `outputSchema` runs with
//! `--json-schema`, each reply carries `structuredOutput` (validated before it is stored), and a
//! model that cannot match the schema fails the message with a 502 that says so.

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
        "required": ["answer"],
        "additionalProperties": false
    })
}

async fn thread_with_schema(daemon: &TestDaemon) -> String {
    let (status, body) = daemon
        .post("/api/threads", json!({"outputSchema": schema()}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["outputSchema"], schema());
    body["id"].as_str().expect("thread id").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_carry_validated_structured_output() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = thread_with_schema(&daemon).await;
    mock.once_when_prompt_contains(
        "what is six times seven",
        Reply::tool_use(
            "StructuredOutput",
            json!({"answer": "42", "confidence": 0.9}),
        ),
    );
    let (status, body) = daemon.send(&thread, "what is six times seven").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let expected = json!({"answer": "42", "confidence": 0.9});
    assert_eq!(body["message"]["structuredOutput"], expected, "{body}");
    let request = mock.message_requests().last().cloned().unwrap();
    let offered = request
        .tool("StructuredOutput")
        .expect("the schema reached the model");
    assert_eq!(offered["input_schema"]["required"], json!(["answer"]));
    let (_, stored) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(
        stored["messages"][1]["structuredOutput"], expected,
        "stored"
    );

    // A thread without a schema is unchanged: no structuredOutput, no StructuredOutput tool.
    let plain = daemon.create_thread().await;
    let (status, body) = daemon.send(&plain, "hello").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["message"].get("structuredOutput").is_none(), "{body}");
    let request = mock.message_requests().last().cloned().unwrap();
    assert!(request.tool("StructuredOutput").is_none());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_misses_the_schema_fails_the_message_clearly() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude
            .env
            .insert("MAX_STRUCTURED_OUTPUT_RETRIES".into(), "2".into());
    })
    .await;
    let thread = thread_with_schema(&daemon).await;
    // Every answer the model gives has a number where the schema wants a string.
    let wrong = Reply::tool_use("StructuredOutput", json!({"answer": 5}));
    mock.when_prompt_contains("answer badly", wrong.clone());
    mock.when_prompt_contains("does not match required schema", wrong);
    let (status, body) = daemon.send(&thread, "answer badly").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["error"]["code"], "structured_output_failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("error_max_structured_output_retries"),
        "{message}"
    );
    assert!(message.contains("/answer"), "names the problem: {message}");

    // The thread goes on.
    mock.reset();
    mock.once_when_prompt_contains(
        "try again",
        Reply::tool_use("StructuredOutput", json!({"answer": "five"})),
    );
    let (status, body) = daemon.send(&thread, "try again").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["message"]["structuredOutput"],
        json!({"answer": "five"})
    );
    daemon.stop().await;
}

/// Schemas no turn could use are refused at creation with the reason: each of these was once
/// taken (201) and then failed every turn of its thread, the CLI exiting on it (`cli_died`), or
/// was refused by the CLI's argument limit (`Argument list too long`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_schema_is_refused_when_the_thread_is_created() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let with_a = |a: Value| json!({"type": "object", "properties": {"a": a}});
    let huge: Vec<String> = (0..60_000).map(|i| format!("value-{i:05}")).collect();
    for (schema, says) in [
        (with_a(json!({"type": "nonsense"})), "/properties/a/type"),
        (json!("a string"), "JSON Schema object"),
        (json!({"type": "string"}), r#""type": "object""#),
        (json!({"type": "object", "x-note": "hi"}), "`x-note`"),
        (
            json!({"type": "object", "$dynamicAnchor": "n", "properties": {"a": {"$dynamicRef": "#n"}}}),
            "`$dynamicAnchor`",
        ),
        (
            json!({"type": "object", "$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}},
                   "properties": {"a": {"$ref": "#/$defs/x"}}}),
            "never reaches a value",
        ),
        (
            with_a(json!({"type": "string", "pattern": "(?i)abc"})),
            "ECMAScript",
        ),
        (with_a(json!({"enum": huge})), "at most 65536"),
    ] {
        let (status, body) = daemon
            .post("/api/threads", json!({"outputSchema": schema}))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("outputSchema") && message.contains(says),
            "{says}: {message}"
        );
    }
    let (_, threads) = daemon.get("/api/threads").await;
    assert_eq!(threads["threads"], json!([]), "no thread was made");
    daemon.stop().await;
}

/// What the CLI takes runs: a schema that names draft 2020-12 as its `$schema` (the CLI gets it
/// without), a `format` (asserted by neither), a Unicode-class pattern.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_the_cli_takes_run_their_turns() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "who": {"type": "string", "format": "email"},
            "name": {"type": "string", "pattern": "^\\p{L}+$"}
        },
        "required": ["who", "name"]
    });
    let (status, body) = daemon
        .post("/api/threads", json!({"outputSchema": schema}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let thread = body["id"].as_str().unwrap().to_owned();
    let answer = json!({"who": "someone", "name": "Zoë"});
    mock.once_when_prompt_contains(
        "who is it",
        Reply::tool_use("StructuredOutput", answer.clone()),
    );
    let (status, body) = daemon.send(&thread, "who is it").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["message"]["structuredOutput"], answer);
    let offered = mock.message_requests().last().cloned().unwrap();
    let offered = offered.tool("StructuredOutput").expect("the tool").clone();
    assert!(
        offered["input_schema"].get("$schema").is_none(),
        "{offered}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_started_without_the_schema_never_serves_its_turns() {
    let mock = MockApi::start().await;
    // A spare is a process started ahead of need with the default options: no --json-schema.
    let daemon = TestDaemon::start(&mock, |c| c.pool.spares = 1).await;
    harness_tests::util::eventually(
        std::time::Duration::from_secs(60),
        "a spare is parked",
        || daemon.counts().spares_parked == 1,
    )
    .await
    .expect("a spare is parked");
    let thread = thread_with_schema(&daemon).await;
    assert_eq!(
        daemon.counts().spares_claimed,
        0,
        "the schema thread took no spare"
    );
    mock.once_when_prompt_contains(
        "typed please",
        Reply::tool_use("StructuredOutput", json!({"answer": "yes"})),
    );
    let (status, body) = daemon.send(&thread, "typed please").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["message"]["structuredOutput"],
        json!({"answer": "yes"})
    );
    // A plain thread still takes the spare.
    harness_tests::util::eventually(
        std::time::Duration::from_secs(60),
        "a spare is parked again",
        || daemon.counts().spares_parked == 1,
    )
    .await
    .expect("a spare is parked");
    daemon.create_thread().await;
    assert_eq!(daemon.counts().spares_claimed, 1);
    daemon.stop().await;
}
