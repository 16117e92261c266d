//! What turns cost: the sums of a thread's per-message usage, the totals of a UTC day (kept in
//! `usage_days`, written in the same transaction as each turn's usage), and the thread's own
//! budget.

use chrono::{NaiveDate, Utc};
use plugin_contract::ThreadId;

use super::{Db, Store, StoreError, Usage};

impl Store {
    /// The sums over every message of the thread (replies, and failed turns that reached the
    /// API). Zero for a thread with no turns yet, or an unknown one.
    pub async fn thread_usage(&self, thread: &ThreadId) -> Result<Usage, StoreError> {
        let _timer = self.metrics.time("thread_usage");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => return postgres::thread_usage(pool, thread).await,
        };
        let thread = thread.as_str();
        let row = sqlx::query!(
            r#"SELECT COALESCE(SUM(input_tokens), 0) AS "input!: i64",
                      COALESCE(SUM(output_tokens), 0) AS "output!: i64",
                      COALESCE(SUM(cache_read_tokens), 0) AS "cache_read!: i64",
                      COALESCE(SUM(cache_write_tokens), 0) AS "cache_write!: i64",
                      COALESCE(SUM(cost_usd), 0.0) AS "cost!: f64",
                      COALESCE(SUM(api_ms), 0) AS "api_ms!: i64"
               FROM messages WHERE thread_id = ?1"#,
            thread,
        )
        .fetch_one(pool)
        .await?;
        Ok(Usage {
            input_tokens: row.input,
            output_tokens: row.output,
            cache_read_tokens: row.cache_read,
            cache_write_tokens: row.cache_write,
            cost_usd: row.cost,
            api_ms: row.api_ms,
        })
    }

    /// The totals of turns that ended on `day` (UTC); zero for a day without turns. `api_ms` is
    /// not kept per day and is zero.
    pub async fn day_usage(&self, day: NaiveDate) -> Result<Usage, StoreError> {
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => return postgres::day_usage(pool, day).await,
        };
        let day = day.format("%Y-%m-%d").to_string();
        let row = sqlx::query!(
            r#"SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                      cost_usd AS "cost_usd: f64"
               FROM usage_days WHERE day = ?1"#,
            day,
        )
        .fetch_optional(pool)
        .await?;
        Ok(row
            .map(|row| Usage {
                input_tokens: row.input_tokens,
                output_tokens: row.output_tokens,
                cache_read_tokens: row.cache_read_tokens,
                cache_write_tokens: row.cache_write_tokens,
                cost_usd: row.cost_usd,
                api_ms: 0,
            })
            .unwrap_or_default())
    }

    /// Sets (or with `None` removes) the thread's own budget. [`StoreError::ThreadNotFound`] for
    /// an unknown thread.
    pub async fn set_thread_budget(
        &self,
        id: &ThreadId,
        max_budget_usd: Option<f64>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("set_thread_budget");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::set_thread_budget(pool, id, max_budget_usd).await
            }
        };
        let id_text = id.as_str();
        let now = super::now_text();
        let done = sqlx::query!(
            "UPDATE threads SET max_budget_usd = ?1, updated_at = ?2 WHERE id = ?3",
            max_budget_usd,
            now,
            id_text,
        )
        .execute(pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::ThreadNotFound(id.clone()));
        }
        Ok(())
    }
}

