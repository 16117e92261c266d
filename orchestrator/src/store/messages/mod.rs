//! Messages and the life of a turn: a user message is stored `pending` before the turn runs, then
//! either [`Store::complete_turn`] writes the assistant reply and marks it `done`, or
//! [`Store::fail_turn`] marks it `error`/`interrupted`. [`Store::interrupt_pending`] cleans up after
//! a crash; [`Store::history`] feeds a fresh CLI session the finished exchanges.
//!
//! `seq` is computed inside the INSERT that writes the row, so concurrent writers on one thread
//! never collide: SQLite runs each write statement under the database's single write lock; on
//! PostgreSQL the writing transaction first locks the thread's row (`lock_thread`).

use chrono::{DateTime, Utc};
use plugin_contract::{CliSessionId, HistoryMessage, ThreadId};

use sqlx::postgres::PgRow;
use sqlx::Row;

use super::{
    is_unique_violation, now_text, pg, Db, Inserted, MessageId, MessageRow, MessageStatus,
    NewUserMessage, Origin, Role, Store, StoreError, Usage,
};

/// A `messages` row as sqlx decodes it. The thread id is still text: `plugin-contract` has no sqlx,
/// so it is wrapped here.
struct MessageRecord {
    id: MessageId,
    thread_id: String,
    seq: i64,
    role: Role,
    content: String,
    status: MessageStatus,
    error: Option<String>,
    client_message_id: Option<String>,
    reply_to: Option<MessageId>,
    model: Option<String>,
    origin: Origin,
    structured_output: Option<serde_json::Value>,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    cache_read_tokens: Option<i64>,
    cache_write_tokens: Option<i64>,
    cost_usd: Option<f64>,
    api_ms: Option<i64>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// The columns a [`MessageRecord`] reads on PostgreSQL, for `concat!`.
macro_rules! pg_message_columns {
    () => {
        "id, thread_id, seq, role, content, status, error, client_message_id, reply_to, model,
         origin, structured_output, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
         cost_usd, api_ms, created_at, updated_at"
    };
}

impl MessageRecord {
    fn from_pg(row: &PgRow) -> Result<Self, StoreError> {
        Ok(MessageRecord {
            id: row.try_get("id")?,
            thread_id: row.try_get("thread_id")?,
            seq: row.try_get("seq")?,
            role: pg::parsed(row, "role")?,
            content: row.try_get("content")?,
            status: pg::parsed(row, "status")?,
            error: row.try_get("error")?,
            client_message_id: row.try_get("client_message_id")?,
            reply_to: row.try_get("reply_to")?,
            model: row.try_get("model")?,
            origin: pg::parsed(row, "origin")?,
            structured_output: pg::opt_json(row, "structured_output")?,
            input_tokens: row.try_get("input_tokens")?,
            output_tokens: row.try_get("output_tokens")?,
            cache_read_tokens: row.try_get("cache_read_tokens")?,
            cache_write_tokens: row.try_get("cache_write_tokens")?,
            cost_usd: row.try_get("cost_usd")?,
            api_ms: row.try_get("api_ms")?,
            created_at: pg::time(row, "created_at")?,
            updated_at: pg::time(row, "updated_at")?,
        })
    }
}

impl From<MessageRecord> for MessageRow {
    fn from(row: MessageRecord) -> Self {
        MessageRow {
            id: row.id,
            thread_id: ThreadId::from_string(row.thread_id),
            seq: row.seq,
            role: row.role,
            content: row.content,
            status: row.status,
            error: row.error,
            client_message_id: row.client_message_id,
            reply_to: row.reply_to,
            model: row.model,
            origin: row.origin,
            structured_output: row.structured_output,
            // Written together: the cost stands for all of them.
            usage: row.cost_usd.map(|cost_usd| Usage {
                input_tokens: row.input_tokens.unwrap_or_default(),
                output_tokens: row.output_tokens.unwrap_or_default(),
                cache_read_tokens: row.cache_read_tokens.unwrap_or_default(),
                cache_write_tokens: row.cache_write_tokens.unwrap_or_default(),
                cost_usd,
                api_ms: row.api_ms.unwrap_or_default(),
            }),
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl Store {
    /// Stores a user message as `pending`, at the end of its thread.
    ///
    /// When `client_message_id` is set and the thread already has a message with it, nothing is
    /// inserted and the first message comes back as [`Inserted::Duplicate`]: a client retry must
    /// not run the turn twice. [`StoreError::ThreadNotFound`] for an unknown thread.
    pub async fn insert_user_message(&self, new: NewUserMessage) -> Result<Inserted, StoreError> {
        self.insert_user_message_fenced(new, None).await
    }

    /// [`Store::insert_user_message`] that succeeds only while `fence` (when set) still holds the
    /// thread's lease: [`StoreError::LeaseLost`] otherwise, nothing written. On PostgreSQL the
    /// check runs in the inserting transaction; on SQLite (which never runs clustered) just before.
    pub async fn insert_user_message_fenced(
        &self,
        new: NewUserMessage,
        fence: Option<&super::Fence>,
    ) -> Result<Inserted, StoreError> {
        let _timer = self.metrics.time("insert_user_message");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::insert_user_message(pool, new, self.fencing(fence)).await
            }
        };
        super::leases::check_fence_sqlite_pool(pool, new.thread_id.as_str(), self.fencing(fence))
            .await?;
        let id = MessageId::generate();
        let now = now_text();
        let thread_id = new.thread_id.as_str();
        let origin = new.origin.as_str();
        // Selecting FROM threads makes an unknown thread insert no row (instead of tripping the
        // foreign key), and the seq subquery runs under the statement's write lock.
        let inserted = sqlx::query_as!(
            MessageRecord,
            r#"INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                                     client_message_id, reply_to, model, origin, created_at,
                                     updated_at)
               SELECT ?1, t.id,
                      (SELECT COALESCE(MAX(m.seq), 0) + 1 FROM messages m WHERE m.thread_id = t.id),
                      'user', ?2, 'pending', NULL, ?3, NULL, ?4, ?7, ?5, ?5
               FROM threads t WHERE t.id = ?6
               RETURNING id AS "id: MessageId", thread_id, seq, role AS "role: Role", content,
                         status AS "status: MessageStatus", error, client_message_id,
                         reply_to AS "reply_to: MessageId", model,
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
            thread_id,
            origin,
        )
        .fetch_optional(pool)
        .await;

        match inserted {
            Ok(Some(row)) => Ok(Inserted::New(row.into())),
            Ok(None) => Err(StoreError::ThreadNotFound(new.thread_id)),
            Err(err) if is_unique_violation(&err) => {
                // Only `messages_client_id` can refuse a user message (the id is fresh and
                // reply_to is NULL), so the first message with this client id exists.
                let Some(client_id) = &new.client_message_id else {
                    return Err(err.into());
                };
                let first = sqlx::query_as!(
                    MessageRecord,
                    r#"SELECT id AS "id: MessageId", thread_id, seq, role AS "role: Role", content,
                              status AS "status: MessageStatus", error, client_message_id,
                              reply_to AS "reply_to: MessageId", model,
                      origin AS "origin: Origin",
                      structured_output AS "structured_output: serde_json::Value",
                      input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                      cost_usd, api_ms,
                              created_at AS "created_at: DateTime<Utc>",
                              updated_at AS "updated_at: DateTime<Utc>"
                       FROM messages WHERE thread_id = ?1 AND client_message_id = ?2"#,
                    thread_id,
                    client_id,
                )
                .fetch_one(pool)
                .await?;
                tracing::debug!(
                    thread_id = %new.thread_id,
                    message_id = %first.id,
                    client_message_id = %client_id,
                    "Client resent a message; returning the first one."
                );
                Ok(Inserted::Duplicate(first.into()))
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Ends a turn that produced a reply, in one transaction: inserts the assistant message
    /// (`done`, answering `user_message`, next in its thread), marks the user message `done`, and
    /// records the CLI session to resume when `session` is set. Returns the assistant message.
    ///
    /// [`StoreError::MessageNotFound`] when `user_message` is not a user message we have.
    pub async fn complete_turn(
        &self,
        user_message: &MessageId,
        reply_text: &str,
        model: Option<&str>,
        structured_output: Option<&serde_json::Value>,
        session: Option<&CliSessionId>,
        usage: Option<&Usage>,
    ) -> Result<MessageRow, StoreError> {
        self.complete_turn_fenced(
            None,
            user_message,
            reply_text,
            model,
            structured_output,
            session,
            usage,
        )
        .await
    }

    /// [`Store::complete_turn`] that commits only while `fence` (when set) still holds the
    /// thread's lease, checked inside the transaction: [`StoreError::LeaseLost`] otherwise,
    /// nothing written.
    #[allow(clippy::too_many_arguments)]
    pub async fn complete_turn_fenced(
        &self,
        fence: Option<&super::Fence>,
        user_message: &MessageId,
        reply_text: &str,
        model: Option<&str>,
        structured_output: Option<&serde_json::Value>,
        session: Option<&CliSessionId>,
        usage: Option<&Usage>,
    ) -> Result<MessageRow, StoreError> {
        let _timer = self.metrics.time("complete_turn");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::complete_turn(
                    pool,
                    self.fencing(fence),
                    user_message,
                    reply_text,
                    model,
                    structured_output,
                    session,
                    usage,
                )
                .await
            }
        };
        // IMMEDIATE takes the write lock up front: a deferred transaction that reads first and
        // writes later can fail with SQLITE_BUSY_SNAPSHOT, which the busy timeout does not retry.
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let now = now_text();

        let thread_id = sqlx::query_scalar!(
            "UPDATE messages SET status = 'done', error = NULL, updated_at = ?1
             WHERE id = ?2 AND role = 'user' RETURNING thread_id",
            now,
            user_message,
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::MessageNotFound(user_message.clone()))?;
        super::leases::check_fence_sqlite(&mut tx, &thread_id, self.fencing(fence)).await?;

        let reply_id = MessageId::generate();
        let structured = structured_output.map(serde_json::Value::to_string);
        let u = usage.copied().unwrap_or_default();
        let cost = usage.map(|u| u.cost_usd);
        let reply = sqlx::query_as!(
            MessageRecord,
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
               RETURNING id AS "id: MessageId", thread_id, seq, role AS "role: Role", content,
                         status AS "status: MessageStatus", error, client_message_id,
                         reply_to AS "reply_to: MessageId", model,
                      origin AS "origin: Origin",
                      structured_output AS "structured_output: serde_json::Value",
                      input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                      cost_usd, api_ms,
                         created_at AS "created_at: DateTime<Utc>",
                         updated_at AS "updated_at: DateTime<Utc>""#,
            reply_id,
            thread_id,
            reply_text,
            user_message,
            model,
            now,
            structured,
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            cost,
            u.api_ms,
        )
        .fetch_one(&mut *tx)
        .await?;

        record_session(&mut tx, &thread_id, session, &now).await?;
        if let Some(usage) = usage {
            super::usage::add_to_day(&mut tx, usage).await?;
        }
        tx.commit().await?;
        Ok(reply.into())
    }

    /// Ends a turn that produced no reply: sets the user message's status (meant for
    /// [`MessageStatus::Error`] or [`MessageStatus::Interrupted`]) and error text, and records the
    /// CLI session to resume when `session` is set (a failed turn may still have started one).
    ///
    /// [`StoreError::MessageNotFound`] when `user_message` is not a user message we have.
    pub async fn fail_turn(
        &self,
        user_message: &MessageId,
        status: MessageStatus,
        error: &str,
        session: Option<&CliSessionId>,
        usage: Option<&Usage>,
    ) -> Result<(), StoreError> {
        self.fail_turn_fenced(None, user_message, status, error, session, usage)
            .await
    }

    /// [`Store::fail_turn`] that commits only while `fence` (when set) still holds the thread's
    /// lease, checked inside the transaction: [`StoreError::LeaseLost`] otherwise.
    pub async fn fail_turn_fenced(
        &self,
        fence: Option<&super::Fence>,
        user_message: &MessageId,
        status: MessageStatus,
        error: &str,
        session: Option<&CliSessionId>,
        usage: Option<&Usage>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("fail_turn");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::fail_turn(
                    pool,
                    self.fencing(fence),
                    user_message,
                    status,
                    error,
                    session,
                    usage,
                )
                .await
            }
        };
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let now = now_text();

