//! `messages`: a thread's user messages and replies (a turn's end is `outcomes.rs`).
//!
//! `seq` is computed inside the INSERT that writes the row. PostgreSQL has no database-wide
//! write lock, so a write that inserts into a thread first locks the thread's row
//! ([`lock_thread`]) in its [`ThreadTx`]: writers of one thread take turns, which keeps their
//! `seq`s distinct and makes the `clientMessageId` check and the insert that follows it atomic.

use harness_db::{
    history_pair, now_text, Fence, Inserted, MessageId, MessageRow, MessageStatus, NewUserMessage,
    Origin, Role, StoreError,
};
use plugin_contract::{HistoryMessage, ThreadId};
use sqlx::{PgConnection, PgPool};

use crate::{Postgres, ThreadTx};

harness_db::message_queries!(Postgres);

async fn insert_user_message(
    pool: &PgPool,
    fence: Option<&Fence>,
    id: &MessageId,
    new: &NewUserMessage,
) -> Result<Inserted, StoreError> {
    let thread = &new.thread_id;
    let mut tx = ThreadTx::begin(pool, thread, fence).await?;
    if !lock_thread(tx.conn(), thread).await? {
        return Err(StoreError::ThreadNotFound(thread.clone()));
    }
    if let Some(client_id) = &new.client_message_id {
        // Under the thread's lock: no other insert on this thread can come in between.
        let first = sqlx::query_as!(
            MessageRow,
            r#"SELECT id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                      role AS "role: Role", content, status AS "status: MessageStatus", error,
                      client_message_id, reply_to AS "reply_to: MessageId", model,
                      origin AS "origin: Origin", caller_subject, caller_tenant,
                      structured_output AS "structured_output: serde_json::Value",
                      blocks AS "blocks: serde_json::Value",
                      input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                      cost_usd, api_ms,
                      created_at::timestamptz AS "created_at!",
                      updated_at::timestamptz AS "updated_at!"
               FROM messages WHERE thread_id = $1 AND client_message_id = $2"#,
            thread as &ThreadId,
            client_id,
        )
        .fetch_optional(tx.conn())
        .await?;
        if let Some(first) = first {
            tx.commit().await?;
            return Ok(Inserted::Duplicate(first));
        }
    }
    let text = new.content.text();
    let inserted = sqlx::query_as!(
        MessageRow,
        r#"INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                                 client_message_id, reply_to, model, origin, caller_subject,
                                 caller_tenant, created_at, updated_at, blocks)
           VALUES ($1, $6,
                   (SELECT COALESCE(MAX(m.seq), 0) + 1 FROM messages m WHERE m.thread_id = $6),
                   'user', $2, 'pending', NULL, $3, NULL, $4, $7, $8, $9, $5, $5, $10)
           RETURNING id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                     role AS "role: Role", content, status AS "status: MessageStatus", error,
                     client_message_id, reply_to AS "reply_to: MessageId", model,
                     origin AS "origin: Origin", caller_subject, caller_tenant,
                     structured_output AS "structured_output: serde_json::Value",
                     blocks AS "blocks: serde_json::Value",
                     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                     cost_usd, api_ms,
                     created_at::timestamptz AS "created_at!",
                     updated_at::timestamptz AS "updated_at!""#,
        id as &MessageId,
        text.as_ref(),
        new.client_message_id,
        new.model,
        now_text(),
        thread as &ThreadId,
        new.origin.as_str(),
        new.caller.as_ref().map(|c| c.subject.as_str()),
        new.caller.as_ref().and_then(|c| c.tenant.as_deref()),
        new.blocks_json() as Option<String>,
    )
    .fetch_one(tx.conn())
    .await?;
    tx.commit().await?;
    Ok(Inserted::New(inserted))
}

async fn user_message_thread(
    pool: &PgPool,
    id: &MessageId,
) -> Result<Option<ThreadId>, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT thread_id AS "thread_id: ThreadId" FROM messages
           WHERE id = $1 AND role = 'user'"#,
        id as &MessageId,
    )
    .fetch_optional(pool)
    .await?)
}

