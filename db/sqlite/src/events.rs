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
