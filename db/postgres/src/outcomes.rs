//! `turn_outcomes`, and the one function that ends a turn ([`end_in`]); see
//! [`harness_db::OutcomeQueries`].

use harness_db::{
    now_text, Announcement, EndCause, Ending, Fence, MessageId, MessageRow, MessageStatus,
    NewReply, Origin, Outcome, OutcomeRow, PendingTurn, Role, RunRef, StoreError, TurnKey, Usage,
};
use plugin_contract::{CliSessionId, ThreadId};
use sqlx::{PgConnection, PgPool};

use crate::messages::lock_thread;
use crate::usage::{add_to_caller_day, add_to_day};
use crate::{Postgres, ThreadTx};

harness_db::outcome_queries!(Postgres);

/// Ends the turn of `turn` on `conn`, inside the caller's transaction (its own, or a takeover's
/// lease transaction): the message's status, the reply, usage, session, the event and webhook
/// events of `announcement`, and the outcome. `None`, with nothing written, when the message is
/// not `pending`.
pub(crate) async fn end_in(
    conn: &mut PgConnection,
    turn: TurnKey<'_>,
    ending: Ending<'_>,
    announcement: &Announcement,
) -> Result<Option<Outcome>, StoreError> {
    let TurnKey { thread, message } = turn;
    let now = now_text();
    if !settle_message(conn, turn, &ending, &now).await? {
        return Ok(None);
    }
    let reply = store_reply_and_usage(conn, turn, &ending, &now).await?;
    record_session(conn, thread, ending.session, &now).await?;
    let data = announcement.data_with(reply.as_ref());
    let event =
        crate::events::append(conn, thread, Some(message), announcement.kind, &data).await?;
    for webhook in &announcement.webhooks {
        crate::webhooks::outbox(conn, thread, webhook).await?;
    }
    let reply_id = reply.as_ref().map(|r| &r.id);
    let outcome = insert_outcome(conn, turn, &ending, reply_id, event.id, &now).await?;
    Ok(Some(Outcome {
        outcome,
        reply,
        event,
    }))
}

/// Moves the user message of `turn` from `pending` to its status after `ending`: true when it
/// did, false when the message was no longer `pending`; [`StoreError::MessageNotFound`] when
/// `turn` names no user message of its thread.
async fn settle_message(
    conn: &mut PgConnection,
    turn: TurnKey<'_>,
    ending: &Ending<'_>,
    now: &str,
) -> Result<bool, StoreError> {
    let TurnKey { thread, message } = turn;
    let status = ending.cause.status();
    let error = ending.error_text();
    let moved = sqlx::query!(
        "UPDATE messages SET status = $1, error = $2, updated_at = $3
         WHERE id = $4 AND thread_id = $5 AND role = 'user' AND status = 'pending'",
        status.as_str(),
        error,
        now,
        message as &MessageId,
        thread as &ThreadId,
    )
    .execute(&mut *conn)
    .await?;
    if moved.rows_affected() > 0 {
        return Ok(true);
    }
    let known = sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "n!: i64" FROM messages
           WHERE id = $1 AND thread_id = $2 AND role = 'user'"#,
        message as &MessageId,
        thread as &ThreadId,
    )
    .fetch_one(&mut *conn)
    .await?;
    match known {
        0 => Err(StoreError::MessageNotFound(message.clone())),
        _ => Ok(false),
    }
}

/// Stores the reply of `ending` (when it has one) with the turn's usage, else adds the usage to
/// the user message's; and adds it to the day's. The reply stored.
async fn store_reply_and_usage(
    conn: &mut PgConnection,
    turn: TurnKey<'_>,
    ending: &Ending<'_>,
    now: &str,
) -> Result<Option<MessageRow>, StoreError> {
    let reply = match ending.reply {
        // The reply's `seq` comes next in the thread.
        Some(reply) if lock_thread(conn, turn.thread).await? => {
            Some(insert_reply(conn, turn, reply, ending.usage, now).await?)
        }
        _ => {
            if let Some(usage) = ending.usage {
                add_to_message(conn, turn.message, usage).await?;
            }
            None
        }
    };
    if let Some(usage) = ending.usage {
        add_to_day(conn, usage, 1).await?;
        add_to_caller_day(conn, turn.message, usage).await?;
    }
    Ok(reply)
}

