//! The webhook tables; see [`harness_db::WebhookQueries`]. A claim re-checks its conditions on
//! each row it locks, so of two nodes claiming at once each delivery goes to one; a fan-out
//! marks its event under the row's lock first.

use harness_db::{
    new_delivery_id, now_text, AttemptRow, Attempted, DeliveryRow, DeliveryStatus, NewDelivery,
    StoreError, ThreadCallback, WebhookDraft, WebhookEventRow,
};
use plugin_contract::ThreadId;
use sqlx::{PgConnection, PgPool};

use crate::Postgres;

harness_db::webhook_queries!(Postgres);

/// Writes `draft` in the outbox, inside the caller's transaction.
pub(crate) async fn outbox(
    conn: &mut PgConnection,
    thread: &ThreadId,
    draft: &WebhookDraft,
) -> Result<(), StoreError> {
    let now = now_text();
    sqlx::query!(
        "INSERT INTO webhook_events (type, thread_id, data, created_at) VALUES ($1, $2, $3, $4)",
        draft.kind,
        thread as &ThreadId,
        draft.data.to_string(),
        now,
    )
    .execute(conn)
    .await?;
    Ok(())
}

async fn waiting_webhook_events(
    pool: &PgPool,
    limit: u32,
) -> Result<Vec<WebhookEventRow>, StoreError> {
    Ok(sqlx::query_as!(
        WebhookEventRow,
        r#"SELECT id, type AS "kind!", thread_id AS "thread_id: ThreadId",
                  data AS "data: serde_json::Value",
                  created_at::timestamptz AS "created_at!"
           FROM webhook_events WHERE fanned_out = 0 ORDER BY id LIMIT $1"#,
        i64::from(limit),
    )
    .fetch_all(pool)
    .await?)
}

