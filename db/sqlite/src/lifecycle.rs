//! Pages of threads and messages, a thread's title and tags, and deleting a thread; see
//! [`harness_db::LifecycleQueries`].

use chrono::{DateTime, Utc};
use harness_db::{
    files_named, fts_query, now_text, DeletedRows, Fence, LifecycleQueries, MessageId, MessageRow,
    MessageStatus, OnInterrupt, Origin, Role, StoreError, ThreadChange, ThreadQuery, ThreadRow,
    ThreadSummaryRow, Workspace,
};
use plugin_contract::{CliSessionId, ThreadId};
use sqlx::types::Json;

use crate::{Sqlite, ThreadTx};

/// A [`ThreadSummaryRow`] from a row of a query selecting the thread's columns, its
/// `last_activity_at` and `running` (each query has its own row type).
macro_rules! summary_row {
    ($row:expr) => {{
        let row = $row;
        ThreadSummaryRow {
            thread: ThreadRow {
                id: row.id,
                title: row.title,
                model: row.model,
                cli_session_id: row.cli_session_id,
                parent_id: row.parent_id,
                output_schema: row.output_schema,
                forked_session: row.forked_session,
                max_budget_usd: row.max_budget_usd,
                workspace: row.workspace,
                profile: row.profile,
                tenant: row.tenant,
                on_interrupt: row.on_interrupt,
                archived_at: row.archived_at,
                created_at: row.created_at,
                updated_at: row.updated_at,
            },
            last_activity_at: row.last_activity_at,
            running: row.running,
        }
    }};
}

impl LifecycleQueries for Sqlite {
    async fn thread_page(
        &self,
        query: &ThreadQuery<'_>,
    ) -> Result<Vec<ThreadSummaryRow>, StoreError> {
        let (after_at, after_id) = match &query.after {
            Some((at, id)) => (Some(at.as_str()), Some(id.as_str())),
            None => (None, None),
        };
        let archived = query.archived.as_str();
        let rows = sqlx::query!(
            r#"SELECT t.id AS "id!: ThreadId", t.title, t.model,
                      t.cli_session_id AS "cli_session_id: CliSessionId",
                      t.parent_id AS "parent_id: ThreadId",
                      t.output_schema AS "output_schema: serde_json::Value",
                      t.forked_session AS "forked_session: CliSessionId",
                      t.max_budget_usd,
                      t.workspace AS "workspace: Json<Workspace>", t.profile, t.tenant,
                      t.on_interrupt AS "on_interrupt: OnInterrupt",
                      t.archived_at AS "archived_at: DateTime<Utc>",
                      t.created_at AS "created_at: DateTime<Utc>",
                      t.updated_at AS "updated_at: DateTime<Utc>",
                      t.last_activity_at AS "last_activity_at!: DateTime<Utc>",
                      EXISTS(SELECT 1 FROM messages m
                             WHERE m.thread_id = t.id AND m.status = 'pending') AS "running!: bool"
               FROM threads t
               WHERE (?1 IS NULL OR t.tenant = ?1)
                 AND (?2 = 'any' OR (?2 = 'live') = (t.archived_at IS NULL))
                 AND (?3 IS NULL OR t.profile = ?3)
                 AND (?4 IS NULL OR EXISTS (SELECT 1 FROM thread_tags g
                                            WHERE g.thread_id = t.id AND g.tag = ?4))
                 AND (?5 IS NULL OR t.created_at >= ?5) AND (?6 IS NULL OR t.created_at < ?6)
                 AND (?7 IS NULL OR t.last_activity_at >= ?7)
                 AND (?8 IS NULL OR t.last_activity_at < ?8)
                 AND (?9 IS NULL OR t.last_activity_at < ?9
                      OR (t.last_activity_at = ?9 AND t.id < ?10))
               ORDER BY t.last_activity_at DESC, t.id DESC
               LIMIT ?11"#,
            query.tenant,
            archived,
            query.profile,
            query.tag,
            query.created_from,
            query.created_to,
            query.active_from,
            query.active_to,
            after_at,
            after_id,
            query.limit,
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(|row| summary_row!(row)).collect())
    }

