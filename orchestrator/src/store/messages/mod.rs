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
    is_unique_violation, now_text, pg, Db, Inserted, Message, MessageId, MessageStatus,
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

impl From<MessageRecord> for Message {
    fn from(row: MessageRecord) -> Self {
        Message {
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
    ) -> Result<Message, StoreError> {
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
    ) -> Result<Message, StoreError> {
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
    pub async fn get_message(&self, id: &MessageId) -> Result<Option<Message>, StoreError> {
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
        Ok(row.map(Message::from))
    }

    /// Every message of the thread in `seq` order, whatever its status. An unknown thread has no
    /// messages.
    pub async fn list_messages(&self, thread: &ThreadId) -> Result<Vec<Message>, StoreError> {
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
        Ok(rows.into_iter().map(Message::from).collect())
    }

    /// The assistant message answering `user_message`, or `None` while there is none (the turn is
    /// running or failed). A duplicate `client_message_id` uses it to return the first reply.
    pub async fn reply_for(&self, user_message: &MessageId) -> Result<Option<Message>, StoreError> {
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
        Ok(row.map(Message::from))
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
    pub async fn retry_interrupted(&self, id: &MessageId) -> Result<Option<Message>, StoreError> {
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
        Ok(row.map(Message::from))
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

/// The same operations on PostgreSQL, in the order of `impl Store` above.
mod postgres {
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
    ) -> Result<Message, StoreError> {
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
    ) -> Result<Option<Message>, StoreError> {
        sqlx::query(sql)
            .bind(id.as_str())
            .fetch_optional(pool)
            .await?
            .map(|row| MessageRecord::from_pg(&row).map(Message::from))
            .transpose()
    }

    pub(super) async fn get_message(
        pool: &PgPool,
        id: &MessageId,
    ) -> Result<Option<Message>, StoreError> {
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
    ) -> Result<Vec<Message>, StoreError> {
        sqlx::query(concat!(
            "SELECT ",
            pg_message_columns!(),
            " FROM messages WHERE thread_id = $1 ORDER BY seq, rowid"
        ))
        .bind(thread.as_str())
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| MessageRecord::from_pg(row).map(Message::from))
        .collect()
    }

    pub(super) async fn reply_for(
        pool: &PgPool,
        user_message: &MessageId,
    ) -> Result<Option<Message>, StoreError> {
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
    ) -> Result<Option<Message>, StoreError> {
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
        Ok(row.map(Message::from))
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
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::tests::store_tests;
    use super::super::NewThread;
    use super::*;

    async fn thread(store: &Store) -> ThreadId {
        store.create_thread(NewThread::default()).await.unwrap().id
    }

    store_tests! {
        async fn only_one_retry_puts_an_interrupted_message_back_to_pending(store: sqlite_memory) {
            let thread = thread(&store).await;
            let Inserted::New(message) = store
                .insert_user_message(NewUserMessage {
                    thread_id: thread,
                    content: "cut short".into(),
                    client_message_id: Some("c".into()),
                    model: None,
                    origin: crate::store::Origin::User,
                })
                .await
                .unwrap()
            else {
                panic!("a new message")
            };
            assert!(
                store
                    .retry_interrupted(&message.id)
                    .await
                    .unwrap()
                    .is_none(),
                "a pending message is not retried"
            );
            store.interrupt_pending("crash").await.unwrap();
            let retried = store.retry_interrupted(&message.id).await.unwrap();
            let retried = retried.expect("the first retry gets it");
            assert_eq!(retried.status, MessageStatus::Pending);
            assert_eq!(retried.error, None);
            assert_eq!(retried.seq, message.seq, "it keeps its place");
            assert!(store
                .retry_interrupted(&message.id)
                .await
                .unwrap()
                .is_none());
        }
    }

    fn user(thread: &ThreadId, content: &str, client: Option<&str>) -> NewUserMessage {
        NewUserMessage {
            thread_id: thread.clone(),
            content: content.into(),
            client_message_id: client.map(str::to_owned),
            model: None,
            origin: crate::store::Origin::User,
        }
    }

    async fn send(store: &Store, thread: &ThreadId, content: &str) -> Message {
        match store
            .insert_user_message(user(thread, content, None))
            .await
            .unwrap()
        {
            Inserted::New(m) => m,
            Inserted::Duplicate(m) => panic!("unexpected duplicate {m:?}"),
        }
    }

    async fn count_messages(store: &Store) -> i64 {
        store.test_count("SELECT COUNT(*) FROM messages").await
    }

    store_tests! {
        async fn user_messages_get_increasing_seq_per_thread(store: sqlite_memory) {
            let a = thread(&store).await;
            let b = thread(&store).await;

            let a1 = send(&store, &a, "one").await;
            let a2 = send(&store, &a, "two").await;
            let b1 = send(&store, &b, "other").await;
            let a3 = send(&store, &a, "three").await;

            assert_eq!((a1.seq, a2.seq, a3.seq, b1.seq), (1, 2, 3, 1));
            assert_eq!(a1.role, Role::User);
            assert_eq!(a1.status, MessageStatus::Pending);
            assert_eq!(a1.thread_id, a);
            assert_eq!(a1.content, "one");
            assert!(a1.id.as_str().starts_with("msg_"));

            let listed: Vec<(i64, String)> = store
                .list_messages(&a)
                .await
                .unwrap()
                .into_iter()
                .map(|m| (m.seq, m.content))
                .collect();
            assert_eq!(
                listed,
                [(1, "one".into()), (2, "two".into()), (3, "three".into())]
            );

            let got = store.get_message(&a2.id).await.unwrap().unwrap();
            assert_eq!(got.content, "two");
            assert_eq!(got.created_at, a2.created_at);
            assert!(store
                .get_message(&MessageId::from_string("msg_x"))
                .await
                .unwrap()
                .is_none());
        }
    }

    store_tests! {
        async fn message_to_unknown_thread_is_thread_not_found(store: sqlite_memory) {
            let unknown = ThreadId::from_string("thr_nope");
            let err = store
                .insert_user_message(user(&unknown, "hi", Some("c1")))
                .await
                .unwrap_err();
            assert!(
                matches!(err, StoreError::ThreadNotFound(ref id) if *id == unknown),
                "{err:?}"
            );
            assert_eq!(count_messages(&store).await, 0);
        }
    }

    store_tests! {
        async fn duplicate_client_id_returns_the_first_message(store: sqlite_memory) {
            let t = thread(&store).await;
            let first = store
                .insert_user_message(user(&t, "hello", Some("c1")))
                .await
                .unwrap();
            let Inserted::New(first) = first else {
                panic!("first insert was a duplicate")
            };
            assert_eq!(first.client_message_id.as_deref(), Some("c1"));

            let again = store
                .insert_user_message(user(&t, "hello again", Some("c1")))
                .await
                .unwrap();
            let Inserted::Duplicate(dup) = &again else {
                panic!("expected Duplicate, got {again:?}")
            };
            assert_eq!(dup.id, first.id);
            assert_eq!(dup.content, "hello");
            assert_eq!(again.message().id, first.id);
            assert_eq!(count_messages(&store).await, 1);

            // Messages without a client id never collide.
            send(&store, &t, "x").await;
            send(&store, &t, "y").await;
            assert_eq!(count_messages(&store).await, 3);
        }
    }

    store_tests! {
        async fn same_client_id_on_two_threads_is_allowed(store: sqlite_memory) {
            let a = thread(&store).await;
            let b = thread(&store).await;
            let on_a = store
                .insert_user_message(user(&a, "a", Some("same")))
                .await
                .unwrap();
            let on_b = store
                .insert_user_message(user(&b, "b", Some("same")))
                .await
                .unwrap();
            assert!(matches!(on_a, Inserted::New(_)));
            assert!(matches!(on_b, Inserted::New(_)));
            assert_ne!(on_a.message().id, on_b.message().id);
            assert_eq!(count_messages(&store).await, 2);
        }
    }

    store_tests! {
        async fn complete_turn_writes_reply_and_session(store: sqlite_memory) {
            let t = thread(&store).await;
            let question = send(&store, &t, "2+2?").await;
            assert!(store.reply_for(&question.id).await.unwrap().is_none());
            let session = CliSessionId::from_string("sess-42");

            let reply = store
                .complete_turn(&question.id, "4", Some("opus"), None, Some(&session), None)
                .await
                .unwrap();
            assert_eq!(reply.role, Role::Assistant);
            assert_eq!(reply.status, MessageStatus::Done);
            assert_eq!(reply.reply_to.as_ref(), Some(&question.id));
            assert_eq!(reply.thread_id, t);
            assert_eq!(reply.seq, 2);
            assert_eq!(reply.content, "4");
            assert_eq!(reply.model.as_deref(), Some("opus"));

            let question = store.get_message(&question.id).await.unwrap().unwrap();
            assert_eq!(question.status, MessageStatus::Done);
            assert_eq!(
                store.require_thread(&t).await.unwrap().cli_session_id,
                Some(session)
            );
            assert_eq!(
                store.reply_for(&question.id).await.unwrap().unwrap().id,
                reply.id
            );

            // The next user message follows the reply.
            assert_eq!(send(&store, &t, "next").await.seq, 3);

            let json = serde_json::to_value(&reply).unwrap();
            assert_eq!(json["replyTo"], question.id.as_str());
            assert_eq!(json["status"], "done");
            assert_eq!(json["role"], "assistant");
        }
    }

    store_tests! {
        async fn complete_turn_without_session_keeps_the_old_one(store: sqlite_memory) {
            let t = thread(&store).await;
            let old = CliSessionId::from_string("old");
            store.set_cli_session(&t, Some(&old)).await.unwrap();
            let question = send(&store, &t, "hi").await;
            store
                .complete_turn(&question.id, "hello", None, None, None, None)
                .await
                .unwrap();
            assert_eq!(
                store.require_thread(&t).await.unwrap().cli_session_id,
                Some(old)
            );
        }
    }

    store_tests! {
        async fn complete_turn_rejects_unknown_and_answered_messages_atomically(store: sqlite_memory) {
            let t = thread(&store).await;
            let unknown = MessageId::from_string("msg_nope");
            let err = store
                .complete_turn(&unknown, "x", None, None, None, None)
                .await
                .unwrap_err();
            assert!(
                matches!(err, StoreError::MessageNotFound(ref id) if *id == unknown),
                "{err:?}"
            );

            let question = send(&store, &t, "q").await;
            let reply = store
                .complete_turn(&question.id, "a", None, None, None, None)
                .await
                .unwrap();
            // An assistant message is not a user message to answer.
            assert!(matches!(
                store
                    .complete_turn(&reply.id, "x", None, None, None, None)
                    .await,
                Err(StoreError::MessageNotFound(_))
            ));
            // A second reply to the same question breaks `messages_reply_to`; the session update in the
            // same transaction must roll back with it.
            let session = CliSessionId::from_string("must-not-stick");
            assert!(matches!(
                store
                    .complete_turn(&question.id, "again", None, None, Some(&session), None)
                    .await,
                Err(StoreError::Db(_))
            ));
            assert_eq!(count_messages(&store).await, 2);
            assert_eq!(store.require_thread(&t).await.unwrap().cli_session_id, None);
        }
    }

    store_tests! {
        async fn fail_turn_sets_status_error_and_session(store: sqlite_memory) {
            let t = thread(&store).await;
            let question = send(&store, &t, "q").await;
            let session = CliSessionId::from_string("sess-f");

            store
                .fail_turn(
                    &question.id,
                    MessageStatus::Error,
                    "CLI died",
                    Some(&session),
                    None,
                )
                .await
                .unwrap();
            let got = store.get_message(&question.id).await.unwrap().unwrap();
            assert_eq!(got.status, MessageStatus::Error);
            assert_eq!(got.error.as_deref(), Some("CLI died"));
            assert_eq!(
                store.require_thread(&t).await.unwrap().cli_session_id,
                Some(session)
            );
            assert!(store.reply_for(&question.id).await.unwrap().is_none());

            let other = send(&store, &t, "q2").await;
            store
                .fail_turn(&other.id, MessageStatus::Interrupted, "stopped", None, None)
                .await
                .unwrap();
            let got = store.get_message(&other.id).await.unwrap().unwrap();
            assert_eq!(got.status, MessageStatus::Interrupted);
            assert_eq!(got.error.as_deref(), Some("stopped"));

            let unknown = MessageId::from_string("msg_nope");
            assert!(matches!(
                store
                    .fail_turn(&unknown, MessageStatus::Error, "x", None, None)
                    .await,
                Err(StoreError::MessageNotFound(_))
            ));
        }
    }

    store_tests! {
        async fn history_holds_only_finished_exchanges_in_order(store: sqlite_memory) {
            let t = thread(&store).await;
            let other = thread(&store).await;

            let q1 = send(&store, &t, "q1").await;
            store
                .complete_turn(&q1.id, "a1", None, None, None, None)
                .await
                .unwrap();
            let failed = send(&store, &t, "failed").await;
            store
                .fail_turn(&failed.id, MessageStatus::Error, "boom", None, None)
                .await
                .unwrap();
            let stopped = send(&store, &t, "stopped").await;
            store
                .fail_turn(&stopped.id, MessageStatus::Interrupted, "stop", None, None)
                .await
                .unwrap();
            let q2 = send(&store, &t, "q2").await;
            let o1 = send(&store, &other, "other thread").await;
            store
                .complete_turn(&o1.id, "other reply", None, None, None, None)
                .await
                .unwrap();
            store
                .complete_turn(&q2.id, "a2", None, None, None, None)
                .await
                .unwrap();
            send(&store, &t, "running now").await;

            let history: Vec<(String, String)> = store
                .history(&t)
                .await
                .unwrap()
                .into_iter()
                .map(|m| (m.role, m.content))
                .collect();
            let expected: Vec<(String, String)> = [
                ("user", "q1"),
                ("assistant", "a1"),
                ("user", "q2"),
                ("assistant", "a2"),
            ]
            .into_iter()
            .map(|(r, c)| (r.to_owned(), c.to_owned()))
            .collect();
            assert_eq!(history, expected);

            assert!(store
                .history(&ThreadId::from_string("thr_nope"))
                .await
                .unwrap()
                .is_empty());
        }
    }

    store_tests! {
        async fn interrupt_pending_marks_only_pending_user_messages(store: sqlite_memory) {
            let t = thread(&store).await;
            let done = send(&store, &t, "done").await;
            store
                .complete_turn(&done.id, "reply", None, None, None, None)
                .await
                .unwrap();
            let p1 = send(&store, &t, "p1").await;
            let p2 = send(&store, &t, "p2").await;

            assert_eq!(
                store.interrupt_pending("daemon restarted").await.unwrap(),
                2
            );
            for id in [&p1.id, &p2.id] {
                let m = store.get_message(id).await.unwrap().unwrap();
                assert_eq!(m.status, MessageStatus::Interrupted);
                assert_eq!(m.error.as_deref(), Some("daemon restarted"));
            }
            let m = store.get_message(&done.id).await.unwrap().unwrap();
            assert_eq!(m.status, MessageStatus::Done);
            assert_eq!(m.error, None);
            assert_eq!(store.interrupt_pending("again").await.unwrap(), 0);
        }
    }

    store_tests! {
        async fn concurrent_inserts_get_distinct_seqs(store: sqlite_file) {
            let t = thread(&store).await;
            let tasks: Vec<_> = (0..20)
                .map(|i| {
                    let store = store.clone();
                    let t = t.clone();
                    tokio::spawn(async move {
                        store
                            .insert_user_message(user(&t, &format!("m{i}"), Some(&format!("c{i}"))))
                            .await
                            .unwrap()
                            .message()
                            .seq
                    })
                })
                .collect();
            let mut seqs = Vec::new();
            for task in tasks {
                seqs.push(task.await.unwrap());
            }
            seqs.sort_unstable();
            assert_eq!(seqs, (1..=20).collect::<Vec<i64>>());
            assert_eq!(seqs.iter().collect::<HashSet<_>>().len(), 20);
        }
    }

    store_tests! {
        /// Questions and replies written at once on one thread still get distinct, gapless
        /// `seq`s (PostgreSQL has no database-wide write lock: the thread's row lock does it).
        async fn concurrent_questions_and_replies_get_distinct_seqs(store: sqlite_file) {
            let t = thread(&store).await;
            let mut questions = Vec::new();
            for i in 0..5 {
                questions.push(send(&store, &t, &format!("q{i}")).await);
            }
            let replies = questions.into_iter().map(|q| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .complete_turn(&q.id, "a", None, None, None, None)
                        .await
                        .unwrap()
                        .seq
                })
            });
            let more = (0..5).map(|i| {
                let store = store.clone();
                let t = t.clone();
                tokio::spawn(async move { send(&store, &t, &format!("more{i}")).await.seq })
            });
            let tasks: Vec<_> = replies.chain(more).collect();
            let mut seqs: Vec<i64> = (1..=5).collect();
            for task in tasks {
                seqs.push(task.await.unwrap());
            }
            seqs.sort_unstable();
            assert_eq!(seqs, (1..=15).collect::<Vec<i64>>());
        }
    }

    store_tests! {
        async fn concurrent_duplicates_insert_once(store: sqlite_file) {
            let t = thread(&store).await;
            let tasks: Vec<_> = (0..10)
                .map(|_| {
                    let store = store.clone();
                    let t = t.clone();
                    tokio::spawn(async move {
                        store
                            .insert_user_message(user(&t, "same", Some("retry")))
                            .await
                            .unwrap()
                    })
                })
                .collect();
            let mut new = 0;
            let mut ids = HashSet::new();
            for task in tasks {
                let inserted = task.await.unwrap();
                if matches!(inserted, Inserted::New(_)) {
                    new += 1;
                }
                ids.insert(inserted.message().id.clone());
            }
            assert_eq!(new, 1);
            assert_eq!(ids.len(), 1);
            assert_eq!(count_messages(&store).await, 1);
        }
    }

    store_tests! {
        async fn unknown_status_is_corrupt(store: sqlite_memory) {
            let t = thread(&store).await;
            let m = send(&store, &t, "q").await;
            // The CHECK constraint stops this in normal use; bypass it as a damaged file would.
            store
                .test_execute(match store.backend() {
                    "sqlite" => "PRAGMA ignore_check_constraints = ON",
                    _ => "ALTER TABLE messages DROP CONSTRAINT messages_status",
                })
                .await;
            store
                .test_execute(&format!(
                    "UPDATE messages SET status = 'weird' WHERE id = '{}'",
                    m.id
                ))
                .await;
            let err = store.get_message(&m.id).await.unwrap_err();
            assert!(
                matches!(err, StoreError::Corrupt(ref s) if s.contains("weird")),
                "{err:?}"
            );
        }
    }
}
