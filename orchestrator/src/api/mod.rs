//! What clients see: the bodies the HTTP API and `/mcp` answer with, and the events a thread's
//! stream carries ([`events`]). Each type here is built from the store's rows (`From`), so a new
//! column becomes an API field only when someone adds it here, on purpose.
//!
//! The OpenAPI document (`http::openapi`) is derived from these types, and so are the SSE
//! payloads: a field added here is documented by the same edit.
//!
//! Files: this one (`Thread`, `Message`, …), `pages.rs` (pages; their cursors in `cursor.rs`),
//! `schedules.rs`, `threads.rs`, `events.rs` (`ThreadEvent`, a variant per kind, whence the
//! OpenAPI SSE schemas), `doc.rs` (the text rules of request fields), `a2a.rs` (the A2A words
//! the JSON-RPC door and the push notifications share).
//!
//! Kept apart from `http` because the event bus (`events`) and the pipeline build these values
//! too; this module imports only [`crate::store`] and [`crate::budget`] (for their value types).

pub mod a2a;
pub mod cursor;
pub mod doc;
pub mod events;
pub mod pages;
pub mod schedules;
pub mod threads;

use chrono::{DateTime, Utc};
use plugin_contract::{CliSessionId, ThreadId};
use serde::{Deserialize, Serialize};

use crate::store::{
    EndCause, MessageId, MessageRow, MessageStatus, OnInterrupt, OutcomeRow, PermissionRow,
    ThreadRow, ThreadSummaryRow, ToolCallRow, Workspace,
};

/// A conversation.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    #[schema(value_type = String, example = "thr_0123456789abcdef0123456789abcdef")]
    pub id: ThreadId,
    pub title: Option<String>,
    pub model: Option<String>,
    /// The CLI session to `--resume` when no warm process serves the thread. It changes over the
    /// thread's life; never a key.
    #[schema(value_type = Option<String>)]
    pub cli_session_id: Option<CliSessionId>,
    /// The thread that delegated to this one, or that this one forked.
    #[schema(value_type = Option<String>)]
    pub parent_id: Option<ThreadId>,
    /// The JSON Schema every reply matches (`structuredOutput`); absent: plain text replies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// For a fork: the CLI session it forked, which its first turn resumes with
    /// `--fork-session` (until then `cli_session_id` is empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub forked_session: Option<CliSessionId>,
    /// Most USD the thread's turns may cost together; `None`: only the daemon's daily budget.
    pub max_budget_usd: Option<f64>,
    /// Where the thread works (a folder, or a worktree made for it); absent: a folder of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Workspace>,
    /// Its agent profile (`GET /api/profiles`); `null`: the daemon's default.
    pub profile: Option<String>,
    /// What happens to a turn a crash, a shutdown or a takeover cuts: `mark` (it stays
    /// `interrupted`) or `retry` (it runs again by itself, `turn.redrive_attempts` times at most).
    pub on_interrupt: OnInterrupt,
    /// The tenant it belongs to (its creator's key's); absent: the operator's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// When it was archived (it takes no more messages); absent: a live thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// Last change to the thread row itself (its session), not to its messages.
    pub updated_at: DateTime<Utc>,
}

