//! The CLI's stream-json protocol: the command line, what we write to stdin, and what the CLI
//! writes to stdout, decoded into typed lines (the first two in `input.rs`). No pipes here, so
//! every case is a string test.
//!
//! Stdout lines are decoded by serde into tagged enums. Decoding is lenient about fields and
//! strict about shape: a line that is not a JSON object with a string `type` is an error (the
//! reader logs and skips it), an unknown `type` is [`CliMessage::Ignored`], and a known line whose
//! field has an unexpected type reads that field as absent, so one odd field never costs a turn
//! its `result`.

use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod content;
mod hooks;
mod input;
mod startup;
mod system;

pub use content::{ContentBlock, MediaSource, UserContent};
pub use hooks::{Hooks, SkillShellCommand, SKILL_SHELL_HOOK_ID, STOP_HOOK_ID};
pub use input::{
    cli_args, control_request, control_response, initialize_request, user_turn, ExternalMcpServers,
    SdkMcpServer, SpawnOptions,
};
pub use startup::{StartupClass, StartupFailure};
use system::SystemLine;
pub use system::{
    MemoryRecall, MirrorError, ModelRefusalFallback, RecalledMemory, SystemHandling,
    SYSTEM_SUBTYPES,
};

/// One stdout line, sorted by what the host does with it.
#[derive(Clone, Debug, PartialEq)]
pub enum CliMessage {
    /// The CLI asks the host something (`mcp_message`, `can_use_tool`, `hook_callback`).
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
    Result(Box<TurnResult>),
    /// Turn progress: `system`, `assistant`, `user`, `stream_event`, `rate_limit_event`.
    Progress(Progress),
    /// Lines the CLI appended to a transcript file (`--session-mirror` only).
    Mirror(TranscriptMirror),
    /// A command (a turn) changed state inside the CLI: `command_lifecycle`.
    Lifecycle(Lifecycle),
    /// A line of a type the host does not use (new types appear often).
    Ignored,
}

/// A `command_lifecycle` line: the CLI queued, started or completed a command. Ours carry the
/// `uuid` of the user line we wrote; a turn the CLI starts by itself (a cron firing, a
/// `ScheduleWakeup`) has a fresh `command_uuid` and says why in `wakeup_source`. (A turn for a
/// background task's notice has no lifecycle line at all: only its `system/init`.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifecycle {
    pub command_uuid: String,
    /// `queued`, `started` or `completed`.
    pub state: String,
    /// Why the CLI started the command by itself: `schedule_wakeup` (a cron), `loop_wakeup` (a
    /// `ScheduleWakeup`), …; `None` for the host's own commands.
    pub wakeup_source: Option<String>,
}

/// One `transcript_mirror` line: the JSON objects the CLI appended, in order, to one transcript
/// file. A frame has no sequence number: its place in the stdout stream is its order. Entries stay
/// untouched JSON, since restoring a session means writing them back exactly.
#[derive(Clone, Debug, PartialEq)]
pub struct TranscriptMirror {
    /// The absolute path of the transcript file under the process's `CLAUDE_CONFIG_DIR`:
    /// `<config>/projects/<project key>/<session id>.jsonl` (sub-agents: under `<session id>/`).
    pub file_path: String,
    pub entries: Vec<Value>,
}

impl TranscriptMirror {
    /// The file's path inside its project folder (`<session id>.jsonl`, or
    /// `<session id>/subagents/….jsonl`), or `None` when `file_path` is not under a
    /// `projects/<key>/` folder or would climb out of it.
    pub fn project_relative_path(&self) -> Option<String> {
        let parts: Vec<&str> = self.file_path.split('/').collect();
        let at = parts.iter().rposition(|part| *part == "projects")?;
        let relative = parts.get(at + 2..)?;
        let safe = !relative.is_empty()
            && relative
                .iter()
                .all(|part| !part.is_empty() && *part != "." && *part != "..");
        safe.then(|| relative.join("/"))
    }

    /// The CLI session the file belongs to: the first component of the relative path without
    /// `.jsonl`.
    pub fn session_id(&self) -> Option<String> {
        let relative = self.project_relative_path()?;
        let first = relative.split('/').next()?;
        Some(first.strip_suffix(".jsonl").unwrap_or(first).to_owned())
    }
}

/// An entry's own id (`uuid`), when it has one: `queue-operation`, `last-prompt`, `cost-state`
/// and a few other kinds have none.
pub fn transcript_entry_uuid(entry: &Value) -> Option<&str> {
    entry.get("uuid").and_then(Value::as_str)
}

