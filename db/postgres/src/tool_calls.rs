//! `tool_calls`: a record of every tool call the in-process MCP server served.

use harness_db::{is_foreign_key_violation, now_text, Fence, NewToolCall, StoreError, ToolCallRow};
use plugin_contract::ThreadId;
use sqlx::{PgConnection, PgPool};

use crate::{Postgres, ThreadTx};

harness_db::tool_call_queries!(Postgres);

async fn insert(conn: &mut PgConnection, call: &NewToolCall) -> Result<i64, StoreError> {
    // BIGINT is signed; a call longer than 292 million years is clamped.
    let duration_ms = i64::try_from(call.duration_ms).unwrap_or(i64::MAX);
    let result = call.result.as_ref().map(serde_json::Value::to_string);
    let inserted = sqlx::query_scalar!(
        "INSERT INTO tool_calls
             (thread_id, tool, tool_use_id, input, result, is_error, duration_ms, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        call.thread_id.as_ref() as Option<&ThreadId>,
        call.tool,
        call.tool_use_id,
        call.input.to_string(),
        result,
        call.is_error,
        duration_ms,
        now_text(),
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

async fn of_thread(pool: &PgPool, thread: &ThreadId) -> Result<Vec<ToolCallRow>, StoreError> {
    Ok(sqlx::query_as!(
        ToolCallRow,
        r#"SELECT id, thread_id AS "thread_id: ThreadId", tool, tool_use_id,
                  input AS "input: serde_json::Value",
                  result AS "result: serde_json::Value",
                  is_error, duration_ms,
                  created_at::timestamptz AS "created_at!"
           FROM tool_calls WHERE thread_id = $1 ORDER BY id"#,
        thread as &ThreadId,
    )
    .fetch_all(pool)
    .await?)
}
