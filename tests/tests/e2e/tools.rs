//! Plugin tools: validation and defaults through `POST /api/tools/{name}/call`, the schemas the API
//! and the CLI see, the recorded calls, whole turns where the mock model calls our tools through
//! the real CLI (time, a wrong input, the calling thread, delegation, its depth limit and a full
//! pool), and start-up refusing an invalid tool schema.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::{test_config, TestDaemon};
use harness_tests::mock::{MockApi, RecordedRequest, Reply};
use harness_tests::probe::{ProbePlugin, SLOW_TIMEOUT};
use harness_tests::util::eventually;
use orchestrator::config::Config;
use plugin_contract::{
    async_trait, Plugin, PluginTable, Tool, ToolContext, ToolError, ToolOutput, ToolSpec,
};

const TIME_TOOL: &str = "mcp__harness__time__current_time";
const DELEGATE_TOOL: &str = "mcp__harness__delegation__delegate";

async fn probe_daemon(mock: &MockApi) -> TestDaemon {
    TestDaemon::start_with_plugins(mock, vec![Arc::new(ProbePlugin::default())], |_| {}).await
}

/// The `[plugins.*]` tables of a config file holding `file`.
fn plugin_tables(file: &str) -> BTreeMap<String, PluginTable> {
    Config::from_toml(file).expect("a valid config").plugins
}

/// `POST /api/tools/{tool}/call` that must answer 200; returns the result (the MCP shape).
async fn call(daemon: &TestDaemon, tool: &str, body: Value) -> Value {
    let (status, result) = daemon.post(&format!("/api/tools/{tool}/call"), body).await;
    assert_eq!(status, StatusCode::OK, "{tool}: {result}");
    result
}

/// The result's text content, joined.
fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content array: {result}"))
        .iter()
        .map(|c| c["text"].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A successful call's structured `received` value (what the probe's handler got).
async fn received(daemon: &TestDaemon, tool: &str, input: Value) -> Value {
    let result = call(daemon, tool, json!({"input": input})).await;
    assert_eq!(result.get("isError"), None, "{tool}: {result}");
    result["structuredContent"]["received"].clone()
}

/// Checks that a call was refused with exactly the violations `expected` lists, as
/// `(pointer, part of the message)`, one line each, in any order.
#[track_caller]
fn check_violations(tool: &str, result: &Value, expected: &[(&str, &str)]) {
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        result.get("structuredContent").is_none(),
        "a refused call has no structured content: {result}"
    );
    let text = text_of(result);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(format!("Invalid input for tool `{tool}`:").as_str()),
        "{text}"
    );
    let lines: Vec<&str> = lines.collect();
    assert_eq!(
        lines.len(),
        expected.len(),
        "one line per violation: {text}"
    );
    for (pointer, fragment) in expected {
        let prefix = format!("- at {pointer}: ");
        assert!(
            lines
                .iter()
                .any(|line| line.starts_with(&prefix) && line.contains(fragment)),
            "no violation at {pointer} saying {fragment:?} in:\n{text}"
        );
    }
}

/// Every key anywhere in `value`.
fn all_keys(value: &Value) -> Vec<String> {
    let mut keys = Vec::new();
    fn walk(value: &Value, keys: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, item) in map {
                    keys.push(key.clone());
                    walk(item, keys);
                }
            }
            Value::Array(items) => items.iter().for_each(|item| walk(item, keys)),
            _ => {}
        }
    }
    walk(value, &mut keys);
    keys
}

