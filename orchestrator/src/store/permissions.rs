//! Tool permissions the CLI asked for: recorded when asked, updated once when decided. A
//! pending row is what `GET /api/threads/{id}/permissions` lists; the decision and who made it
//! stay beside the tool call (`tool_use_id`).

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;

use super::{now_text, Db, MessageId, Store, StoreError};

/// A permission as stored. What clients see is `api::Permission`, built from it.
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionRow {
    /// The CLI's request id; the id a person answers.
    pub request_id: String,
    pub thread_id: ThreadId,
    pub message_id: Option<MessageId>,
    pub tool_use_id: Option<String>,
    pub tool_name: String,
    pub input: serde_json::Value,
    /// `pending`, `allowed` or `denied`.
    pub status: String,
    /// `rule`, `person`, `timeout`, `policy` or `interrupt`; `None` while pending.
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

/// A permission to record.
#[derive(Clone, Debug)]
pub struct NewPermission<'a> {
    pub request_id: &'a str,
    pub thread_id: &'a ThreadId,
    pub message_id: Option<&'a MessageId>,
    pub tool_use_id: Option<&'a str>,
    pub tool_name: &'a str,
    pub input: &'a serde_json::Value,
}

struct PermissionRecord {
    id: String,
    thread_id: String,
    message_id: Option<MessageId>,
    tool_use_id: Option<String>,
    tool_name: String,
    input: serde_json::Value,
    status: String,
    decided_by: Option<String>,
    reason: Option<String>,
    created_at: DateTime<Utc>,
    decided_at: Option<DateTime<Utc>>,
}

impl From<PermissionRecord> for PermissionRow {
    fn from(row: PermissionRecord) -> Self {
        PermissionRow {
            request_id: row.id,
            thread_id: ThreadId::from_string(row.thread_id),
            message_id: row.message_id,
            tool_use_id: row.tool_use_id,
            tool_name: row.tool_name,
            input: row.input,
            status: row.status,
            decided_by: row.decided_by,
            reason: row.reason,
            created_at: row.created_at,
            decided_at: row.decided_at,
        }
    }
}

impl Store {
    /// Records a request; `status` is `pending` for one a person will answer, else the
    /// decision already made (`decided_by` then says by whom).
    pub async fn record_permission(
        &self,
        new: NewPermission<'_>,
        status: &str,
        decided_by: Option<&str>,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("record_permission");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::record_permission(
                    pool,
                    new,
                    status,
                    decided_by,
                    reason,
                    self.fencing(None),
                )
                .await
            }
        };
        let thread = new.thread_id.as_str();
        super::leases::check_fence_sqlite_pool(pool, thread, self.fencing(None)).await?;
        let input = new.input.to_string();
        let now = now_text();
        let decided_at = decided_by.map(|_| now.clone());
        sqlx::query!(
            "INSERT INTO permissions (id, thread_id, message_id, tool_use_id, tool_name, input,
                                      status, decided_by, reason, created_at, decided_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            new.request_id,
            thread,
            new.message_id,
            new.tool_use_id,
            new.tool_name,
            input,
            status,
            decided_by,
            reason,
            now,
            decided_at,
        )
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Decides a pending request of `thread`; false when it was not pending (unknown or
    /// decided).
    pub async fn decide_permission(
        &self,
        thread: &ThreadId,
        request_id: &str,
        status: &str,
        decided_by: &str,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        let _timer = self.metrics.time("decide_permission");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::decide_permission(
                    pool,
                    thread,
                    self.fencing(None),
                    request_id,
                    status,
                    decided_by,
                    reason,
                )
                .await
            }
        };
        super::leases::check_fence_sqlite_pool(pool, thread.as_str(), self.fencing(None)).await?;
        let now = now_text();
        let done = sqlx::query!(
            "UPDATE permissions SET status = ?2, decided_by = ?3, reason = ?4, decided_at = ?5
             WHERE id = ?1 AND status = 'pending'",
            request_id,
            status,
            decided_by,
            reason,
            now,
        )
        .execute(pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Denies every pending request (at start-up: their processes are gone); returns how many.
    pub async fn deny_pending_permissions(&self, reason: &str) -> Result<u64, StoreError> {
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => return postgres::deny_pending_permissions(pool, reason).await,
        };
        let now = now_text();
        let done = sqlx::query!(
            "UPDATE permissions SET status = 'denied', decided_by = 'interrupt', reason = ?1,
                                    decided_at = ?2
             WHERE status = 'pending'",
            reason,
            now,
        )
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// One request of the thread, if it exists.
    pub async fn permission(
        &self,
        thread: &ThreadId,
        request_id: &str,
    ) -> Result<Option<PermissionRow>, StoreError> {
        Ok(self
            .select_permissions(thread, false, Some(request_id))
            .await?
            .pop())
    }

    /// The thread's requests, oldest first; only the pending ones when `pending_only`.
    pub async fn permissions(
        &self,
        thread: &ThreadId,
        pending_only: bool,
    ) -> Result<Vec<PermissionRow>, StoreError> {
        self.select_permissions(thread, pending_only, None).await
    }

    async fn select_permissions(
        &self,
        thread: &ThreadId,
        pending_only: bool,
        request_id: Option<&str>,
    ) -> Result<Vec<PermissionRow>, StoreError> {
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::select_permissions(pool, thread, pending_only, request_id).await
            }
        };
        let thread = thread.as_str();
        let rows = sqlx::query_as!(
            PermissionRecord,
            r#"SELECT id AS "id!", thread_id, message_id AS "message_id: MessageId", tool_use_id,
                      tool_name, input AS "input: serde_json::Value", status, decided_by, reason,
                      created_at AS "created_at: DateTime<Utc>",
                      decided_at AS "decided_at: DateTime<Utc>"
               FROM permissions
               WHERE thread_id = ?1 AND (?2 = 0 OR status = 'pending') AND (?3 IS NULL OR id = ?3)
               ORDER BY created_at, id"#,
            thread,
            pending_only,
            request_id,
        )
        .fetch_all(pool)
        .await?;
        Ok(rows.into_iter().map(PermissionRow::from).collect())
    }
}

