//! The `claude` CLI's stream-json protocol: building the command line, encoding what we write to
//! stdin, decoding what it writes to stdout. No pipes here, so every case is a string test.
//!
//! Reference: `shared/protocol/claude-cli-protocol.md` (verified against claude 2.1.330).

use serde_json::{json, Value};

use plugin_contract::{CliSessionId, StreamEvent};

/// The name of our in-process MCP server, as the CLI knows it.
pub const MCP_SERVER: &str = "harness";

/// What makes two processes of one thread interchangeable. A change to any of these replaces the
/// thread's process; `resume` is not part of it (it only matters when a process starts).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SpawnOptions {
    pub model: Option<String>,
    pub system_prompt: Option<String>,
    pub append_system_prompt: Option<String>,
    pub builtin_tools: Option<String>,
    pub allowed_tools: Vec<String>,
    pub permission_mode: Option<String>,
    /// Per-call timeout the CLI applies to our MCP server, in ms (the adapter enforces its own too).
    pub mcp_timeout_ms: u64,
    /// `--max-turns`: the CLI's own bound on API round trips in one turn.
    pub max_turns: Option<u32>,
    /// `--settings`: a JSON object of settings for the session.
    pub settings: Option<String>,
}

/// The argv (after the binary) for one process.
pub fn cli_args(options: &SpawnOptions, resume: Option<&CliSessionId>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--output-format",
        "stream-json",
        "--verbose",
        "--input-format",
        "stream-json",
        "--include-partial-messages",
        // Only our settings: user/project settings files could change tools or hooks under us.
        "--setting-sources=",
    ]
    .map(String::from)
    .to_vec();
    let mcp = json!({"mcpServers": {MCP_SERVER: {
        "type": "sdk", "name": MCP_SERVER, "alwaysLoad": true, "timeout": options.mcp_timeout_ms,
    }}});
    args.extend(["--mcp-config".to_owned(), mcp.to_string()]);
    let mut allowed = vec![format!("mcp__{MCP_SERVER}")];
    allowed.extend(options.allowed_tools.iter().cloned());
    args.extend(["--allowedTools".to_owned(), allowed.join(",")]);
    if let Some(settings) = &options.settings {
        args.push(format!("--settings={settings}"));
    }
    if let Some(max) = options.max_turns {
        args.push(format!("--max-turns={max}"));
    }
    // Equals form throughout: `--resume` takes an optional value, so a separate value starting with
    // `-` would be read as another flag.
    if let Some(model) = &options.model {
        args.push(format!("--model={model}"));
    }
    if let Some(prompt) = &options.system_prompt {
        args.push(format!("--system-prompt={prompt}"));
    }
    if let Some(prompt) = &options.append_system_prompt {
        args.push(format!("--append-system-prompt={prompt}"));
    }
    if let Some(tools) = &options.builtin_tools {
        args.push(format!("--tools={tools}"));
    }
    if let Some(mode) = &options.permission_mode {
        args.push(format!("--permission-mode={mode}"));
    }
    if let Some(session) = resume {
        args.push(format!("--resume={session}"));
    }
    args
}

/// A user turn. `client_composed` makes the CLI take the text verbatim, so `/clear` and other
/// slash commands are never run (one would switch the session id mid-process).
pub fn user_turn(content: &str, uuid: &str) -> String {
    json!({
        "type": "user",
        "session_id": "",
        "message": {"role": "user", "content": content},
        "parent_tool_use_id": null,
        "client_composed": true,
        "uuid": uuid,
    })
    .to_string()
}

/// A control request from us to the CLI.
pub fn control_request(request_id: &str, request: Value) -> String {
    json!({"type": "control_request", "request_id": request_id, "request": request}).to_string()
}

/// A successful answer to one of the CLI's control requests.
pub fn control_success(request_id: &str, response: Value) -> String {
    json!({"type": "control_response", "response": {
        "subtype": "success", "request_id": request_id, "response": response,
    }})
    .to_string()
}

