//! A session's events as a projection of its thread's stored events: each stored row gives
//! zero or more [`SessionEvent`]s, by itself, so a page of the list and a frame of the stream
//! are computed the same way from the same rows, with nothing remembered between them.
//!
//! Ids are derived, never stored:
//! - a tool call's events take the CLI's tool-use id: `sevt_tu_{id}` for the `agent.tool_use` /
//!   `agent.mcp_tool_use` / `agent.custom_tool_use`, `sevt_tr_{id}` for its result (a custom
//!   tool's: the `user.custom_tool_result` that answered it) ([`tool_use_of`] goes back);
//! - a `user.message` takes its message's id: `sevt_{message id}` ([`user_message_event_id`]),
//!   which the answer to its sending already names;
//! - a `span.model_request_start` takes the gateway's request id: `sevt_{request id}`
//!   (`sevt_mreq_…`, [`model_request_event_id`]), which the request's `span.model_request_end`
//!   names from its own row as its `model_request_start_id`;
//! - every other event is `sevt_{row id}_{k}`, the `k`-th event of its row ([`row_of`]; none of
//!   the ids above has that form).
//!
//! The mapping, by the row's `kind`:
//! - `message_received` from a user → `user.message` (its blocks, files as `{type: "file",
//!   file_id}` sources; else its text); from the CLI, or a goal's turn → nothing;
//! - `turn_started` and `permission_decided` → `session.status_running`;
//! - `model_request_started` → `span.model_request_start`;
//! - `model_request_finished` → `span.model_request_end`, its `model_usage` the tokens the
//!   response reported, `is_error` as the request's;
//! - `assistant_text` → `agent.message`; `assistant_thinking` → `agent.thinking` (the API's
//!   event carries no text);
//! - `tool_call_started` → `agent.custom_tool_use` for `mcp__custom__TOOL` (a custom tool),
//!   `agent.mcp_tool_use` for another `mcp__SERVER__TOOL`, else `agent.tool_use`, with
//!   `evaluated_permission` `ask` when the tool's policy asks, else `allow`;
//! - `tool_call_finished` → by the tool's `name` the turn stored with it: nothing for a custom
//!   tool's (the `user.custom_tool_result` that answered it is its result), an
//!   `agent.mcp_tool_result` for another MCP tool's, else `agent.tool_result` (also for a row
//!   stored without a name);
//! - `client_tool_call` (a custom tool's call): `waiting` → `session.status_idle`
//!   (`requires_action` on the `agent.custom_tool_use`); `answered` → the
//!   `user.custom_tool_result` that answered it, then `session.status_running`; `cancelled` →
//!   nothing (the turn's end says the rest);
//! - `permission_requested` → `session.status_idle` (`requires_action` on the tool use);
//! - `turn_finished` → `session.status_idle` (`end_turn`);
//! - `turn_failed` → `session.status_idle`: `budget_reached` when refused, `end_turn` when
//!   interrupted or withdrawn, else a terminal `session.error` then `retries_exhausted`;
//! - but of a goal's turn ([`Lens::goal_turn`]) neither says the session is idle: the goal
//!   goes on (`crate::goals`), and its end says so;
//! - `goal_set` → `user.define_outcome` (id `sevt_{goal}`, [`goal_event_id`]);
//! - `goal_grading_started` → `span.outcome_evaluation_start` (id `sevt_{goal}_start_{n}`);
//! - `goal_graded` → `span.outcome_evaluation_end` naming that start (`""` when the iteration
//!   ended before its grading), then, when the goal is over, `session.status_idle` (`end_turn`);
//! - `api_retry` → a retrying `session.error`; `limit_reached` → a terminal one;
//! - `turn_redriven` (a turn run again after the daemon that ran it stopped) →
//!   `session.status_rescheduled`;
//! - `thread_archived` and `thread_deleted` → `session.status_terminated`;
//! - anything else → nothing.

use serde_json::Value;

