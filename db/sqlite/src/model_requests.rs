//! `model_requests`: the model gateway's record of each model request.

use chrono::{DateTime, Utc};
use harness_db::{now_text, MessageId, ModelRequestRow, NewModelRequest, StoreError, Usage};
use plugin_contract::ThreadId;
use sqlx::SqlitePool;

use crate::usage::{add_to_day, add_to_subject_day};
use crate::Sqlite;

harness_db::model_request_queries!(Sqlite);

async fn insert(pool: &SqlitePool, r: &NewModelRequest) -> Result<i64, StoreError> {
    let now = now_text();
    let mut tx = pool.begin().await?;
    let id = sqlx::query_scalar!(
        r#"INSERT INTO model_requests (thread_id, message_id, model, status, input_tokens,
               output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, first_byte_ms, ms,
               key_id, alone, created_at)
           VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
           RETURNING id AS "id!""#,
        r.thread_id,
        r.message_id,
        r.model,
        r.status,
        r.input_tokens,
        r.output_tokens,
        r.cache_read_tokens,
        r.cache_write_tokens,
        r.cost_usd,
        r.first_byte_ms,
        r.ms,
        r.key_id,
        r.alone,
        now,
    )
    .fetch_one(&mut *tx)
    .await?;
    if r.alone {
        let usage = Usage {
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cache_read_tokens: r.cache_read_tokens,
            cache_write_tokens: r.cache_write_tokens,
            cost_usd: r.cost_usd,
            api_ms: 0,
        };
        add_to_day(&mut tx, &usage, 0).await?;
        if let Some(key) = &r.key_id {
            add_to_subject_day(&mut tx, key, &usage).await?;
        }
    }
    tx.commit().await?;
    Ok(id)
}

async fn of_message(
    pool: &SqlitePool,
    message: &MessageId,
) -> Result<Vec<ModelRequestRow>, StoreError> {
    Ok(sqlx::query_as!(
        ModelRequestRow,
        r#"SELECT id AS "id!", thread_id AS "thread_id: ThreadId",
                  message_id AS "message_id: MessageId", model, status, input_tokens,
                  output_tokens, cache_read_tokens, cache_write_tokens,
                  cost_usd AS "cost_usd: f64", first_byte_ms, ms, key_id, alone AS "alone: bool",
                  created_at AS "created_at: DateTime<Utc>"
           FROM model_requests WHERE message_id = ?1 ORDER BY id"#,
        message,
    )
    .fetch_all(pool)
    .await?)
}