async fn fan_out(
    pool: &PgPool,
    event: i64,
    targets: &[NewDelivery<'_>],
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let marked = sqlx::query!(
        "UPDATE webhook_events SET fanned_out = 1 WHERE id = $1 AND fanned_out = 0",
        event,
    )
    .execute(&mut *tx)
    .await?;
    if marked.rows_affected() == 0 {
        return Ok(false);
    }
    let now = now_text();
    for target in targets {
        let id = new_delivery_id();
        sqlx::query!(
            "INSERT INTO webhook_deliveries (id, event_id, endpoint, url, type, thread_id, data,
                                             status, attempts, next_attempt_at, created_at,
                                             updated_at)
             SELECT $1, e.id, $2, $3, e.type, e.thread_id, e.data, 'pending', 0, $4, e.created_at, $4
             FROM webhook_events e WHERE e.id = $5
             ON CONFLICT (event_id, endpoint) DO NOTHING",
            id,
            target.endpoint,
            target.url,
            now,
            event,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(true)
}

async fn claim_deliveries(
    pool: &PgPool,
    node: &str,
    now: &str,
    until: &str,
    limit: u32,
) -> Result<Vec<DeliveryRow>, StoreError> {
    Ok(sqlx::query_as!(
        DeliveryRow,
        r#"UPDATE webhook_deliveries SET claimed_by = $1, claimed_until = $2
           WHERE id IN (SELECT id FROM webhook_deliveries
                        WHERE status = 'pending' AND next_attempt_at <= $3
                              AND (claimed_until IS NULL OR claimed_until < $3)
                        ORDER BY next_attempt_at LIMIT $4
                        FOR UPDATE SKIP LOCKED)
                 AND status = 'pending' AND (claimed_until IS NULL OR claimed_until < $3)
           RETURNING id, event_id, endpoint, url, type AS kind,
                     thread_id AS "thread_id: ThreadId", data AS "data: serde_json::Value",
                     status AS "status: DeliveryStatus", attempts,
                     next_attempt_at::timestamptz AS "next_attempt_at!", last_error,
                     created_at::timestamptz AS "created_at!",
                     updated_at::timestamptz AS "updated_at!""#,
        node,
        until,
        now,
        i64::from(limit),
    )
    .fetch_all(pool)
    .await?)
}

async fn record_attempt(
    pool: &PgPool,
    delivery: &str,
    node: &str,
    attempted: Attempted<'_>,
) -> Result<(), StoreError> {
    let now = now_text();
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "INSERT INTO webhook_attempts (delivery_id, node, status_code, error, ms, at)
         VALUES ($1, $2, $3, $4, $5, $6)",
        delivery,
        node,
        attempted.status_code,
        attempted.error,
        attempted.ms,
        now,
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE webhook_deliveries
         SET status = $1, attempts = attempts + 1, next_attempt_at = $2, last_error = $3,
             claimed_by = NULL, claimed_until = NULL, updated_at = $4
         WHERE id = $5",
        attempted.then.as_str(),
        attempted.retry_at,
        attempted.error,
        now,
        delivery,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

async fn list_deliveries(
    pool: &PgPool,
    status: Option<DeliveryStatus>,
    limit: u32,
    before: Option<(&str, &str)>,
) -> Result<Vec<DeliveryRow>, StoreError> {
    let (before_at, before_id) = before.unzip();
    Ok(sqlx::query_as!(
        DeliveryRow,
        r#"SELECT id, event_id, endpoint, url, type AS kind,
                  thread_id AS "thread_id: ThreadId", data AS "data: serde_json::Value",
                  status AS "status: DeliveryStatus", attempts,
                  next_attempt_at::timestamptz AS "next_attempt_at!", last_error,
                  created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!"
           FROM webhook_deliveries WHERE ($1::text IS NULL OR status = $1)
             AND ($3::text IS NULL OR (created_at, id) < ($3, $4::text))
           ORDER BY created_at DESC, id DESC LIMIT $2"#,
        status.map(DeliveryStatus::as_str),
        i64::from(limit),
        before_at,
        before_id,
    )
    .fetch_all(pool)
    .await?)
}

async fn delivery(pool: &PgPool, id: &str) -> Result<Option<DeliveryRow>, StoreError> {
    Ok(sqlx::query_as!(
        DeliveryRow,
        r#"SELECT id, event_id, endpoint, url, type AS kind,
                  thread_id AS "thread_id: ThreadId", data AS "data: serde_json::Value",
                  status AS "status: DeliveryStatus", attempts,
                  next_attempt_at::timestamptz AS "next_attempt_at!", last_error,
                  created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!"
           FROM webhook_deliveries WHERE id = $1"#,
        id,
    )
    .fetch_optional(pool)
    .await?)
}

async fn delivery_attempts(pool: &PgPool, id: &str) -> Result<Vec<AttemptRow>, StoreError> {
    Ok(sqlx::query_as!(
        AttemptRow,
        r#"SELECT delivery_id, node, status_code, error, ms, at::timestamptz AS "at!"
           FROM webhook_attempts WHERE delivery_id = $1 ORDER BY id"#,
        id,
    )
    .fetch_all(pool)
    .await?)
}

async fn redeliver(pool: &PgPool, id: &str) -> Result<Option<DeliveryRow>, StoreError> {
    let now = now_text();
    Ok(sqlx::query_as!(
        DeliveryRow,
        r#"UPDATE webhook_deliveries
           SET status = 'pending', attempts = 0, next_attempt_at = $1, claimed_by = NULL,
               claimed_until = NULL, updated_at = $1
           WHERE id = $2
           RETURNING id, event_id, endpoint, url, type AS kind,
                     thread_id AS "thread_id: ThreadId", data AS "data: serde_json::Value",
                     status AS "status: DeliveryStatus", attempts,
                     next_attempt_at::timestamptz AS "next_attempt_at!", last_error,
                     created_at::timestamptz AS "created_at!",
                     updated_at::timestamptz AS "updated_at!""#,
        now,
        id,
    )
    .fetch_optional(pool)
    .await?)
}

async fn set_thread_callback(
    pool: &PgPool,
    thread: &ThreadId,
    url: &str,
    secret: &str,
) -> Result<(), StoreError> {
    let now = now_text();
    sqlx::query!(
        "INSERT INTO thread_callbacks (thread_id, url, secret, created_at)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (thread_id) DO UPDATE SET url = excluded.url, secret = excluded.secret",
        thread as &ThreadId,
        url,
        secret,
        now,
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn thread_callback(
    pool: &PgPool,
    thread: &ThreadId,
) -> Result<Option<ThreadCallback>, StoreError> {
    Ok(sqlx::query_as!(
        ThreadCallback,
        "SELECT url, secret FROM thread_callbacks WHERE thread_id = $1",
        thread as &ThreadId,
    )
    .fetch_optional(pool)
    .await?)
}