use super::wire::{
    Content, EventBody, ModelUsage, Permission, RetryStatus, Rubric, SessionError,
    SessionErrorType, SessionEvent, StopReason,
};
use crate::mcp::CLIENT_SERVER;
use crate::store::EventRow;

const TOOL_USE: &str = "sevt_tu_";
const TOOL_RESULT: &str = "sevt_tr_";

/// What the projection of a row needs besides the row.
#[derive(Clone, Copy)]
pub struct Lens<'a> {
    /// Whether the tool's permission policy is `always_ask`, by the CLI's name for it
    /// (`mcp__SERVER__TOOL` for an MCP tool).
    pub asks: &'a dyn Fn(&str) -> bool,
    /// The row belongs to a goal's turn (its message's `clientMessageId` is a goal's:
    /// [`crate::goals::GOAL_TURN_PREFIX`]).
    pub goal_turn: bool,
}

/// The session events of one stored thread event.
pub fn project(row: &EventRow, lens: Lens<'_>) -> Vec<SessionEvent> {
    bodies(row, lens)
        .into_iter()
        .enumerate()
        .map(|(k, (id, body))| SessionEvent {
            id: id.unwrap_or_else(|| format!("sevt_{}_{k}", row.id)),
            processed_at: Some(row.created_at),
            body,
        })
        .collect()
}

/// The id of the `agent.tool_use` / `agent.mcp_tool_use` event of the CLI's tool use `id`.
pub fn tool_use_event_id(tool_use_id: &str) -> String {
    format!("{TOOL_USE}{tool_use_id}")
}

/// The id of the `user.define_outcome` event of the goal `goal` (`outc_…`).
pub fn goal_event_id(goal: &str) -> String {
    format!("sevt_{goal}")
}

/// The id of the `span.outcome_evaluation_start` of the goal's `iteration`.
fn evaluation_start_id(goal: &str, iteration: u32) -> String {
    format!("sevt_{goal}_start_{iteration}")
}

/// The id of the `user.message` event of the user message `message` (`msg_…`).
pub fn user_message_event_id(message: &str) -> String {
    format!("sevt_{message}")
}

/// The id of the `span.model_request_start` event of the gateway's model request `request`
/// (`mreq_…`).
pub fn model_request_event_id(request: &str) -> String {
    format!("sevt_{request}")
}

/// The id of the result of the CLI's tool use `id`: its `agent.tool_result`, or for a custom
/// tool the `user.custom_tool_result` that answered it.
pub fn tool_result_event_id(tool_use_id: &str) -> String {
    format!("{TOOL_RESULT}{tool_use_id}")
}

/// The CLI's tool-use id of an `agent.tool_use` / `agent.mcp_tool_use` event's id.
pub fn tool_use_of(event_id: &str) -> Option<&str> {
    event_id
        .strip_prefix(TOOL_USE)
        .filter(|rest| !rest.is_empty())
}

/// The stored row and the index within it of an event id of the `sevt_{row}_{k}` form.
pub fn row_of(event_id: &str) -> Option<(i64, usize)> {
    let (row, k) = event_id.strip_prefix("sevt_")?.split_once('_')?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(row) || !all_digits(k) {
        return None;
    }
    Some((row.parse().ok()?, k.parse().ok()?))
}

