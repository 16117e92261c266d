//! `messages`: a thread's user messages and replies, and the life of a turn.
//!
//! `seq` is computed inside the INSERT that writes the row; every write runs in a [`ThreadTx`]
//! (`BEGIN IMMEDIATE`), under the database's one write lock, so concurrent writers on one thread
//! never collide, and the `clientMessageId` check and the insert that follows it are atomic.

use chrono::{DateTime, Utc};
use harness_db::{
    is_unique_violation, now_text, Fence, Inserted, MessageId, MessageRow, MessageStatus, NewReply,
    NewUserMessage, Origin, Role, StoreError, Usage,
};
use plugin_contract::{CliSessionId, HistoryMessage, ThreadId};
use sqlx::{SqliteConnection, SqlitePool};

use crate::usage::add_to_day;
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
    // Selecting FROM threads makes an unknown thread insert no row (instead of tripping the
    // foreign key).
    let inserted = sqlx::query_as!(
        MessageRow,
        r#"INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                                 client_message_id, reply_to, model, origin, created_at,
                                 updated_at)
           SELECT ?1, t.id,
                  (SELECT COALESCE(MAX(m.seq), 0) + 1 FROM messages m WHERE m.thread_id = t.id),
                  'user', ?2, 'pending', NULL, ?3, NULL, ?4, ?7, ?5, ?5
           FROM threads t WHERE t.id = ?6
           RETURNING id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                     role AS "role: Role", content, status AS "status: MessageStatus", error,
                     client_message_id, reply_to AS "reply_to: MessageId", model,
                     origin AS "origin: Origin",
                     structured_output AS "structured_output: serde_json::Value",
                     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                     cost_usd, api_ms,
                     created_at AS "created_at: DateTime<Utc>",
                     updated_at AS "updated_at: DateTime<Utc>""#,
        id,
        new.content,
        new.client_message_id,
        new.model,
        now,
        thread,
        origin,
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
                      origin AS "origin: Origin",
                      structured_output AS "structured_output: serde_json::Value",
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

/// Marks the user message `done`, then inserts the reply after it; see
/// [`MessageQueries::complete_turn`].
async fn complete_turn(
    tx: &mut ThreadTx,
    thread: &ThreadId,
    user_message: &MessageId,
    reply: NewReply<'_>,
    session: Option<&CliSessionId>,
    usage: Option<&Usage>,
) -> Result<MessageRow, StoreError> {
    let now = now_text();
    let answered = sqlx::query!(
        "UPDATE messages SET status = 'done', error = NULL, updated_at = ?1
         WHERE id = ?2 AND thread_id = ?3 AND role = 'user'",
        now,
        user_message,
        thread,
    )
    .execute(tx.conn())
    .await?;
    if answered.rows_affected() == 0 {
        return Err(StoreError::MessageNotFound(user_message.clone()));
    }

    let structured = reply.structured_output.map(serde_json::Value::to_string);
    let u = usage.copied().unwrap_or_default();
    let cost = usage.map(|u| u.cost_usd);
    let row = sqlx::query_as!(
        MessageRow,
        r#"INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                                 client_message_id, reply_to, model, structured_output,
                                 input_tokens, output_tokens, cache_read_tokens,
                                 cache_write_tokens, cost_usd, api_ms, origin, created_at,
                                 updated_at)
           VALUES (?1, ?2,
                   (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE thread_id = ?2),
                   'assistant', ?3, 'done', NULL, NULL, ?4, ?5, ?7,
                   ?8, ?9, ?10, ?11, ?12, ?13,
                   (SELECT origin FROM messages WHERE id = ?4), ?6, ?6)
           RETURNING id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                     role AS "role: Role", content, status AS "status: MessageStatus", error,
                     client_message_id, reply_to AS "reply_to: MessageId", model,
                     origin AS "origin: Origin",
                     structured_output AS "structured_output: serde_json::Value",
                     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                     cost_usd, api_ms,
                     created_at AS "created_at: DateTime<Utc>",
                     updated_at AS "updated_at: DateTime<Utc>""#,
        reply.id,
        thread,
        reply.text,
        user_message,
        reply.model,
        now,
        structured,
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        cost,
        u.api_ms,
    )
    .fetch_one(tx.conn())
    .await?;

    record_session(tx.conn(), thread, session, &now).await?;
    if let Some(usage) = usage {
        add_to_day(tx.conn(), usage).await?;
    }
    Ok(row)
}