    async fn search_threads(
        &self,
        query: &ThreadQuery<'_>,
        words: &str,
        offset: i64,
    ) -> Result<Vec<ThreadSummaryRow>, StoreError> {
        let archived = query.archived.as_str();
        let matched = fts_query(words);
        let rows = sqlx::query!(
            r#"WITH hits AS (
                   SELECT thread_id, MIN(rank) AS score FROM thread_search
                   WHERE thread_search MATCH ?10 GROUP BY thread_id)
               SELECT t.id AS "id!: ThreadId", t.title, t.model,
                      t.cli_session_id AS "cli_session_id: CliSessionId",
                      t.parent_id AS "parent_id: ThreadId",
                      t.output_schema AS "output_schema: serde_json::Value",
                      t.forked_session AS "forked_session: CliSessionId",
                      t.max_budget_usd,
                      t.workspace AS "workspace: Json<Workspace>", t.profile, t.tenant,
                      t.on_interrupt AS "on_interrupt: OnInterrupt",
                      t.archived_at AS "archived_at: DateTime<Utc>",
                      t.created_at AS "created_at: DateTime<Utc>",
                      t.updated_at AS "updated_at: DateTime<Utc>",
                      t.last_activity_at AS "last_activity_at!: DateTime<Utc>",
                      EXISTS(SELECT 1 FROM messages m
                             WHERE m.thread_id = t.id AND m.status = 'pending') AS "running!: bool"
               FROM hits h JOIN threads t ON t.id = h.thread_id
               WHERE (?1 IS NULL OR t.tenant = ?1)
                 AND (?2 = 'any' OR (?2 = 'live') = (t.archived_at IS NULL))
                 AND (?3 IS NULL OR t.profile = ?3)
                 AND (?4 IS NULL OR EXISTS (SELECT 1 FROM thread_tags g
                                            WHERE g.thread_id = t.id AND g.tag = ?4))
                 AND (?5 IS NULL OR t.created_at >= ?5) AND (?6 IS NULL OR t.created_at < ?6)
                 AND (?7 IS NULL OR t.last_activity_at >= ?7)
                 AND (?8 IS NULL OR t.last_activity_at < ?8)
               ORDER BY h.score, t.id DESC
               LIMIT ?9 OFFSET ?11"#,
            query.tenant,
            archived,
            query.profile,
            query.tag,
            query.created_from,
            query.created_to,
            query.active_from,
            query.active_to,
            query.limit,
            matched,
            offset,
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(|row| summary_row!(row)).collect())
    }

    async fn tags_of(&self, threads: &[ThreadId]) -> Result<Vec<(ThreadId, String)>, StoreError> {
        // One statement for the page: its ids as a JSON array.
        let ids = serde_json::to_string(threads).unwrap_or_else(|_| "[]".into());
        let rows = sqlx::query!(
            r#"SELECT thread_id AS "thread_id!: ThreadId", tag AS "tag!"
               FROM thread_tags WHERE thread_id IN (SELECT value FROM json_each(?1))
               ORDER BY thread_id, tag"#,
            ids,
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(|r| (r.thread_id, r.tag)).collect())
    }

    async fn message_page(
        &self,
        thread: &ThreadId,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<MessageRow>, StoreError> {
        Ok(sqlx::query_as!(
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
               FROM messages WHERE thread_id = ?1 AND (?2 IS NULL OR seq < ?2)
               ORDER BY seq DESC, rowid DESC LIMIT ?3"#,
            thread,
            before,
            limit,
        )
        .fetch_all(self.pool())
        .await?)
    }

    async fn change_thread(
        &self,
        fence: Option<&Fence>,
        id: &ThreadId,
        change: &ThreadChange<'_>,
    ) -> Result<ThreadRow, StoreError> {
        let mut tx = ThreadTx::begin(self.pool(), id, fence).await?;
        let now = now_text();
        let (set_title, title) = match change.title {
            Some(title) => (true, title),
            None => (false, None),
        };
        let row = sqlx::query_as!(
            ThreadRow,
            r#"UPDATE threads
               SET title = CASE WHEN ?1 THEN ?2 ELSE title END,
                   archived_at = CASE WHEN ?3 THEN NULL ELSE archived_at END,
                   updated_at = ?4
               WHERE id = ?5
               RETURNING id AS "id!: ThreadId", title, model,
                         cli_session_id AS "cli_session_id: CliSessionId",
                         parent_id AS "parent_id: ThreadId",
                         output_schema AS "output_schema: serde_json::Value",
                         forked_session AS "forked_session: CliSessionId",
                         max_budget_usd,
                         workspace AS "workspace: Json<Workspace>", profile, tenant,
                         on_interrupt AS "on_interrupt: OnInterrupt",
                         archived_at AS "archived_at: DateTime<Utc>",
                         created_at AS "created_at: DateTime<Utc>",
                         updated_at AS "updated_at: DateTime<Utc>""#,
            set_title,
            title,
            change.unarchive,
            now,
            id,
        )
        .fetch_optional(tx.conn())
        .await?
        .ok_or_else(|| StoreError::ThreadNotFound(id.clone()))?;
        if let Some(tags) = change.tags {
            sqlx::query!("DELETE FROM thread_tags WHERE thread_id = ?1", id)
                .execute(tx.conn())
                .await?;
            for tag in tags {
                sqlx::query!(
                    "INSERT INTO thread_tags (thread_id, tag) VALUES (?1, ?2)
                     ON CONFLICT DO NOTHING",
                    id,
                    tag,
                )
                .execute(tx.conn())
                .await?;
            }
        }
        tx.commit().await?;
        Ok(row)
    }

    async fn delete_thread(
        &self,
        fence: Option<&Fence>,
        id: &ThreadId,
    ) -> Result<DeletedRows, StoreError> {
        let mut tx = ThreadTx::begin(self.pool(), id, fence).await?;
        let blocks = sqlx::query_scalar!(
            r#"SELECT blocks AS "blocks!" FROM messages
               WHERE thread_id = ?1 AND blocks IS NOT NULL"#,
            id,
        )
        .fetch_all(tx.conn())
        .await?;
        let c = tx.conn();
        let mut deleted = delete_rows_of(&mut *c, id).await?;
        deleted.push(("threads", delete_thread_row(&mut *c, id).await?));
        deleted.push(("files", delete_unnamed_files(&mut *c, blocks).await?));
        tx.commit().await?;
        Ok(deleted)
    }

    async fn children(&self, id: &ThreadId) -> Result<Vec<ThreadId>, StoreError> {
        Ok(sqlx::query_scalar!(
            r#"SELECT id AS "id!: ThreadId" FROM threads WHERE parent_id = ?1 ORDER BY id"#,
            id,
        )
        .fetch_all(self.pool())
        .await?)
    }

    async fn thread_rows(&self, id: &ThreadId) -> Result<DeletedRows, StoreError> {
        let r = sqlx::query!(
            r#"SELECT
                 (SELECT COUNT(*) FROM managed_sessions WHERE thread_id = ?1) AS "managed_sessions!: i64",
                 (SELECT COUNT(*) FROM webhook_events WHERE thread_id = ?1) AS "webhook_events!: i64",
                 (SELECT COUNT(*) FROM webhook_deliveries WHERE thread_id = ?1) AS "webhook_deliveries!: i64",
                 (SELECT COUNT(*) FROM schedule_runs WHERE thread_id = ?1) AS "schedule_runs!: i64",
                 (SELECT COUNT(*) FROM schedules WHERE thread_id = ?1) AS "schedules!: i64",
                 (SELECT COUNT(*) FROM turn_outcomes WHERE thread_id = ?1) AS "turn_outcomes!: i64",
                 (SELECT COUNT(*) FROM permissions WHERE thread_id = ?1) AS "permissions!: i64",
                 (SELECT COUNT(*) FROM thread_rules WHERE thread_id = ?1) AS "thread_rules!: i64",
                 (SELECT COUNT(*) FROM tool_calls WHERE thread_id = ?1) AS "tool_calls!: i64",
                 (SELECT COUNT(*) FROM events WHERE thread_id = ?1) AS "events!: i64",
                 (SELECT COUNT(*) FROM transcript_entries WHERE thread_id = ?1) AS "transcript_entries!: i64",
                 (SELECT COUNT(*) FROM thread_callbacks WHERE thread_id = ?1) AS "thread_callbacks!: i64",
                 (SELECT COUNT(*) FROM leases WHERE thread_id = ?1) AS "leases!: i64",
                 (SELECT COUNT(*) FROM thread_tags WHERE thread_id = ?1) AS "thread_tags!: i64",
                 (SELECT COUNT(*) FROM delegations WHERE child = ?1 OR parent = ?1) AS "delegations!: i64",
                 (SELECT COUNT(*) FROM model_requests WHERE thread_id = ?1) AS "model_requests!: i64",
                 (SELECT COUNT(*) FROM messages WHERE thread_id = ?1) AS "messages!: i64",
                 (SELECT COUNT(*) FROM threads WHERE id = ?1) AS "threads!: i64""#,
            id,
        )
        .fetch_one(self.pool())
        .await?;
        let count = |n: i64| u64::try_from(n).unwrap_or_default();
        Ok(vec![
            ("managed_sessions", count(r.managed_sessions)),
            ("webhook_events", count(r.webhook_events)),
            ("webhook_deliveries", count(r.webhook_deliveries)),
            ("schedule_runs", count(r.schedule_runs)),
            ("schedules", count(r.schedules)),
            ("turn_outcomes", count(r.turn_outcomes)),
            ("permissions", count(r.permissions)),
            ("thread_rules", count(r.thread_rules)),
            ("tool_calls", count(r.tool_calls)),
            ("events", count(r.events)),
            ("transcript_entries", count(r.transcript_entries)),
            ("thread_callbacks", count(r.thread_callbacks)),
            ("leases", count(r.leases)),
            ("thread_tags", count(r.thread_tags)),
            ("delegations", count(r.delegations)),
            ("model_requests", count(r.model_requests)),
            ("messages", count(r.messages)),
            ("threads", count(r.threads)),
        ])
    }
}