/// A progress line, reduced to what the host reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// The session id the line carries, when it carries one.
    pub session_id: Option<String>,
    /// `system/init`: the CLI has started the turn (it is no longer queued inside the CLI).
    pub starts_turn: bool,
    /// Events for clients; empty for lines that only matter for bookkeeping.
    pub events: Vec<TurnEvent>,
    /// An `assistant` line of the turn's own: the model request it came from.
    pub model_call: Option<ModelCall>,
    /// `system/init` and `system/status`: the permission mode in effect, which is not always
    /// the one asked for (managed settings can narrow it).
    pub permission_mode: Option<String>,
}

/// One Messages API response the CLI reports (each of its `assistant` lines names one; a
/// response of several content blocks comes as several lines of the same `id`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelCall {
    pub id: String,
    pub model: String,
    /// The usage so far of that response.
    pub usage: ApiUsage,
}

/// Something that happened during a turn, in the order the CLI reported it. Lines from inside
/// sub-agents (a non-null `parent_tool_use_id`) are not the turn's own text and give no events.
/// Each variant's payload is a type of its own, so the daemon's thread events carry it as it is.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnEvent {
    TextDelta(TextDelta),
    AssistantText(AssistantText),
    AssistantThinking(AssistantThinking),
    ToolCallStarted(ToolCallStarted),
    ToolCallFinished(ToolCallFinished),
    ApiRetry(ApiRetry),
    RateLimit(RateLimit),
    /// `system/model_refusal_fallback`.
    ModelRefusalFallback(ModelRefusalFallback),
    /// `system/memory_recall`.
    MemoryRecall(MemoryRecall),
    /// `system/mirror_error` (an SDK host's; the CLI does not write it).
    MirrorError(MirrorError),
}

/// A piece of the assistant's text, as the API streams it.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TextDelta {
    pub text: String,
}

/// A complete assistant text block.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AssistantText {
    pub text: String,
}

/// A complete thinking block of the assistant (extended thinking): what the model reasoned
/// before it answered. Empty when the API redacted it.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AssistantThinking {
    pub thinking: String,
}

/// The model called a tool.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ToolCallStarted {
    pub tool_use_id: String,
    pub name: String,
    pub input: Value,
}

/// A tool result went back to the model.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ToolCallFinished {
    pub tool_use_id: String,
    /// The tool's name, from the turn's `tool_call_started` of the same id: the CLI's result
    /// line does not carry it, the turn does ([`crate::TurnEvents`]). Absent for a call the
    /// turn did not see start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub is_error: bool,
    pub content: Value,
}

/// The CLI is retrying a failed Messages API request.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ApiRetry {
    pub attempt: u64,
    pub max_retries: u64,
    pub retry_delay_ms: u64,
    pub error: String,
    pub status: Option<u64>,
}

/// The account's rate-limit state changed (`rate_limit_event`; only under a claude.ai/OAuth
/// login, never with an API key). `status` is `allowed`, `allowed_warning` or `rejected`; a
/// `rejected` one is followed at once by an error `result` (the CLI does not retry it).
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RateLimit {
    pub status: String,
    /// Unix seconds when the limiting window resets.
    pub resets_at: Option<u64>,
    /// The window that limits: `five_hour`, `seven_day`, …
    pub rate_limit_type: Option<String>,
    /// Share of the window used, 0–1, when the CLI reports it.
    pub utilization: Option<f64>,
    /// The warning threshold crossed (`allowed_warning`).
    pub surpassed_threshold: Option<f64>,
    pub is_using_overage: Option<bool>,
}

