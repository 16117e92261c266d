//! Threads: creating, looking up and listing them, the CLI session each one resumes, and how deep a
//! delegated child sits. Messages of a thread are in `messages.rs`.

use chrono::{DateTime, Utc};
use plugin_contract::{CliSessionId, ThreadId};

use sqlx::postgres::PgRow;
use sqlx::Row;

use super::{now_text, pg, Db, NewThread, Store, StoreError, ThreadRow, ThreadSummaryRow};

/// Guards the depth walk against a parent cycle. Creation makes cycles impossible (a parent must
/// exist before its child gets a fresh id), but a hand-edited database should not hang the daemon.
const MAX_DEPTH_WALK: i64 = 10_000;

/// A `threads` row as sqlx decodes it. The contract's ids are still text: `plugin-contract` has no
/// sqlx, so they are wrapped here.
struct ThreadRecord {
    id: String,
    title: Option<String>,
    model: Option<String>,
    cli_session_id: Option<String>,
    parent_id: Option<String>,
    output_schema: Option<serde_json::Value>,
    forked_session: Option<String>,
    max_budget_usd: Option<f64>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// The columns a [`ThreadRecord`] reads on PostgreSQL, for `concat!`.
macro_rules! pg_thread_columns {
    () => {
        "id, title, model, cli_session_id, parent_id, output_schema, forked_session,
         max_budget_usd, created_at, updated_at"
    };
}

impl ThreadRecord {
    fn from_pg(row: &PgRow) -> Result<Self, StoreError> {
        Ok(ThreadRecord {
            id: row.try_get("id")?,
            title: row.try_get("title")?,
            model: row.try_get("model")?,
            cli_session_id: row.try_get("cli_session_id")?,
            parent_id: row.try_get("parent_id")?,
            output_schema: pg::opt_json(row, "output_schema")?,
            forked_session: row.try_get("forked_session")?,
            max_budget_usd: row.try_get("max_budget_usd")?,
            created_at: pg::time(row, "created_at")?,
            updated_at: pg::time(row, "updated_at")?,
        })
    }
}

impl From<ThreadRecord> for ThreadRow {
    fn from(row: ThreadRecord) -> Self {
        ThreadRow {
            id: ThreadId::from_string(row.id),
            title: row.title,
            model: row.model,
            cli_session_id: row.cli_session_id.map(CliSessionId::from_string),
            parent_id: row.parent_id.map(ThreadId::from_string),
            output_schema: row.output_schema,
            forked_session: row.forked_session.map(CliSessionId::from_string),
            max_budget_usd: row.max_budget_usd,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl Store {
    /// Creates a thread, with `new.id` or a fresh [`ThreadId`]. A `parent_id` must name an
    /// existing thread ([`StoreError::ThreadNotFound`] otherwise).
    pub async fn create_thread(&self, new: NewThread) -> Result<ThreadRow, StoreError> {
        let _timer = self.metrics.time("create_thread");
        if let Some(parent) = &new.parent_id {
            // Threads are never deleted, so the parent cannot vanish before the insert.
            self.require_thread(parent).await?;
        }
        let id = new.id.clone().unwrap_or_else(ThreadId::generate);
        let id_text = id.as_str();
        let parent = new.parent_id.as_ref().map(ThreadId::as_str);
        let now = now_text();
        let schema = new.output_schema.as_ref().map(serde_json::Value::to_string);
        let row = match &self.db {
            Db::Sqlite(pool) => sqlx::query_as!(
                ThreadRecord,
                r#"INSERT INTO threads (id, title, model, cli_session_id, parent_id, output_schema,
                                    max_budget_usd, created_at, updated_at)
               VALUES (?1, ?2, ?3, NULL, ?4, ?6, ?7, ?5, ?5)
               RETURNING id, title, model, cli_session_id, parent_id,
                         output_schema AS "output_schema: serde_json::Value", forked_session,
                      max_budget_usd,
                         created_at AS "created_at: DateTime<Utc>",
                         updated_at AS "updated_at: DateTime<Utc>""#,
                id_text,
                new.title,
                new.model,
                parent,
                now,
                schema,
                new.max_budget_usd,
            )
            .fetch_one(pool)
            .await?,
            Db::Postgres(pool) => {
                let row = sqlx::query(concat!(
                    "INSERT INTO threads (id, title, model, cli_session_id, parent_id,
                                          output_schema, max_budget_usd, created_at, updated_at)
                     VALUES ($1, $2, $3, NULL, $4, $6, $7, $5, $5)
                     RETURNING ",
                    pg_thread_columns!()
                ))
                .bind(id_text)
                .bind(&new.title)
                .bind(&new.model)
                .bind(parent)
                .bind(&now)
                .bind(&schema)
                .bind(new.max_budget_usd)
                .fetch_one(pool)
                .await?;
                ThreadRecord::from_pg(&row)?
            }
        };
        tracing::debug!(thread_id = %id, parent_id = ?new.parent_id, "Created a thread.");
        Ok(row.into())
    }

    /// A new thread that forks `parent`: its model, `outputSchema`, budget limit (not what it
    /// spent) and finished messages (new ids, in order, each reply still answering its
    /// question; their usage stays the parent's), and the parent's CLI session to fork on its
    /// first turn. One transaction.
    pub async fn fork_thread(
        &self,
        parent: &ThreadId,
        title: Option<String>,
    ) -> Result<ThreadRow, StoreError> {
        let _timer = self.metrics.time("fork_thread");
        let source = self.require_thread(parent).await?;
        let id = ThreadId::generate();
        let (id_text, parent_text) = (id.as_str(), parent.as_str());
        let now = now_text();
        let schema = source
            .output_schema
            .as_ref()
            .map(serde_json::Value::to_string);
        let session = source.cli_session_id.as_ref().map(CliSessionId::as_str);
        let title = title.or_else(|| Some(format!("fork of {parent}")));
        let row = match &self.db {
            Db::Sqlite(pool) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                let row = sqlx::query_as!(
                    ThreadRecord,
                    r#"INSERT INTO threads (id, title, model, cli_session_id, parent_id, output_schema,
                                    forked_session, max_budget_usd, created_at, updated_at)
               VALUES (?1, ?2, ?3, NULL, ?4, ?5, ?6, ?8, ?7, ?7)
               RETURNING id, title, model, cli_session_id, parent_id,
                         output_schema AS "output_schema: serde_json::Value", forked_session,
                      max_budget_usd,
                         created_at AS "created_at: DateTime<Utc>",
                         updated_at AS "updated_at: DateTime<Utc>""#,
                    id_text,
                    title,
                    source.model,
                    parent_text,
                    schema,
                    session,
                    now,
                    source.max_budget_usd,
                )
                .fetch_one(&mut *tx)
                .await?;
                let messages = sqlx::query!(
                    r#"SELECT id AS "id!", role, content, reply_to, model, structured_output
               FROM messages WHERE thread_id = ?1 AND status = 'done' ORDER BY seq"#,
                    parent_text,
                )
                .fetch_all(&mut *tx)
                .await?;
                let mut new_ids = std::collections::HashMap::new();
                for (seq, m) in (1_i64..).zip(messages) {
                    let new_id = super::MessageId::generate();
                    let reply_to = m
                        .reply_to
                        .as_ref()
                        .and_then(|old| new_ids.get(old))
                        .map(super::MessageId::as_str);
                    let new_text = new_id.as_str();
                    sqlx::query!(
                        "INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                                       client_message_id, reply_to, model, structured_output,
                                       created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'done', NULL, NULL, ?6, ?7, ?8, ?9, ?9)",
                        new_text,
                        id_text,
                        seq,
                        m.role,
                        m.content,
                        reply_to,
                        m.model,
                        m.structured_output,
                        now,
                    )
                    .execute(&mut *tx)
                    .await?;
                    new_ids.insert(m.id, new_id.clone());
                }
                tx.commit().await?;
                row
            }
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                let row = sqlx::query(concat!(
                    "INSERT INTO threads (id, title, model, cli_session_id, parent_id,
                                          output_schema, forked_session, max_budget_usd,
                                          created_at, updated_at)
                     VALUES ($1, $2, $3, NULL, $4, $5, $6, $8, $7, $7)
                     RETURNING ",
                    pg_thread_columns!()
                ))
                .bind(id_text)
                .bind(&title)
                .bind(&source.model)
                .bind(parent_text)
                .bind(&schema)
                .bind(session)
                .bind(&now)
                .bind(source.max_budget_usd)
                .fetch_one(&mut *tx)
                .await?;
                let row = ThreadRecord::from_pg(&row)?;
                // One statement: a consistent view of the parent's messages.
                let messages = sqlx::query(
                    "SELECT id, role, content, reply_to, model, structured_output
                     FROM messages WHERE thread_id = $1 AND status = 'done' ORDER BY seq",
                )
                .bind(parent_text)
                .fetch_all(&mut *tx)
                .await?;
                let mut new_ids = std::collections::HashMap::<String, super::MessageId>::new();
                for (seq, m) in (1_i64..).zip(messages) {
                    let new_id = super::MessageId::generate();
                    let old_reply_to: Option<String> = m.try_get("reply_to")?;
                    let reply_to = old_reply_to
                        .as_ref()
                        .and_then(|old| new_ids.get(old))
                        .map(super::MessageId::as_str);
                    sqlx::query(
                        "INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                                               client_message_id, reply_to, model,
                                               structured_output, created_at, updated_at)
                         VALUES ($1, $2, $3, $4, $5, 'done', NULL, NULL, $6, $7, $8, $9, $9)",
                    )
                    .bind(new_id.as_str())
                    .bind(id_text)
                    .bind(seq)
                    .bind(m.try_get::<String, _>("role")?)
                    .bind(m.try_get::<String, _>("content")?)
                    .bind(reply_to)
                    .bind(m.try_get::<Option<String>, _>("model")?)
                    .bind(m.try_get::<Option<String>, _>("structured_output")?)
                    .bind(&now)
                    .execute(&mut *tx)
                    .await?;
                    new_ids.insert(m.try_get("id")?, new_id);
                }
                tx.commit().await?;
                row
            }
        };
        tracing::debug!(thread_id = %id, parent_id = %parent, "Forked a thread.");
        Ok(row.into())
    }

    /// The thread, or `None` when we never created it.
    pub async fn get_thread(&self, id: &ThreadId) -> Result<Option<ThreadRow>, StoreError> {
        let _timer = self.metrics.time("get_thread");
        let id_text = id.as_str();
        let row = match &self.db {
            Db::Sqlite(pool) => {
                sqlx::query_as!(
                    ThreadRecord,
                    r#"SELECT id, title, model, cli_session_id, parent_id,
                      output_schema AS "output_schema: serde_json::Value", forked_session,
                      max_budget_usd,
                      created_at AS "created_at: DateTime<Utc>",
                      updated_at AS "updated_at: DateTime<Utc>"
               FROM threads WHERE id = ?1"#,
                    id_text,
                )
                .fetch_optional(pool)
                .await?
            }
            Db::Postgres(pool) => sqlx::query(concat!(
                "SELECT ",
                pg_thread_columns!(),
                " FROM threads WHERE id = $1"
            ))
            .bind(id_text)
            .fetch_optional(pool)
            .await?
            .map(|row| ThreadRecord::from_pg(&row))
            .transpose()?,
        };
        Ok(row.map(ThreadRow::from))
    }

    /// The thread, or [`StoreError::ThreadNotFound`].
    pub async fn require_thread(&self, id: &ThreadId) -> Result<ThreadRow, StoreError> {
        self.get_thread(id)
            .await?
            .ok_or_else(|| StoreError::ThreadNotFound(id.clone()))
    }

    /// Every thread, newest first (creation order; ties broken by insertion order).
    pub async fn list_threads(&self) -> Result<Vec<ThreadRow>, StoreError> {
        let rows = match &self.db {
            Db::Sqlite(pool) => {
                sqlx::query_as!(
                    ThreadRecord,
                    r#"SELECT id, title, model, cli_session_id, parent_id,
                      output_schema AS "output_schema: serde_json::Value", forked_session,
                      max_budget_usd,
                      created_at AS "created_at: DateTime<Utc>",
                      updated_at AS "updated_at: DateTime<Utc>"
               FROM threads ORDER BY created_at DESC, rowid DESC"#,
                )
                .fetch_all(pool)
                .await?
            }
            Db::Postgres(pool) => sqlx::query(concat!(
                "SELECT ",
                pg_thread_columns!(),
                " FROM threads ORDER BY created_at DESC, rowid DESC"
            ))
            .fetch_all(pool)
            .await?
            .iter()
            .map(ThreadRecord::from_pg)
            .collect::<Result<_, _>>()?,
        };
        Ok(rows.into_iter().map(ThreadRow::from).collect())
    }

    /// Every thread with its last activity and whether a turn is under way, newest first: what
    /// a list of threads shows people.
    pub async fn list_thread_summaries(&self) -> Result<Vec<ThreadSummaryRow>, StoreError> {
        let _timer = self.metrics.time("list_thread_summaries");
        match &self.db {
            Db::Sqlite(pool) => {
                let rows = sqlx::query!(
                    r#"SELECT t.id, t.title, t.model, t.cli_session_id, t.parent_id,
                      t.output_schema AS "output_schema: serde_json::Value", t.forked_session,
                      t.max_budget_usd,
                      t.created_at AS "created_at: DateTime<Utc>",
                      t.updated_at AS "updated_at: DateTime<Utc>",
                      COALESCE((SELECT MAX(m.updated_at) FROM messages m WHERE m.thread_id = t.id),
                               t.updated_at) AS "last_activity_at!: DateTime<Utc>",
                      EXISTS(SELECT 1 FROM messages m
                             WHERE m.thread_id = t.id AND m.status = 'pending') AS "running!: bool"
               FROM threads t ORDER BY t.created_at DESC, t.rowid DESC"#,
                )
                .fetch_all(pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|row| ThreadSummaryRow {
                        thread: ThreadRecord {
                            id: row.id,
                            title: row.title,
                            model: row.model,
                            cli_session_id: row.cli_session_id,
                            parent_id: row.parent_id,
                            output_schema: row.output_schema,
                            forked_session: row.forked_session,
                            max_budget_usd: row.max_budget_usd,
                            created_at: row.created_at,
                            updated_at: row.updated_at,
                        }
                        .into(),
                        last_activity_at: row.last_activity_at,
                        running: row.running,
                    })
                    .collect())
            }
            Db::Postgres(pool) => {
                let rows = sqlx::query(concat!(
                    "SELECT ",
                    pg_thread_columns!(),
                    ", COALESCE((SELECT MAX(m.updated_at) FROM messages m
                                 WHERE m.thread_id = t.id), t.updated_at) AS last_activity_at,
                       EXISTS(SELECT 1 FROM messages m
                              WHERE m.thread_id = t.id AND m.status = 'pending') AS running
                     FROM threads t ORDER BY t.created_at DESC, t.rowid DESC"
                ))
                .fetch_all(pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok(ThreadSummaryRow {
                            thread: ThreadRecord::from_pg(row)?.into(),
                            last_activity_at: pg::time(row, "last_activity_at")?,
                            running: row.try_get("running")?,
                        })
                    })
                    .collect()
            }
        }
    }

    /// Records the CLI session the thread should `--resume` next (or forgets it with `None`, after
    /// the CLI could no longer load it). [`StoreError::ThreadNotFound`] for an unknown thread;
    /// [`StoreError::LeaseLost`] on a node without the thread's lease (`leases.rs`).
    pub async fn set_cli_session(
        &self,
        id: &ThreadId,
        session: Option<&CliSessionId>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("set_cli_session");
        let session = session.map(CliSessionId::as_str);
        let now = now_text();
        let id_text = id.as_str();
        let updated = match &self.db {
            Db::Sqlite(pool) => {
                super::leases::check_fence_sqlite_pool(pool, id_text, self.fencing(None)).await?;
                sqlx::query!(
                    "UPDATE threads SET cli_session_id = ?1, updated_at = ?2 WHERE id = ?3",
                    session,
                    now,
                    id_text,
                )
                .execute(pool)
                .await?
                .rows_affected()
            }
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                super::leases::check_fence_pg(&mut tx, id_text, self.fencing(None)).await?;
                let updated = sqlx::query(
                    "UPDATE threads SET cli_session_id = $1, updated_at = $2 WHERE id = $3",
                )
                .bind(session)
                .bind(&now)
                .bind(id_text)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                updated
            }
        };
        if updated == 0 {
            return Err(StoreError::ThreadNotFound(id.clone()));
        }
        Ok(())
    }

    /// How many ancestors the thread has through `parent_id`: 0 for a root thread, 1 for its
    /// child. Delegation uses it to bound nesting. [`StoreError::ThreadNotFound`] for an unknown
    /// thread.
    pub async fn thread_depth(&self, id: &ThreadId) -> Result<u32, StoreError> {
        // MAX over no rows (an unknown thread) is NULL.
        let id_text = id.as_str();
        let depth = match &self.db {
            Db::Sqlite(pool) => {
                sqlx::query_scalar!(
                    r#"WITH RECURSIVE chain(id, parent_id, depth) AS (
                   SELECT id, parent_id, 0 FROM threads WHERE id = ?1
                   UNION ALL
                   SELECT t.id, t.parent_id, chain.depth + 1
                   FROM threads t JOIN chain ON t.id = chain.parent_id
                   WHERE chain.depth < ?2
               )
               SELECT MAX(depth) AS "depth?: i64" FROM chain"#,
                    id_text,
                    MAX_DEPTH_WALK,
                )
                .fetch_one(pool)
                .await?
            }
            Db::Postgres(pool) => {
                sqlx::query_scalar::<_, Option<i64>>(
                    "WITH RECURSIVE chain(id, parent_id, depth) AS (
                         SELECT id, parent_id, 0::BIGINT FROM threads WHERE id = $1
                         UNION ALL
                         SELECT t.id, t.parent_id, chain.depth + 1
                         FROM threads t JOIN chain ON t.id = chain.parent_id
                         WHERE chain.depth < $2
                     )
                     SELECT MAX(depth) FROM chain",
                )
                .bind(id_text)
                .bind(MAX_DEPTH_WALK)
                .fetch_one(pool)
                .await?
            }
        };
        let depth = depth.ok_or_else(|| StoreError::ThreadNotFound(id.clone()))?;
        u32::try_from(depth)
            .map_err(|_| StoreError::Corrupt(format!("thread {id} has depth {depth}")))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use super::*;

    store_tests! {
        async fn summaries_show_last_activity_and_running_turns(store: sqlite_memory) {
            let idle = store.create_thread(NewThread::default()).await.unwrap();
            let busy = store.create_thread(NewThread::default()).await.unwrap();
            store
                .insert_user_message(crate::store::NewUserMessage {
                    thread_id: busy.id.clone(),
                    content: "hi".into(),
                    client_message_id: None,
                    model: None,
                    origin: crate::store::Origin::User,
                })
                .await
                .unwrap();
            let summaries = store.list_thread_summaries().await.unwrap();
            let ids: Vec<_> = summaries.iter().map(|s| s.thread.id.clone()).collect();
            assert_eq!(ids, [busy.id.clone(), idle.id.clone()], "newest first");
            assert!(summaries[0].running, "a pending message is a running turn");
            assert!(summaries[0].last_activity_at > busy.updated_at);
            assert!(!summaries[1].running);
            assert_eq!(summaries[1].last_activity_at, idle.updated_at);
        }
    }

    store_tests! {
        async fn create_get_and_list_threads(store: sqlite_memory) {
            let first = store
                .create_thread(NewThread {
                    id: None,
                    title: Some("first".into()),
                    model: Some("sonnet".into()),
                    parent_id: None,
                    output_schema: Some(serde_json::json!({"type": "object"})),
                    max_budget_usd: Some(1.5),
                })
                .await
                .unwrap();
            assert_eq!(first.max_budget_usd, Some(1.5));
            assert_eq!(
                first.output_schema,
                Some(serde_json::json!({"type": "object"}))
            );
            let second = store.create_thread(NewThread::default()).await.unwrap();

            assert!(first.id.as_str().starts_with("thr_"));
            assert_ne!(first.id, second.id);
            assert_eq!(first.title.as_deref(), Some("first"));
            assert_eq!(first.model.as_deref(), Some("sonnet"));
            assert_eq!(first.cli_session_id, None);
            assert_eq!(first.created_at, first.updated_at);

            let got = store.get_thread(&first.id).await.unwrap().unwrap();
            assert_eq!(got.id, first.id);
            assert_eq!(got.title.as_deref(), Some("first"));
            assert_eq!(got.created_at, first.created_at);

            let unknown = ThreadId::from_string("thr_nope");
            assert!(store.get_thread(&unknown).await.unwrap().is_none());
            match store.require_thread(&unknown).await {
                Err(StoreError::ThreadNotFound(id)) => assert_eq!(id, unknown),
                other => panic!("expected ThreadNotFound, got {other:?}"),
            }

            let listed: Vec<ThreadId> = store
                .list_threads()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.id)
                .collect();
            assert_eq!(listed, [second.id, first.id], "newest first");
        }
    }

    store_tests! {
        async fn list_orders_by_creation_time_not_insertion(store: sqlite_memory) {
            let a = store.create_thread(NewThread::default()).await.unwrap();
            let b = store.create_thread(NewThread::default()).await.unwrap();
            // Pretend `a` was created after `b`.
            store
                .test_execute(&format!(
                    "UPDATE threads SET created_at = '2999-01-01T00:00:00.000000Z' WHERE id = '{}'",
                    a.id
                ))
                .await;
            let listed: Vec<ThreadId> = store
                .list_threads()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.id)
                .collect();
            assert_eq!(listed, [a.id, b.id]);
        }
    }

    store_tests! {
        async fn parents_and_depth(store: sqlite_memory) {
            let root = store.create_thread(NewThread::default()).await.unwrap();
            let child = store
                .create_thread(NewThread {
                    parent_id: Some(root.id.clone()),
                    ..Default::default()
                })
                .await
                .unwrap();
            let grandchild = store
                .create_thread(NewThread {
                    parent_id: Some(child.id.clone()),
                    ..Default::default()
                })
                .await
                .unwrap();

            assert_eq!(child.parent_id.as_ref(), Some(&root.id));
            assert_eq!(grandchild.parent_id.as_ref(), Some(&child.id));
            assert_eq!(store.thread_depth(&root.id).await.unwrap(), 0);
            assert_eq!(store.thread_depth(&child.id).await.unwrap(), 1);
            assert_eq!(store.thread_depth(&grandchild.id).await.unwrap(), 2);

            let unknown = ThreadId::from_string("thr_nope");
            assert!(matches!(
                store.thread_depth(&unknown).await,
                Err(StoreError::ThreadNotFound(id)) if id == unknown
            ));
        }
    }

    store_tests! {
        async fn unknown_parent_is_thread_not_found_and_creates_nothing(store: sqlite_memory) {
            let unknown = ThreadId::from_string("thr_missing");
            let err = store
                .create_thread(NewThread {
                    parent_id: Some(unknown.clone()),
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert!(
                matches!(err, StoreError::ThreadNotFound(ref id) if *id == unknown),
                "{err:?}"
            );
            assert!(store.list_threads().await.unwrap().is_empty());
        }
    }

    store_tests! {
        async fn set_and_clear_cli_session(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap();
            let session = CliSessionId::from_string("sess-1");

            store
                .set_cli_session(&thread.id, Some(&session))
                .await
                .unwrap();
            let got = store.require_thread(&thread.id).await.unwrap();
            assert_eq!(got.cli_session_id, Some(session));
            assert!(got.updated_at >= thread.updated_at);

            store.set_cli_session(&thread.id, None).await.unwrap();
            assert_eq!(
                store
                    .require_thread(&thread.id)
                    .await
                    .unwrap()
                    .cli_session_id,
                None
            );

            let unknown = ThreadId::from_string("thr_nope");
            assert!(matches!(
                store.set_cli_session(&unknown, None).await,
                Err(StoreError::ThreadNotFound(_))
            ));
        }
    }

    store_tests! {
        async fn bad_timestamp_is_corrupt_not_a_panic(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap();
            store
                .test_execute(&format!(
                    "UPDATE threads SET updated_at = 'soon' WHERE id = '{}'",
                    thread.id
                ))
                .await;
            assert!(matches!(
                store.get_thread(&thread.id).await,
                Err(StoreError::Corrupt(_))
            ));
        }
    }
}
