//! The API's event types, as the SDKs (`anthropic` 2.10.0, `@anthropic-ai/sdk` 1.10.0) read and
//! send them: [`SessionEvent`] (what `GET /v1/sessions/{id}/events` lists and its stream sends)
//! and [`SendEvents`] (the body of `POST /v1/sessions/{id}/events`).
//!
//! Fields the SDKs declare optional are left out when `None`; those they declare required are
//! always written (`processed_at` as `null` for a user event not yet processed).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// One event of a session: its `id` (`sevt_…`), when it was processed, and its type's fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionEvent {
    pub id: String,
    /// RFC 3339; `null` for a user event still queued. Always set on agent, session and span
    /// events.
    pub processed_at: Option<DateTime<Utc>>,
    #[serde(flatten)]
    pub body: EventBody,
}

/// An event's type (`type`) and the fields of that type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type")]
pub enum EventBody {
    #[serde(rename = "user.message")]
    UserMessage { content: Vec<Content> },
    #[serde(rename = "user.interrupt")]
    UserInterrupt {},
    #[serde(rename = "user.tool_confirmation")]
    UserToolConfirmation {
        /// The `agent.tool_use` / `agent.mcp_tool_use` event's id.
        tool_use_id: String,
        result: Confirmation,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deny_message: Option<String>,
    },
    #[serde(rename = "user.custom_tool_result")]
    UserCustomToolResult {
        /// The `agent.custom_tool_use` event's id.
        custom_tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Vec<Content>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    #[serde(rename = "user.define_outcome")]
    UserDefineOutcome {
        description: String,
        rubric: Rubric,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_iterations: Option<u32>,
        /// `outc_…`, set by the server (required on the echoed event).
        outcome_id: String,
    },
    #[serde(rename = "agent.message")]
    AgentMessage { content: Vec<Content> },
    #[serde(rename = "agent.thinking")]
    AgentThinking {},
    #[serde(rename = "agent.tool_use")]
    AgentToolUse {
        name: String,
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evaluated_permission: Option<Permission>,
    },
    #[serde(rename = "agent.tool_result")]
    AgentToolResult {
        /// The `agent.tool_use` event's id.
        tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Vec<Content>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    #[serde(rename = "agent.mcp_tool_use")]
    AgentMcpToolUse {
        name: String,
        mcp_server_name: String,
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evaluated_permission: Option<Permission>,
    },
    #[serde(rename = "agent.mcp_tool_result")]
    AgentMcpToolResult {
        /// The `agent.mcp_tool_use` event's id.
        mcp_tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Vec<Content>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    #[serde(rename = "agent.custom_tool_use")]
    AgentCustomToolUse { name: String, input: Value },
    #[serde(rename = "session.status_running")]
    SessionStatusRunning {},
    #[serde(rename = "session.status_idle")]
    SessionStatusIdle {
        stop_reason: StopReason,
        /// Why the model refused, with a refusal: Harness reports none (`null`).
        #[schema(value_type = Option<Object>)]
        stop_details: Option<serde_json::Value>,
    },
    #[serde(rename = "session.status_rescheduled")]
    SessionStatusRescheduled {},
    #[serde(rename = "session.status_terminated")]
    SessionStatusTerminated {},
    #[serde(rename = "session.error")]
    SessionError { error: SessionError },
    #[serde(rename = "span.model_request_start")]
    SpanModelRequestStart {},
    #[serde(rename = "span.model_request_end")]
    SpanModelRequestEnd {
        /// The `span.model_request_start` event's id.
        model_request_start_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        model_usage: ModelUsage,
    },
    #[serde(rename = "span.outcome_evaluation_start")]
    SpanOutcomeEvaluationStart {
        outcome_id: String,
        /// 0-based revision cycle.
        iteration: u32,
    },
    #[serde(rename = "span.outcome_evaluation_ongoing")]
    SpanOutcomeEvaluationOngoing { outcome_id: String, iteration: u32 },
    #[serde(rename = "span.outcome_evaluation_end")]
    SpanOutcomeEvaluationEnd {
        /// The `span.outcome_evaluation_start` event's id.
        outcome_evaluation_start_id: String,
        outcome_id: String,
        iteration: u32,
        /// `satisfied`, `needs_revision`, `max_iterations_reached`, `failed` or `interrupted`.
        result: String,
        explanation: String,
        usage: ModelUsage,
    },
}

/// The `type` of an event: its SSE `event:` name and what a `types[]` filter names.
pub fn event_type(body: &EventBody) -> &'static str {
    match body {
        EventBody::UserMessage { .. } => "user.message",
        EventBody::UserInterrupt {} => "user.interrupt",
        EventBody::UserToolConfirmation { .. } => "user.tool_confirmation",
        EventBody::UserCustomToolResult { .. } => "user.custom_tool_result",
        EventBody::UserDefineOutcome { .. } => "user.define_outcome",
        EventBody::AgentMessage { .. } => "agent.message",
        EventBody::AgentThinking {} => "agent.thinking",
        EventBody::AgentToolUse { .. } => "agent.tool_use",
        EventBody::AgentToolResult { .. } => "agent.tool_result",
        EventBody::AgentMcpToolUse { .. } => "agent.mcp_tool_use",
        EventBody::AgentMcpToolResult { .. } => "agent.mcp_tool_result",
        EventBody::AgentCustomToolUse { .. } => "agent.custom_tool_use",
        EventBody::SessionStatusRunning {} => "session.status_running",
        EventBody::SessionStatusIdle { .. } => "session.status_idle",
        EventBody::SessionStatusRescheduled {} => "session.status_rescheduled",
        EventBody::SessionStatusTerminated {} => "session.status_terminated",
        EventBody::SessionError { .. } => "session.error",
        EventBody::SpanModelRequestStart {} => "span.model_request_start",
        EventBody::SpanModelRequestEnd { .. } => "span.model_request_end",
        EventBody::SpanOutcomeEvaluationStart { .. } => "span.outcome_evaluation_start",
        EventBody::SpanOutcomeEvaluationOngoing { .. } => "span.outcome_evaluation_ongoing",
        EventBody::SpanOutcomeEvaluationEnd { .. } => "span.outcome_evaluation_end",
    }
}

/// A content block. `source` is the API's source object as it is (`{type: "file", file_id}`,
/// `{type: "base64", media_type, data}`, `{type: "url", url}`, or for a document
/// `{type: "text", media_type, data}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    Text {
        text: String,
    },
    Image {
        source: Value,
    },
    Document {
        source: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<String>,
    },
}

