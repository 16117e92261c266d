//! `messages`: a thread's user messages and replies (a turn's end is `outcomes.rs`).
//!
//! `seq` is computed inside the INSERT that writes the row; every write runs in a [`ThreadTx`]
//! (`BEGIN IMMEDIATE`), under the database's one write lock, so concurrent writers on one thread
//! never collide, and the `clientMessageId` check and the insert that follows it are atomic.

use chrono::{DateTime, Utc};
use harness_db::{
    history_pair, is_unique_violation, now_text, Fence, Inserted, MessageId, MessageRow,
    MessageStatus, NewUserMessage, Origin, Role, StoreError,
};
use plugin_contract::{HistoryMessage, ThreadId};
use sqlx::SqlitePool;

use crate::{Sqlite, ThreadTx};

harness_db::message_queries!(Sqlite);

async fn insert_user_message(
    pool: &SqlitePool,
    fence: Option<&Fence>,
    id: &MessageId,
    new: &NewUserMessage,
) -> Result<Inserted, StoreError> {
    let thread = &new.thread_id;
    // One statement: the unique index on (thread, clientMessageId) refuses a second message
    // with the same key, and the first is read back below.
    let mut tx = ThreadTx::single(pool, thread, fence).await?;
    let now = now_text();
    let origin = new.origin.as_str();
    let caller_subject = new.caller.as_ref().map(|c| c.subject.as_str());
    let caller_tenant = new.caller.as_ref().and_then(|c| c.tenant.as_deref());
    let text = new.content.text();
    let blocks = new.blocks_json();
    // Selecting FROM threads makes an unknown thread insert no row (instead of tripping the
    // foreign key).
    let inserted = sqlx::query_as!(
        MessageRow,
        r#"INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                                 client_message_id, reply_to, model, origin, caller_subject,
                                 caller_tenant, created_at, updated_at, blocks)
           SELECT ?1, t.id,
                  (SELECT COALESCE(MAX(m.seq), 0) + 1 FROM messages m WHERE m.thread_id = t.id),
                  'user', ?2, 'pending', NULL, ?3, NULL, ?4, ?7, ?8, ?9, ?5, ?5, ?10
           FROM threads t WHERE t.id = ?6
           RETURNING id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                     role AS "role: Role", content, status AS "status: MessageStatus", error,
                     client_message_id, reply_to AS "reply_to: MessageId", model,
                     origin AS "origin: Origin", caller_subject, caller_tenant,
                     structured_output AS "structured_output: serde_json::Value",
                     blocks AS "blocks: serde_json::Value",
                     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                     cost_usd, api_ms,
                     created_at AS "created_at: DateTime<Utc>",
                     updated_at AS "updated_at: DateTime<Utc>""#,
        id,
        text,
        new.client_message_id,
        new.model,
        now,
        thread,
        origin,
        caller_subject,
        caller_tenant,
        blocks,
    )
    .fetch_optional(tx.conn())
    .await;
    let inserted = match (inserted, &new.client_message_id) {
        (Ok(row), _) => row.ok_or_else(|| StoreError::ThreadNotFound(thread.clone()))?,
        (Err(err), Some(client_id)) if is_unique_violation(&err) => {
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
                      created_at AS "created_at: DateTime<Utc>",
                      updated_at AS "updated_at: DateTime<Utc>"
               FROM messages WHERE thread_id = ?1 AND client_message_id = ?2"#,
                thread,
                client_id,
            )
            .fetch_one(tx.conn())
            .await?;
            tx.commit().await?;
            return Ok(Inserted::Duplicate(first));
        }
        (Err(err), _) => return Err(err.into()),
    };
    tx.commit().await?;
    Ok(Inserted::New(inserted))
}

async fn user_message_thread(
    pool: &SqlitePool,
    id: &MessageId,
) -> Result<Option<ThreadId>, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT thread_id AS "thread_id: ThreadId" FROM messages
           WHERE id = ?1 AND role = 'user'"#,
        id,
    )
    .fetch_optional(pool)
    .await?)
}

async fn get_message(pool: &SqlitePool, id: &MessageId) -> Result<Option<MessageRow>, StoreError> {
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
                  created_at AS "created_at: DateTime<Utc>",
                  updated_at AS "updated_at: DateTime<Utc>"
           FROM messages WHERE id = ?1"#,
        id,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

async fn list_messages(
    pool: &SqlitePool,
    thread: &ThreadId,
) -> Result<Vec<MessageRow>, StoreError> {
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
                  created_at AS "created_at: DateTime<Utc>",
                  updated_at AS "updated_at: DateTime<Utc>"
           FROM messages WHERE thread_id = ?1 ORDER BY seq, rowid"#,
        thread,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

async fn reply_for(
    pool: &SqlitePool,
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
                  created_at AS "created_at: DateTime<Utc>",
                  updated_at AS "updated_at: DateTime<Utc>"
           FROM messages WHERE reply_to = ?1 AND role = 'assistant'"#,
        user_message,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

async fn history(pool: &SqlitePool, thread: &ThreadId) -> Result<Vec<HistoryMessage>, StoreError> {
    let exchanges = sqlx::query!(
        "SELECT u.content AS user_content, u.blocks AS user_blocks, a.content AS reply_content
         FROM messages u
         JOIN messages a ON a.reply_to = u.id AND a.role = 'assistant' AND a.status = 'done'
         WHERE u.thread_id = ?1 AND u.role = 'user' AND u.status = 'done'
         ORDER BY u.seq, u.rowid",
        thread,
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
        r#"UPDATE messages SET status = 'pending', error = NULL, updated_at = ?1
           WHERE id = ?2 AND thread_id = ?3 AND role = 'user'
                 AND status IN ('interrupted', 'refused')
           RETURNING id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                     role AS "role: Role", content, status AS "status: MessageStatus", error,
                     client_message_id, reply_to AS "reply_to: MessageId", model,
                     origin AS "origin: Origin", caller_subject, caller_tenant,
                     structured_output AS "structured_output: serde_json::Value",
                     blocks AS "blocks: serde_json::Value",
                     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                     cost_usd, api_ms,
                     created_at AS "created_at: DateTime<Utc>",
                     updated_at AS "updated_at: DateTime<Utc>""#,
        now,
        id,
        thread,
    )
    .fetch_optional(tx.conn())
    .await?;
    Ok(row)
}
