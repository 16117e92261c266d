//! What turns cost: the sums of a thread's per-message usage, the totals of a UTC day (kept in
//! `usage_days`, written in the same transaction as each turn's usage), and the thread's own
//! budget.

use chrono::{NaiveDate, Utc};
use plugin_contract::ThreadId;

use super::{on_db, Backends, UsageQueries, Store, StoreError, Usage};

impl Store {
    /// The sums over every message of the thread (replies, and failed turns that reached the
    /// API). Zero for a thread with no turns yet, or an unknown one.
    pub async fn thread_usage(&self, thread: &ThreadId) -> Result<Usage, StoreError> {
        let _timer = self.metrics.time("thread_usage");
        on_db!(self, db => db.thread_usage(thread).await)
    }

    /// The totals of turns that ended on `day` (UTC); zero for a day without turns. `api_ms` is
    /// not kept per day and is zero.
    pub async fn day_usage(&self, day: NaiveDate) -> Result<Usage, StoreError> {
        let _timer = self.metrics.time("day_usage");
        on_db!(self, db => db.day_usage(day).await)
    }

    /// Sets (or with `None` removes) the thread's own budget. [`StoreError::ThreadNotFound`] for
    /// an unknown thread.
    pub async fn set_thread_budget(
        &self,
        id: &ThreadId,
        max_budget_usd: Option<f64>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("set_thread_budget");
        on_db!(self, db => db.set_thread_budget(id, max_budget_usd).await)
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