/// A `user.tool_confirmation`'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Confirmation {
    Allow,
    Deny,
}

/// A tool call's evaluated permission policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    Allow,
    Ask,
    Deny,
}

/// How a `user.define_outcome` is graded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Rubric {
    Text { content: String },
    File { file_id: String },
}

/// Why a session went idle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    /// Waiting on the client: the ids of the tool-use events to confirm or answer.
    RequiresAction {
        event_ids: Vec<String>,
    },
    RetriesExhausted,
    BudgetReached,
}

/// A `session.error`'s error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionError {
    #[serde(rename = "type")]
    pub kind: SessionErrorType,
    pub message: String,
    pub retry_status: RetryStatus,
}

/// The kinds of session error this server reports (those without fields of their own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionErrorType {
    UnknownError,
    ModelOverloadedError,
    ModelRateLimitedError,
    ModelRequestFailedError,
    BillingError,
    ToolUseLimitReachedError,
    CompactionLimitReachedError,
}

/// Whether the session retries after an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RetryStatus {
    Retrying,
    Exhausted,
    Terminal,
}

/// A model request's tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

/// The body of `POST /v1/sessions/{id}/events`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SendEvents {
    pub events: Vec<EventParams>,
}

/// An event a client sends. Any other `type` (`user.tool_result`, `system.message`, …) is
/// refused: "unknown variant `…`, expected one of …".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type")]
pub enum EventParams {
    #[serde(rename = "user.message")]
    UserMessage { content: Vec<Content> },
    #[serde(rename = "user.interrupt")]
    UserInterrupt {},
    #[serde(rename = "user.tool_confirmation")]
    UserToolConfirmation {
        tool_use_id: String,
        result: Confirmation,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deny_message: Option<String>,
    },
    #[serde(rename = "user.custom_tool_result")]
    UserCustomToolResult {
        custom_tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Vec<Content>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    #[serde(rename = "user.define_outcome")]
    UserDefineOutcome {
        description: String,
        rubric: Rubric,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "crate::managed::params::integral"
        )]
        #[schema(minimum = 1, maximum = 20)]
        max_iterations: Option<u32>,
    },
}

impl EventParams {
    /// The event as echoed; `outcome_id` is the id given to a `user.define_outcome` (ignored by
    /// the other types).
    pub fn into_body(self, outcome_id: impl FnOnce() -> String) -> EventBody {
        match self {
            EventParams::UserMessage { content } => EventBody::UserMessage { content },
            EventParams::UserInterrupt {} => EventBody::UserInterrupt {},
            EventParams::UserToolConfirmation {
                tool_use_id,
                result,
                deny_message,
            } => EventBody::UserToolConfirmation {
                tool_use_id,
                result,
                deny_message,
            },
            EventParams::UserCustomToolResult {
                custom_tool_use_id,
                content,
                is_error,
            } => EventBody::UserCustomToolResult {
                custom_tool_use_id,
                content,
                is_error,
            },
            EventParams::UserDefineOutcome {
                description,
                rubric,
                max_iterations,
            } => EventBody::UserDefineOutcome {
                description,
                rubric,
                max_iterations,
                outcome_id: outcome_id(),
            },
        }
    }
}
