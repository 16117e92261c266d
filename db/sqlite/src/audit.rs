//! `audit_log`; see [`harness_db::AuditQueries`].

use chrono::{DateTime, Utc};
use harness_db::{now_text, AuditRow, NewAudit, StoreError};
use plugin_contract::ThreadId;
use sqlx::SqlitePool;

use crate::Sqlite;

harness_db::audit_queries!(Sqlite);

async fn record_audit(pool: &SqlitePool, entry: NewAudit<'_>) -> Result<(), StoreError> {
    let now = now_text();
    sqlx::query!(
        "INSERT INTO audit_log (at, subject, tenant, action, path, thread_id, status, remote)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        now,
        entry.subject,
        entry.tenant,
        entry.action,
        entry.path,
        entry.thread_id,
        entry.status,
        entry.remote,
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn audit_entries(
    pool: &SqlitePool,
    limit: u32,
    before: Option<i64>,
) -> Result<Vec<AuditRow>, StoreError> {
    Ok(sqlx::query_as!(
        AuditRow,
        r#"SELECT id AS "id!", at AS "at: DateTime<Utc>", subject, tenant, action, path,
                  thread_id AS "thread_id: ThreadId", status, remote
           FROM audit_log WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2"#,
        before,
        limit,
    )
    .fetch_all(pool)
    .await?)
}

async fn purge_audit(pool: &SqlitePool, older_than: &str) -> Result<u64, StoreError> {
    let done = sqlx::query!("DELETE FROM audit_log WHERE at < ?1", older_than)
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}