        let thread_id = sqlx::query_scalar!(
            "UPDATE messages SET status = ?1, error = ?2, updated_at = ?3
             WHERE id = ?4 AND role = 'user' RETURNING thread_id",
            status,
            error,
            now,
            user_message,
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::MessageNotFound(user_message.clone()))?;
        super::leases::check_fence_sqlite(&mut tx, &thread_id, self.fencing(fence)).await?;

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
            .execute(&mut *tx)
            .await?;
            super::usage::add_to_day(&mut tx, u).await?;
        }
        record_session(&mut tx, &thread_id, session, &now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The message, or `None` when we do not have it.
    pub async fn get_message(&self, id: &MessageId) -> Result<Option<MessageRow>, StoreError> {
        let _timer = self.metrics.time("get_message");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => return postgres::get_message(pool, id).await,
        };
        let row = sqlx::query_as!(
            MessageRecord,
            r#"SELECT id AS "id: MessageId", thread_id, seq, role AS "role: Role", content,
                      status AS "status: MessageStatus", error, client_message_id,
                      reply_to AS "reply_to: MessageId", model,
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
        Ok(row.map(MessageRow::from))
    }

    /// Every message of the thread in `seq` order, whatever its status. An unknown thread has no
    /// messages.
    pub async fn list_messages(&self, thread: &ThreadId) -> Result<Vec<MessageRow>, StoreError> {
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => return postgres::list_messages(pool, thread).await,
        };
        let thread = thread.as_str();
        let rows = sqlx::query_as!(
            MessageRecord,
            r#"SELECT id AS "id: MessageId", thread_id, seq, role AS "role: Role", content,
                      status AS "status: MessageStatus", error, client_message_id,
                      reply_to AS "reply_to: MessageId", model,
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
        Ok(rows.into_iter().map(MessageRow::from).collect())
    }

    /// The assistant message answering `user_message`, or `None` while there is none (the turn is
    /// running or failed). A duplicate `client_message_id` uses it to return the first reply.
    pub async fn reply_for(
        &self,
        user_message: &MessageId,
    ) -> Result<Option<MessageRow>, StoreError> {
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => return postgres::reply_for(pool, user_message).await,
        };
        let row = sqlx::query_as!(
            MessageRecord,
            r#"SELECT id AS "id: MessageId", thread_id, seq, role AS "role: Role", content,
                      status AS "status: MessageStatus", error, client_message_id,
                      reply_to AS "reply_to: MessageId", model,
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
        Ok(row.map(MessageRow::from))
    }

    /// The thread's finished exchanges, oldest first: each `done` user message followed by the
    /// assistant reply that answered it. Pending, failed and interrupted turns are left out, so
    /// the turn being run never appears. An unknown thread has no history.
    pub async fn history(&self, thread: &ThreadId) -> Result<Vec<HistoryMessage>, StoreError> {
        let _timer = self.metrics.time("history");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => return postgres::history(pool, thread).await,
        };
        let thread = thread.as_str();
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

    /// Puts an `interrupted` or `refused` user message back to `pending`, so a client's retry
    /// runs it. Returns the message when this call did it; `None` when it was neither (any more):
    /// of two concurrent retries, exactly one gets it.
    pub async fn retry_interrupted(
        &self,
        id: &MessageId,
    ) -> Result<Option<MessageRow>, StoreError> {
        let _timer = self.metrics.time("retry_interrupted");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::retry_interrupted(pool, id, self.fencing(None)).await
            }
        };
        let now = now_text();
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let row = sqlx::query_as!(
            MessageRecord,
            r#"UPDATE messages SET status = 'pending', error = NULL, updated_at = ?1
               WHERE id = ?2 AND role = 'user' AND status IN ('interrupted', 'refused')
               RETURNING id AS "id: MessageId", thread_id, seq, role AS "role: Role", content,
                         status AS "status: MessageStatus", error, client_message_id,
                         reply_to AS "reply_to: MessageId", model,
                      origin AS "origin: Origin",
                      structured_output AS "structured_output: serde_json::Value",
                      input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                      cost_usd, api_ms,
                         created_at AS "created_at: DateTime<Utc>",
                         updated_at AS "updated_at: DateTime<Utc>""#,
            now,
            id,
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = &row {
            super::leases::check_fence_sqlite(&mut tx, &row.thread_id, self.fencing(None)).await?;
        }
        tx.commit().await?;
        Ok(row.map(MessageRow::from))
    }

