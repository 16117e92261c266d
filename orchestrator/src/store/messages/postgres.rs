//! The messages' operations on PostgreSQL, in the order of `impl Store` in `messages/mod.rs`.

use sqlx::PgPool;

use super::*;

/// Locks the thread's row until the transaction ends, so writers of one thread take turns:
/// what SQLite's single write lock gives the `seq` subqueries and the `clientMessageId`
/// check. `NO KEY`: inserts that merely reference the thread (events, tool calls) still pass.
/// False for an unknown thread.
async fn lock_thread(tx: &mut sqlx::PgConnection, thread_id: &str) -> Result<bool, StoreError> {
    Ok(
        sqlx::query("SELECT id FROM threads WHERE id = $1 FOR NO KEY UPDATE")
            .bind(thread_id)
            .fetch_optional(tx)
            .await?
            .is_some(),
    )
}

pub(super) async fn insert_user_message(
    pool: &PgPool,
    new: NewUserMessage,
    fencing: super::super::leases::Fencing<'_>,
) -> Result<Inserted, StoreError> {
    let id = MessageId::generate();
    let now = now_text();
    let thread_id = new.thread_id.as_str();
    let mut tx = pool.begin().await?;
    if !lock_thread(&mut tx, thread_id).await? {
        return Err(StoreError::ThreadNotFound(new.thread_id));
    }
    super::super::leases::check_fence_pg(&mut tx, thread_id, fencing).await?;
    if let Some(client_id) = &new.client_message_id {
        // Under the thread's lock: no other insert on this thread can come in between.
        let first = sqlx::query(concat!(
            "SELECT ",
            pg_message_columns!(),
            " FROM messages WHERE thread_id = $1 AND client_message_id = $2"
        ))
        .bind(thread_id)
        .bind(client_id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(first) = first {
            let first = MessageRecord::from_pg(&first)?;
            tx.commit().await?;
            tracing::debug!(
                thread_id = %new.thread_id,
                message_id = %first.id,
                client_message_id = %client_id,
                "Client resent a message; returning the first one."
            );
            return Ok(Inserted::Duplicate(first.into()));
        }
    }
    let row = sqlx::query(concat!(
        "INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                               client_message_id, reply_to, model, origin, created_at,
                               updated_at)
         VALUES ($1, $6,
                 (SELECT COALESCE(MAX(m.seq), 0) + 1 FROM messages m WHERE m.thread_id = $6),
                 'user', $2, 'pending', NULL, $3, NULL, $4, $7, $5, $5)
         RETURNING ",
        pg_message_columns!()
    ))
    .bind(id.as_str())
    .bind(&new.content)
    .bind(&new.client_message_id)
    .bind(&new.model)
    .bind(&now)
    .bind(thread_id)
    .bind(new.origin.as_str())
    .fetch_one(&mut *tx)
    .await?;
    let row = MessageRecord::from_pg(&row)?;
    tx.commit().await?;
    Ok(Inserted::New(row.into()))
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn complete_turn(
    pool: &PgPool,
    fencing: super::super::leases::Fencing<'_>,
    user_message: &MessageId,
    reply_text: &str,
    model: Option<&str>,
    structured_output: Option<&serde_json::Value>,
    session: Option<&CliSessionId>,
    usage: Option<&Usage>,
) -> Result<MessageRow, StoreError> {
    let mut tx = pool.begin().await?;
    let now = now_text();
    let thread_id: String = sqlx::query_scalar(
        "UPDATE messages SET status = 'done', error = NULL, updated_at = $1
         WHERE id = $2 AND role = 'user' RETURNING thread_id",
    )
    .bind(&now)
    .bind(user_message.as_str())
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| StoreError::MessageNotFound(user_message.clone()))?;
    lock_thread(&mut tx, &thread_id).await?;
    super::super::leases::check_fence_pg(&mut tx, &thread_id, fencing).await?;

    let reply_id = MessageId::generate();
    let structured = structured_output.map(serde_json::Value::to_string);
    let u = usage.copied().unwrap_or_default();
    let cost = usage.map(|u| u.cost_usd);
    let reply = sqlx::query(concat!(
        "INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                               client_message_id, reply_to, model, structured_output,
                               input_tokens, output_tokens, cache_read_tokens,
                               cache_write_tokens, cost_usd, api_ms, origin, created_at,
                               updated_at)
         VALUES ($1, $2,
                 (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE thread_id = $2),
                 'assistant', $3, 'done', NULL, NULL, $4, $5, $7,
                 $8, $9, $10, $11, $12, $13,
                 (SELECT origin FROM messages WHERE id = $4), $6, $6)
         RETURNING ",
        pg_message_columns!()
    ))
    .bind(reply_id.as_str())
    .bind(&thread_id)
    .bind(reply_text)
    .bind(user_message.as_str())
    .bind(model)
    .bind(&now)
    .bind(&structured)
    .bind(u.input_tokens)
    .bind(u.output_tokens)
    .bind(u.cache_read_tokens)
    .bind(u.cache_write_tokens)
    .bind(cost)
    .bind(u.api_ms)
    .fetch_one(&mut *tx)
    .await?;
    let reply = MessageRecord::from_pg(&reply)?;

    record_session(&mut tx, &thread_id, session, &now).await?;
    if let Some(usage) = usage {
        super::super::usage::pg_add_to_day(&mut tx, usage).await?;
    }
    tx.commit().await?;
    Ok(reply.into())
}