// ---------------------------------------------------------------------------------------------
// POST /api/tools/{name}/call

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_lists_every_violation_with_its_pointer() {
    let mock = MockApi::start().await;
    let daemon = probe_daemon(&mock).await;
    let order = "probe__order";
    let item = json!({"sku": "ABC-1", "qty": 2});
    let cases: Vec<(Value, Vec<(&str, &str)>)> = vec![
        // Missing required.
        (
            json!({}),
            vec![("(root)", "\"item\" is a required property")],
        ),
        (
            json!({"item": {"sku": "ABC-1"}}),
            vec![("/item", "\"qty\" is a required property")],
        ),
        // Wrong type, in a nested object.
        (
            json!({"item": {"sku": "ABC-1", "qty": "2"}}),
            vec![("/item/qty", "\"2\" is not of type \"integer\"")],
        ),
        // Integer vs number.
        (
            json!({"item": {"sku": "ABC-1", "qty": 1.5}}),
            vec![("/item/qty", "1.5 is not of type \"integer\"")],
        ),
        // Enum miss.
        (
            json!({"item": item, "priority": "urgent"}),
            vec![("/priority", "\"urgent\" is not one of")],
        ),
        // An array item, by index.
        (
            json!({"item": item, "tags": ["ok", 5]}),
            vec![("/tags/1", "5 is not of type \"string\"")],
        ),
        // Pattern and minimum at once: both listed.
        (
            json!({"item": {"sku": "abc", "qty": 0}}),
            vec![
                ("/item/sku", "does not match \"^[A-Z]{3}-[0-9]+$\""),
                ("/item/qty", "0 is less than the minimum of 1"),
            ],
        ),
        // Unknown properties are refused where the schema says so.
        (
            json!({"item": item, "colour": "red"}),
            vec![("(root)", "'colour' was unexpected")],
        ),
        // Everything wrong at once.
        (
            json!({"item": {"sku": 7, "qty": "many"}, "tags": "x", "priority": 1}),
            vec![
                ("/item/sku", "7 is not of type \"string\""),
                ("/item/qty", "\"many\" is not of type \"integer\""),
                ("/tags", "\"x\" is not of type \"array\""),
                ("/priority", "1 is not of type \"string\""),
                ("/priority", "1 is not one of"),
            ],
        ),
    ];
    for (input, expected) in cases {
        let result = call(&daemon, order, json!({"input": input})).await;
        check_violations(order, &result, &expected);
    }

    // The same checks on the shorthand tool: an integer is a number, a string is not.
    let tally = "probe__tally";
    let ok = received(&daemon, tally, json!({"label": "x", "ratio": 2})).await;
    assert_eq!(ok["ratio"], 2);
    let result = call(
        &daemon,
        tally,
        json!({"input": {"label": "x", "ratio": "2"}}),
    )
    .await;
    check_violations(
        tally,
        &result,
        &[("/ratio", "\"2\" is not of type \"number\"")],
    );
    let result = call(
        &daemon,
        tally,
        json!({"input": {"label": "x", "ratio": 0.5, "count": 2.5}}),
    )
    .await;
    check_violations(
        tally,
        &result,
        &[("/count", "2.5 is not of type \"integer\"")],
    );
    let result = call(&daemon, tally, json!({"input": {}})).await;
    check_violations(
        tally,
        &result,
        &[
            ("(root)", "\"label\" is a required property"),
            ("(root)", "\"ratio\" is a required property"),
        ],
    );

    // A validation failure on the time tool names the pointer too.
    let result = call(
        &daemon,
        "time__current_time",
        json!({"input": {"timezone": 5}}),
    )
    .await;
    check_violations(
        "time__current_time",
        &result,
        &[("/timezone", "5 is not of type \"string\"")],
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_fills_defaults_before_the_handler_runs() {
    let mock = MockApi::start().await;
    let daemon = probe_daemon(&mock).await;

    // Top level: the omitted enum and string get their defaults; given values are kept.
    let got = received(
        &daemon,
        "probe__order",
        json!({"item": {"sku": "ABC-1", "qty": 2}}),
    )
    .await;
    assert_eq!(
        got,
        json!({"item": {"sku": "ABC-1", "qty": 2}, "priority": "normal", "note": "none"})
    );
    let got = received(
        &daemon,
        "probe__order",
        json!({"item": {"sku": "ABC-1", "qty": 2}, "priority": "high", "tags": ["a"]}),
    )
    .await;
    assert_eq!(
        got,
        json!({"item": {"sku": "ABC-1", "qty": 2}, "priority": "high", "note": "none", "tags": ["a"]})
    );

    // Through `$ref`: each address gets the definition's default unless it sets its own.
    let got = received(
        &daemon,
        "probe__ship",
        json!({"from": {"city": "Berlin"}, "to": {"city": "Lyon", "country": "FR"}}),
    )
    .await;
    assert_eq!(
        got,
        json!({"from": {"city": "Berlin", "country": "DE"}, "to": {"city": "Lyon", "country": "FR"}})
    );
    let result = call(
        &daemon,
        "probe__ship",
        json!({"input": {"from": {"city": "Berlin"}, "to": {"country": "FR"}}}),
    )
    .await;
    check_violations(
        "probe__ship",
        &result,
        &[("/to", "\"city\" is a required property")],
    );

    // Shorthand: the defaulted field is optional and filled.
    let got = received(
        &daemon,
        "probe__tally",
        json!({"label": "sheep", "ratio": 0.5}),
    )
    .await;
    assert_eq!(got, json!({"label": "sheep", "ratio": 0.5, "count": 3}));

    // The time tool: `{}` and no input at all both mean UTC.
    for body in [json!({"input": {}}), json!({})] {
        let result = call(&daemon, "time__current_time", body).await;
        assert_eq!(result.get("isError"), None, "{result}");
        assert_eq!(result["structuredContent"]["timezone"], "UTC", "{result}");
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_turns_failures_into_error_results_and_bad_requests_into_http_errors() {
    let mock = MockApi::start().await;
    let daemon = probe_daemon(&mock).await;

    // Output that breaks the tool's own output schema.
    let result = call(&daemon, "probe__miscount", json!({"input": {}})).await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    let text = text_of(&result);
    assert!(
        text.contains("probe__miscount") && text.contains("output schema"),
        "{text}"
    );
    assert!(
        text.contains("at /count: \"many\" is not of type \"integer\""),
        "{text}"
    );

    // A panic: the message reaches the caller, the daemon carries on.
    let result = call(&daemon, "probe__explode", json!({"input": {}})).await;
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        text_of(&result),
        "tool `probe__explode` panicked: probe exploded on purpose"
    );

    // A timeout names the tool and the limit, and comes no sooner than the limit. That it
    // came instead of the tool's own answer (after `SLOW_SLEEP`) the error itself shows.
    let started = Instant::now();
    let result = call(&daemon, "probe__slow", json!({"input": {}})).await;
    let took = started.elapsed();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        text_of(&result),
        format!("tool `probe__slow` did not finish within {SLOW_TIMEOUT:?} and was stopped")
    );
    assert!(took >= SLOW_TIMEOUT, "{took:?}");

    // A tool error (unknown timezone) is an error result too.
    let result = call(
        &daemon,
        "time__current_time",
        json!({"input": {"timezone": "Mars/Olympus"}}),
    )
    .await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(text_of(&result).contains("unknown timezone `Mars/Olympus`"));

    // Still healthy after all of that.
    let got = received(
        &daemon,
        "probe__order",
        json!({"item": {"sku": "ABC-1", "qty": 1}}),
    )
    .await;
    assert_eq!(got["priority"], "normal");

    // HTTP-level errors: unknown tool, bad bodies, unknown thread.
    let (status, body) = daemon
        .post("/api/tools/probe__nope/call", json!({"input": {}}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("probe__nope"),
        "{body}"
    );
    let (status, body) = daemon
        .post(
            "/api/tools/probe__order/call",
            json!({"input": {}, "inptu": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "invalid_body");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("inptu"),
        "{body}"
    );
    let (status, body) = daemon
        .post("/api/tools/probe__order/call", json!({"threadId": 5}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = daemon
        .post_raw("/api/tools/probe__order/call", "{\"input\": ")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_json");
    let (status, body) = daemon
        .post(
            "/api/tools/time__current_time/call",
            json!({"threadId": "thr_missing", "input": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "thread_not_found");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_list_shows_normalized_schemas() {
    let mock = MockApi::start().await;
    let daemon = probe_daemon(&mock).await;
    let (status, body) = daemon.get("/api/tools").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tools = body["tools"].as_array().expect("a tool list");
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is listed: {body}"))
    };
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "delegation__delegate",
            "probe__explode",
            "probe__gate",
            "probe__miscount",
            "probe__order",
            "probe__repeat",
            "probe__ship",
            "probe__slow",
            "probe__tally",
            "probe__whoami",
            "time__current_time",
        ]
    );

    // Shorthand: expanded, descriptions and defaults kept, only fields without a default required.
    let tally = tool("probe__tally");
    assert_eq!(tally["description"], "Tallies probe things.");
    assert_eq!(
        tally["inputSchema"],
        json!({
            "type": "object",
            "properties": {
                "count": {"type": "integer", "default": 3, "description": "How many."},
                "label": {"type": "string", "description": "What to call them."},
                "ratio": {"type": "number"}
            },
            "required": ["label", "ratio"]
        })
    );

    // `$ref`: inlined for the API, `$defs` gone, the property's own description kept.
    let ship = tool("probe__ship")["inputSchema"].clone();
    let keys = all_keys(&ship);
    assert!(!keys.iter().any(|k| k == "$ref" || k == "$defs"), "{ship}");
    assert_eq!(
        ship["properties"]["from"],
        json!({
            "type": "object",
            "description": "Where the parcel starts.",
            "properties": {
                "city": {"type": "string", "description": "City name."},
                "country": {"type": "string", "default": "DE"}
            },
            "required": ["city"]
        })
    );
    assert_eq!(
        ship["properties"]["to"]["properties"]["country"]["default"],
        "DE"
    );

    // Explicit schemas: required as written, never every property.
    let order = tool("probe__order");
    assert_eq!(order["inputSchema"]["required"], json!(["item"]));
    assert_eq!(
        order["inputSchema"]["properties"]["priority"]["default"],
        "normal"
    );
    let time = tool("time__current_time");
    assert_eq!(
        time["inputSchema"]["properties"]["timezone"]["default"],
        "UTC"
    );
    assert_eq!(time["inputSchema"].get("required"), None);
    assert_eq!(
        time["outputSchema"]["required"],
        json!(["iso", "unix", "timezone"])
    );
    assert!(tool("probe__miscount")["outputSchema"].is_object());
    assert_eq!(tool("probe__order").get("outputSchema"), None);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_recorded_per_thread() {
    let mock = MockApi::start().await;
    let daemon = probe_daemon(&mock).await;
    let thread = daemon.create_thread().await;
    let other = daemon.create_thread().await;

    call(
        &daemon,
        "probe__tally",
        json!({"threadId": thread, "input": {"label": "a", "ratio": 1}}),
    )
    .await;
    call(
        &daemon,
        "probe__order",
        json!({"threadId": thread, "input": {"item": {"sku": "x", "qty": 1}}}),
    )
    .await;
    call(
        &daemon,
        "probe__slow",
        json!({"threadId": thread, "input": {}}),
    )
    .await;
    call(
        &daemon,
        "probe__tally",
        json!({"threadId": other, "input": {"label": "b", "ratio": 1}}),
    )
    .await;
    call(
        &daemon,
        "probe__tally",
        json!({"input": {"label": "c", "ratio": 1}}),
    )
    .await;

    let (status, body) = daemon
        .get(&format!("/api/threads/{thread}/tool-calls"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let calls = body["toolCalls"].as_array().expect("a list");
    let summary: Vec<(&str, bool)> = calls
        .iter()
        .map(|c| (c["tool"].as_str().unwrap(), c["isError"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        summary,
        [
            ("probe__tally", false),
            ("probe__order", true),
            ("probe__slow", true)
        ],
        "only this thread's calls, oldest first: {body}"
    );
    for c in calls {
        assert_eq!(c["threadId"], thread.as_str());
        assert!(c["createdAt"].is_string(), "{c}");
    }
    // The input as the caller sent it; the result as the caller got it.
    assert_eq!(calls[0]["input"], json!({"label": "a", "ratio": 1}));
    assert_eq!(
        calls[0]["result"]["structuredContent"]["received"],
        json!({"label": "a", "ratio": 1, "count": 3})
    );
    assert_eq!(calls[1]["input"], json!({"item": {"sku": "x", "qty": 1}}));
    assert!(text_of(&calls[1]["result"]).contains("/item/sku"), "{body}");
    let slow_ms = calls[2]["durationMs"].as_u64().expect("a duration");
    assert!(slow_ms >= SLOW_TIMEOUT.as_millis() as u64, "{slow_ms}");
    assert!(text_of(&calls[2]["result"]).contains("did not finish within"));

    let (_, body) = daemon
        .get(&format!("/api/threads/{other}/tool-calls"))
        .await;
    assert_eq!(
        body["toolCalls"].as_array().map(Vec::len),
        Some(1),
        "{body}"
    );
    let (status, _) = daemon.get("/api/threads/thr_missing/tool-calls").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    daemon.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Whole turns: the mock model calls our tools through the real CLI.

/// The first message request that offered tools to the model.
fn first_with_tools(mock: &MockApi) -> RecordedRequest {
    mock.message_requests()
        .into_iter()
        .find(|r| !r.tool_names().is_empty())
        .expect("a request that offered tools")
}

/// The first message request whose last user message carries tool results.
fn request_with_tool_result(mock: &MockApi) -> RecordedRequest {
    mock.message_requests()
        .into_iter()
        .find(|r| !r.tool_results().is_empty())
        .expect("a request carrying a tool_result")
}

/// The thread's recorded tool calls.
async fn tool_calls(daemon: &TestDaemon, thread: &str) -> Vec<Value> {
    let (status, body) = daemon
        .get(&format!("/api/threads/{thread}/tool-calls"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["toolCalls"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_calls_current_time_and_gets_the_time() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    mock.once_when_prompt_contains("what time is it", Reply::tool_use(TIME_TOOL, json!({})));
    let thread = daemon.create_thread().await;
    let (status, body) = daemon.send(&thread, "what time is it?").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let follow_up = request_with_tool_result(&mock);
    let results = follow_up.tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    let result = &results[0];
    assert!(!result.is_error, "{result:?}");
    // The model sees the structured content as JSON.
    let time: Value = serde_json::from_str(&result.text).unwrap_or_else(|e| {
        panic!(
            "the tool_result is the structured JSON ({e}): {}",
            result.text
        )
    });
    assert_eq!(time["timezone"], "UTC", "{time}");
    let iso = time["iso"].as_str().expect("iso");
    assert!(iso.ends_with("+00:00"), "{iso}");
    let unix = time["unix"].as_i64().expect("unix");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    assert!((now - unix).abs() < 120, "{unix} is now");

    // The turn ends with the model's final text.
    assert_eq!(
        body["message"]["content"],
        format!("tool said: {}", result.text)
    );
    assert_eq!(body["message"]["status"], "done");

    // The call is recorded, tied to the model's tool_use id; the defaults were filled for it.
    let calls = tool_calls(&daemon, &thread).await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["tool"], "time__current_time");
    assert_eq!(calls[0]["toolUseId"], result.tool_use_id.as_str());
    assert_eq!(calls[0]["input"], json!({}));
    assert_eq!(calls[0]["isError"], false);
    assert_eq!(calls[0]["result"]["structuredContent"], time);
    assert!(calls[0]["durationMs"].is_u64());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_input_is_an_error_result_and_the_turn_goes_on() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    mock.once_when_prompt_contains(
        "time in zone five",
        Reply::tool_use(TIME_TOOL, json!({"timezone": 5})),
    );
    let thread = daemon.create_thread().await;
    let (status, body) = daemon.send(&thread, "time in zone five").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let results = request_with_tool_result(&mock).tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    let result = &results[0];
    assert!(result.is_error, "{result:?}");
    assert_eq!(
        result.text,
        "Invalid input for tool `time__current_time`:\n- at /timezone: 5 is not of type \"string\""
    );
    assert_eq!(
        body["message"]["content"],
        format!("tool said: {}", result.text)
    );
    assert_eq!(body["message"]["status"], "done");

    let calls = tool_calls(&daemon, &thread).await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["input"], json!({"timezone": 5}));
    assert_eq!(calls[0]["isError"], true);
    assert_eq!(calls[0]["toolUseId"], result.tool_use_id.as_str());

    // The process survived; the thread goes on.
    let pid = daemon.pid_of(&thread).expect("a live process");
    assert_eq!(daemon.reply(&thread, "and now?").await, "echo: and now?");
    assert_eq!(daemon.pid_of(&thread), Some(pid));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_receives_descriptions_defaults_and_inlined_refs() {
    let mock = MockApi::start().await;
    let daemon = probe_daemon(&mock).await;
    let thread = daemon.create_thread().await;
    assert_eq!(
        daemon.reply(&thread, "hello tools").await,
        "echo: hello tools"
    );

    let request = first_with_tools(&mock);
    let names = request.tool_names();
    for name in [
        TIME_TOOL,
        DELEGATE_TOOL,
        "mcp__harness__probe__order",
        "mcp__harness__probe__ship",
        "mcp__harness__probe__tally",
    ] {
        assert!(
            names.iter().any(|n| n == name),
            "{name} is offered inline (no tool search): {names:?}"
        );
    }
    let time = request.tool(TIME_TOOL).expect("the time tool");
    assert_eq!(
        time["input_schema"]["properties"]["timezone"]["default"], "UTC",
        "{time}"
    );
    assert_eq!(
        time["input_schema"]["properties"]["timezone"]["description"],
        "IANA timezone name, e.g. Europe/Berlin"
    );
    assert!(
        time["description"]
            .as_str()
            .unwrap_or_default()
            .contains("Returns the current date and time in an IANA timezone"),
        "{time}"
    );

    let ship = request
        .tool("mcp__harness__probe__ship")
        .expect("the $ref tool");
    let keys = all_keys(&ship["input_schema"]);
    assert!(
        !keys.iter().any(|k| k == "$ref" || k == "$defs"),
        "what the API got has no $ref: {ship}"
    );
    assert_eq!(
        ship["input_schema"]["properties"]["from"]["properties"]["country"]["default"],
        "DE"
    );
    let tally = request
        .tool("mcp__harness__probe__tally")
        .expect("the shorthand tool");
    assert_eq!(
        tally["input_schema"]["properties"]["count"],
        json!({"type": "integer", "default": 3, "description": "How many."})
    );
    assert_eq!(tally["input_schema"]["required"], json!(["label", "ratio"]));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegation_runs_a_child_thread_on_its_own_process() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    mock.once_when_prompt_contains(
        "please delegate",
        Reply::tool_use(DELEGATE_TOOL, json!({"prompt": "child task XYZ"})),
    );
    let parent = daemon.create_thread().await;
    let (status, body) = daemon.send(&parent, "please delegate this").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // The child thread exists, with its parent.
    let (_, list) = daemon.get("/api/threads").await;
    let children: Vec<&Value> = list["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["parentId"] == parent.as_str())
        .collect();
    assert_eq!(children.len(), 1, "{list}");
    let child = children[0]["id"].as_str().expect("child id").to_owned();
    let (_, child_body) = daemon.get(&format!("/api/threads/{child}")).await;
    let messages = child_body["messages"].as_array().expect("messages");
    let contents: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(contents, ["child task XYZ", "echo: child task XYZ"]);

    // It ran on its own process.
    let parent_pid = daemon.pid_of(&parent).expect("the parent's process");
    let child_pid = daemon.pid_of(&child).expect("the child's process");
    assert_ne!(parent_pid, child_pid);
    assert_eq!(daemon.spawns(), 2);

    // Its reply came back to the parent as the tool result.
    let to_parent: Vec<RecordedRequest> = mock
        .message_requests()
        .into_iter()
        .filter(|r| !r.tool_results().is_empty())
        .collect();
    assert_eq!(to_parent.len(), 1, "one tool result, in the parent's turn");
    let results = to_parent[0].tool_results();
    assert_eq!(results.len(), 1);
    assert!(!results[0].is_error, "{:?}", results[0]);
    assert_eq!(results[0].text, "echo: child task XYZ");
    assert_eq!(
        body["message"]["content"],
        "tool said: echo: child task XYZ"
    );

    // Recorded on the parent's thread; the child made no tool calls.
    let calls = tool_calls(&daemon, &parent).await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["tool"], "delegation__delegate");
    assert_eq!(calls[0]["input"], json!({"prompt": "child task XYZ"}));
    assert_eq!(calls[0]["isError"], false);
    assert!(tool_calls(&daemon, &child).await.is_empty());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegation_beyond_the_depth_limit_is_a_tool_error() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.plugins = plugin_tables("[plugins.delegation]\nmax_depth = 1");
    })
    .await;
    mock.once_when_prompt_contains(
        "start the chain",
        Reply::tool_use(DELEGATE_TOOL, json!({"prompt": "level one LVL1"})),
    );
    mock.once_when_prompt_contains(
        "LVL1",
        Reply::tool_use(DELEGATE_TOOL, json!({"prompt": "level two LVL2"})),
    );
    let root = daemon.create_thread().await;
    let (status, body) = daemon.send(&root, "start the chain").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["message"]["status"], "done");

    // The child tried to delegate and got an error naming the limit; no grandchild was made.
    let errors: Vec<_> = mock
        .message_requests()
        .iter()
        .flat_map(RecordedRequest::tool_results)
        .filter(|r| r.is_error)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].text.contains("delegation depth limit reached")
            && errors[0].text.contains("the limit is 1"),
        "{errors:?}"
    );
    assert!(
        !mock
            .message_requests()
            .iter()
            .any(|r| r.last_user_text().contains("LVL2")),
        "the grandchild never ran"
    );
    let (_, list) = daemon.get("/api/threads").await;
    let threads = list["threads"].as_array().expect("threads");
    assert_eq!(threads.len(), 2, "root and one child: {list}");
    let child = threads
        .iter()
        .find(|t| t["parentId"] == root.as_str())
        .expect("the child");
    let child = child["id"].as_str().expect("child id");

    // The child's turn finished with the error in its reply, which went back to the root.
    let child_calls = tool_calls(&daemon, child).await;
    assert_eq!(child_calls.len(), 1, "{child_calls:?}");
    assert_eq!(child_calls[0]["isError"], true);
    let reply = body["message"]["content"].as_str().expect("reply text");
    assert!(
        reply.starts_with("tool said: tool said: ") && reply.contains("depth limit"),
        "{reply}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_runs_for_the_thread_whose_process_made_it() {
    let mock = MockApi::start().await;
    let daemon = probe_daemon(&mock).await;
    mock.when_prompt_contains(
        "who am I",
        Reply::tool_use("mcp__harness__probe__whoami", json!({})),
    );
    let a = daemon.create_thread().await;
    let b = daemon.create_thread().await;
    // Concurrently, so both processes are live and calling at once.
    let ((status_a, body_a), (status_b, body_b)) = tokio::join!(
        daemon.send(&a, "who am I, A?"),
        daemon.send(&b, "who am I, B?")
    );
    assert_eq!((status_a, status_b), (StatusCode::OK, StatusCode::OK));
    // No id came from the model: the tool input was `{}` both times.
    for (thread, body) in [(&a, &body_a), (&b, &body_b)] {
        let expected = json!({"thread": thread});
        assert_eq!(
            body["message"]["content"],
            format!("tool said: {expected}"),
            "{body}"
        );
        let calls = tool_calls(&daemon, thread).await;
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0]["input"], json!({}));
        assert_eq!(calls[0]["result"]["structuredContent"], expected);
    }
    assert_ne!(daemon.pid_of(&a), daemon.pid_of(&b));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegation_with_no_free_pool_slot_borrows_an_overflow_slot() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.pool.max_capacity = 1;
        c.plugins = plugin_tables("[plugins.delegation]\ntimeout = 30");
    })
    .await;
    mock.once_when_prompt_contains(
        "delegate with a full pool",
        Reply::tool_use(DELEGATE_TOOL, json!({"prompt": "child task FULL"})),
    );
    let parent = daemon.create_thread().await;
    let (status, body) = daemon.send(&parent, "delegate with a full pool").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The parent's busy process holds the only slot and waits on the child: the child gets an
    // overflow slot instead of waiting for a slot only it could free. A child that waited would
    // have run into the delegation timeout, an error result, not the child's reply.
    let results = request_with_tool_result(&mock).tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(!results[0].is_error, "{results:?}");
    assert_eq!(results[0].text, "echo: child task FULL");
    assert_eq!(daemon.spawns(), 2);
    assert_eq!(body["message"]["status"], "done");
    // The over-capacity child process lives for its one turn only.
    eventually(
        Duration::from_secs(10),
        "only the parent's process is left",
        || daemon.live_pids().len() == 1,
    )
    .await
    .unwrap();
    daemon.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Start-up

/// A plugin whose one tool has an invalid schema.
struct BadSchemaPlugin;

struct BadSchemaTool;

#[async_trait]
impl Tool for BadSchemaTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "broken".into(),
            description: "Never loads.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": "zero"}}
            }),
            output_schema: None,
            timeout: None,
        }
    }

    async fn call(&self, _ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed("never loaded".into()))
    }
}

