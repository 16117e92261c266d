use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;
use serde_json::{json, Value};

use super::*;
use crate::managed::events::wire::{
    event_type, Confirmation, EventParams, ModelUsage, Rubric, SendEvents,
};

const AT: &str = "2026-01-02T03:04:05Z";

fn at() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(AT)
        .expect("a time")
        .with_timezone(&Utc)
}

fn row(kind: &str, data: Value) -> EventRow {
    EventRow {
        id: 7,
        thread_id: ThreadId::from_string("thr_1"),
        message_id: None,
        kind: kind.to_owned(),
        data,
        created_at: at(),
    }
}

/// `Bash` asks; every other tool is allowed.
fn asks(tool: &str) -> bool {
    tool == "Bash"
}

/// The lens of a row outside any goal's turn.
fn lens() -> Lens<'static> {
    Lens {
        asks: &asks,
        goal_turn: false,
    }
}

fn projected(kind: &str, data: Value) -> Value {
    serde_json::to_value(project(&row(kind, data), lens())).expect("serializes")
}

/// An idle event of row 7 with `stop_reason`.
fn idle_json(k: usize, stop_reason: Value) -> Value {
    json!({"id": format!("sevt_7_{k}"), "processed_at": AT, "type": "session.status_idle", "stop_reason": stop_reason,
        "stop_details": null})
}

fn error_json(k: usize, kind: &str, message: &str, retry: &str) -> Value {
    json!({"id": format!("sevt_7_{k}"), "processed_at": AT, "type": "session.error",
        "error": {"type": kind, "message": message, "retry_status": {"type": retry}}})
}

/// (kind, data, the projected events' JSON): one row per mapping.
fn table() -> Vec<(&'static str, Value, Value)> {
    let mut rows = messages_and_text();
    rows.extend(tool_calls());
    rows.extend(custom_tool_calls());
    rows.extend(turn_ends());
    rows.extend(errors_and_silence());
    rows.extend(spans_and_termination());
    rows
}

fn messages_and_text() -> Vec<(&'static str, Value, Value)> {
    vec![
        (
            "message_received",
            json!({"messageId": "msg_1", "content": "hi", "clientMessageId": null, "origin": "user"}),
            json!([{"id": "sevt_msg_1", "processed_at": AT, "type": "user.message",
                "content": [{"type": "text", "text": "hi"}]}]),
        ),
        (
            "message_received",
            json!({"messageId": "msg_1", "content": "look", "clientMessageId": "c1", "origin": "user",
            "blocks": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "file", "fileId": "file_1", "media_type": "image/png", "bytes": 3}},
                {"type": "document", "source": {"type": "file", "fileId": "file_2"}},
            ]}),
            json!([{"id": "sevt_msg_1", "processed_at": AT, "type": "user.message", "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
                {"type": "document", "source": {"type": "file", "file_id": "file_2"}},
            ]}]),
        ),
        (
            "message_received",
            json!({"messageId": "msg_1", "content": "wake up", "clientMessageId": null, "origin": "cli"}),
            json!([]),
        ),
        (
            "turn_started",
            json!({"messageId": "msg_1", "origin": "user"}),
            json!([{"id": "sevt_7_0", "processed_at": AT, "type": "session.status_running"}]),
        ),
        (
            "assistant_thinking",
            json!({"thinking": "hm"}),
            json!([{"id": "sevt_7_0", "processed_at": AT, "type": "agent.thinking"}]),
        ),
        (
            "assistant_text",
            json!({"text": "Hello."}),
            json!([{"id": "sevt_7_0", "processed_at": AT, "type": "agent.message",
                "content": [{"type": "text", "text": "Hello."}]}]),
        ),
    ]
}

