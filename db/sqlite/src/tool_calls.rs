//! `tool_calls`: a record of every tool call the in-process MCP server served.

use chrono::{DateTime, Utc};
use harness_db::{is_foreign_key_violation, now_text, Fence, NewToolCall, StoreError, ToolCallRow};
use plugin_contract::ThreadId;
use sqlx::{SqliteConnection, SqlitePool};

use crate::{Sqlite, ThreadTx};

harness_db::tool_call_queries!(Sqlite);

async fn insert(conn: &mut SqliteConnection, call: &NewToolCall) -> Result<i64, StoreError> {
    // SQLite integers are signed; a call longer than 292 million years is clamped.
    let duration_ms = i64::try_from(call.duration_ms).unwrap_or(i64::MAX);
    let now = now_text();
    let inserted = sqlx::query_scalar!(
        "INSERT INTO tool_calls
             (thread_id, tool, tool_use_id, input, result, is_error, duration_ms, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
        call.thread_id,
        call.tool,
        call.tool_use_id,
        call.input,
        call.result,
        call.is_error,
        duration_ms,
        now,
    )
    .fetch_one(conn)
    .await;
    match (inserted, &call.thread_id) {
        (Ok(id), _) => Ok(id),
        (Err(err), Some(thread)) if is_foreign_key_violation(&err) => {
            Err(StoreError::ThreadNotFound(thread.clone()))
        }
        (Err(err), _) => Err(err.into()),
    }
}

async fn of_thread(pool: &SqlitePool, thread: &ThreadId) -> Result<Vec<ToolCallRow>, StoreError> {
    Ok(sqlx::query_as!(
        ToolCallRow,
        r#"SELECT id AS "id!", thread_id AS "thread_id: ThreadId", tool, tool_use_id,
                  input AS "input: serde_json::Value",
                  result AS "result: serde_json::Value",
                  is_error AS "is_error: bool",
                  duration_ms,
                  created_at AS "created_at: DateTime<Utc>"
           FROM tool_calls WHERE thread_id = ?1 ORDER BY id"#,
        thread,
    )
    .fetch_all(pool)
    .await?)
}