impl From<ThreadRow> for Thread {
    fn from(row: ThreadRow) -> Self {
        Thread {
            id: row.id,
            title: row.title,
            model: row.model,
            cli_session_id: row.cli_session_id,
            parent_id: row.parent_id,
            output_schema: row.output_schema,
            forked_session: row.forked_session,
            max_budget_usd: row.max_budget_usd,
            workspace: row.workspace.map(|w| w.0),
            profile: row.profile,
            on_interrupt: row.on_interrupt,
            tenant: row.tenant,
            archived_at: row.archived_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// How one run of a user message ended (`turn_outcomes`).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// `done`, `error`, `refused`, `withdrawn`, `interrupted`, `shutdown`, `crash` or `takeover`.
    pub cause: EndCause,
    /// The message's status this run left.
    pub status: MessageStatus,
    pub error: Option<String>,
    /// The reply, for `done`.
    pub reply_id: Option<MessageId>,
    /// The `turn_finished` or `turn_failed` event written with it.
    pub event_id: i64,
    pub created_at: DateTime<Utc>,
}

impl From<OutcomeRow> for Outcome {
    fn from(row: OutcomeRow) -> Self {
        Outcome {
            cause: row.cause,
            status: row.status,
            error: row.error,
            reply_id: row.reply_id,
            event_id: row.event_id,
            created_at: row.created_at,
        }
    }
}

/// One model request of a turn, as the model gateway metered it (`model_requests`).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequest {
    /// The model that answered; `null` when none did (refused, or the API failed).
    pub model: Option<String>,
    /// The HTTP status the gateway answered the CLI with (402 when it refused a request because
    /// a budget was spent).
    pub status: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    /// What it cost at the gateway's prices (`gateway.prices`).
    pub cost_usd: f64,
    /// From the request's arrival to the response's head.
    pub first_byte_ms: i64,
    /// From the request's arrival to the response's last byte.
    pub ms: i64,
    pub created_at: DateTime<Utc>,
}

impl From<crate::store::ModelRequestRow> for ModelRequest {
    fn from(row: crate::store::ModelRequestRow) -> Self {
        ModelRequest {
            model: row.model,
            status: row.status,
            input_tokens: row.input_tokens,
            output_tokens: row.output_tokens,
            cache_read_tokens: row.cache_read_tokens,
            cache_write_tokens: row.cache_write_tokens,
            cost_usd: row.cost_usd,
            first_byte_ms: row.first_byte_ms,
            ms: row.ms,
            created_at: row.created_at,
        }
    }
}

/// A thread as a list of threads shows it: when something last happened in it, and whether a
/// turn is under way (a user message still `pending`).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadSummary {
    #[serde(flatten)]
    pub thread: Thread,
    /// The newest change to the thread or any of its messages.
    pub last_activity_at: DateTime<Utc>,
    pub running: bool,
    pub tags: Vec<String>,
}

impl From<ThreadSummaryRow> for ThreadSummary {
    fn from(row: ThreadSummaryRow) -> Self {
        ThreadSummary {
            thread: row.thread.into(),
            last_activity_at: row.last_activity_at,
            running: row.running,
            tags: Vec::new(),
        }
    }
}

/// One message of a thread: defined with the stored row (`harness_db::Message`), because the
/// transaction that ends a turn puts the stored reply in its `turn_finished` event.
pub use crate::store::Message;

/// The answer to a message: the stored reply, and the turn it ends.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = TurnReply)]
pub struct Reply {
    pub message: Message,
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    /// The CLI session the turn ran in.
    #[schema(value_type = Option<String>)]
    pub session_id: Option<CliSessionId>,
    pub user_message_id: MessageId,
}

/// The messages, in order, as the API shows them.
pub fn messages(rows: Vec<MessageRow>) -> Vec<Message> {
    rows.into_iter().map(Message::from).collect()
}

/// A recorded tool call.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub id: i64,
    #[schema(value_type = Option<String>)]
    pub thread_id: Option<ThreadId>,
    pub tool: String,
    pub tool_use_id: Option<String>,
    pub input: serde_json::Value,
    pub result: Option<serde_json::Value>,
    pub is_error: bool,
    pub duration_ms: u64,
    pub created_at: DateTime<Utc>,
}

impl From<ToolCallRow> for ToolCall {
    fn from(row: ToolCallRow) -> Self {
        ToolCall {
            id: row.id,
            thread_id: row.thread_id,
            tool: row.tool,
            tool_use_id: row.tool_use_id,
            input: row.input,
            result: row.result,
            is_error: row.is_error,
            // Written from a `u64`: never negative.
            duration_ms: u64::try_from(row.duration_ms).unwrap_or_default(),
            created_at: row.created_at,
        }
    }
}

