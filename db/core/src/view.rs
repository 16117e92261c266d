//! How the API shows a stored message ([`Message`]): here, beside [`MessageRow`], because the
//! transaction that ends a turn writes the stored reply, as the API shows it, into its
//! `turn_finished` event ([`crate::Announcement`]); the daemon's API re-exports it.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;
use serde::Serialize;

use crate::{CallerId, MessageId, MessageRow, MessageStatus, Origin, Role, Usage};

/// One message of a thread.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub id: MessageId,
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    /// Position in the thread, from 1, in arrival order.
    pub seq: i64,
    pub role: Role,
    /// The message's text.
    pub content: String,
    /// A user message sent as content blocks: the blocks, its images and documents as file
    /// references (`{"type": "file", "fileId", "media_type", "bytes"}`; `GET /api/files/{id}`
    /// has their bytes), never the bytes themselves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<plugin_contract::ContentBlock>>,
    pub status: MessageStatus,
    /// Why the turn failed, for `error` and `interrupted`.
    pub error: Option<String>,
    pub client_message_id: Option<String>,
    /// For an assistant message: the user message it answers.
    pub reply_to: Option<MessageId>,
    pub model: Option<String>,
    /// Who started the turn this message belongs to: `user` (a message sent to the API) or `cli`
    /// (the CLI started it by itself).
    pub origin: Origin,
    /// Who sent a user message: the subject (`operator`, an API key's id, `schedule:<id>`) and
    /// its tenant; absent on replies, the CLI's own turns and messages stored before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<CallerId>,
    /// A reply of a thread with an `outputSchema`: the value, validated against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<serde_json::Value>,
    /// What the turn cost: on the reply of a turn that replied, on the user message of a turn
    /// that failed after reaching the API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<MessageRow> for Message {
    fn from(row: MessageRow) -> Self {
        let usage = row.usage();
        let caller = row.caller();
        let blocks = row.content_blocks();
        Message {
            id: row.id,
            thread_id: row.thread_id,
            seq: row.seq,
            role: row.role,
            blocks,
            content: row.content,
            status: row.status,
            error: row.error,
            client_message_id: row.client_message_id,
            reply_to: row.reply_to,
            model: row.model,
            origin: row.origin,
            caller,
            structured_output: row.structured_output,
            usage,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}