async fn get_message(pool: &PgPool, id: &MessageId) -> Result<Option<MessageRow>, StoreError> {
    let row = sqlx::query_as!(
        MessageRow,
        r#"SELECT id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                  role AS "role: Role", content, status AS "status: MessageStatus", error,
                  client_message_id, reply_to AS "reply_to: MessageId", model,
                  origin AS "origin: Origin", caller_subject, caller_tenant,
                  structured_output AS "structured_output: serde_json::Value",
                  blocks AS "blocks: serde_json::Value",
                  input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                  cost_usd, api_ms,
                  created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!"
           FROM messages WHERE id = $1"#,
        id as &MessageId,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

async fn list_messages(pool: &PgPool, thread: &ThreadId) -> Result<Vec<MessageRow>, StoreError> {
    let rows = sqlx::query_as!(
        MessageRow,
        r#"SELECT id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                  role AS "role: Role", content, status AS "status: MessageStatus", error,
                  client_message_id, reply_to AS "reply_to: MessageId", model,
                  origin AS "origin: Origin", caller_subject, caller_tenant,
                  structured_output AS "structured_output: serde_json::Value",
                  blocks AS "blocks: serde_json::Value",
                  input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                  cost_usd, api_ms,
                  created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!"
           FROM messages WHERE thread_id = $1 ORDER BY seq, rowid"#,
        thread as &ThreadId,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

async fn reply_for(
    pool: &PgPool,
    user_message: &MessageId,
) -> Result<Option<MessageRow>, StoreError> {
    let row = sqlx::query_as!(
        MessageRow,
        r#"SELECT id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                  role AS "role: Role", content, status AS "status: MessageStatus", error,
                  client_message_id, reply_to AS "reply_to: MessageId", model,
                  origin AS "origin: Origin", caller_subject, caller_tenant,
                  structured_output AS "structured_output: serde_json::Value",
                  blocks AS "blocks: serde_json::Value",
                  input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                  cost_usd, api_ms,
                  created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!"
           FROM messages WHERE reply_to = $1 AND role = 'assistant'"#,
        user_message as &MessageId,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

async fn history(pool: &PgPool, thread: &ThreadId) -> Result<Vec<HistoryMessage>, StoreError> {
    let exchanges = sqlx::query!(
        "SELECT u.content AS user_content, u.blocks AS user_blocks, a.content AS reply_content
         FROM messages u
         JOIN messages a ON a.reply_to = u.id AND a.role = 'assistant' AND a.status = 'done'
         WHERE u.thread_id = $1 AND u.role = 'user' AND u.status = 'done'
         ORDER BY u.seq, u.rowid",
        thread as &ThreadId,
    )
    .fetch_all(pool)
    .await?;
    Ok(exchanges
        .into_iter()
        .flat_map(|e| history_pair(e.user_content, e.user_blocks, e.reply_content))
        .collect())
}

async fn retry_interrupted(
    tx: &mut ThreadTx,
    thread: &ThreadId,
    id: &MessageId,
) -> Result<Option<MessageRow>, StoreError> {
    let now = now_text();
    let row = sqlx::query_as!(
        MessageRow,
        r#"UPDATE messages SET status = 'pending', error = NULL, updated_at = $1
           WHERE id = $2 AND thread_id = $3 AND role = 'user'
                 AND status IN ('interrupted', 'refused')
           RETURNING id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                     role AS "role: Role", content, status AS "status: MessageStatus", error,
                     client_message_id, reply_to AS "reply_to: MessageId", model,
                     origin AS "origin: Origin", caller_subject, caller_tenant,
                     structured_output AS "structured_output: serde_json::Value",
                     blocks AS "blocks: serde_json::Value",
                     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                     cost_usd, api_ms,
                     created_at::timestamptz AS "created_at!",
                     updated_at::timestamptz AS "updated_at!""#,
        now,
        id as &MessageId,
        thread as &ThreadId,
    )
    .fetch_optional(tx.conn())
    .await?;
    Ok(row)
}

/// Locks the thread's row until the transaction ends, so writers of one thread take turns:
/// what SQLite's one write lock gives the `seq` subqueries and the `clientMessageId` check.
/// `NO KEY`: inserts that merely reference the thread (events, tool calls) still pass. False
/// for an unknown thread.
pub(crate) async fn lock_thread(
    conn: &mut PgConnection,
    thread: &ThreadId,
) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM threads WHERE id = $1 FOR NO KEY UPDATE",
        thread as &ThreadId,
    )
    .fetch_optional(conn)
    .await?
    .is_some())
}