impl Plugin for BadSchemaPlugin {
    fn name(&self) -> &str {
        "shaky"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(BadSchemaTool)]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_plugin_schema_stops_start_up() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(&mock, dir.path(), "/nonexistent/claude".into());
    let mut plugins = harness::plugins(&config).expect("the plugins' settings are valid");
    plugins.push(Arc::new(BadSchemaPlugin));
    let err = match orchestrator::server::start(config, plugins).await {
        Ok(running) => {
            running.stop().await;
            panic!("a daemon with an invalid tool schema started");
        }
        Err(err) => err.to_string(),
    };
    assert!(
        err.contains("plugin `shaky`")
            && err.contains("tool `broken`")
            && err.contains("/properties/n/minimum"),
        "{err}"
    );
    assert!(mock.requests().is_empty());

    // A tool the Messages API would refuse stops it too.
    struct RefusedPlugin;
    impl Plugin for RefusedPlugin {
        fn name(&self) -> &str {
            "shaky"
        }
        fn tools(&self) -> Vec<Arc<dyn Tool>> {
            vec![Arc::new(OneOfTool)]
        }
    }
    struct OneOfTool;
    #[async_trait]
    impl Tool for OneOfTool {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "either".into(),
                description: "Top-level oneOf.".into(),
                input_schema: json!({"oneOf": [{"type": "object"}, {"type": "object"}]}),
                output_schema: None,
                timeout: None,
            }
        }
        async fn call(&self, _ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
            Err(ToolError::Failed("never loaded".into()))
        }
    }
    let config = test_config(&mock, dir.path(), "/nonexistent/claude".into());
    let err = match orchestrator::server::start(config, vec![Arc::new(RefusedPlugin)]).await {
        Ok(running) => {
            running.stop().await;
            panic!("a daemon with a top-level oneOf started");
        }
        Err(err) => err.to_string(),
    };
    assert!(
        err.contains("plugin `shaky`") && err.contains("tool `either`") && err.contains("oneOf"),
        "{err}"
    );
}

