//! `transcript_entries`: the CLI's transcripts as its processes mirror them. A frame is
//! appended in one fenced transaction; an entry's `uuid` is unique per session (a partial
//! UNIQUE index), so `ON CONFLICT DO NOTHING` skips one already stored.

use harness_db::{now_text, Fence, StoreError, TranscriptEntry};
use plugin_contract::{CliSessionId, ThreadId};
use serde_json::Value;
use sqlx::SqlitePool;

use crate::{Sqlite, ThreadTx};

harness_db::transcript_queries!(Sqlite);

/// Inserts the entries in order; how many were new.
async fn append(
    tx: &mut ThreadTx,
    thread: &ThreadId,
    session: &CliSessionId,
    file: &str,
    entries: &[Value],
) -> Result<u64, StoreError> {
    let now = now_text();
    let mut added = 0;
    for entry in entries {
        let uuid = entry.get("uuid").and_then(Value::as_str);
        let line = entry.to_string();
        let done = sqlx::query!(
            "INSERT INTO transcript_entries (thread_id, session_id, file, uuid, entry, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT DO NOTHING",
            thread,
            session,
            file,
            uuid,
            line,
            now,
        )
        .execute(tx.conn())
        .await?;
        added += done.rows_affected();
    }
    Ok(added)
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