/// Deletes every row of the thread `id` in the other tables (a webhook delivery's attempts
/// first), children before parents; each table's count, in that order.
async fn delete_rows_of(
    c: &mut sqlx::SqliteConnection,
    id: &ThreadId,
) -> Result<DeletedRows, StoreError> {
    let mut deleted: DeletedRows = Vec::new();
    sqlx::query!(
        "DELETE FROM webhook_attempts WHERE delivery_id IN
                 (SELECT id FROM webhook_deliveries WHERE thread_id = ?1)",
        id
    )
    .execute(&mut *c)
    .await?;
    // Each table's rows of the thread, counted.
    macro_rules! delete {
        ($table:ident, $sql:literal) => {
            deleted.push((
                stringify!($table),
                sqlx::query!($sql, id)
                    .execute(&mut *c)
                    .await?
                    .rows_affected(),
            ))
        };
    }
    delete!(
        managed_sessions,
        "DELETE FROM managed_sessions WHERE thread_id = ?1"
    );
    delete!(
        webhook_deliveries,
        "DELETE FROM webhook_deliveries WHERE thread_id = ?1"
    );
    delete!(
        webhook_events,
        "DELETE FROM webhook_events WHERE thread_id = ?1"
    );
    delete!(
        schedule_runs,
        "DELETE FROM schedule_runs WHERE thread_id = ?1
                    OR schedule_id IN (SELECT id FROM schedules WHERE thread_id = ?1)"
    );
    delete!(schedules, "DELETE FROM schedules WHERE thread_id = ?1");
    delete!(
        turn_outcomes,
        "DELETE FROM turn_outcomes WHERE thread_id = ?1"
    );
    delete!(permissions, "DELETE FROM permissions WHERE thread_id = ?1");
    delete!(
        thread_rules,
        "DELETE FROM thread_rules WHERE thread_id = ?1"
    );
    delete!(tool_calls, "DELETE FROM tool_calls WHERE thread_id = ?1");
    delete!(events, "DELETE FROM events WHERE thread_id = ?1");
    delete!(
        transcript_entries,
        "DELETE FROM transcript_entries WHERE thread_id = ?1"
    );
    delete!(
        thread_callbacks,
        "DELETE FROM thread_callbacks WHERE thread_id = ?1"
    );
    delete!(leases, "DELETE FROM leases WHERE thread_id = ?1");
    delete!(thread_tags, "DELETE FROM thread_tags WHERE thread_id = ?1");
    delete!(
        delegations,
        "DELETE FROM delegations WHERE child = ?1 OR parent = ?1"
    );
    delete!(
        model_requests,
        "DELETE FROM model_requests WHERE thread_id = ?1"
    );
    delete!(messages, "DELETE FROM messages WHERE thread_id = ?1");
    Ok(deleted)
}