    /// Crash recovery at start-up, before any turn runs: every user message still `pending` (its
    /// turn died with the previous daemon) becomes `interrupted` with `reason` as its error.
    /// Returns how many.
    pub async fn interrupt_pending(&self, reason: &str) -> Result<u64, StoreError> {
        let now = now_text();
        let count = match &self.db {
            Db::Sqlite(pool) => sqlx::query!(
                "UPDATE messages SET status = 'interrupted', error = ?1, updated_at = ?2
             WHERE status = 'pending' AND role = 'user'",
                reason,
                now,
            )
            .execute(pool)
            .await?
            .rows_affected(),
            Db::Postgres(pool) => postgres::interrupt_pending(pool, reason, &now).await?,
        };
        if count > 0 {
            tracing::info!(
                count,
                "Marked turns left pending by the previous run as interrupted."
            );
        }
        Ok(count)
    }
}

/// Records `session` (when set) as the thread's CLI session to resume, inside the turn's
/// transaction.
async fn record_session(
    tx: &mut sqlx::SqliteConnection,
    thread_id: &str,
    session: Option<&CliSessionId>,
    now: &str,
) -> Result<(), StoreError> {
    if let Some(session) = session.map(CliSessionId::as_str) {
        sqlx::query!(
            "UPDATE threads SET cli_session_id = ?1, updated_at = ?2 WHERE id = ?3",
            session,
            now,
            thread_id,
        )
        .execute(tx)
        .await?;
    }
    Ok(())
}

mod postgres;

#[cfg(test)]
mod tests;
