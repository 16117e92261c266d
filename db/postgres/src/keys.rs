//! `api_keys` and `caller_usage_days`; see [`harness_db::KeyQueries`].

use chrono::NaiveDate;
use harness_db::{now_text, KeyRow, NewKey, StoreError};
use sqlx::PgPool;

use crate::Postgres;

harness_db::key_queries!(Postgres);

async fn create_key(pool: &PgPool, key: NewKey<'_>) -> Result<KeyRow, StoreError> {
    let now = now_text();
    Ok(sqlx::query_as!(
        KeyRow,
        r#"INSERT INTO api_keys (id, hash, tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                                created_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           RETURNING id, tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                     created_at::timestamptz AS "created_at!",
                     revoked_at::timestamptz AS "revoked_at""#,
        key.id,
        key.hash,
        key.tenant,
        key.scopes,
        key.daily_usd,
        key.max_concurrent_turns,
        key.rpm,
        now,
    )
    .fetch_one(pool)
    .await?)
}

async fn live_key(pool: &PgPool, hash: &str) -> Result<Option<KeyRow>, StoreError> {
    Ok(sqlx::query_as!(
        KeyRow,
        r#"SELECT id, tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                  created_at::timestamptz AS "created_at!",
                  revoked_at::timestamptz AS "revoked_at"
           FROM api_keys WHERE hash = $1 AND revoked_at IS NULL"#,
        hash,
    )
    .fetch_optional(pool)
    .await?)
}

async fn key(pool: &PgPool, id: &str) -> Result<Option<KeyRow>, StoreError> {
    Ok(sqlx::query_as!(
        KeyRow,
        r#"SELECT id, tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                  created_at::timestamptz AS "created_at!",
                  revoked_at::timestamptz AS "revoked_at"
           FROM api_keys WHERE id = $1"#,
        id,
    )
    .fetch_optional(pool)
    .await?)
}

async fn list_keys(pool: &PgPool) -> Result<Vec<KeyRow>, StoreError> {
    Ok(sqlx::query_as!(
        KeyRow,
        r#"SELECT id, tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                  created_at::timestamptz AS "created_at!",
                  revoked_at::timestamptz AS "revoked_at"
           FROM api_keys ORDER BY created_at, id"#,
    )
    .fetch_all(pool)
    .await?)
}

async fn revoke_key(pool: &PgPool, id: &str) -> Result<Option<KeyRow>, StoreError> {
    let now = now_text();
    Ok(sqlx::query_as!(
        KeyRow,
        r#"UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1
           RETURNING id, tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                     created_at::timestamptz AS "created_at!",
                     revoked_at::timestamptz AS "revoked_at""#,
        id,
        now,
    )
    .fetch_optional(pool)
    .await?)
}

async fn caller_day_cost(pool: &PgPool, subject: &str, day: NaiveDate) -> Result<f64, StoreError> {
    let day = day.format("%Y-%m-%d").to_string();
    Ok(sqlx::query_scalar!(
        r#"SELECT cost_usd AS "cost_usd!: f64" FROM caller_usage_days
           WHERE subject = $1 AND day = $2"#,
        subject,
        day,
    )
    .fetch_optional(pool)
    .await?
    .unwrap_or(0.0))
}