/// Writes the outcome row of `turn`'s ending, naming its reply and its event.
async fn insert_outcome(
    conn: &mut PgConnection,
    turn: TurnKey<'_>,
    ending: &Ending<'_>,
    reply_id: Option<&MessageId>,
    event_id: i64,
    now: &str,
) -> Result<OutcomeRow, StoreError> {
    let TurnKey { thread, message } = turn;
    let status = ending.cause.status();
    let error = ending.error_text();
    Ok(sqlx::query_as!(
        OutcomeRow,
        r#"INSERT INTO turn_outcomes (thread_id, message_id, status, cause, error, reply_id,
                                      event_id, created_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           RETURNING id, thread_id AS "thread_id: ThreadId",
                     message_id AS "message_id: MessageId", status AS "status: MessageStatus",
                     cause AS "cause: EndCause", error, reply_id AS "reply_id: MessageId",
                     event_id, created_at::timestamptz AS "created_at!""#,
        thread as &ThreadId,
        message as &MessageId,
        status.as_str(),
        ending.cause.as_str(),
        error,
        reply_id as Option<&MessageId>,
        event_id,
        now,
    )
    .fetch_one(&mut *conn)
    .await?)
}

async fn schedule_run_of(pool: &PgPool, message: &MessageId) -> Result<Option<RunRef>, StoreError> {
    Ok(sqlx::query_as!(
        RunRef,
        r#"SELECT schedule_id, id AS "run_id!" FROM schedule_runs WHERE message_id = $1"#,
        message as &MessageId,
    )
    .fetch_optional(pool)
    .await?)
}

/// Inserts the reply to `turn`, `done`, next in its thread, with the turn's usage.
async fn insert_reply(
    conn: &mut PgConnection,
    turn: TurnKey<'_>,
    reply: NewReply<'_>,
    usage: Option<&Usage>,
    now: &str,
) -> Result<MessageRow, StoreError> {
    let structured = reply.structured_output.map(serde_json::Value::to_string);
    let u = usage.copied().unwrap_or_default();
    let cost = usage.map(|u| u.cost_usd);
    Ok(sqlx::query_as!(
        MessageRow,
        r#"INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                                 client_message_id, reply_to, model, structured_output,
                                 input_tokens, output_tokens, cache_read_tokens,
                                 cache_write_tokens, cost_usd, api_ms, origin, created_at,
                                 updated_at)
           VALUES ($1, $2,
                   (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE thread_id = $2),
                   'assistant', $3, 'done', NULL, NULL, $4, $5, $7,
                   $8, $9, $10, $11, $12, $13,
                   (SELECT origin FROM messages WHERE id = $4), $6, $6)
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
        reply.id as &MessageId,
        turn.thread as &ThreadId,
        reply.text,
        turn.message as &MessageId,
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
    .fetch_one(conn)
    .await?)
}