/// A tool permission the CLI asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Permission {
    /// The CLI's request id; the id a person answers.
    pub request_id: String,
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    pub message_id: Option<MessageId>,
    pub tool_use_id: Option<String>,
    pub tool_name: String,
    pub input: serde_json::Value,
    /// `pending`, `allowed` or `denied`.
    pub status: String,
    /// `rule`, `person`, `timeout`, `policy` or `interrupt`; `None` while pending.
    pub decided_by: Option<String>,
    /// For a person's decision: the caller who answered (`operator`, an API key's id, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl From<PermissionRow> for Permission {
    fn from(row: PermissionRow) -> Self {
        Permission {
            request_id: row.request_id,
            thread_id: row.thread_id,
            message_id: row.message_id,
            tool_use_id: row.tool_use_id,
            tool_name: row.tool_name,
            input: row.input,
            status: row.status,
            decided_by: row.decided_by,
            answered_by: row.answered_by,
            reason: row.reason,
            created_at: row.created_at,
            decided_at: row.decided_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_row() -> ThreadRow {
        let at = DateTime::parse_from_rfc3339("2026-11-25T10:00:00Z")
            .expect("a time")
            .with_timezone(&Utc);
        ThreadRow {
            id: ThreadId::from_string("thr_1"),
            title: None,
            model: Some("sonnet".into()),
            cli_session_id: None,
            parent_id: None,
            output_schema: None,
            forked_session: None,
            max_budget_usd: None,
            workspace: None,
            profile: None,
            on_interrupt: OnInterrupt::Mark,
            tenant: None,
            archived_at: None,
            created_at: at,
            updated_at: at,
        }
    }

    #[test]
    fn a_thread_is_camel_case_and_leaves_out_what_it_does_not_have() {
        let json = serde_json::to_value(Thread::from(thread_row())).expect("serializes");
        assert_eq!(json["id"], "thr_1");
        assert_eq!(json["cliSessionId"], serde_json::Value::Null);
        assert_eq!(json["parentId"], serde_json::Value::Null);
        assert_eq!(json["createdAt"], "2026-11-25T10:00:00Z");
        assert!(json.get("created_at").is_none());
        assert!(json.get("outputSchema").is_none(), "{json}");
        assert!(json.get("forkedSession").is_none(), "{json}");
    }

    #[test]
    fn a_message_and_a_tool_call_are_camel_case() {
        let row = thread_row();
        let message = Message::from(MessageRow {
            thread_id: row.id.clone(),
            content: "hello".into(),
            updated_at: row.updated_at,
            ..crate::store::tests::reply_row("hello", row.created_at)
        });
        let json = serde_json::to_value(message).expect("serializes");
        assert_eq!(json["replyTo"], "msg_1");
        assert_eq!(json["status"], "done");
        assert_eq!(json["role"], "assistant");
        assert!(json.get("usage").is_none(), "{json}");

        let call = ToolCall::from(ToolCallRow {
            id: 1,
            thread_id: Some(row.id),
            tool: "time__now".into(),
            tool_use_id: Some("toolu_1".into()),
            input: serde_json::json!({}),
            result: None,
            is_error: false,
            duration_ms: 17,
            created_at: row.created_at,
        });
        let json = serde_json::to_value(call).expect("serializes");
        assert_eq!(json["toolUseId"], "toolu_1");
        assert_eq!(json["isError"], false);
        assert_eq!(json["durationMs"], 17);
    }
}

/// What archiving did to a thread's worktree (`workspaces.on_archive`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeDisposition {
    /// The worktree's folder was removed.
    pub removed: bool,
    /// Kept because it held uncommitted, untracked or ignored work (`remove-if-clean`).
    pub kept_dirty: bool,
    /// Its branch was deleted (it had no commit of its own, or `remove`).
    pub branch_deleted: bool,
}