/// The `result` line: exactly one per turn.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct TurnResult {
    /// The CLI reports API failures as `subtype: "success"` with `is_error: true`: only this flag
    /// says whether the turn worked.
    #[serde(default, deserialize_with = "lenient")]
    pub is_error: bool,
    #[serde(default, deserialize_with = "lenient")]
    pub subtype: String,
    #[serde(default, rename = "result", deserialize_with = "lenient")]
    pub text: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub session_id: Option<String>,
    #[serde(default, deserialize_with = "lenient_list")]
    pub errors: Vec<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub num_turns: u64,
    #[serde(default, deserialize_with = "lenient")]
    pub terminal_reason: Option<String>,
    #[serde(default, deserialize_with = "lenient_list")]
    pub user_message_uuids: Vec<String>,
    /// With `--json-schema`: the model's `StructuredOutput` input, checked by the CLI. Absent when
    /// the model answered with text only (the turn may still be `success`).
    #[serde(default)]
    pub structured_output: Option<Value>,
    /// The HTTP status of the API error that ended the turn once the CLI's retries ran out (429,
    /// 529, …); `None` when the API answered.
    #[serde(default, deserialize_with = "lenient")]
    pub api_error_status: Option<u16>,
    /// This turn's figures per model. `total_cost_usd` and `modelUsage` count from the process's
    /// start instead (protocol notes §5.5).
    #[serde(default, deserialize_with = "lenient")]
    pub model_usage_since_last_result: Option<BTreeMap<String, ModelUsage>>,
    /// The last API request's tokens; used only when the per-turn figures are missing.
    #[serde(default, deserialize_with = "lenient")]
    pub usage: Option<ApiUsage>,
    #[serde(default, deserialize_with = "lenient")]
    pub total_cost_usd: Option<f64>,
    /// Counts results per process from 0.
    #[serde(default, deserialize_with = "lenient")]
    pub result_index: Option<u64>,
    /// Time this turn spent in Messages API requests.
    #[serde(default, deserialize_with = "lenient")]
    pub duration_api_ms: u64,
    /// Set on the zeroed result a process writes when it cannot start
    /// ([`TurnResult::startup_failure`]).
    #[serde(default, deserialize_with = "lenient")]
    pub startup_failure_reason: Option<String>,
    /// The file of a `config_file_invalid` start-up failure.
    #[serde(default, deserialize_with = "lenient")]
    pub invalid_config_file: Option<startup::InvalidConfigFile>,
}

/// One model's figures in `model_usage_since_last_result`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ModelUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    #[serde(rename = "costUSD")]
    pub cost_usd: f64,
}

/// The Messages API's `usage` object, as the `result` line repeats it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ApiUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
}

/// What one turn cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TurnUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
    pub api_ms: u64,
}

impl TurnResult {
    /// The turn's usage: the per-turn figures summed over models (a turn may use several: a
    /// sub-agent, a model switch). Without them, the last request's tokens, and the cumulative
    /// cost only for a process's first result, where it is this turn's alone.
    pub fn usage(&self) -> TurnUsage {
        let api_ms = self.duration_api_ms;
        if let Some(models) = &self.model_usage_since_last_result {
            return models.values().fold(
                TurnUsage {
                    api_ms,
                    ..TurnUsage::default()
                },
                |sum, m| TurnUsage {
                    input_tokens: sum.input_tokens + m.input_tokens,
                    output_tokens: sum.output_tokens + m.output_tokens,
                    cache_read_tokens: sum.cache_read_tokens + m.cache_read_input_tokens,
                    cache_write_tokens: sum.cache_write_tokens + m.cache_creation_input_tokens,
                    cost_usd: sum.cost_usd + m.cost_usd,
                    api_ms,
                },
            );
        }
        let tokens = self.usage.clone().unwrap_or_default();
        TurnUsage {
            input_tokens: tokens.input_tokens,
            output_tokens: tokens.output_tokens,
            cache_read_tokens: tokens.cache_read_input_tokens,
            cache_write_tokens: tokens.cache_creation_input_tokens,
            cost_usd: match self.result_index {
                Some(0) => self.total_cost_usd.unwrap_or_default(),
                _ => 0.0,
            },
            api_ms,
        }
    }

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

    /// True when an interrupt ended the turn (the process stays usable).
    pub fn was_interrupted(&self) -> bool {
        self.terminal_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("aborted"))
    }
}

/// Why a stdout line could not be used. The reader logs it and goes on.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("not a JSON object with a string `type`: {line:.200} ({source})")]
    BadLine {
        line: String,
        source: serde_json::Error,
    },
}

/// Decodes one stdout line.
pub fn decode(line: &str) -> Result<CliMessage, ProtocolError> {
    let decoded: Line = serde_json::from_str(line).map_err(|source| ProtocolError::BadLine {
        line: line.to_owned(),
        source,
    })?;
    Ok(match decoded {
        Line::ControlRequest(line) => line.into_message(),
        Line::ControlResponse(line) => line.into_message(),
        Line::ControlCancelRequest(line) => CliMessage::ControlCancel {
            request_id: line.request_id,
        },
        Line::Result(result) => CliMessage::Result(result),
        Line::System(line) => CliMessage::Progress(line.into_progress()),
        Line::Assistant(line) => line.progress(true, assistant_event),
        Line::User(line) => line.progress(false, user_event),
        Line::StreamEvent(line) => CliMessage::Progress(line.into_progress()),
        Line::RateLimitEvent(line) => CliMessage::Progress(line.into_progress()),
        Line::TranscriptMirror(line) => CliMessage::Mirror(TranscriptMirror {
            file_path: line.file_path,
            entries: line.entries.into_iter().map(Value::Object).collect(),
        }),
        Line::CommandLifecycle(line) => CliMessage::Lifecycle(Lifecycle {
            command_uuid: line.command_uuid,
            state: line.state,
            wakeup_source: line.wakeup_source,
        }),
        Line::Other => CliMessage::Ignored,
    })
}