fn tool_calls() -> Vec<(&'static str, Value, Value)> {
    vec![
        (
            "tool_call_started",
            json!({"tool_use_id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}),
            json!([{"id": "sevt_tu_toolu_1", "processed_at": AT, "type": "agent.tool_use",
                "name": "Bash", "input": {"command": "ls"}, "evaluated_permission": "ask"}]),
        ),
        (
            "tool_call_started",
            json!({"tool_use_id": "toolu_2", "name": "mcp__github__create_issue", "input": {"title": "t"}}),
            json!([{"id": "sevt_tu_toolu_2", "processed_at": AT, "type": "agent.mcp_tool_use",
                "name": "create_issue", "mcp_server_name": "github", "input": {"title": "t"},
                "evaluated_permission": "allow"}]),
        ),
        (
            "tool_call_finished",
            json!({"tool_use_id": "toolu_1", "is_error": false, "content": "a\nb"}),
            json!([{"id": "sevt_tr_toolu_1", "processed_at": AT, "type": "agent.tool_result",
                "tool_use_id": "sevt_tu_toolu_1", "content": [{"type": "text", "text": "a\nb"}],
                "is_error": false}]),
        ),
        (
            "tool_call_finished",
            json!({"tool_use_id": "toolu_2", "is_error": true,
                "content": [{"type": "text", "text": "no"}, {"type": "tool_reference", "tool_name": "x"}]}),
            json!([{"id": "sevt_tr_toolu_2", "processed_at": AT, "type": "agent.tool_result",
                "tool_use_id": "sevt_tu_toolu_2", "content": [{"type": "text", "text": "no"}],
                "is_error": true}]),
        ),
        (
            "permission_requested",
            json!({"requestId": "perm_1", "toolName": "Bash", "input": {}, "toolUseId": "toolu_1"}),
            json!([idle_json(
                0,
                json!({"type": "requires_action", "event_ids": ["sevt_tu_toolu_1"]})
            )]),
        ),
        (
            "permission_requested",
            json!({"requestId": "perm_1", "toolName": "Bash", "input": {}, "toolUseId": null}),
            json!([]),
        ),
        (
            "permission_decided",
            json!({"requestId": "perm_1", "toolName": "Bash", "decision": "allow", "decidedBy": "person", "reason": null}),
            json!([{"id": "sevt_7_0", "processed_at": AT, "type": "session.status_running"}]),
        ),
    ]
}

/// A custom tool's call: its use, its wait, the client's answer.
fn custom_tool_calls() -> Vec<(&'static str, Value, Value)> {
    vec![
        (
            "tool_call_started",
            json!({"tool_use_id": "toolu_3", "name": "mcp__custom__get_weather", "input": {"city": "Paris"}}),
            json!([{"id": "sevt_tu_toolu_3", "processed_at": AT, "type": "agent.custom_tool_use",
                "name": "get_weather", "input": {"city": "Paris"}}]),
        ),
        (
            "client_tool_call",
            json!({"toolUseId": "toolu_3", "name": "mcp__custom__get_weather", "state": "waiting"}),
            json!([idle_json(
                0,
                json!({"type": "requires_action", "event_ids": ["sevt_tu_toolu_3"]})
            )]),
        ),
        (
            "client_tool_call",
            json!({"toolUseId": "toolu_3", "name": "mcp__custom__get_weather", "state": "answered",
                "content": [{"type": "text", "text": "sunny"}], "isError": false}),
            json!([{"id": "sevt_tr_toolu_3", "processed_at": AT, "type": "user.custom_tool_result",
                    "custom_tool_use_id": "sevt_tu_toolu_3",
                    "content": [{"type": "text", "text": "sunny"}], "is_error": false},
                {"id": "sevt_7_1", "processed_at": AT, "type": "session.status_running"}]),
        ),
        (
            "client_tool_call",
            json!({"toolUseId": "toolu_3", "name": "mcp__custom__get_weather", "state": "cancelled"}),
            json!([]),
        ),
    ]
}

fn turn_ends() -> Vec<(&'static str, Value, Value)> {
    let failed = |cause: &str| json!({"messageId": "msg_1", "status": "error", "cause": cause, "error": "it broke"});
    let unknown = error_json(0, "unknown_error", "it broke", "terminal");
    let exhausted = idle_json(1, json!({"type": "retries_exhausted"}));
    vec![
        (
            "turn_finished",
            json!({"messageId": "msg_1", "reply": {}}),
            json!([idle_json(0, json!({"type": "end_turn"}))]),
        ),
        (
            "turn_failed",
            failed("refused"),
            json!([idle_json(0, json!({"type": "budget_reached"}))]),
        ),
        (
            "turn_failed",
            failed("interrupted"),
            json!([idle_json(0, json!({"type": "end_turn"}))]),
        ),
        (
            "turn_failed",
            failed("withdrawn"),
            json!([idle_json(0, json!({"type": "end_turn"}))]),
        ),
        ("turn_failed", failed("error"), json!([unknown, exhausted])),
        (
            "turn_failed",
            failed("shutdown"),
            json!([unknown, exhausted]),
        ),
        ("turn_failed", failed("crash"), json!([unknown, exhausted])),
        (
            "turn_failed",
            failed("takeover"),
            json!([unknown, exhausted]),
        ),
    ]
}

/// A model request's `model_request_finished`, with `is_error`.
fn finished(is_error: bool) -> Value {
    json!({"requestId": "mreq_1", "model": "claude-sonnet-4-6", "status": if is_error { 529 } else { 200 },
        "isError": is_error, "inputTokens": 120, "outputTokens": 57, "cacheReadTokens": 40,
        "cacheWriteTokens": 3, "durationMs": 812})
}

fn spans_and_termination() -> Vec<(&'static str, Value, Value)> {
    let end = |is_error: bool| {
        json!([{"id": "sevt_7_0", "processed_at": AT, "type": "span.model_request_end",
            "model_request_start_id": "sevt_mreq_1", "is_error": is_error,
            "model_usage": {"input_tokens": 120, "output_tokens": 57,
                "cache_creation_input_tokens": 3, "cache_read_input_tokens": 40}}])
    };
    let terminated =
        json!([{"id": "sevt_7_0", "processed_at": AT, "type": "session.status_terminated"}]);
    vec![
        (
            "model_request_started",
            json!({"requestId": "mreq_1", "model": "claude-sonnet-4-6"}),
            json!([{"id": "sevt_mreq_1", "processed_at": AT, "type": "span.model_request_start"}]),
        ),
        ("model_request_started", json!({"model": "m"}), json!([])),
        ("model_request_finished", finished(false), end(false)),
        ("model_request_finished", finished(true), end(true)),
        (
            "model_request_finished",
            json!({"requestId": "mreq_1", "status": 402, "isError": true}),
            json!([{"id": "sevt_7_0", "processed_at": AT, "type": "span.model_request_end",
                "model_request_start_id": "sevt_mreq_1", "is_error": true,
                "model_usage": {"input_tokens": 0, "output_tokens": 0,
                    "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}]),
        ),
        (
            "turn_redriven",
            json!({"messageId": "msg_1", "attempt": 2, "cause": "crash"}),
            json!([{"id": "sevt_7_0", "processed_at": AT, "type": "session.status_rescheduled"}]),
        ),
        ("thread_archived", json!({}), terminated.clone()),
        ("thread_deleted", json!({}), terminated),
    ]
}

fn errors_and_silence() -> Vec<(&'static str, Value, Value)> {
    let retry = |status: Value| json!({"attempt": 1, "max_retries": 10, "retry_delay_ms": 500, "error": "busy", "status": status});
    vec![
        (
            "api_retry",
            retry(json!(529)),
            json!([error_json(0, "model_overloaded_error", "busy", "retrying")]),
        ),
        (
            "api_retry",
            retry(json!(429)),
            json!([error_json(
                0,
                "model_rate_limited_error",
                "busy",
                "retrying"
            )]),
        ),
        (
            "api_retry",
            retry(json!(500)),
            json!([error_json(
                0,
                "model_request_failed_error",
                "busy",
                "retrying"
            )]),
        ),
        (
            "api_retry",
            retry(Value::Null),
            json!([error_json(
                0,
                "model_request_failed_error",
                "busy",
                "retrying"
            )]),
        ),
        (
            "limit_reached",
            json!({"limit": "memory", "max": 512, "pid": 9, "command": "node", "processStopped": false,
                "message": "out of memory"}),
            json!([error_json(0, "unknown_error", "out of memory", "terminal")]),
        ),
        ("text_delta", json!({"text": "Hel"}), json!([])),
        (
            "process_ready",
            json!({"start": {"kind": "warm"}, "pid": 1}),
            json!([]),
        ),
        ("rate_limit", json!({"status": "allowed"}), json!([])),
        (
            "turn_throttled",
            json!({"messageId": "msg_1", "limit": 1, "running": 1, "position": 1}),
            json!([]),
        ),
        ("something_new", json!({}), json!([])),
    ]
}

#[test]
fn each_kind_projects_to_the_expected_events() {
    for (kind, data, expected) in table() {
        assert_eq!(projected(kind, data.clone()), expected, "{kind} {data}");
    }
}

#[test]
fn projected_events_read_back_as_they_were() {
    for (kind, data, _) in table() {
        for event in project(&row(kind, data), lens()) {
            let json = serde_json::to_string(&event).expect("serializes");
            let back: SessionEvent = serde_json::from_str(&json).expect(&json);
            assert_eq!(back, event, "{json}");
        }
    }
}

#[test]
fn ids_lead_back_to_their_rows_and_tool_uses() {
    assert_eq!(row_of("sevt_7_0"), Some((7, 0)));
    assert_eq!(row_of("sevt_123_45"), Some((123, 45)));
    for not_a_row in [
        "sevt_tu_toolu_1",
        "sevt_mreq_1",
        "sevt_7",
        "sevt__0",
        "sevt_7_",
        "sevt_-1_0",
        "x_7_0",
    ] {
        assert_eq!(row_of(not_a_row), None, "{not_a_row}");
    }
    assert_eq!(tool_use_of("sevt_tu_toolu_1"), Some("toolu_1"));
    assert_eq!(tool_use_of(&tool_use_event_id("toolu_9")), Some("toolu_9"));
    for not_a_use in ["sevt_tr_toolu_1", "sevt_7_0", "sevt_tu_"] {
        assert_eq!(tool_use_of(not_a_use), None, "{not_a_use}");
    }
    // A row's later events keep their ids whatever came before them in the row.
    let events = project(
        &row("turn_failed", json!({"cause": "crash", "error": "x"})),
        lens(),
    );
    let ids: Vec<_> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["sevt_7_0", "sevt_7_1"]);
    assert_eq!(event_type(&events[1].body), "session.status_idle");
}

/// A model request's end names its start by the request's id alone, wherever their rows are,
/// and the start's id is no row's.
#[test]
fn a_model_requests_end_names_its_start() {
    let start = EventRow {
        id: 3,
        ..row(
            "model_request_started",
            json!({"requestId": "mreq_ab12", "model": null}),
        )
    };
    let mut data = finished(false);
    data["requestId"] = json!("mreq_ab12");
    let end = EventRow {
        id: 11,
        ..row("model_request_finished", data)
    };
    let start = project(&start, lens()).remove(0);
    let end = project(&end, lens()).remove(0);
    assert_eq!(start.id, model_request_event_id("mreq_ab12"));
    assert_eq!(row_of(&start.id), None);
    assert_eq!(end.id, "sevt_11_0");
    match end.body {
        EventBody::SpanModelRequestEnd {
            model_request_start_id,
            ..
        } => assert_eq!(model_request_start_id, start.id),
        other => panic!("not an end: {other:?}"),
    }
}

#[test]
fn event_type_is_the_serialized_type() {
    for event in one_of_each_type() {
        let json = serde_json::to_value(&event).expect("serializes");
        assert_eq!(json["type"], event_type(&event.body), "{json}");
    }
}

#[test]
fn sent_events_parse_and_unknown_types_are_refused() {
    let body = json!({"events": [
        {"type": "user.message", "content": [{"type": "text", "text": "hi"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]},
        {"type": "user.interrupt"},
        {"type": "user.tool_confirmation", "tool_use_id": "sevt_tu_toolu_1", "result": "deny", "deny_message": "no"},
        {"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_7_0"},
        {"type": "user.define_outcome", "description": "d", "rubric": {"type": "text", "content": "r"}},
    ]});
    let sent: SendEvents = serde_json::from_value(body).expect("parses");
    assert_eq!(sent.events.len(), 5);
    assert_eq!(
        sent.events[2],
        EventParams::UserToolConfirmation {
            tool_use_id: "sevt_tu_toolu_1".into(),
            result: Confirmation::Deny,
            deny_message: Some("no".into()),
        }
    );
    let echoed = sent.events[4].clone().into_body(|| "outc_1".into());
    assert_eq!(
        serde_json::to_value(&echoed).expect("serializes"),
        json!({"type": "user.define_outcome", "description": "d",
            "rubric": {"type": "text", "content": "r"}, "outcome_id": "outc_1"})
    );

    let err = serde_json::from_value::<SendEvents>(
        json!({"events": [{"type": "system.message", "content": []}]}),
    )
    .expect_err("refused");
    assert!(
        err.to_string().contains("unknown variant `system.message`"),
        "{err}"
    );
    assert!(err.to_string().contains("user.message"), "{err}");
}

/// One event of every type: the projection's, and the others built by hand.
fn one_of_each_type() -> Vec<SessionEvent> {
    let mut events: Vec<SessionEvent> = table()
        .into_iter()
        .flat_map(|(kind, data, _)| project(&row(kind, data), lens()))
        .collect();
    let usage = ModelUsage {
        input_tokens: 1,
        output_tokens: 2,
        cache_creation_input_tokens: 3,
        cache_read_input_tokens: 4,
    };
    let outcome = || "outc_1".to_owned();
    let built = [
        EventBody::UserInterrupt {},
        EventBody::UserToolConfirmation {
            tool_use_id: "sevt_tu_toolu_1".into(),
            result: Confirmation::Allow,
            deny_message: None,
        },
        EventBody::UserCustomToolResult {
            custom_tool_use_id: "sevt_7_0".into(),
            content: Some(vec![Content::Document {
                source: json!({"type": "text", "media_type": "text/plain", "data": "d"}),
                title: Some("t".into()),
                context: None,
            }]),
            is_error: None,
        },
        EventBody::UserDefineOutcome {
            description: "d".into(),
            rubric: Rubric::File {
                file_id: "file_1".into(),
            },
            max_iterations: Some(3),
            outcome_id: outcome(),
        },
        EventBody::AgentThinking {},
        EventBody::AgentMcpToolResult {
            mcp_tool_use_id: "sevt_tu_toolu_2".into(),
            content: None,
            is_error: Some(false),
        },
        EventBody::AgentCustomToolUse {
            name: "lookup".into(),
            input: json!({"q": 1}),
        },
        EventBody::SessionStatusTerminated {},
        EventBody::SpanModelRequestStart {},
        EventBody::SpanModelRequestEnd {
            model_request_start_id: "sevt_1_0".into(),
            is_error: Some(false),
            model_usage: usage.clone(),
        },
        EventBody::SpanOutcomeEvaluationStart {
            outcome_id: outcome(),
            iteration: 0,
        },
        EventBody::SpanOutcomeEvaluationOngoing {
            outcome_id: outcome(),
            iteration: 0,
        },
        EventBody::SpanOutcomeEvaluationEnd {
            outcome_evaluation_start_id: "sevt_2_0".into(),
            outcome_id: outcome(),
            iteration: 0,
            result: "satisfied".into(),
            explanation: "fine".into(),
            usage,
        },
    ];
    events.extend(built.into_iter().enumerate().map(|(k, body)| SessionEvent {
        id: format!("sevt_100_{k}"),
        processed_at: Some(at()),
        body,
    }));
    // A user event still queued.
    events.push(SessionEvent {
        id: "sevt_101_0".into(),
        processed_at: None,
        body: EventBody::UserMessage {
            content: vec![text_block("queued")],
        },
    });
    events
}

const SDK_CHECK: &str = r#"
import json, sys, typing
from pydantic import BaseModel, TypeAdapter
from anthropic.types.beta.sessions import BetaManagedAgentsSessionEvent as Event

union = typing.get_args(Event)[0]
by_type = {}
for cls in typing.get_args(union):
    by_type[typing.get_args(cls.model_fields["type"].annotation)[0]] = cls
adapter = TypeAdapter(Event)

def no_extra(model, path):
    assert not model.model_extra, f"{path}: fields the SDK does not know: {model.model_extra}"
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, BaseModel):
                no_extra(item, f"{path}.{name}")

seen = set()
for line in open(sys.argv[1]):
    raw = json.loads(line)
    event = adapter.validate_json(line, strict=True)
    expected = by_type[raw["type"]]
    assert type(event) is expected, f"{raw['type']} read as {type(event).__name__}"
    no_extra(event, raw["type"])
    seen.add(raw["type"])
print(len(seen), "types:", " ".join(sorted(seen)))
"#;

/// The Python SDK's own models read every type of event the door writes as that type's class,
/// with no field it does not know.
#[test]
fn the_python_sdk_reads_every_event_type() {
    let python = std::path::Path::new("/tmp/venv/bin/python");
    if !python.exists() {
        println!("skipped: no Python SDK at {}", python.display());
        return;
    }
    let events = one_of_each_type();
    let types: std::collections::BTreeSet<_> = events.iter().map(|e| event_type(&e.body)).collect();
    assert_eq!(types.len(), 21, "one of each type: {types:?}");

    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("events.jsonl");
    let lines: Vec<String> = events
        .iter()
        .map(|e| serde_json::to_string(e).expect("serializes"))
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").expect("written");
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(SDK_CHECK)
        .arg(&path)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("21 types:"), "{stdout}");
}

/// The OpenAPI schemas derive: an event is its type's fields beside `id` and `processed_at`.
#[test]
fn the_event_schemas_derive() {
    use utoipa::PartialSchema as _;
    let event = serde_json::to_string(&SessionEvent::schema()).expect("serializes");
    let body = serde_json::to_string(&EventBody::schema()).expect("serializes");
    let sent = serde_json::to_string(&EventParams::schema()).expect("serializes");
    assert!(event.contains("processed_at"), "{event}");
    assert!(body.contains("agent.mcp_tool_use"), "{body}");
    assert!(sent.contains("user.define_outcome"), "{sent}");
}

#[test]
fn a_goal_is_an_outcome_defined_evaluated_and_ended_with_one_idle() {
    let set = projected(
        "goal_set",
        json!({"goalId": "outc_1", "description": "Write fib.py", "rubric": "- fib(10) is 55", "maxIterations": 2}),
    );
    assert_eq!(
        set,
        json!([{"id": "sevt_outc_1", "processed_at": AT, "type": "user.define_outcome",
                "description": "Write fib.py", "rubric": {"type": "text", "content": "- fib(10) is 55"},
                "max_iterations": 2, "outcome_id": "outc_1"}])
    );
    let start = projected(
        "goal_grading_started",
        json!({"goalId": "outc_1", "iteration": 1, "graderThreadId": "thr_2"}),
    );
    assert_eq!(
        start,
        json!([{"id": "sevt_outc_1_start_1", "processed_at": AT,
                "type": "span.outcome_evaluation_start", "outcome_id": "outc_1", "iteration": 1}])
    );
    let usage =
        json!({"inputTokens": 10, "outputTokens": 3, "cacheReadTokens": 2, "cacheWriteTokens": 1});
    let graded = |result: &str, graded: bool| {
        projected(
            "goal_graded",
            json!({"goalId": "outc_1", "iteration": 1, "result": result, "explanation": "why",
                   "graded": graded, "usage": usage}),
        )
    };
    // Another iteration follows: no idle.
    let revise = graded("needs_revision", true);
    assert_eq!(
        revise,
        json!([{"id": "sevt_7_0", "processed_at": AT, "type": "span.outcome_evaluation_end",
                "outcome_evaluation_start_id": "sevt_outc_1_start_1", "outcome_id": "outc_1",
                "iteration": 1, "result": "needs_revision", "explanation": "why",
                "usage": {"input_tokens": 10, "output_tokens": 3,
                          "cache_creation_input_tokens": 1, "cache_read_input_tokens": 2}}])
    );
    // The goal's end: the evaluation's end, then the idle.
    let done = graded("satisfied", true);
    assert_eq!(done[1], idle_json(1, json!({"type": "end_turn"})));
    // Cut before its grading: no start to name.
    let cut = graded("interrupted", false);
    assert_eq!(cut[0]["outcome_evaluation_start_id"], "");
    assert_eq!(cut[1]["type"], "session.status_idle");
}

#[test]
fn a_goals_turns_say_nothing_of_idleness_nor_show_their_prompts() {
    let goal_turn = Lens {
        asks: &asks,
        goal_turn: true,
    };
    let received = json!({"messageId": "msg_1", "content": "Write fib.py", "origin": "user",
                          "clientMessageId": "goal:outc_1:0"});
    assert!(project(&row("message_received", received.clone()), goal_turn).is_empty());
    assert_eq!(project(&row("message_received", received), lens()).len(), 1);
    let finished = row("turn_finished", json!({"messageId": "msg_1"}));
    assert!(project(&finished, goal_turn).is_empty());
    assert_eq!(project(&finished, lens()).len(), 1);
    // A failed turn still says what failed, but not that the session is idle.
    let failed = row("turn_failed", json!({"cause": "error", "error": "boom"}));
    let types: Vec<_> = project(&failed, goal_turn)
        .iter()
        .map(|e| event_type(&e.body))
        .collect();
    assert_eq!(types, ["session.error"]);
    // The rest of a goal's turn is the session's as any other's.
    let started = row(
        "turn_started",
        json!({"messageId": "msg_1", "origin": "user"}),
    );
    assert_eq!(project(&started, goal_turn).len(), 1);
}