/// Deletes the thread's own row, its children left without a parent; `ThreadNotFound` when
/// there is none.
async fn delete_thread_row(
    c: &mut sqlx::SqliteConnection,
    id: &ThreadId,
) -> Result<u64, StoreError> {
    let n = |r: sqlx::sqlite::SqliteQueryResult| r.rows_affected();
    sqlx::query!(
        "UPDATE threads SET parent_id = NULL WHERE parent_id = ?1",
        id
    )
    .execute(&mut *c)
    .await?;
    let threads = n(sqlx::query!("DELETE FROM threads WHERE id = ?1", id)
        .execute(&mut *c)
        .await?);
    if threads == 0 {
        return Err(StoreError::ThreadNotFound(id.clone()));
    }
    Ok(threads)
}

/// Deletes the files named in `blocks` (the thread's messages, read before they went) that no
/// other message names; how many went.
async fn delete_unnamed_files(
    c: &mut sqlx::SqliteConnection,
    blocks: Vec<String>,
) -> Result<u64, StoreError> {
    let n = |r: sqlx::sqlite::SqliteQueryResult| r.rows_affected();
    let mut files = 0;
    for file in files_named(blocks) {
        // A file another message still names stays.
        let quoted = format!("\"{file}\"");
        files += n(sqlx::query!(
            "DELETE FROM files WHERE id = ?1 AND NOT EXISTS
                     (SELECT 1 FROM messages WHERE instr(blocks, ?2) > 0)",
            file,
            quoted,
        )
        .execute(&mut *c)
        .await?);
    }
    Ok(files)
}