/// The row's events: a fixed id (tool calls) or `None` for the row-derived one.
fn bodies(row: &EventRow, lens: Lens<'_>) -> Vec<(Option<String>, EventBody)> {
    let data = &row.data;
    let plain = |body| vec![(None, body)];
    match row.kind.as_str() {
        "message_received" if str_of(data, "origin") == Some("user") && !lens.goal_turn => {
            let id = str_of(data, "messageId").map(user_message_event_id);
            vec![(
                id,
                EventBody::UserMessage {
                    content: user_content(data),
                },
            )]
        }
        "turn_started" | "permission_decided" => plain(EventBody::SessionStatusRunning {}),
        "model_request_started" => match str_of(data, "requestId") {
            Some(request) => vec![(
                Some(model_request_event_id(request)),
                EventBody::SpanModelRequestStart {},
            )],
            None => Vec::new(),
        },
        "model_request_finished" => model_request_end(data).map(plain).unwrap_or_default(),
        "assistant_thinking" => plain(EventBody::AgentThinking {}),
        "assistant_text" => match str_of(data, "text") {
            Some(text) => plain(EventBody::AgentMessage {
                content: vec![text_block(text)],
            }),
            None => Vec::new(),
        },
        "tool_call_started" => tool_use(data, lens.asks).into_iter().collect(),
        "tool_call_finished" => tool_result(data).into_iter().collect(),
        "client_tool_call" => client_tool_call(data),
        "permission_requested" => match str_of(data, "toolUseId") {
            Some(id) => plain(idle(StopReason::RequiresAction {
                event_ids: vec![tool_use_event_id(id)],
            })),
            None => Vec::new(),
        },
        "turn_finished" if !lens.goal_turn => plain(idle(StopReason::EndTurn)),
        "turn_failed" => turn_failed(data)
            .into_iter()
            .filter(|body| !lens.goal_turn || !matches!(body, EventBody::SessionStatusIdle { .. }))
            .map(|b| (None, b))
            .collect(),
        "goal_set" => goal_set(data).into_iter().collect(),
        "goal_grading_started" => grading_started(data).into_iter().collect(),
        "goal_graded" => goal_graded(data),
        "api_retry" => plain(api_retry(data)),
        "turn_redriven" => plain(EventBody::SessionStatusRescheduled {}),
        "thread_archived" | "thread_deleted" => plain(EventBody::SessionStatusTerminated {}),
        "limit_reached" => plain(error(
            SessionErrorType::UnknownError,
            limit_message(data),
            RetryStatus::Terminal,
        )),
        _ => Vec::new(),
    }
}

/// A user message's content: its blocks when it was sent as blocks, else its text.
fn user_content(data: &Value) -> Vec<Content> {
    let blocks: Vec<Content> = data
        .get("blocks")
        .and_then(Value::as_array)
        .map(|blocks| blocks.iter().filter_map(user_block).collect())
        .unwrap_or_default();
    if !blocks.is_empty() {
        return blocks;
    }
    vec![text_block(str_of(data, "content").unwrap_or_default())]
}

/// One stored block (`claude_cli::ContentBlock`): files named by `fileId` become the API's
/// `{type: "file", file_id}`; other sources are kept as they are.
fn user_block(block: &Value) -> Option<Content> {
    let source = || {
        let source = block.get("source")?;
        if str_of(source, "type") == Some("file") {
            let file_id = str_of(source, "fileId").or_else(|| str_of(source, "file_id"))?;
            return Some(serde_json::json!({ "type": "file", "file_id": file_id }));
        }
        Some(source.clone())
    };
    match str_of(block, "type")? {
        "text" => Some(text_block(str_of(block, "text")?)),
        "image" => Some(Content::Image { source: source()? }),
        "document" => Some(Content::Document {
            source: source()?,
            title: None,
            context: None,
        }),
        _ => None,
    }
}

/// `tool_call_started` (`claude_cli::ToolCallStarted`).
fn tool_use(data: &Value, asks: &dyn Fn(&str) -> bool) -> Option<(Option<String>, EventBody)> {
    let id = str_of(data, "tool_use_id")?;
    let full_name = str_of(data, "name")?;
    let input = data
        .get("input")
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    let evaluated_permission = Some(if asks(full_name) {
        Permission::Ask
    } else {
        Permission::Allow
    });
    let body = match mcp_name(full_name) {
        Some((CLIENT_SERVER, name)) => EventBody::AgentCustomToolUse {
            name: name.to_owned(),
            input,
        },
        Some((server, name)) => EventBody::AgentMcpToolUse {
            name: name.to_owned(),
            mcp_server_name: server.to_owned(),
            input,
            evaluated_permission,
        },
        None => EventBody::AgentToolUse {
            name: full_name.to_owned(),
            input,
            evaluated_permission,
        },
    };
    Some((Some(tool_use_event_id(id)), body))
}