/// An error answer to one of the CLI's control requests.
pub fn control_error(request_id: &str, error: &str) -> String {
    json!({"type": "control_response", "response": {
        "subtype": "error", "request_id": request_id, "error": error,
    }})
    .to_string()
}

/// One line from the CLI's stdout, sorted by what we do with it.
#[derive(Clone, Debug, PartialEq)]
pub enum CliMessage {
    /// The CLI asks us something (`mcp_message`, `can_use_tool`, `hook_callback`).
    ControlRequest {
        request_id: String,
        subtype: String,
        request: Value,
    },
    /// The CLI answers one of our control requests.
    ControlResponse {
        request_id: String,
        outcome: Result<Value, String>,
    },
    /// The CLI abandoned one of its requests; it must not be answered.
    ControlCancel { request_id: String },
    /// The end of a turn.
    Result(TurnResult),
    /// Anything else that carries turn progress: `system`, `assistant`, `user`, `stream_event`.
    Turn(TurnLine),
    /// A line we do not use (unknown types appear often).
    Ignored { kind: String },
}

/// A progress line of a turn, already reduced to what the daemon reports.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnLine {
    /// The session id the line carries, when it carries one.
    pub session_id: Option<String>,
    /// `system/init`: the CLI has started the turn (it is no longer queued inside the CLI).
    pub starts_turn: bool,
    /// Events for clients; empty for lines that only matter for bookkeeping.
    pub events: Vec<StreamEvent>,
}

/// The `result` line: exactly one per turn.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnResult {
    /// The CLI reports API failures as `subtype: "success"` with `is_error: true`: only this flag
    /// says whether the turn worked.
    pub is_error: bool,
    pub subtype: String,
    pub text: Option<String>,
    pub session_id: Option<String>,
    pub errors: Vec<String>,
    pub num_turns: u64,
    pub terminal_reason: Option<String>,
    pub user_message_uuids: Vec<String>,
}

impl TurnResult {
    /// A reason fit for an error message: the result text, the CLI's errors, or the subtype.
    pub fn error_reason(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(text) = self.text.as_deref().filter(|t| !t.is_empty()) {
            parts.push(text.to_owned());
        }
        parts.extend(
            self.errors
                .iter()
                .filter(|e| !e.starts_with("[ede_diagnostic]"))
                .cloned(),
        );
        if parts.is_empty() {
            parts.push(match &self.terminal_reason {
                Some(reason) => format!("{} ({reason})", self.subtype),
                None => self.subtype.clone(),
            });
        }
        parts.join("; ")
    }

    /// True when the CLI could not load the session it was asked to resume.
    pub fn is_missing_session(&self) -> bool {
        self.errors
            .iter()
            .any(|e| e.contains("No conversation found"))
    }
}

/// Why a stdout line could not be used. The reader logs it and goes on.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("not a JSON object: {line:.200}")]
    NotJson {
        line: String,
        source: serde_json::Error,
    },
    #[error("line has no `type`: {line:.200}")]
    NoType { line: String },
}

