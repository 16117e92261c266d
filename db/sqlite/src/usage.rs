//! What turns cost: a thread's sums, a UTC day's totals (`usage_days`), a thread's budget.

use chrono::{NaiveDate, Utc};
use harness_db::{now_text, MessageId, StoreError, Usage};
use plugin_contract::ThreadId;
use sqlx::{SqliteConnection, SqlitePool};

use crate::Sqlite;

harness_db::usage_queries!(Sqlite);

/// What its turns cost, with its model requests that no turn's cost covers.
async fn of_thread(pool: &SqlitePool, thread: &ThreadId) -> Result<Usage, StoreError> {
    Ok(sqlx::query_as!(
        Usage,
        r#"SELECT COALESCE(SUM(input_tokens), 0) AS "input_tokens!: i64",
                  COALESCE(SUM(output_tokens), 0) AS "output_tokens!: i64",
                  COALESCE(SUM(cache_read_tokens), 0) AS "cache_read_tokens!: i64",
                  COALESCE(SUM(cache_write_tokens), 0) AS "cache_write_tokens!: i64",
                  COALESCE(SUM(cost_usd), 0.0) AS "cost_usd!: f64",
                  COALESCE(SUM(api_ms), 0) AS "api_ms!: i64"
           FROM (SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                        cost_usd, api_ms
                 FROM messages WHERE thread_id = ?1
                 UNION ALL
                 SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                        cost_usd, 0
                 FROM model_requests WHERE thread_id = ?1 AND alone = 1)"#,
        thread,
    )
    .fetch_one(pool)
    .await?)
}

async fn of_day(pool: &SqlitePool, day: NaiveDate) -> Result<Usage, StoreError> {
    let day = day.format("%Y-%m-%d").to_string();
    Ok(sqlx::query_as!(
        Usage,
        r#"SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                  cost_usd AS "cost_usd: f64", 0 AS "api_ms!: i64"
           FROM usage_days WHERE day = ?1"#,
        day,
    )
    .fetch_optional(pool)
    .await?
    .unwrap_or_default())
}

async fn set_thread_budget(
    pool: &SqlitePool,
    thread: &ThreadId,
    max_budget_usd: Option<f64>,
) -> Result<(), StoreError> {
    let now = now_text();
    let done = sqlx::query!(
        "UPDATE threads SET max_budget_usd = ?1, updated_at = ?2 WHERE id = ?3",
        max_budget_usd,
        now,
        thread,
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::ThreadNotFound(thread.clone()));
    }
    Ok(())
}

async fn record_delegation(
    pool: &SqlitePool,
    child: &ThreadId,
    parent: &ThreadId,
) -> Result<(), StoreError> {
    sqlx::query!(
        "INSERT INTO delegations (child, parent) VALUES (?1, ?2) ON CONFLICT (child) DO NOTHING",
        child,
        parent,
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn delegators(pool: &SqlitePool, thread: &ThreadId) -> Result<Vec<ThreadId>, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"WITH RECURSIVE up(id, depth) AS (
               SELECT parent, 1 FROM delegations WHERE child = ?1
               UNION ALL
               SELECT d.parent, up.depth + 1 FROM delegations d JOIN up ON d.child = up.id
           )
           SELECT id AS "id!: ThreadId" FROM up ORDER BY depth"#,
        thread,
    )
    .fetch_all(pool)
    .await?)
}

async fn tree_cost_usd(pool: &SqlitePool, thread: &ThreadId) -> Result<f64, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"WITH RECURSIVE tree(id) AS (
               SELECT ?1
               UNION ALL
               SELECT d.child FROM delegations d JOIN tree ON d.parent = tree.id
           )
           SELECT COALESCE((SELECT SUM(cost_usd) FROM messages
                            WHERE thread_id IN (SELECT id FROM tree)), 0.0)
                + COALESCE((SELECT SUM(cost_usd) FROM model_requests
                            WHERE alone = 1 AND thread_id IN (SELECT id FROM tree)), 0.0)
               AS "cost!: f64""#,
        thread,
    )
    .fetch_one(pool)
    .await?)
}

/// Adds `turns` turns and `usage` to today's totals, inside the transaction that stores them:
/// one turn's, or a model request's that no turn counts (`turns` 0).
pub(crate) async fn add_to_day(
    conn: &mut SqliteConnection,
    usage: &Usage,
    turns: i64,
) -> Result<(), StoreError> {
    let day = Utc::now().date_naive().format("%Y-%m-%d").to_string();
    sqlx::query!(
        "INSERT INTO usage_days (day, turns, input_tokens, output_tokens, cache_read_tokens,
                                 cache_write_tokens, cost_usd)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (day) DO UPDATE SET
             turns = turns + excluded.turns,
             input_tokens = input_tokens + excluded.input_tokens,
             output_tokens = output_tokens + excluded.output_tokens,
             cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
             cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
             cost_usd = cost_usd + excluded.cost_usd",
        day,
        turns,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.cost_usd,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Adds one turn's cost to what the caller of its user message `message` spent today, inside the
/// transaction that stores it (nothing for a message with no caller).
pub(crate) async fn add_to_caller_day(
    conn: &mut SqliteConnection,
    message: &MessageId,
    usage: &Usage,
) -> Result<(), StoreError> {
    let day = Utc::now().date_naive().format("%Y-%m-%d").to_string();
    sqlx::query!(
        "INSERT INTO caller_usage_days (subject, day, turns, cost_usd)
         SELECT caller_subject, ?2, 1, ?3 FROM messages
         WHERE id = ?1 AND caller_subject IS NOT NULL
         ON CONFLICT (subject, day) DO UPDATE SET
             turns = turns + 1,
             cost_usd = cost_usd + excluded.cost_usd",
        message,
        day,
        usage.cost_usd,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Adds a model request's cost that no turn counts to what key `subject` spent today.
pub(crate) async fn add_to_subject_day(
    conn: &mut SqliteConnection,
    subject: &str,
    usage: &Usage,
) -> Result<(), StoreError> {
    let day = Utc::now().date_naive().format("%Y-%m-%d").to_string();
    sqlx::query!(
        "INSERT INTO caller_usage_days (subject, day, turns, cost_usd)
         VALUES (?1, ?2, 0, ?3)
         ON CONFLICT (subject, day) DO UPDATE SET cost_usd = cost_usd + excluded.cost_usd",
        subject,
        day,
        usage.cost_usd,
    )
    .execute(conn)
    .await?;
    Ok(())
}
