//! `transcript_entries`: the CLI's transcripts as its processes mirror them. A frame is
//! appended in one statement (with the fence's check in its transaction, when there is one); an
//! entry's `uuid` is unique per session (a partial UNIQUE index), so `ON CONFLICT DO NOTHING`
//! skips one already stored.

use harness_db::{now_text, Fence, StoreError, TranscriptEntry};
use plugin_contract::{CliSessionId, ThreadId};
use serde_json::Value;
use sqlx::PgPool;

use crate::{Postgres, ThreadTx};

harness_db::transcript_queries!(Postgres);

/// Inserts the entries in order, in one statement (the entries' uuids and lines as two arrays,
/// `unnest`ed side by side); how many were new.
async fn append(
    tx: &mut ThreadTx,
    thread: &ThreadId,
    session: &CliSessionId,
    file: &str,
    entries: &[Value],
) -> Result<u64, StoreError> {
    let now = now_text();
    let (uuids, lines): (Vec<Option<String>>, Vec<String>) = entries
        .iter()
        .map(|entry| {
            let uuid = entry.get("uuid").and_then(Value::as_str).map(str::to_owned);
            (uuid, entry.to_string())
        })
        .unzip();
    let done = sqlx::query!(
        "INSERT INTO transcript_entries (thread_id, session_id, file, uuid, entry, created_at)
         SELECT $1, $2, $3, t.uuid, t.line, $4
         FROM unnest($5::text[], $6::text[]) WITH ORDINALITY AS t(uuid, line, n) ORDER BY t.n
         ON CONFLICT DO NOTHING",
        thread as &ThreadId,
        session as &CliSessionId,
        file,
        now,
        &uuids as &[Option<String>],
        &lines,
    )
    .execute(tx.conn())
    .await?;
    Ok(done.rows_affected())
}

async fn of_session(
    pool: &PgPool,
    session: &CliSessionId,
) -> Result<Vec<TranscriptEntry>, StoreError> {
    Ok(sqlx::query_as!(
        TranscriptEntry,
        r#"SELECT session_id AS "session_id: CliSessionId", file, uuid, entry AS line
           FROM transcript_entries WHERE session_id = $1 ORDER BY id"#,
        session as &CliSessionId,
    )
    .fetch_all(pool)
    .await?)
}

async fn of_thread(pool: &PgPool, thread: &ThreadId) -> Result<Vec<TranscriptEntry>, StoreError> {
    Ok(sqlx::query_as!(
        TranscriptEntry,
        r#"SELECT session_id AS "session_id: CliSessionId", file, uuid, entry AS line
           FROM transcript_entries WHERE thread_id = $1 ORDER BY id"#,
        thread as &ThreadId,
    )
    .fetch_all(pool)
    .await?)
}
