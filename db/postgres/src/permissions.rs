//! `permissions`: the tool permissions the CLI asked for, recorded when asked and decided once.

use harness_db::{
    new_rule_id, now_text, Decided, Fence, MessageId, NewPermission, PermissionRow, StoreError,
    ThreadRuleRow,
};
use plugin_contract::ThreadId;
use sqlx::PgPool;

use crate::{Postgres, ThreadTx};

harness_db::permission_queries!(Postgres);

async fn insert(
    tx: &mut ThreadTx,
    new: &NewPermission<'_>,
    status: &str,
    decided_by: Option<&str>,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    let now = now_text();
    let decided_at = decided_by.map(|_| now.clone());
    sqlx::query!(
        "INSERT INTO permissions (id, thread_id, message_id, tool_use_id, tool_name, input,
                                  status, decided_by, reason, created_at, decided_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        new.request_id,
        new.thread_id as &ThreadId,
        new.message_id as Option<&MessageId>,
        new.tool_use_id,
        new.tool_name,
        new.input.to_string(),
        status,
        decided_by,
        reason,
        now,
        decided_at,
    )
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// True when the request was pending and is now decided.
async fn decide(
    tx: &mut ThreadTx,
    request_id: &str,
    decided: Decided<'_>,
) -> Result<bool, StoreError> {
    let Decided {
        status,
        decided_by,
        answered_by,
        reason,
        rules: _,
    } = decided;
    let done = sqlx::query!(
        "UPDATE permissions SET status = $2, decided_by = $3, reason = $4, decided_at = $5,
                                answered_by = $6
         WHERE id = $1 AND status = 'pending'",
        request_id,
        status,
        decided_by,
        reason,
        now_text(),
        answered_by,
    )
    .execute(tx.conn())
    .await?;
    Ok(done.rows_affected() == 1)
}

async fn deny_pending(pool: &PgPool, reason: &str) -> Result<u64, StoreError> {
    let done = sqlx::query!(
        "UPDATE permissions SET status = 'denied', decided_by = 'interrupt', reason = $1,
                                decided_at = $2
         WHERE status = 'pending'",
        reason,
        now_text(),
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

async fn select(
    pool: &PgPool,
    thread: &ThreadId,
    pending_only: bool,
    request_id: Option<&str>,
    after: Option<(&str, &str)>,
    limit: Option<i64>,
) -> Result<Vec<PermissionRow>, StoreError> {
    let (after_at, after_id) = after.unzip();
    Ok(sqlx::query_as!(
        PermissionRow,
        r#"SELECT id AS request_id, thread_id AS "thread_id: ThreadId",
                  message_id AS "message_id: MessageId", tool_use_id, tool_name,
                  input AS "input: serde_json::Value", status, decided_by, answered_by, reason,
                  created_at::timestamptz AS "created_at!",
                  decided_at::timestamptz AS "decided_at?"
           FROM permissions
           WHERE thread_id = $1 AND (NOT $2 OR status = 'pending')
             AND ($3::TEXT IS NULL OR id = $3)
             AND ($4::TEXT IS NULL OR (created_at, id) > ($4, $5::TEXT))
           ORDER BY created_at, id LIMIT $6"#,
        thread as &ThreadId,
        pending_only,
        request_id,
        after_at,
        after_id,
        limit,
    )
    .fetch_all(pool)
    .await?)
}

/// Adds `rule` to the thread unless it has it.
async fn add_rule(
    tx: &mut ThreadTx,
    thread: &ThreadId,
    rule: &str,
    request_id: &str,
    added_by: Option<&str>,
) -> Result<(), StoreError> {
    let (id, now) = (new_rule_id(), now_text());
    sqlx::query!(
        "INSERT INTO thread_rules (id, thread_id, rule, request_id, added_by, created_at)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (thread_id, rule) DO NOTHING",
        id,
        thread as &ThreadId,
        rule,
        request_id,
        added_by,
        now,
    )
    .execute(tx.conn())
    .await?;
    Ok(())
}

async fn rules_of(pool: &PgPool, thread: &ThreadId) -> Result<Vec<ThreadRuleRow>, StoreError> {
    Ok(sqlx::query_as!(
        ThreadRuleRow,
        r#"SELECT id, thread_id AS "thread_id: ThreadId", rule, request_id, added_by,
                  created_at::timestamptz AS "created_at!"
           FROM thread_rules WHERE thread_id = $1 ORDER BY created_at, id"#,
        thread as &ThreadId,
    )
    .fetch_all(pool)
    .await?)
}

async fn delete_rule(pool: &PgPool, thread: &ThreadId, id: &str) -> Result<bool, StoreError> {
    let done = sqlx::query!(
        "DELETE FROM thread_rules WHERE thread_id = $1 AND id = $2",
        thread as &ThreadId,
        id
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}
