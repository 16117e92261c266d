//! A record of every tool call the in-process MCP server served: what was asked, what went back,
//! how long it took. Written once per call after it finished; read for inspection and tests.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;

use super::{is_foreign_key_violation, now_text, Db, NewToolCall, Store, StoreError, ToolCallRow};

/// A `tool_calls` row as sqlx decodes it. The thread id is still text: `plugin-contract` has no
/// sqlx, so it is wrapped here.
struct ToolCallRecord {
    id: i64,
    thread_id: Option<String>,
    tool: String,
    tool_use_id: Option<String>,
    input: serde_json::Value,
    result: Option<serde_json::Value>,
    is_error: bool,
    duration_ms: u64,
    created_at: DateTime<Utc>,
}

impl From<ToolCallRecord> for ToolCallRow {
    fn from(row: ToolCallRecord) -> Self {
        ToolCallRow {
            id: row.id,
            thread_id: row.thread_id.map(ThreadId::from_string),
            tool: row.tool,
            tool_use_id: row.tool_use_id,
            input: row.input,
            result: row.result,
            is_error: row.is_error,
            duration_ms: row.duration_ms,
            created_at: row.created_at,
        }
    }
}

impl Store {
    /// Records a finished tool call and returns its id. [`StoreError::ThreadNotFound`] when
    /// `thread_id` names an unknown thread; [`StoreError::LeaseLost`] when it names one whose
    /// lease this node does not hold (`leases.rs`).
    pub async fn record_tool_call(&self, call: NewToolCall) -> Result<i64, StoreError> {
        let _timer = self.metrics.time("record_tool_call");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::record_tool_call(pool, call, self.fencing(None)).await
            }
        };
        if let Some(thread) = &call.thread_id {
            super::leases::check_fence_sqlite_pool(pool, thread.as_str(), self.fencing(None))
                .await?;
        }
        // SQLite integers are signed; a call longer than 292 million years is clamped.
        let duration_ms = i64::try_from(call.duration_ms).unwrap_or(i64::MAX);
        let thread_id = call.thread_id.as_ref().map(ThreadId::as_str);
        let now = now_text();
        let inserted = sqlx::query_scalar!(
            "INSERT INTO tool_calls
                 (thread_id, tool, tool_use_id, input, result, is_error, duration_ms, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
            thread_id,
            call.tool,
            call.tool_use_id,
            call.input,
            call.result,
            call.is_error,
            duration_ms,
            now,
        )
        .fetch_one(pool)
        .await;
        match (inserted, call.thread_id) {
            (Ok(id), _) => Ok(id),
            (Err(err), Some(thread)) if is_foreign_key_violation(&err) => {
                Err(StoreError::ThreadNotFound(thread))
            }
            (Err(err), _) => Err(err.into()),
        }
    }

    /// The thread's tool calls, oldest first (ascending id).
    pub async fn tool_calls(&self, thread: &ThreadId) -> Result<Vec<ToolCallRow>, StoreError> {
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => return postgres::tool_calls(pool, thread).await,
        };
        let thread = thread.as_str();
        let rows = sqlx::query_as!(
            ToolCallRecord,
            r#"SELECT id AS "id!", thread_id, tool, tool_use_id,
                      input AS "input: serde_json::Value",
                      result AS "result: serde_json::Value",
                      is_error AS "is_error: bool",
                      duration_ms AS "duration_ms: u64",
                      created_at AS "created_at: DateTime<Utc>"
               FROM tool_calls WHERE thread_id = ?1 ORDER BY id"#,
            thread,
        )
        .fetch_all(pool)
        .await?;
        Ok(rows.into_iter().map(ToolCallRow::from).collect())
    }
}

/// The same operations on PostgreSQL, in the order of `impl Store` above.
mod postgres {
    use sqlx::postgres::PgRow;
    use sqlx::{PgPool, Row};

    use super::super::pg;
    use super::*;

    fn tool_call(row: &PgRow) -> Result<ToolCallRow, StoreError> {
        let duration_ms: i64 = row.try_get("duration_ms")?;
        Ok(ToolCallRecord {
            id: row.try_get("id")?,
            thread_id: row.try_get("thread_id")?,
            tool: row.try_get("tool")?,
            tool_use_id: row.try_get("tool_use_id")?,
            input: pg::json(row, "input")?,
            result: pg::opt_json(row, "result")?,
            is_error: row.try_get("is_error")?,
            duration_ms: u64::try_from(duration_ms)
                .map_err(|_| StoreError::Corrupt(format!("duration_ms {duration_ms}")))?,
            created_at: pg::time(row, "created_at")?,
        }
        .into())
    }