/// Adds one turn's usage to today's totals, inside the transaction that stores it.
pub(super) async fn add_to_day(
    tx: &mut sqlx::SqliteConnection,
    usage: &Usage,
) -> Result<(), StoreError> {
    let day = Utc::now().date_naive().format("%Y-%m-%d").to_string();
    sqlx::query!(
        "INSERT INTO usage_days (day, turns, input_tokens, output_tokens, cache_read_tokens,
                                 cache_write_tokens, cost_usd)
         VALUES (?1, 1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (day) DO UPDATE SET
             turns = turns + 1,
             input_tokens = input_tokens + excluded.input_tokens,
             output_tokens = output_tokens + excluded.output_tokens,
             cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
             cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
             cost_usd = cost_usd + excluded.cost_usd",
        day,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.cost_usd,
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// [`add_to_day`] on PostgreSQL.
pub(super) async fn pg_add_to_day(
    tx: &mut sqlx::PgConnection,
    usage: &Usage,
) -> Result<(), StoreError> {
    let day = Utc::now().date_naive().format("%Y-%m-%d").to_string();
    sqlx::query(
        "INSERT INTO usage_days (day, turns, input_tokens, output_tokens, cache_read_tokens,
                                 cache_write_tokens, cost_usd)
         VALUES ($1, 1, $2, $3, $4, $5, $6)
         ON CONFLICT (day) DO UPDATE SET
             turns = usage_days.turns + 1,
             input_tokens = usage_days.input_tokens + excluded.input_tokens,
             output_tokens = usage_days.output_tokens + excluded.output_tokens,
             cache_read_tokens = usage_days.cache_read_tokens + excluded.cache_read_tokens,
             cache_write_tokens = usage_days.cache_write_tokens + excluded.cache_write_tokens,
             cost_usd = usage_days.cost_usd + excluded.cost_usd",
    )
    .bind(day)
    .bind(usage.input_tokens)
    .bind(usage.output_tokens)
    .bind(usage.cache_read_tokens)
    .bind(usage.cache_write_tokens)
    .bind(usage.cost_usd)
    .execute(tx)
    .await?;
    Ok(())
}

/// The same operations on PostgreSQL, in the order of `impl Store` above.
mod postgres {
    use chrono::NaiveDate;
    use plugin_contract::ThreadId;
    use sqlx::postgres::PgRow;
    use sqlx::{PgPool, Row};

    use super::super::{now_text, StoreError, Usage};

    fn usage(row: &PgRow) -> Result<Usage, StoreError> {
        Ok(Usage {
            input_tokens: row.try_get("input_tokens")?,
            output_tokens: row.try_get("output_tokens")?,
            cache_read_tokens: row.try_get("cache_read_tokens")?,
            cache_write_tokens: row.try_get("cache_write_tokens")?,
            cost_usd: row.try_get("cost_usd")?,
            api_ms: row.try_get("api_ms")?,
        })
    }

    pub(super) async fn thread_usage(
        pool: &PgPool,
        thread: &ThreadId,
    ) -> Result<Usage, StoreError> {
        // SUM of BIGINT is NUMERIC on PostgreSQL: cast back.
        let row = sqlx::query(
            "SELECT COALESCE(SUM(input_tokens), 0)::BIGINT AS input_tokens,
                    COALESCE(SUM(output_tokens), 0)::BIGINT AS output_tokens,
                    COALESCE(SUM(cache_read_tokens), 0)::BIGINT AS cache_read_tokens,
                    COALESCE(SUM(cache_write_tokens), 0)::BIGINT AS cache_write_tokens,
                    COALESCE(SUM(cost_usd), 0)::DOUBLE PRECISION AS cost_usd,
                    COALESCE(SUM(api_ms), 0)::BIGINT AS api_ms
             FROM messages WHERE thread_id = $1",
        )
        .bind(thread.as_str())
        .fetch_one(pool)
        .await?;
        usage(&row)
    }

    pub(super) async fn day_usage(pool: &PgPool, day: NaiveDate) -> Result<Usage, StoreError> {
        let day = day.format("%Y-%m-%d").to_string();
        sqlx::query(
            "SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd,
                    0::BIGINT AS api_ms
             FROM usage_days WHERE day = $1",
        )
        .bind(day)
        .fetch_optional(pool)
        .await?
        .map(|row| usage(&row))
        .transpose()
        .map(Option::unwrap_or_default)
    }

    pub(super) async fn set_thread_budget(
        pool: &PgPool,
        id: &ThreadId,
        max_budget_usd: Option<f64>,
    ) -> Result<(), StoreError> {
        let updated =
            sqlx::query("UPDATE threads SET max_budget_usd = $1, updated_at = $2 WHERE id = $3")
                .bind(max_budget_usd)
                .bind(now_text())
                .bind(id.as_str())
                .execute(pool)
                .await?
                .rows_affected();
        if updated == 0 {
            return Err(StoreError::ThreadNotFound(id.clone()));
        }
        Ok(())
    }
}