/// Adds `usage` to what the user message already cost (an earlier run of it, interrupted and
/// then retried, may have cost something too).
async fn add_to_message(
    conn: &mut PgConnection,
    message: &MessageId,
    u: &Usage,
) -> Result<(), StoreError> {
    sqlx::query!(
        "UPDATE messages SET input_tokens = COALESCE(input_tokens, 0) + $1,
                output_tokens = COALESCE(output_tokens, 0) + $2,
                cache_read_tokens = COALESCE(cache_read_tokens, 0) + $3,
                cache_write_tokens = COALESCE(cache_write_tokens, 0) + $4,
                cost_usd = COALESCE(cost_usd, 0) + $5,
                api_ms = COALESCE(api_ms, 0) + $6
         WHERE id = $7",
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        u.cost_usd,
        u.api_ms,
        message as &MessageId,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Records `session` (when set) as the thread's CLI session to resume.
async fn record_session(
    conn: &mut PgConnection,
    thread: &ThreadId,
    session: Option<&CliSessionId>,
    now: &str,
) -> Result<(), StoreError> {
    if let Some(session) = session {
        sqlx::query!(
            "UPDATE threads SET cli_session_id = $1, updated_at = $2 WHERE id = $3",
            session as &CliSessionId,
            now,
            thread as &ThreadId,
        )
        .execute(conn)
        .await?;
    }
    Ok(())
}

async fn pending_turns(
    pool: &PgPool,
    thread: Option<&ThreadId>,
) -> Result<Vec<PendingTurn>, StoreError> {
    pending(pool, thread).await
}

/// The user messages still `pending`, of `thread` or of every thread, oldest first, read on
/// `executor` (the pool, or a lease's transaction).
pub(crate) async fn pending<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    thread: Option<&ThreadId>,
) -> Result<Vec<PendingTurn>, StoreError> {
    Ok(sqlx::query_as!(
        PendingTurn,
        r#"SELECT thread_id AS "thread_id: ThreadId", id AS "message_id: MessageId"
           FROM messages
           WHERE status = 'pending' AND role = 'user' AND ($1::text IS NULL OR thread_id = $1)
           ORDER BY created_at, seq"#,
        thread as Option<&ThreadId>,
    )
    .fetch_all(executor)
    .await?)
}

async fn outcomes_of(pool: &PgPool, message: &MessageId) -> Result<Vec<OutcomeRow>, StoreError> {
    Ok(sqlx::query_as!(
        OutcomeRow,
        r#"SELECT id, thread_id AS "thread_id: ThreadId",
                  message_id AS "message_id: MessageId", status AS "status: MessageStatus",
                  cause AS "cause: EndCause", error, reply_id AS "reply_id: MessageId",
                  event_id, created_at::timestamptz AS "created_at!"
           FROM turn_outcomes WHERE message_id = $1 ORDER BY id"#,
        message as &MessageId,
    )
    .fetch_all(pool)
    .await?)
}

async fn redrive_threads(
    pool: &PgPool,
    max_cuts: i64,
    now: &str,
) -> Result<Vec<ThreadId>, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT DISTINCT m.thread_id AS "thread_id!: ThreadId"
           FROM messages m JOIN threads t ON t.id = m.thread_id
           WHERE t.on_interrupt = 'retry' AND t.archived_at IS NULL AND m.role = 'user'
             AND m.status IN ('interrupted', 'pending')
             AND ((m.status = 'interrupted'
                   AND (SELECT o.cause FROM turn_outcomes o WHERE o.message_id = m.id
                        ORDER BY o.id DESC LIMIT 1) IN ('shutdown', 'crash', 'takeover')
                   AND (SELECT COUNT(*) FROM turn_outcomes o WHERE o.message_id = m.id
                        AND o.cause IN ('shutdown', 'crash', 'takeover')) <= $1)
                  OR (m.status = 'pending'
                      AND EXISTS (SELECT 1 FROM leases l
                                  WHERE l.thread_id = m.thread_id AND l.expires_at < $2)))"#,
        max_cuts,
        now,
    )
    .fetch_all(pool)
    .await?)
}

async fn redrivable(
    pool: &PgPool,
    thread: &ThreadId,
    max_cuts: i64,
) -> Result<Vec<MessageId>, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT m.id AS "id!: MessageId" FROM messages m
           WHERE m.thread_id = $1 AND m.role = 'user' AND m.status = 'interrupted'
             AND (SELECT o.cause FROM turn_outcomes o WHERE o.message_id = m.id
                  ORDER BY o.id DESC LIMIT 1) IN ('shutdown', 'crash', 'takeover')
             AND (SELECT COUNT(*) FROM turn_outcomes o WHERE o.message_id = m.id
                  AND o.cause IN ('shutdown', 'crash', 'takeover')) <= $2
           ORDER BY m.seq"#,
        thread as &ThreadId,
        max_cuts,
    )
    .fetch_all(pool)
    .await?)
}