/// Sets the user message's `status` and error text; see [`MessageQueries::fail_turn`].
async fn fail_turn(
    tx: &mut ThreadTx,
    thread: &ThreadId,
    user_message: &MessageId,
    status: MessageStatus,
    error: &str,
    session: Option<&CliSessionId>,
    usage: Option<&Usage>,
) -> Result<(), StoreError> {
    let now = now_text();
    let failed = sqlx::query!(
        "UPDATE messages SET status = ?1, error = ?2, updated_at = ?3
         WHERE id = ?4 AND thread_id = ?5 AND role = 'user'",
        status,
        error,
        now,
        user_message,
        thread,
    )
    .execute(tx.conn())
    .await?;
    if failed.rows_affected() == 0 {
        return Err(StoreError::MessageNotFound(user_message.clone()));
    }

    if let Some(u) = usage {
        // Added to what an earlier run of the same message (interrupted, then retried) cost.
        sqlx::query!(
            "UPDATE messages SET input_tokens = COALESCE(input_tokens, 0) + ?1,
                    output_tokens = COALESCE(output_tokens, 0) + ?2,
                    cache_read_tokens = COALESCE(cache_read_tokens, 0) + ?3,
                    cache_write_tokens = COALESCE(cache_write_tokens, 0) + ?4,
                    cost_usd = COALESCE(cost_usd, 0) + ?5,
                    api_ms = COALESCE(api_ms, 0) + ?6
             WHERE id = ?7",
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.cost_usd,
            u.api_ms,
            user_message,
        )
        .execute(tx.conn())
        .await?;
        add_to_day(tx.conn(), u).await?;
    }
    record_session(tx.conn(), thread, session, &now).await
}

async fn get_message(pool: &SqlitePool, id: &MessageId) -> Result<Option<MessageRow>, StoreError> {
    let row = sqlx::query_as!(
        MessageRow,
        r#"SELECT id AS "id: MessageId", thread_id AS "thread_id: ThreadId", seq,
                  role AS "role: Role", content, status AS "status: MessageStatus", error,
                  client_message_id, reply_to AS "reply_to: MessageId", model,
                  origin AS "origin: Origin",
                  structured_output AS "structured_output: serde_json::Value",
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
                  origin AS "origin: Origin",
                  structured_output AS "structured_output: serde_json::Value",
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
                  origin AS "origin: Origin",
                  structured_output AS "structured_output: serde_json::Value",
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
        "SELECT u.content AS user_content, a.content AS reply_content
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
        .flat_map(|e| {
            [
                HistoryMessage {
                    role: Role::User.as_str().to_owned(),
                    content: e.user_content,
                },
                HistoryMessage {
                    role: Role::Assistant.as_str().to_owned(),
                    content: e.reply_content,
                },
            ]
        })
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
                     origin AS "origin: Origin",
                     structured_output AS "structured_output: serde_json::Value",
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

async fn interrupt_pending(pool: &SqlitePool, reason: &str) -> Result<u64, StoreError> {
    let now = now_text();
    Ok(sqlx::query!(
        "UPDATE messages SET status = 'interrupted', error = ?1, updated_at = ?2
         WHERE status = 'pending' AND role = 'user'",
        reason,
        now,
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// Records `session` (when set) as the thread's CLI session to resume, inside the turn's
/// transaction.
async fn record_session(
    conn: &mut SqliteConnection,
    thread: &ThreadId,
    session: Option<&CliSessionId>,
    now: &str,
) -> Result<(), StoreError> {
    if let Some(session) = session {
        sqlx::query!(
            "UPDATE threads SET cli_session_id = ?1, updated_at = ?2 WHERE id = ?3",
            session,
            now,
            thread,
        )
        .execute(conn)
        .await?;
    }
    Ok(())
}