    pub(super) async fn record_tool_call(
        pool: &PgPool,
        call: NewToolCall,
        fencing: super::super::leases::Fencing<'_>,
    ) -> Result<i64, StoreError> {
        // BIGINT is signed; a call longer than 292 million years is clamped.
        let duration_ms = i64::try_from(call.duration_ms).unwrap_or(i64::MAX);
        let mut tx = pool.begin().await?;
        if let Some(thread) = &call.thread_id {
            super::super::leases::check_fence_pg(&mut tx, thread.as_str(), fencing).await?;
        }
        let inserted = sqlx::query_scalar(
            "INSERT INTO tool_calls
                 (thread_id, tool, tool_use_id, input, result, is_error, duration_ms, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        )
        .bind(call.thread_id.as_ref().map(ThreadId::as_str))
        .bind(&call.tool)
        .bind(&call.tool_use_id)
        .bind(call.input.to_string())
        .bind(call.result.as_ref().map(serde_json::Value::to_string))
        .bind(call.is_error)
        .bind(duration_ms)
        .bind(now_text())
        .fetch_one(&mut *tx)
        .await;
        match (inserted, call.thread_id) {
            (Ok(id), _) => {
                tx.commit().await?;
                Ok(id)
            }
            (Err(err), Some(thread)) if is_foreign_key_violation(&err) => {
                Err(StoreError::ThreadNotFound(thread))
            }
            (Err(err), _) => Err(err.into()),
        }
    }

    pub(super) async fn tool_calls(
        pool: &PgPool,
        thread: &ThreadId,
    ) -> Result<Vec<ToolCallRow>, StoreError> {
        sqlx::query(
            "SELECT id, thread_id, tool, tool_use_id, input, result, is_error, duration_ms,
                    created_at
             FROM tool_calls WHERE thread_id = $1 ORDER BY id",
        )
        .bind(thread.as_str())
        .fetch_all(pool)
        .await?
        .iter()
        .map(tool_call)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::store_tests;
    use super::super::NewThread;
    use super::*;

    fn call(thread: Option<&ThreadId>, tool: &str) -> NewToolCall {
        NewToolCall {
            thread_id: thread.cloned(),
            tool: tool.into(),
            tool_use_id: Some(format!("toolu_{tool}")),
            input: json!({"tz": "Europe/Paris"}),
            result: Some(json!({"text": "12:00"})),
            is_error: false,
            duration_ms: 17,
        }
    }

    store_tests! {
        async fn tool_calls_round_trip_in_order(store: sqlite_memory) {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let other = store.create_thread(NewThread::default()).await.unwrap().id;

            let first = store
                .record_tool_call(call(Some(&t), "time__now"))
                .await
                .unwrap();
            store
                .record_tool_call(call(Some(&other), "elsewhere"))
                .await
                .unwrap();
            store
                .record_tool_call(call(None, "no_thread"))
                .await
                .unwrap();
            let failed = NewToolCall {
                tool_use_id: None,
                result: None,
                is_error: true,
                duration_ms: u64::MAX,
                ..call(Some(&t), "delegation__ask")
            };
            let second = store.record_tool_call(failed).await.unwrap();
            assert!(second > first);

            let rows = store.tool_calls(&t).await.unwrap();
            assert_eq!(rows.len(), 2);
            let r = &rows[0];
            assert_eq!(r.id, first);
            assert_eq!(r.thread_id.as_ref(), Some(&t));
            assert_eq!(r.tool, "time__now");
            assert_eq!(r.tool_use_id.as_deref(), Some("toolu_time__now"));
            assert_eq!(r.input, json!({"tz": "Europe/Paris"}));
            assert_eq!(r.result, Some(json!({"text": "12:00"})));
            assert!(!r.is_error);
            assert_eq!(r.duration_ms, 17);

            let r = &rows[1];
            assert_eq!(r.id, second);
            assert_eq!(r.tool, "delegation__ask");
            assert_eq!(r.tool_use_id, None);
            assert_eq!(r.result, None);
            assert!(r.is_error);
            assert_eq!(r.duration_ms, i64::MAX as u64);

            let json = serde_json::to_value(&rows[0]).unwrap();
            assert_eq!(json["toolUseId"], "toolu_time__now");
            assert_eq!(json["isError"], false);
            assert_eq!(json["durationMs"], 17);

            let no_thread = store
                .test_count("SELECT COUNT(*) FROM tool_calls WHERE thread_id IS NULL")
                .await;
            assert_eq!(no_thread, 1);
        }
    }

    store_tests! {
        async fn tool_call_for_unknown_thread_is_thread_not_found(store: sqlite_memory) {
            let unknown = ThreadId::from_string("thr_nope");
            let err = store
                .record_tool_call(call(Some(&unknown), "x"))
                .await
                .unwrap_err();
            assert!(
                matches!(err, StoreError::ThreadNotFound(ref id) if *id == unknown),
                "{err:?}"
            );
        }
    }
}