impl ControlRequestLine {
    /// A control request of the CLI's, its `subtype` read out for routing.
    fn into_message(self) -> CliMessage {
        CliMessage::ControlRequest {
            request_id: self.request_id,
            subtype: self
                .request
                .get("subtype")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            request: self.request,
        }
    }
}

impl ControlResponseLine {
    /// The CLI's answer to one of our control requests: its response, or its error.
    fn into_message(self) -> CliMessage {
        let body = self.response;
        let outcome = if body.subtype == "success" {
            Ok(body.response)
        } else {
            Err(body
                .error
                .unwrap_or_else(|| "unknown control error".to_owned()))
        };
        CliMessage::ControlResponse {
            request_id: body.request_id,
            outcome,
        }
    }
}

impl StreamEventLine {
    /// A text delta of the top-level conversation (a sub-agent's are left out).
    fn into_progress(self) -> Progress {
        let top_level = matches!(self.parent_tool_use_id, None | Some(Value::Null));
        let text = match self.event.and_then(|e| e.delta) {
            Some(Delta::TextDelta { text }) if top_level => Some(text),
            _ => None,
        };
        Progress {
            events: text
                .map(|text| TurnEvent::TextDelta(TextDelta { text }))
                .into_iter()
                .collect(),
            session_id: self.session_id,
            starts_turn: false,
            ..Progress::default()
        }
    }
}

impl RateLimitLine {
    /// The rate limit's state as the CLI reports it.
    fn into_progress(self) -> Progress {
        let info = self.rate_limit_info;
        Progress {
            events: vec![TurnEvent::RateLimit(RateLimit {
                status: info.status,
                resets_at: info.resets_at,
                rate_limit_type: info.rate_limit_type,
                utilization: info.utilization,
                surpassed_threshold: info.surpassed_threshold,
                is_using_overage: info.is_using_overage,
            })],
            session_id: self.session_id,
            starts_turn: false,
            ..Progress::default()
        }
    }
}

/// An assistant message's block as a turn event: its text, its thinking, or a tool call
/// starting.
fn assistant_event(block: Block) -> Option<TurnEvent> {
    match block {
        Block::Text { text } => Some(TurnEvent::AssistantText(AssistantText { text })),
        Block::Thinking { thinking } => {
            Some(TurnEvent::AssistantThinking(AssistantThinking { thinking }))
        }
        Block::RedactedThinking => Some(TurnEvent::AssistantThinking(AssistantThinking {
            thinking: String::new(),
        })),
        Block::ToolUse { id, name, input } => Some(TurnEvent::ToolCallStarted(ToolCallStarted {
            tool_use_id: id,
            name,
            input,
        })),
        _ => None,
    }
}

/// A user message's block as a turn event: a tool's result.
fn user_event(block: Block) -> Option<TurnEvent> {
    match block {
        Block::ToolResult {
            tool_use_id,
            is_error,
            content,
        } => Some(TurnEvent::ToolCallFinished(ToolCallFinished {
            tool_use_id,
            name: None,
            is_error,
            content,
        })),
        _ => None,
    }
}

/// A stdout line as the CLI writes it.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Line {
    ControlRequest(ControlRequestLine),
    ControlResponse(ControlResponseLine),
    ControlCancelRequest(ControlCancelLine),
    Result(Box<TurnResult>),
    System(SystemLine),
    Assistant(MessageLine),
    User(MessageLine),
    StreamEvent(StreamEventLine),
    RateLimitEvent(RateLimitLine),
    TranscriptMirror(TranscriptMirrorLine),
    CommandLifecycle(LifecycleLine),
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct LifecycleLine {
    #[serde(default, deserialize_with = "lenient")]
    command_uuid: String,
    #[serde(default, deserialize_with = "lenient")]
    state: String,
    #[serde(default, deserialize_with = "lenient")]
    wakeup_source: Option<String>,
}