pub(super) async fn fail_turn(
    pool: &PgPool,
    fencing: super::super::leases::Fencing<'_>,
    user_message: &MessageId,
    status: MessageStatus,
    error: &str,
    session: Option<&CliSessionId>,
    usage: Option<&Usage>,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let now = now_text();
    let thread_id: String = sqlx::query_scalar(
        "UPDATE messages SET status = $1, error = $2, updated_at = $3
         WHERE id = $4 AND role = 'user' RETURNING thread_id",
    )
    .bind(status.as_str())
    .bind(error)
    .bind(&now)
    .bind(user_message.as_str())
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| StoreError::MessageNotFound(user_message.clone()))?;
    super::super::leases::check_fence_pg(&mut tx, &thread_id, fencing).await?;

    if let Some(u) = usage {
        // Added to what an earlier run of the same message (interrupted, then retried) cost.
        sqlx::query(
            "UPDATE messages SET input_tokens = COALESCE(input_tokens, 0) + $1,
                    output_tokens = COALESCE(output_tokens, 0) + $2,
                    cache_read_tokens = COALESCE(cache_read_tokens, 0) + $3,
                    cache_write_tokens = COALESCE(cache_write_tokens, 0) + $4,
                    cost_usd = COALESCE(cost_usd, 0) + $5,
                    api_ms = COALESCE(api_ms, 0) + $6
             WHERE id = $7",
        )
        .bind(u.input_tokens)
        .bind(u.output_tokens)
        .bind(u.cache_read_tokens)
        .bind(u.cache_write_tokens)
        .bind(u.cost_usd)
        .bind(u.api_ms)
        .bind(user_message.as_str())
        .execute(&mut *tx)
        .await?;
        super::super::usage::pg_add_to_day(&mut tx, u).await?;
    }
    record_session(&mut tx, &thread_id, session, &now).await?;
    tx.commit().await?;
    Ok(())
}

/// The one message `sql` (its columns, then `FROM messages WHERE …` binding `$1`) finds.
async fn one_message(
    pool: &PgPool,
    sql: &'static str,
    id: &MessageId,
) -> Result<Option<MessageRow>, StoreError> {
    sqlx::query(sql)
        .bind(id.as_str())
        .fetch_optional(pool)
        .await?
        .map(|row| MessageRecord::from_pg(&row).map(MessageRow::from))
        .transpose()
}

