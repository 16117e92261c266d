//! What turns cost: the sums of a thread's per-message usage, the totals of a UTC day (kept in
//! `usage_days`, written in the same transaction as each turn's usage), and the thread's own
//! budget.

use chrono::{NaiveDate, Utc};
use plugin_contract::ThreadId;

use super::{Store, StoreError, Usage};

impl Store {
    /// The sums over every message of the thread (replies, and failed turns that reached the
    /// API). Zero for a thread with no turns yet, or an unknown one.
    pub async fn thread_usage(&self, thread: &ThreadId) -> Result<Usage, StoreError> {
        let _timer = self.metrics.time("thread_usage");
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
        .fetch_one(&self.pool)
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
        let day = day.format("%Y-%m-%d").to_string();
        let row = sqlx::query!(
            r#"SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                      cost_usd AS "cost_usd: f64"
               FROM usage_days WHERE day = ?1"#,
            day,
        )
        .fetch_optional(&self.pool)
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
        let id_text = id.as_str();
        let now = super::now_text();
        let done = sqlx::query!(
            "UPDATE threads SET max_budget_usd = ?1, updated_at = ?2 WHERE id = ?3",
            max_budget_usd,
            now,
            id_text,
        )
        .execute(&self.pool)
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