/// The same operations on PostgreSQL, in the order of `impl Store` above.
mod postgres {
    use sqlx::postgres::PgRow;
    use sqlx::{PgPool, Row};

    use super::super::leases::{check_fence_pg, Fencing};
    use super::super::pg;
    use super::*;

    fn permission(row: &PgRow) -> Result<PermissionRow, StoreError> {
        Ok(PermissionRecord {
            id: row.try_get("id")?,
            thread_id: row.try_get("thread_id")?,
            message_id: row.try_get("message_id")?,
            tool_use_id: row.try_get("tool_use_id")?,
            tool_name: row.try_get("tool_name")?,
            input: pg::json(row, "input")?,
            status: row.try_get("status")?,
            decided_by: row.try_get("decided_by")?,
            reason: row.try_get("reason")?,
            created_at: pg::time(row, "created_at")?,
            decided_at: pg::opt_time(row, "decided_at")?,
        }
        .into())
    }

    pub(super) async fn record_permission(
        pool: &PgPool,
        new: NewPermission<'_>,
        status: &str,
        decided_by: Option<&str>,
        reason: Option<&str>,
        fencing: Fencing<'_>,
    ) -> Result<(), StoreError> {
        let now = now_text();
        let decided_at = decided_by.map(|_| now.clone());
        let mut tx = pool.begin().await?;
        check_fence_pg(&mut tx, new.thread_id.as_str(), fencing).await?;
        sqlx::query(
            "INSERT INTO permissions (id, thread_id, message_id, tool_use_id, tool_name, input,
                                      status, decided_by, reason, created_at, decided_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(new.request_id)
        .bind(new.thread_id.as_str())
        .bind(new.message_id.map(MessageId::as_str))
        .bind(new.tool_use_id)
        .bind(new.tool_name)
        .bind(new.input.to_string())
        .bind(status)
        .bind(decided_by)
        .bind(reason)
        .bind(&now)
        .bind(decided_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn decide_permission(
        pool: &PgPool,
        thread: &ThreadId,
        fencing: Fencing<'_>,
        request_id: &str,
        status: &str,
        decided_by: &str,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut tx = pool.begin().await?;
        check_fence_pg(&mut tx, thread.as_str(), fencing).await?;
        let done = sqlx::query(
            "UPDATE permissions SET status = $2, decided_by = $3, reason = $4, decided_at = $5
             WHERE id = $1 AND status = 'pending'",
        )
        .bind(request_id)
        .bind(status)
        .bind(decided_by)
        .bind(reason)
        .bind(now_text())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    pub(super) async fn deny_pending_permissions(
        pool: &PgPool,
        reason: &str,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE permissions SET status = 'denied', decided_by = 'interrupt', reason = $1,
                                    decided_at = $2
             WHERE status = 'pending'",
        )
        .bind(reason)
        .bind(now_text())
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    }

    pub(super) async fn select_permissions(
        pool: &PgPool,
        thread: &ThreadId,
        pending_only: bool,
        request_id: Option<&str>,
    ) -> Result<Vec<PermissionRow>, StoreError> {
        sqlx::query(
            "SELECT id, thread_id, message_id, tool_use_id, tool_name, input, status, decided_by,
                    reason, created_at, decided_at
             FROM permissions
             WHERE thread_id = $1 AND (NOT $2 OR status = 'pending')
               AND ($3::TEXT IS NULL OR id = $3)
             ORDER BY created_at, id",
        )
        .bind(thread.as_str())
        .bind(pending_only)
        .bind(request_id)
        .fetch_all(pool)
        .await?
        .iter()
        .map(permission)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::store_tests;
    use super::super::NewThread;
    use super::*;

    store_tests! {
        async fn a_request_is_decided_once_and_listed_while_pending(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap();
            let input = json!({"command": "touch f"});
            let new = NewPermission {
                request_id: "req-1",
                thread_id: &thread.id,
                message_id: None,
                tool_use_id: Some("toolu_1"),
                tool_name: "Bash",
                input: &input,
            };
            store
                .record_permission(new, "pending", None, None)
                .await
                .unwrap();
            let pending = store.permissions(&thread.id, true).await.unwrap();
            assert_eq!(pending.len(), 1);
            assert_eq!(pending[0].input, input);
            assert!(store
                .decide_permission(&thread.id, "req-1", "allowed", "person", Some("ok"))
                .await
                .unwrap());
            assert!(!store
                .decide_permission(&thread.id, "req-1", "denied", "timeout", None)
                .await
                .unwrap());
            let row = store
                .permission(&thread.id, "req-1")
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                (row.status.as_str(), row.decided_by.as_deref()),
                ("allowed", Some("person"))
            );
            assert!(row.decided_at.is_some());
            assert!(store
                .permissions(&thread.id, true)
                .await
                .unwrap()
                .is_empty());
            assert_eq!(store.permissions(&thread.id, false).await.unwrap().len(), 1);
            assert!(store
                .permission(&thread.id, "other")
                .await
                .unwrap()
                .is_none());
        }
    }
}
