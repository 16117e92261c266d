//! `transcript_entries`: the CLI's transcripts as its processes mirror them. A frame is
//! appended in one statement (with the fence's check in its transaction, when there is one); an
//! entry's `uuid` is unique per session (a partial UNIQUE index), so `ON CONFLICT DO NOTHING`
//! skips one already stored.

use harness_db::{now_text, Fence, StoreError, TranscriptEntry};
use plugin_contract::{CliSessionId, ThreadId};
use serde_json::{json, Value};
use sqlx::SqlitePool;

use crate::{Sqlite, ThreadTx};

harness_db::transcript_queries!(Sqlite);

/// Inserts the entries in order, in one statement: `[uuid, line]` pairs in a JSON array, read
/// back by `json_each` (the `WHERE` only tells SQLite's parser that `ON CONFLICT` is the
/// upsert's); how many were new.
async fn append(
    tx: &mut ThreadTx,
    thread: &ThreadId,
    session: &CliSessionId,
    file: &str,
    entries: &[Value],
) -> Result<u64, StoreError> {
    let now = now_text();
    let rows: Vec<Value> = entries
        .iter()
        .map(|entry| {
            json!([
                entry.get("uuid").filter(|u| u.is_string()),
                entry.to_string()
            ])
        })
        .collect();
    let rows = Value::Array(rows).to_string();
    let done = sqlx::query!(
        "INSERT INTO transcript_entries (thread_id, session_id, file, uuid, entry, created_at)
         SELECT ?1, ?2, ?3, json_extract(value, '$[0]'), json_extract(value, '$[1]'), ?4
         FROM json_each(?5) WHERE true ORDER BY key
         ON CONFLICT DO NOTHING",
        thread,
        session,
        file,
        now,
        rows,
    )
    .execute(tx.conn())
    .await?;
    Ok(done.rows_affected())
}

async fn of_session(
    pool: &SqlitePool,
    session: &CliSessionId,
) -> Result<Vec<TranscriptEntry>, StoreError> {
    Ok(sqlx::query_as!(
        TranscriptEntry,
        r#"SELECT session_id AS "session_id: CliSessionId", file, uuid, entry AS line
           FROM transcript_entries WHERE session_id = ?1 ORDER BY id"#,
        session,
    )
    .fetch_all(pool)
    .await?)
}

async fn of_thread(
    pool: &SqlitePool,
    thread: &ThreadId,
) -> Result<Vec<TranscriptEntry>, StoreError> {
    Ok(sqlx::query_as!(
        TranscriptEntry,
        r#"SELECT session_id AS "session_id: CliSessionId", file, uuid, entry AS line
           FROM transcript_entries WHERE thread_id = ?1 ORDER BY id"#,
        thread,
    )
    .fetch_all(pool)
    .await?)
}
