//! `events`: the per-thread event log. Ids come from the table's AUTOINCREMENT, so they only
//! grow; appends run under the database's one write lock, so they also commit in id order.

use chrono::{DateTime, Utc};
use harness_db::{now_text, EventRow, Fence, MessageId, StoreError};
use plugin_contract::ThreadId;
use sqlx::{SqliteConnection, SqlitePool};

use crate::webhooks::outbox;
use crate::{Sqlite, ThreadTx};

harness_db::event_queries!(Sqlite);

pub(crate) async fn append(
    conn: &mut SqliteConnection,
    thread: &ThreadId,
    message: Option<&MessageId>,
    kind: &str,
    data: &serde_json::Value,
) -> Result<EventRow, StoreError> {
    let now = now_text();
    // Selecting FROM threads turns an unknown thread into "no row" rather than a foreign key
    // error we would have to recognise.
    let row = sqlx::query_as!(
        EventRow,
        r#"INSERT INTO events (thread_id, message_id, kind, data, created_at)
           SELECT t.id, ?1, ?2, ?3, ?4 FROM threads t WHERE t.id = ?5
           RETURNING id AS "id!", thread_id AS "thread_id: ThreadId",
                     message_id AS "message_id: MessageId", kind,
                     data AS "data: serde_json::Value",
                     created_at AS "created_at: DateTime<Utc>""#,
        message,
        kind,
        data,
        now,
        thread,
    )
    .fetch_optional(conn)
    .await?;
    row.ok_or_else(|| StoreError::ThreadNotFound(thread.clone()))
}

async fn after_id(
    pool: &SqlitePool,
    thread: &ThreadId,
    after: i64,
    limit: u32,
) -> Result<Vec<EventRow>, StoreError> {
    Ok(sqlx::query_as!(
        EventRow,
        r#"SELECT id AS "id!", thread_id AS "thread_id: ThreadId",
                  message_id AS "message_id: MessageId", kind,
                  data AS "data: serde_json::Value",
                  created_at AS "created_at: DateTime<Utc>"
           FROM events WHERE thread_id = ?1 AND id > ?2
           ORDER BY id LIMIT ?3"#,
        thread,
        after,
        limit,
    )
    .fetch_all(pool)
    .await?)
}

async fn last_of(
    pool: &SqlitePool,
    thread: &ThreadId,
    kinds: &[String],
) -> Result<Option<EventRow>, StoreError> {
    let kinds = serde_json::to_string(kinds).unwrap_or_default();
    Ok(sqlx::query_as!(
        EventRow,
        r#"SELECT id AS "id!", thread_id AS "thread_id: ThreadId",
                  message_id AS "message_id: MessageId", kind,
                  data AS "data: serde_json::Value",
                  created_at AS "created_at: DateTime<Utc>"
           FROM events
           WHERE thread_id = ?1 AND kind IN (SELECT value FROM json_each(?2))
           ORDER BY id DESC LIMIT 1"#,
        thread,
        kinds,
    )
    .fetch_optional(pool)
    .await?)
}

async fn compacted_through(pool: &SqlitePool, thread: &ThreadId) -> Result<i64, StoreError> {
    let through = sqlx::query_scalar!(
        "SELECT events_compacted_through FROM threads WHERE id = ?1",
        thread
    )
    .fetch_optional(pool)
    .await?;
    Ok(through.unwrap_or(0))
}

async fn last_event_id(pool: &SqlitePool, thread: &ThreadId) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT COALESCE(MAX(id), 0) AS "id!: i64" FROM events WHERE thread_id = ?1"#,
        thread
    )
    .fetch_one(pool)
    .await?)
}

async fn compactable(
    pool: &SqlitePool,
    older_than: &str,
) -> Result<Vec<(ThreadId, i64)>, StoreError> {
    let rows = sqlx::query!(
        r#"SELECT o.thread_id AS "thread_id!: ThreadId", MAX(o.event_id) AS "cut!: i64"
           FROM turn_outcomes o JOIN threads t ON t.id = o.thread_id
           WHERE o.created_at < ?1
           GROUP BY o.thread_id, t.events_compacted_through
           HAVING MAX(o.event_id) > t.events_compacted_through"#,
        older_than,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.thread_id, r.cut)).collect())
}

async fn compact(pool: &SqlitePool, cuts: &[(ThreadId, i64)]) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    let mut removed = 0;
    for (thread, cut) in cuts {
        removed += compact_one(&mut tx, thread, *cut).await?;
    }
    tx.commit().await?;
    Ok(removed)
}

async fn compact_one(
    conn: &mut SqliteConnection,
    thread: &ThreadId,
    cut: i64,
) -> Result<u64, StoreError> {
    sqlx::query!(
        "UPDATE threads SET events_compacted_through = ?2
         WHERE id = ?1 AND events_compacted_through < ?2",
        thread,
        cut,
    )
    .execute(&mut *conn)
    .await?;
    let done = sqlx::query!(
        "DELETE FROM events WHERE thread_id = ?1 AND id <= ?2",
        thread,
        cut
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
