//! What turns cost: a thread's sums, a UTC day's totals (`usage_days`), a thread's budget.

use chrono::{NaiveDate, Utc};
use harness_db::{now_text, MessageId, StoreError, Usage};
use plugin_contract::ThreadId;
use sqlx::{PgConnection, PgPool};

use crate::Postgres;

harness_db::usage_queries!(Postgres);

/// What its turns cost, with its model requests that no turn's cost covers.
async fn of_thread(pool: &PgPool, thread: &ThreadId) -> Result<Usage, StoreError> {
    // SUM of BIGINT is NUMERIC on PostgreSQL: cast back.
    Ok(sqlx::query_as!(
        Usage,
        r#"SELECT COALESCE(SUM(input_tokens), 0)::BIGINT AS "input_tokens!",
                  COALESCE(SUM(output_tokens), 0)::BIGINT AS "output_tokens!",
                  COALESCE(SUM(cache_read_tokens), 0)::BIGINT AS "cache_read_tokens!",
                  COALESCE(SUM(cache_write_tokens), 0)::BIGINT AS "cache_write_tokens!",
                  COALESCE(SUM(cost_usd), 0)::DOUBLE PRECISION AS "cost_usd!",
                  COALESCE(SUM(api_ms), 0)::BIGINT AS "api_ms!"
           FROM (SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                        cost_usd, api_ms
                 FROM messages WHERE thread_id = $1
                 UNION ALL
                 SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                        cost_usd, 0
                 FROM model_requests WHERE thread_id = $1 AND alone) AS spent"#,
        thread as &ThreadId,
    )
    .fetch_one(pool)
    .await?)
}

async fn of_day(pool: &PgPool, day: NaiveDate) -> Result<Usage, StoreError> {
    let day = day.format("%Y-%m-%d").to_string();
    Ok(sqlx::query_as!(
        Usage,
        r#"SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd,
                  0::BIGINT AS "api_ms!"
           FROM usage_days WHERE day = $1"#,
        day,
    )
    .fetch_optional(pool)
    .await?
    .unwrap_or_default())
}

async fn set_thread_budget(
    pool: &PgPool,
    thread: &ThreadId,
    max_budget_usd: Option<f64>,
) -> Result<(), StoreError> {
    let updated = sqlx::query!(
        "UPDATE threads SET max_budget_usd = $1, updated_at = $2 WHERE id = $3",
        max_budget_usd,
        now_text(),
        thread as &ThreadId,
    )
    .execute(pool)
    .await?
    .rows_affected();
    if updated == 0 {
        return Err(StoreError::ThreadNotFound(thread.clone()));
    }
    Ok(())
}

async fn record_delegation(
    pool: &PgPool,
    child: &ThreadId,
    parent: &ThreadId,
) -> Result<(), StoreError> {
    sqlx::query!(
        "INSERT INTO delegations (child, parent) VALUES ($1, $2) ON CONFLICT (child) DO NOTHING",
        child as &ThreadId,
        parent as &ThreadId,
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn delegators(pool: &PgPool, thread: &ThreadId) -> Result<Vec<ThreadId>, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"WITH RECURSIVE up(id, depth) AS (
               SELECT parent, 1 FROM delegations WHERE child = $1
               UNION ALL
               SELECT d.parent, up.depth + 1 FROM delegations d JOIN up ON d.child = up.id
           )
           SELECT id AS "id!: ThreadId" FROM up ORDER BY depth"#,
        thread as &ThreadId,
    )
    .fetch_all(pool)
    .await?)
}

async fn tree_cost_usd(pool: &PgPool, thread: &ThreadId) -> Result<f64, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"WITH RECURSIVE tree(id) AS (
               SELECT $1::TEXT
               UNION ALL
               SELECT d.child FROM delegations d JOIN tree ON d.parent = tree.id
           )
           SELECT (COALESCE((SELECT SUM(cost_usd) FROM messages
                             WHERE thread_id IN (SELECT id FROM tree)), 0)
                 + COALESCE((SELECT SUM(cost_usd) FROM model_requests
                             WHERE alone AND thread_id IN (SELECT id FROM tree)), 0)
                  )::DOUBLE PRECISION AS "cost!""#,
        thread as &ThreadId,
    )
    .fetch_one(pool)
    .await?)
}

/// Adds `turns` turns and `usage` to today's totals, inside the transaction that stores them:
/// one turn's, or a model request's that no turn counts (`turns` 0).
pub(crate) async fn add_to_day(
    conn: &mut PgConnection,
    usage: &Usage,
    turns: i64,
) -> Result<(), StoreError> {
    let day = Utc::now().date_naive().format("%Y-%m-%d").to_string();
    sqlx::query!(
        "INSERT INTO usage_days (day, turns, input_tokens, output_tokens, cache_read_tokens,
                                 cache_write_tokens, cost_usd)
         VALUES ($1, $7, $2, $3, $4, $5, $6)
         ON CONFLICT (day) DO UPDATE SET
             turns = usage_days.turns + excluded.turns,
             input_tokens = usage_days.input_tokens + excluded.input_tokens,
             output_tokens = usage_days.output_tokens + excluded.output_tokens,
             cache_read_tokens = usage_days.cache_read_tokens + excluded.cache_read_tokens,
             cache_write_tokens = usage_days.cache_write_tokens + excluded.cache_write_tokens,
             cost_usd = usage_days.cost_usd + excluded.cost_usd",
        day,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.cost_usd,
        turns,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Adds one turn's cost to what the caller of its user message `message` spent today, inside the
/// transaction that stores it (nothing for a message with no caller).
pub(crate) async fn add_to_caller_day(
    conn: &mut PgConnection,
    message: &MessageId,
    usage: &Usage,
) -> Result<(), StoreError> {
    let day = Utc::now().date_naive().format("%Y-%m-%d").to_string();
    sqlx::query!(
        "INSERT INTO caller_usage_days (subject, day, turns, cost_usd)
         SELECT caller_subject, $2, 1, $3 FROM messages
         WHERE id = $1 AND caller_subject IS NOT NULL
         ON CONFLICT (subject, day) DO UPDATE SET
             turns = caller_usage_days.turns + 1,
             cost_usd = caller_usage_days.cost_usd + excluded.cost_usd",
        message as &MessageId,
        day,
        usage.cost_usd,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Adds a model request's cost that no turn counts to what key `subject` spent today.
pub(crate) async fn add_to_subject_day(
    conn: &mut PgConnection,
    subject: &str,
    usage: &Usage,
) -> Result<(), StoreError> {
    let day = Utc::now().date_naive().format("%Y-%m-%d").to_string();
    sqlx::query!(
        "INSERT INTO caller_usage_days (subject, day, turns, cost_usd)
         VALUES ($1, $2, 0, $3)
         ON CONFLICT (subject, day) DO UPDATE SET
             cost_usd = caller_usage_days.cost_usd + excluded.cost_usd",
        subject,
        day,
        usage.cost_usd,
    )
    .execute(conn)
    .await?;
    Ok(())
}