/// A profile's sub-agents reach the CLI (`initialize.agents`): it lists them to the model as
/// agent types for its `Agent` tool, in the profile's threads only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_sub_agents_are_offered_by_the_agent_tool() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Agent".into());
        let mut lead = orchestrator::config::ProfileConfig::default();
        lead.agents.insert(
            "bug-hunter".into(),
            orchestrator::config::AgentConfig {
                description: "Reads a diff and lists the bugs in it".into(),
                prompt: "You find bugs.".into(),
                ..Default::default()
            },
        );
        c.profiles.insert("lead".into(), lead);
    })
    .await;
    // The CLI lists the agent types to the model in a system message of the conversation.
    let agent_tool = |said: &str| {
        mock.message_requests()
            .into_iter()
            .rfind(|r| r.last_user_text().contains(said))
            .expect("the turn reached the API")
            .all_text()
    };
    let (_, lead) = daemon
        .post("/api/threads", json!({"profile": "lead"}))
        .await;
    let lead = lead["id"].as_str().unwrap().to_owned();
    daemon.reply(&lead, "hello lead").await;
    let offered = agent_tool("hello lead");
    assert!(offered.contains("bug-hunter"), "{offered}");
    assert!(offered.contains("lists the bugs"), "{offered}");
    let plain = daemon.create_thread().await;
    daemon.reply(&plain, "hello plain").await;
    let plain_offer = agent_tool("hello plain");
    assert!(plain_offer.contains("general-purpose"), "{plain_offer}");
    assert!(!plain_offer.contains("bug-hunter"), "{plain_offer}");
    let (_, profiles) = daemon.get("/api/profiles").await;
    assert!(profiles.to_string().contains("bug-hunter"));
    daemon.stop().await;
}