pub(super) async fn get_message(
    pool: &PgPool,
    id: &MessageId,
) -> Result<Option<MessageRow>, StoreError> {
    let sql = concat!(
        "SELECT ",
        pg_message_columns!(),
        " FROM messages WHERE id = $1"
    );
    one_message(pool, sql, id).await
}

pub(super) async fn list_messages(
    pool: &PgPool,
    thread: &ThreadId,
) -> Result<Vec<MessageRow>, StoreError> {
    sqlx::query(concat!(
        "SELECT ",
        pg_message_columns!(),
        " FROM messages WHERE thread_id = $1 ORDER BY seq, rowid"
    ))
    .bind(thread.as_str())
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| MessageRecord::from_pg(row).map(MessageRow::from))
    .collect()
}

pub(super) async fn reply_for(
    pool: &PgPool,
    user_message: &MessageId,
) -> Result<Option<MessageRow>, StoreError> {
    let sql = concat!(
        "SELECT ",
        pg_message_columns!(),
        " FROM messages WHERE reply_to = $1 AND role = 'assistant'"
    );
    one_message(pool, sql, user_message).await
}

pub(super) async fn history(
    pool: &PgPool,
    thread: &ThreadId,
) -> Result<Vec<HistoryMessage>, StoreError> {
    let exchanges = sqlx::query(
        "SELECT u.content AS user_content, a.content AS reply_content
         FROM messages u
         JOIN messages a ON a.reply_to = u.id AND a.role = 'assistant' AND a.status = 'done'
         WHERE u.thread_id = $1 AND u.role = 'user' AND u.status = 'done'
         ORDER BY u.seq, u.rowid",
    )
    .bind(thread.as_str())
    .fetch_all(pool)
    .await?;
    let mut history = Vec::with_capacity(exchanges.len() * 2);
    for e in exchanges {
        history.push(HistoryMessage {
            role: Role::User.as_str().to_owned(),
            content: e.try_get("user_content")?,
        });
        history.push(HistoryMessage {
            role: Role::Assistant.as_str().to_owned(),
            content: e.try_get("reply_content")?,
        });
    }
    Ok(history)
}

pub(super) async fn retry_interrupted(
    pool: &PgPool,
    id: &MessageId,
    fencing: super::super::leases::Fencing<'_>,
) -> Result<Option<MessageRow>, StoreError> {
    let now = now_text();
    let mut tx = pool.begin().await?;
    let row = sqlx::query(concat!(
        "UPDATE messages SET status = 'pending', error = NULL, updated_at = $1
         WHERE id = $2 AND role = 'user' AND status IN ('interrupted', 'refused')
         RETURNING ",
        pg_message_columns!()
    ))
    .bind(&now)
    .bind(id.as_str())
    .fetch_optional(&mut *tx)
    .await?
    .map(|row| MessageRecord::from_pg(&row))
    .transpose()?;
    if let Some(row) = &row {
        super::super::leases::check_fence_pg(&mut tx, &row.thread_id, fencing).await?;
    }
    tx.commit().await?;
    Ok(row.map(MessageRow::from))
}

pub(super) async fn interrupt_pending(
    pool: &PgPool,
    reason: &str,
    now: &str,
) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        "UPDATE messages SET status = 'interrupted', error = $1, updated_at = $2
         WHERE status = 'pending' AND role = 'user'",
    )
    .bind(reason)
    .bind(now)
    .execute(pool)
    .await?
    .rows_affected())
}

/// Records `session` (when set) as the thread's CLI session to resume, inside the turn's
/// transaction.
async fn record_session(
    tx: &mut sqlx::PgConnection,
    thread_id: &str,
    session: Option<&CliSessionId>,
    now: &str,
) -> Result<(), StoreError> {
    if let Some(session) = session.map(CliSessionId::as_str) {
        sqlx::query("UPDATE threads SET cli_session_id = $1, updated_at = $2 WHERE id = $3")
            .bind(session)
            .bind(now)
            .bind(thread_id)
            .execute(tx)
            .await?;
    }
    Ok(())
}