/// Decodes one stdout line.
pub fn decode(line: &str) -> Result<CliMessage, ProtocolError> {
    let value: Value = serde_json::from_str(line).map_err(|source| ProtocolError::NotJson {
        line: line.to_owned(),
        source,
    })?;
    let Some(kind) = value.get("type").and_then(Value::as_str) else {
        return Err(ProtocolError::NoType {
            line: line.to_owned(),
        });
    };
    Ok(match kind {
        "control_request" => CliMessage::ControlRequest {
            request_id: str_field(&value, "request_id").unwrap_or_default(),
            subtype: value
                .pointer("/request/subtype")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            request: value.get("request").cloned().unwrap_or(Value::Null),
        },
        "control_response" => {
            let response = value.get("response").cloned().unwrap_or(Value::Null);
            let request_id = str_field(&response, "request_id").unwrap_or_default();
            let outcome = if response.get("subtype").and_then(Value::as_str) == Some("success") {
                Ok(response.get("response").cloned().unwrap_or(Value::Null))
            } else {
                Err(str_field(&response, "error")
                    .unwrap_or_else(|| "unknown control error".to_owned()))
            };
            CliMessage::ControlResponse {
                request_id,
                outcome,
            }
        }
        "control_cancel_request" => CliMessage::ControlCancel {
            request_id: str_field(&value, "request_id").unwrap_or_default(),
        },
        "result" => CliMessage::Result(TurnResult {
            is_error: value
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            subtype: str_field(&value, "subtype").unwrap_or_default(),
            text: str_field(&value, "result"),
            session_id: str_field(&value, "session_id"),
            errors: string_list(value.get("errors")),
            num_turns: value.get("num_turns").and_then(Value::as_u64).unwrap_or(0),
            terminal_reason: str_field(&value, "terminal_reason"),
            user_message_uuids: string_list(value.get("user_message_uuids")),
        }),
        "system" | "assistant" | "user" | "stream_event" => CliMessage::Turn(TurnLine {
            session_id: str_field(&value, "session_id"),
            starts_turn: kind == "system"
                && str_field(&value, "subtype").as_deref() == Some("init"),
            events: turn_events(kind, &value),
        }),
        other => CliMessage::Ignored {
            kind: other.to_owned(),
        },
    })
}

/// What clients hear about a progress line. Lines from inside sub-agents (non-null
/// `parent_tool_use_id`) are not reported as the thread's own text.
fn turn_events(kind: &str, value: &Value) -> Vec<StreamEvent> {
    let top_level = value.get("parent_tool_use_id").is_none_or(Value::is_null);
    match kind {
        "stream_event" if top_level => {
            let delta = value.pointer("/event/delta");
            let is_text =
                delta.and_then(|d| d.get("type")).and_then(Value::as_str) == Some("text_delta");
            match delta.and_then(|d| d.get("text")).and_then(Value::as_str) {
                Some(text) if is_text => vec![StreamEvent::TextDelta {
                    text: text.to_owned(),
                }],
                _ => Vec::new(),
            }
        }
        "assistant" if top_level => content_blocks(value)
            .filter_map(|block| match block.get("type").and_then(Value::as_str)? {
                "text" => Some(StreamEvent::AssistantText {
                    text: str_field(block, "text")?,
                }),
                "tool_use" => Some(StreamEvent::ToolCallStarted {
                    tool_use_id: str_field(block, "id")?,
                    name: str_field(block, "name")?,
                    input: block.get("input").cloned().unwrap_or(Value::Null),
                }),
                _ => None,
            })
            .collect(),
        "user" if top_level => content_blocks(value)
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
            .map(|block| StreamEvent::ToolCallFinished {
                tool_use_id: str_field(block, "tool_use_id").unwrap_or_default(),
                is_error: block
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                content: block.get("content").cloned().unwrap_or(Value::Null),
            })
            .collect(),
        "system" if value.get("subtype").and_then(Value::as_str) == Some("api_retry") => {
            vec![StreamEvent::ApiRetry {
                attempt: value.get("attempt").and_then(Value::as_u64).unwrap_or(0),
                max_retries: value
                    .get("max_retries")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                retry_delay_ms: value
                    .get("retry_delay_ms")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                error: str_field(value, "error").unwrap_or_default(),
                status: value.get("error_status").and_then(Value::as_u64),
            }]
        }
        _ => Vec::new(),
    }
}