/// A profile's effort and plugin folders reach its processes: `--effort` and `--plugin-dir` on
/// the command line, the effort in the API request, and the plugin's skill listed to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_effort_and_plugins_reach_its_processes() {
    let plugin = tempfile::tempdir().unwrap();
    let root = plugin.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join(".claude-plugin")).unwrap();
    std::fs::write(
        root.join(".claude-plugin/plugin.json"),
        r#"{"name": "helpers", "version": "1.0.0", "description": "test helpers"}"#,
    )
    .unwrap();
    std::fs::create_dir_all(root.join("skills/greet-politely")).unwrap();
    std::fs::write(
        root.join("skills/greet-politely/SKILL.md"),
        "---\nname: greet-politely\ndescription: Greets the user in a formal register\n---\nSay good day.\n",
    )
    .unwrap();
    let mock = MockApi::start().await;
    let dir = root.clone();
    let daemon = TestDaemon::start(&mock, move |c| {
        c.profiles.insert(
            "deep".into(),
            orchestrator::config::ProfileConfig {
                effort: Some("high".into()),
                plugin_dirs: vec![dir],
                // The CLI lists skills to the model with its `Skill` tool.
                builtin_tools: Some("Skill".into()),
                ..Default::default()
            },
        );
    })
    .await;
    let (_, thread) = daemon
        .post("/api/threads", json!({"profile": "deep"}))
        .await;
    let thread = thread["id"].as_str().unwrap().to_owned();
    daemon.reply(&thread, "hello deep").await;
    let pid = daemon.pid_of(&thread).unwrap();
    let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
    assert!(argv.contains("--effort=high"), "{argv}");
    assert!(
        argv.contains(&format!("--plugin-dir={}", root.display())),
        "{argv}"
    );
    let request = mock.message_requests().last().cloned().unwrap();
    // The CLI asks the API for the effort (`output_config.effort`).
    assert_eq!(
        request.body["output_config"]["effort"], "high",
        "{}",
        request.body
    );
    let text = request.all_text();
    assert!(
        text.contains("greet-politely"),
        "the plugin's skill: {text}"
    );
    daemon.stop().await;
}