#[derive(Deserialize)]
struct TranscriptMirrorLine {
    #[serde(default, rename = "filePath", deserialize_with = "lenient")]
    file_path: String,
    /// An entry that is not a JSON object is not a transcript line and is skipped.
    #[serde(default, deserialize_with = "lenient_list")]
    entries: Vec<serde_json::Map<String, Value>>,
}

#[derive(Deserialize)]
struct ControlRequestLine {
    #[serde(default, deserialize_with = "lenient")]
    request_id: String,
    #[serde(default)]
    request: Value,
}

#[derive(Deserialize)]
struct ControlResponseLine {
    #[serde(default, deserialize_with = "lenient")]
    response: ControlResponseBody,
}

#[derive(Default, Deserialize)]
struct ControlResponseBody {
    #[serde(default, deserialize_with = "lenient")]
    subtype: String,
    #[serde(default, deserialize_with = "lenient")]
    request_id: String,
    #[serde(default)]
    response: Value,
    #[serde(default, deserialize_with = "lenient")]
    error: Option<String>,
}

#[derive(Deserialize)]
struct ControlCancelLine {
    #[serde(default, deserialize_with = "lenient")]
    request_id: String,
}

#[derive(Deserialize)]
struct RateLimitLine {
    #[serde(default, deserialize_with = "lenient")]
    rate_limit_info: RateLimitInfo,
    #[serde(default, deserialize_with = "lenient")]
    session_id: Option<String>,
}

/// `rate_limit_info`, camelCase on the wire (protocol notes §8).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RateLimitInfo {
    #[serde(default, deserialize_with = "lenient")]
    status: String,
    #[serde(default, deserialize_with = "lenient")]
    resets_at: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    rate_limit_type: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    utilization: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    surpassed_threshold: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    is_using_overage: Option<bool>,
}

#[derive(Deserialize)]
struct MessageLine {
    #[serde(default, deserialize_with = "lenient")]
    message: MessageBody,
    #[serde(default, deserialize_with = "lenient")]
    session_id: Option<String>,
    #[serde(default)]
    parent_tool_use_id: Option<Value>,
}

impl MessageLine {
    /// The line's events: `event` of each content block, for the turn's own lines only; and
    /// for the model's (`assistant`), the response it belongs to.
    fn progress(self, assistant: bool, event: impl Fn(Block) -> Option<TurnEvent>) -> CliMessage {
        let top_level = matches!(self.parent_tool_use_id, None | Some(Value::Null));
        let body = self.message;
        let wanted = top_level && assistant && !body.id.is_empty();
        let model_call = wanted.then_some(ModelCall {
            id: body.id,
            model: body.model,
            usage: body.usage,
        });
        let events = if top_level {
            body.content.into_iter().filter_map(event).collect()
        } else {
            Vec::new()
        };
        CliMessage::Progress(Progress {
            events,
            session_id: self.session_id,
            starts_turn: false,
            model_call,
            permission_mode: None,
        })
    }
}

#[derive(Default, Deserialize)]
struct MessageBody {
    /// A string for plain user text; blocks otherwise. A block that does not parse is skipped.
    #[serde(default, deserialize_with = "lenient_list")]
    content: Vec<Block>,
    /// An API response's own (`assistant` lines).
    #[serde(default, deserialize_with = "lenient")]
    id: String,
    #[serde(default, deserialize_with = "lenient")]
    model: String,
    #[serde(default, deserialize_with = "lenient")]
    usage: ApiUsage,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    RedactedThinking,
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    ToolResult {
        #[serde(default, deserialize_with = "lenient")]
        tool_use_id: String,
        #[serde(default, deserialize_with = "lenient")]
        is_error: bool,
        #[serde(default)]
        content: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StreamEventLine {
    #[serde(default, deserialize_with = "lenient")]
    event: Option<ApiEvent>,
    #[serde(default, deserialize_with = "lenient")]
    session_id: Option<String>,
    #[serde(default)]
    parent_tool_use_id: Option<Value>,
}

#[derive(Deserialize)]
struct ApiEvent {
    #[serde(default, deserialize_with = "lenient")]
    delta: Option<Delta>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    TextDelta {
        text: String,
    },
    #[serde(other)]
    Other,
}

/// A field of an unexpected type reads as its default.
fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

/// A list whose items of an unexpected shape are skipped; anything but an array is empty.
fn lenient_list<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    Ok(match Value::deserialize(deserializer)? {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|item| serde_json::from_value(item).ok())
            .collect(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests;