fn content_blocks(value: &Value) -> impl Iterator<Item = &Value> {
    value
        .pointer("/message/content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn str_field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_use_equals_form_and_declare_the_sdk_server() {
        let options = SpawnOptions {
            model: Some("claude-x".into()),
            allowed_tools: vec!["Read".into()],
            mcp_timeout_ms: 120_000,
            ..Default::default()
        };
        let session = CliSessionId::from_string("-looks-like-a-flag");
        let args = cli_args(&options, Some(&session));
        assert!(args.contains(&"--model=claude-x".to_owned()));
        assert!(args.contains(&"--resume=-looks-like-a-flag".to_owned()));
        let allowed = args.iter().position(|a| a == "--allowedTools").unwrap();
        assert_eq!(args[allowed + 1], "mcp__harness,Read");
        let mcp = args.iter().position(|a| a == "--mcp-config").unwrap();
        let config: Value = serde_json::from_str(&args[mcp + 1]).unwrap();
        assert_eq!(config["mcpServers"]["harness"]["type"], "sdk");
        assert_eq!(config["mcpServers"]["harness"]["timeout"], 120_000);
        assert!(
            !args.iter().any(|a| a.starts_with("--resume"))
                || args.iter().filter(|a| a.starts_with("--resume")).count() == 1
        );
        assert!(!cli_args(&options, None)
            .iter()
            .any(|a| a.starts_with("--resume")));
    }

    #[test]
    fn user_turn_is_client_composed_and_escapes_everything() {
        let line = user_turn("/clear \"quoted\"\nnext line", "u-1");
        assert!(!line.contains('\n'), "one line on the wire");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["client_composed"], true);
        assert_eq!(v["message"]["content"], "/clear \"quoted\"\nnext line");
        assert_eq!(v["uuid"], "u-1");
    }

    #[test]
    fn decodes_control_traffic() {
        let req = decode(r#"{"type":"control_request","request_id":"abc","request":{"subtype":"mcp_message","server_name":"harness","message":{"jsonrpc":"2.0","id":0,"method":"initialize"}}}"#).unwrap();
        assert!(
            matches!(req, CliMessage::ControlRequest { ref request_id, ref subtype, .. } if request_id == "abc" && subtype == "mcp_message")
        );
        let ok = decode(r#"{"type":"control_response","response":{"subtype":"success","request_id":"req_1","response":{"pid":7}}}"#).unwrap();
        assert_eq!(
            ok,
            CliMessage::ControlResponse {
                request_id: "req_1".into(),
                outcome: Ok(json!({"pid":7}))
            }
        );
        let err = decode(r#"{"type":"control_response","response":{"subtype":"error","request_id":"req_2","error":"nope"}}"#).unwrap();
        assert_eq!(
            err,
            CliMessage::ControlResponse {
                request_id: "req_2".into(),
                outcome: Err("nope".into())
            }
        );
    }

    #[test]
    fn api_failure_reported_as_success_subtype_is_an_error() {
        let line = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500 mock 500","session_id":"s1","num_turns":1,"terminal_reason":"api_error"}"#;
        let CliMessage::Result(result) = decode(line).unwrap() else {
            panic!("not a result")
        };
        assert!(result.is_error);
        assert_eq!(result.error_reason(), "API Error: 500 mock 500");
    }

    #[test]
    fn missing_session_is_recognised() {
        let line = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,"session_id":"x","errors":["No conversation found with session ID: x"]}"#;
        let CliMessage::Result(result) = decode(line).unwrap() else {
            panic!("not a result")
        };
        assert!(result.is_missing_session());
        assert_eq!(
            result.error_reason(),
            "No conversation found with session ID: x"
        );
    }

    #[test]
    fn turn_lines_become_events() {
        let delta = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}},"session_id":"s","parent_tool_use_id":null}"#;
        let CliMessage::Turn(line) = decode(delta).unwrap() else {
            panic!()
        };
        assert_eq!(
            line.events,
            vec![StreamEvent::TextDelta { text: "Hel".into() }]
        );
        assert_eq!(line.session_id.as_deref(), Some("s"));

        let tool = r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_1","name":"mcp__harness__time__current_time","input":{}}]},"parent_tool_use_id":null}"#;
        let CliMessage::Turn(line) = decode(tool).unwrap() else {
            panic!()
        };
        assert!(
            matches!(&line.events[0], StreamEvent::ToolCallStarted { name, .. } if name == "mcp__harness__time__current_time")
        );

        let result = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"bad","is_error":true}]},"parent_tool_use_id":null}"#;
        let CliMessage::Turn(line) = decode(result).unwrap() else {
            panic!()
        };
        assert!(matches!(
            &line.events[0],
            StreamEvent::ToolCallFinished { is_error: true, .. }
        ));

        let nested = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"inner"}]},"parent_tool_use_id":"toolu_9"}"#;
        let CliMessage::Turn(line) = decode(nested).unwrap() else {
            panic!()
        };
        assert!(
            line.events.is_empty(),
            "sub-agent text is not the thread's text"
        );

        let retry = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":2,"retry_delay_ms":622,"error_status":529,"error":"overloaded"}"#;
        let CliMessage::Turn(line) = decode(retry).unwrap() else {
            panic!()
        };
        assert!(matches!(
            &line.events[0],
            StreamEvent::ApiRetry {
                attempt: 1,
                status: Some(529),
                ..
            }
        ));
    }

    mod properties {
        use proptest::prelude::*;
        use serde_json::{Map, Value};

        use super::super::decode;

        /// The line types and field names the decoder looks at, so generated lines reach past the
        /// first `match` into every branch.
        const KINDS: &[&str] = &[
            "control_request",
            "control_response",
            "control_cancel_request",
            "result",
            "system",
            "assistant",
            "user",
            "stream_event",
        ];
        const FIELDS: &[&str] = &[
            "type",
            "subtype",
            "request_id",
            "request",
            "response",
            "error",
            "message",
            "content",
            "event",
            "delta",
            "text",
            "id",
            "name",
            "input",
            "tool_use_id",
            "is_error",
            "parent_tool_use_id",
            "session_id",
            "result",
            "errors",
            "num_turns",
            "terminal_reason",
            "user_message_uuids",
            "attempt",
            "max_retries",
            "retry_delay_ms",
            "error_status",
        ];

        fn any_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                ".{0,12}".prop_map(Value::String),
                prop::sample::select(KINDS).prop_map(Value::from),
                prop::sample::select(
                    &[
                        "init",
                        "api_retry",
                        "success",
                        "text_delta",
                        "tool_use",
                        "tool_result",
                        "text",
                        "mcp_message"
                    ][..]
                )
                .prop_map(Value::from),
            ];
            leaf.prop_recursive(5, 96, 8, |inner| {
                let key = prop_oneof![
                    prop::sample::select(FIELDS).prop_map(str::to_owned),
                    ".{0,8}",
                ];
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    prop::collection::vec((key, inner), 0..8).prop_map(|fields| Value::Object(
                        fields.into_iter().collect::<Map<_, _>>()
                    )),
                ]
            })
        }

        proptest! {
            #[test]
            fn decode_never_panics_on_any_string(line in ".*") {
                let _ = decode(&line);
            }

            #[test]
            fn decode_never_panics_on_any_json(value in any_json()) {
                let _ = decode(&value.to_string());
            }

            #[test]
            fn any_object_with_a_type_decodes(
                kind in prop::sample::select(KINDS),
                fields in prop::collection::vec((prop::sample::select(FIELDS), any_json()), 0..10),
            ) {
                let mut object: Map<String, Value> =
                    fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
                object.insert("type".into(), Value::from(kind));
                prop_assert!(decode(&Value::Object(object).to_string()).is_ok());
            }
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for line in [
            "",
            "not json",
            "[1,2]",
            "{\"no_type\":1}",
            "{\"type\":5}",
            "\u{0}",
        ] {
            assert!(decode(line).is_err(), "{line:?} should not decode");
        }
        assert!(matches!(
            decode(r#"{"type":"brand_new_kind"}"#).unwrap(),
            CliMessage::Ignored { .. }
        ));
    }
}
