//! `api_keys` and `caller_usage_days`; see [`harness_db::KeyQueries`].

use chrono::{DateTime, NaiveDate, Utc};
use harness_db::{now_text, KeyRow, NewKey, StoreError};
use sqlx::SqlitePool;

use crate::Sqlite;

harness_db::key_queries!(Sqlite);

async fn create_key(pool: &SqlitePool, key: NewKey<'_>) -> Result<KeyRow, StoreError> {
    let now = now_text();
    Ok(sqlx::query_as!(
        KeyRow,
        r#"INSERT INTO api_keys (id, hash, tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                                created_at)
           VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
           RETURNING id AS "id!", tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                     created_at AS "created_at: DateTime<Utc>",
                     revoked_at AS "revoked_at: DateTime<Utc>""#,
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

async fn live_key(pool: &SqlitePool, hash: &str) -> Result<Option<KeyRow>, StoreError> {
    Ok(sqlx::query_as!(
        KeyRow,
        r#"SELECT id AS "id!", tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                  created_at AS "created_at: DateTime<Utc>",
                  revoked_at AS "revoked_at: DateTime<Utc>"
           FROM api_keys WHERE hash = ?1 AND revoked_at IS NULL"#,
        hash,
    )
    .fetch_optional(pool)
    .await?)
}

async fn key(pool: &SqlitePool, id: &str) -> Result<Option<KeyRow>, StoreError> {
    Ok(sqlx::query_as!(
        KeyRow,
        r#"SELECT id AS "id!", tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                  created_at AS "created_at: DateTime<Utc>",
                  revoked_at AS "revoked_at: DateTime<Utc>"
           FROM api_keys WHERE id = ?1"#,
        id,
    )
    .fetch_optional(pool)
    .await?)
}

async fn list_keys(pool: &SqlitePool) -> Result<Vec<KeyRow>, StoreError> {
    Ok(sqlx::query_as!(
        KeyRow,
        r#"SELECT id AS "id!", tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                  created_at AS "created_at: DateTime<Utc>",
                  revoked_at AS "revoked_at: DateTime<Utc>"
           FROM api_keys ORDER BY created_at, id"#,
    )
    .fetch_all(pool)
    .await?)
}

async fn revoke_key(pool: &SqlitePool, id: &str) -> Result<Option<KeyRow>, StoreError> {
    let now = now_text();
    Ok(sqlx::query_as!(
        KeyRow,
        r#"UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1
           RETURNING id AS "id!", tenant, scopes, daily_usd, max_concurrent_turns, rpm,
                     created_at AS "created_at: DateTime<Utc>",
                     revoked_at AS "revoked_at: DateTime<Utc>""#,
        id,
        now,
    )
    .fetch_optional(pool)
    .await?)
}

async fn caller_day_cost(
    pool: &SqlitePool,
    subject: &str,
    day: NaiveDate,
) -> Result<f64, StoreError> {
    let day = day.format("%Y-%m-%d").to_string();
    Ok(sqlx::query_scalar!(
        r#"SELECT cost_usd AS "cost_usd!: f64" FROM caller_usage_days
           WHERE subject = ?1 AND day = ?2"#,
        subject,
        day,
    )
    .fetch_optional(pool)
    .await?
    .unwrap_or(0.0))
}