/// `client_tool_call` (`crate::api::events::ClientToolCall`), by its `state`.
fn client_tool_call(data: &Value) -> Vec<(Option<String>, EventBody)> {
    let Some(id) = str_of(data, "toolUseId") else {
        return Vec::new();
    };
    match str_of(data, "state") {
        Some("waiting") => vec![(
            None,
            idle(StopReason::RequiresAction {
                event_ids: vec![tool_use_event_id(id)],
            }),
        )],
        Some("answered") => {
            let answered = EventBody::UserCustomToolResult {
                custom_tool_use_id: tool_use_event_id(id),
                content: data.get("content").and_then(result_content),
                is_error: data.get("isError").and_then(Value::as_bool),
            };
            vec![
                (Some(tool_result_event_id(id)), answered),
                (None, EventBody::SessionStatusRunning {}),
            ]
        }
        _ => Vec::new(),
    }
}

/// Whether the CLI's tool name `name` is a custom tool's (`mcp__custom__TOOL`).
pub fn is_custom_tool(name: &str) -> bool {
    mcp_name(name).is_some_and(|(server, _)| server == CLIENT_SERVER)
}

/// `mcp__SERVER__TOOL` → (SERVER, TOOL).
fn mcp_name(name: &str) -> Option<(&str, &str)> {
    let (server, tool) = name.strip_prefix("mcp__")?.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// `tool_call_finished` (`claude_cli::ToolCallFinished`), by the tool's name.
fn tool_result(data: &Value) -> Option<(Option<String>, EventBody)> {
    let id = str_of(data, "tool_use_id")?;
    let content = data.get("content").and_then(result_content);
    let is_error = data.get("is_error").and_then(Value::as_bool);
    let body = match str_of(data, "name").and_then(mcp_name) {
        // Its result is the client's `user.custom_tool_result`.
        Some((CLIENT_SERVER, _)) => return None,
        Some(_) => EventBody::AgentMcpToolResult {
            mcp_tool_use_id: tool_use_event_id(id),
            content,
            is_error,
        },
        None => EventBody::AgentToolResult {
            tool_use_id: tool_use_event_id(id),
            content,
            is_error,
        },
    };
    Some((Some(tool_result_event_id(id)), body))
}

/// A tool result's content: a string as one text block; of a list of blocks, the text blocks
/// and the images (their source as the Messages API gave it).
fn result_content(content: &Value) -> Option<Vec<Content>> {
    match content {
        Value::String(text) => Some(vec![text_block(text)]),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter_map(|block| match str_of(block, "type")? {
                    "text" => Some(text_block(str_of(block, "text")?)),
                    "image" => Some(Content::Image {
                        source: block.get("source")?.clone(),
                    }),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    }
}

/// `goal_set` (`crate::api::events::GoalSet`).
fn goal_set(data: &Value) -> Option<(Option<String>, EventBody)> {
    let goal = str_of(data, "goalId")?;
    let body = EventBody::UserDefineOutcome {
        description: str_of(data, "description")?.to_owned(),
        rubric: Rubric::Text {
            content: str_of(data, "rubric")?.to_owned(),
        },
        max_iterations: u32_of(data, "maxIterations"),
        outcome_id: goal.to_owned(),
    };
    Some((Some(goal_event_id(goal)), body))
}

/// `goal_grading_started` (`crate::api::events::GoalGradingStarted`).
fn grading_started(data: &Value) -> Option<(Option<String>, EventBody)> {
    let goal = str_of(data, "goalId")?;
    let iteration = u32_of(data, "iteration")?;
    let body = EventBody::SpanOutcomeEvaluationStart {
        outcome_id: goal.to_owned(),
        iteration,
    };
    Some((Some(evaluation_start_id(goal, iteration)), body))
}

/// `goal_graded` (`crate::api::events::GoalGraded`): the evaluation's end, and the idle that
/// ends the goal.
fn goal_graded(data: &Value) -> Vec<(Option<String>, EventBody)> {
    let (Some(goal), Some(iteration), Some(result)) = (
        str_of(data, "goalId"),
        u32_of(data, "iteration"),
        str_of(data, "result"),
    ) else {
        return Vec::new();
    };
    let graded = data.get("graded").and_then(Value::as_bool) == Some(true);
    let usage = &data["usage"];
    let tokens = |key| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let end = EventBody::SpanOutcomeEvaluationEnd {
        outcome_evaluation_start_id: match graded {
            true => evaluation_start_id(goal, iteration),
            false => String::new(),
        },
        outcome_id: goal.to_owned(),
        iteration,
        result: result.to_owned(),
        explanation: str_of(data, "explanation").unwrap_or_default().to_owned(),
        usage: ModelUsage {
            input_tokens: tokens("inputTokens"),
            output_tokens: tokens("outputTokens"),
            cache_creation_input_tokens: tokens("cacheWriteTokens"),
            cache_read_input_tokens: tokens("cacheReadTokens"),
        },
    };
    let mut bodies = vec![(None, end)];
    if result != "needs_revision" {
        bodies.push((None, idle(StopReason::EndTurn)));
    }
    bodies
}

fn u32_of(value: &Value, key: &str) -> Option<u32> {
    value
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

/// `model_request_finished` (`crate::api::events::ModelRequestFinished`): its start's id and
/// the tokens the response reported.
fn model_request_end(data: &Value) -> Option<EventBody> {
    let request = str_of(data, "requestId")?;
    let tokens = |key: &str| data.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(EventBody::SpanModelRequestEnd {
        model_request_start_id: model_request_event_id(request),
        is_error: Some(
            data.get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        ),
        model_usage: ModelUsage {
            input_tokens: tokens("inputTokens"),
            output_tokens: tokens("outputTokens"),
            cache_creation_input_tokens: tokens("cacheWriteTokens"),
            cache_read_input_tokens: tokens("cacheReadTokens"),
        },
    })
}

/// `turn_failed` (`crate::api::events::TurnFailed`), by its `cause`.
fn turn_failed(data: &Value) -> Vec<EventBody> {
    match str_of(data, "cause") {
        Some("refused") => vec![idle(StopReason::BudgetReached)],
        Some("interrupted" | "withdrawn" | "done") => vec![idle(StopReason::EndTurn)],
        _ => vec![
            error(
                SessionErrorType::UnknownError,
                str_of(data, "error")
                    .unwrap_or("the turn failed")
                    .to_owned(),
                RetryStatus::Terminal,
            ),
            idle(StopReason::RetriesExhausted),
        ],
    }
}

/// `api_retry` (`claude_cli::ApiRetry`): the error named by its HTTP status.
fn api_retry(data: &Value) -> EventBody {
    let kind = match data.get("status").and_then(Value::as_u64) {
        Some(529) => SessionErrorType::ModelOverloadedError,
        Some(429) => SessionErrorType::ModelRateLimitedError,
        _ => SessionErrorType::ModelRequestFailedError,
    };
    let message = str_of(data, "error").unwrap_or("the model request failed");
    error(kind, message.to_owned(), RetryStatus::Retrying)
}

/// `limit_reached` (`crate::api::events::LimitReached`): what the stopped process was told.
fn limit_message(data: &Value) -> String {
    match str_of(data, "message") {
        Some(message) if !message.is_empty() => message.to_owned(),
        _ => format!(
            "the {} limit was reached",
            str_of(data, "limit").unwrap_or("sandbox")
        ),
    }
}

fn idle(stop_reason: StopReason) -> EventBody {
    EventBody::SessionStatusIdle {
        stop_reason,
        stop_details: None,
    }
}

fn error(kind: SessionErrorType, message: String, retry_status: RetryStatus) -> EventBody {
    EventBody::SessionError {
        error: SessionError {
            kind,
            message,
            retry_status,
        },
    }
}

fn text_block(text: &str) -> Content {
    Content::Text {
        text: text.to_owned(),
    }
}

fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests;
