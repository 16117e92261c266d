//! `schedules` and `schedule_runs`; see [`harness_db::ScheduleQueries`]. A tick's claim is an
//! UPDATE that compares `next_run_at` under the row's lock: of two claims of one tick, the second
//! finds it moved and writes nothing.

use harness_db::{
    is_unique_violation, now_text, CatchUp, MessageId, MessageStatus, NewRun, NewSchedule, Overlap,
    RunStatus, RunTrigger, ScheduleRow, ScheduleRunRow, StoreError,
};
use plugin_contract::ThreadId;
use sqlx::{PgConnection, PgPool};

use crate::Postgres;

harness_db::schedule_queries!(Postgres);

async fn create_schedule(
    pool: &PgPool,
    id: &str,
    new: NewSchedule<'_>,
) -> Result<ScheduleRow, StoreError> {
    let now = now_text();
    let (overlap, catch_up) = (new.overlap.as_str(), new.catch_up.as_str());
    Ok(sqlx::query_as!(
        ScheduleRow,
        r#"INSERT INTO schedules (id, name, cron, timezone, thread_id, template, prompt, overlap,
                                 catch_up, enabled, next_run_at, created_at, updated_at, tenant,
                                 created_by)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, $14)
           RETURNING id AS "id!", name, cron, timezone, thread_id AS "thread_id: ThreadId",
                     template AS "template: serde_json::Value", prompt, tenant, created_by,
                     overlap AS "overlap: Overlap", catch_up AS "catch_up: CatchUp",
                     enabled,
                     next_run_at::timestamptz AS "next_run_at!",
                     created_at::timestamptz AS "created_at!",
                     updated_at::timestamptz AS "updated_at!""#,
        id,
        new.name,
        new.cron,
        new.timezone,
        new.thread_id as Option<&ThreadId>,
        new.template.map(serde_json::Value::to_string),
        new.prompt,
        overlap,
        catch_up,
        new.enabled,
        new.next_run_at,
        now,
        new.tenant,
        new.created_by,
    )
    .fetch_one(pool)
    .await?)
}

async fn schedule(pool: &PgPool, id: &str) -> Result<Option<ScheduleRow>, StoreError> {
    Ok(sqlx::query_as!(
        ScheduleRow,
        r#"SELECT id AS "id!", name, cron, timezone, thread_id AS "thread_id: ThreadId",
                  template AS "template: serde_json::Value", prompt, tenant, created_by,
                  overlap AS "overlap: Overlap", catch_up AS "catch_up: CatchUp",
                  enabled, next_run_at::timestamptz AS "next_run_at!",
                  created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!"
           FROM schedules WHERE id = $1 AND deleted = FALSE"#,
        id,
    )
    .fetch_optional(pool)
    .await?)
}

async fn list_schedules(pool: &PgPool) -> Result<Vec<ScheduleRow>, StoreError> {
    Ok(sqlx::query_as!(
        ScheduleRow,
        r#"SELECT id AS "id!", name, cron, timezone, thread_id AS "thread_id: ThreadId",
                  template AS "template: serde_json::Value", prompt, tenant, created_by,
                  overlap AS "overlap: Overlap", catch_up AS "catch_up: CatchUp",
                  enabled, next_run_at::timestamptz AS "next_run_at!",
                  created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!"
           FROM schedules WHERE deleted = FALSE ORDER BY created_at, id"#,
    )
    .fetch_all(pool)
    .await?)
}

async fn update_schedule(
    pool: &PgPool,
    id: &str,
    new: NewSchedule<'_>,
) -> Result<Option<ScheduleRow>, StoreError> {
    let now = now_text();
    let (overlap, catch_up) = (new.overlap.as_str(), new.catch_up.as_str());
    Ok(sqlx::query_as!(
        ScheduleRow,
        r#"UPDATE schedules SET name = $2, cron = $3, timezone = $4, thread_id = $5,
                  template = $6, prompt = $7, overlap = $8, catch_up = $9, enabled = $10,
                  next_run_at = $11, updated_at = $12
           WHERE id = $1 AND deleted = FALSE
           RETURNING id AS "id!", name, cron, timezone, thread_id AS "thread_id: ThreadId",
                     template AS "template: serde_json::Value", prompt, tenant, created_by,
                     overlap AS "overlap: Overlap", catch_up AS "catch_up: CatchUp",
                     enabled,
                     next_run_at::timestamptz AS "next_run_at!",
                     created_at::timestamptz AS "created_at!",
                     updated_at::timestamptz AS "updated_at!""#,
        id,
        new.name,
        new.cron,
        new.timezone,
        new.thread_id as Option<&ThreadId>,
        new.template.map(serde_json::Value::to_string),
        new.prompt,
        overlap,
        catch_up,
        new.enabled,
        new.next_run_at,
        now,
    )
    .fetch_optional(pool)
    .await?)
}

async fn delete_schedule(pool: &PgPool, id: &str) -> Result<bool, StoreError> {
    let now = now_text();
    let done = sqlx::query!(
        "UPDATE schedules SET deleted = TRUE, enabled = FALSE, updated_at = $2
         WHERE id = $1 AND deleted = FALSE",
        id,
        now,
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

async fn due_schedules(
    pool: &PgPool,
    now: &str,
    limit: u32,
) -> Result<Vec<ScheduleRow>, StoreError> {
    Ok(sqlx::query_as!(
        ScheduleRow,
        r#"SELECT id AS "id!", name, cron, timezone, thread_id AS "thread_id: ThreadId",
                  template AS "template: serde_json::Value", prompt, tenant, created_by,
                  overlap AS "overlap: Overlap", catch_up AS "catch_up: CatchUp",
                  enabled, next_run_at::timestamptz AS "next_run_at!",
                  created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!"
           FROM schedules WHERE enabled = TRUE AND deleted = FALSE AND next_run_at <= $1
           ORDER BY next_run_at LIMIT $2"#,
        now,
        i64::from(limit),
    )
    .fetch_all(pool)
    .await?)
}

async fn claim_tick(
    pool: &PgPool,
    schedule: &str,
    seen: &str,
    next: &str,
    run: NewRun<'_>,
) -> Result<Option<i64>, StoreError> {
    let now = now_text();
    let mut tx = pool.begin().await?;
    let moved = sqlx::query!(
        "UPDATE schedules SET next_run_at = $3, updated_at = $4
         WHERE id = $1 AND next_run_at = $2 AND enabled = TRUE AND deleted = FALSE",
        schedule,
        seen,
        next,
        now,
    )
    .execute(&mut *tx)
    .await?;
    if moved.rows_affected() == 0 {
        return Ok(None);
    }
    match insert_run(&mut tx, schedule, run).await {
        Ok(id) => {
            tx.commit().await?;
            Ok(Some(id))
        }
        Err(StoreError::Db(err)) if is_unique_violation(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

async fn record_run(pool: &PgPool, schedule: &str, run: NewRun<'_>) -> Result<i64, StoreError> {
    let mut conn = pool.acquire().await?;
    insert_run(&mut conn, schedule, run).await
}

async fn insert_run(
    conn: &mut PgConnection,
    schedule: &str,
    run: NewRun<'_>,
) -> Result<i64, StoreError> {
    let now = now_text();
    let (trigger, status) = (run.trigger.as_str(), run.status.as_str());
    Ok(sqlx::query_scalar!(
        r#"INSERT INTO schedule_runs (schedule_id, trigger, due_at, status, reason, node,
                                     created_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id AS "id!""#,
        schedule,
        trigger,
        run.due_at,
        status,
        run.reason,
        run.node,
        now,
    )
    .fetch_one(conn)
    .await?)
}

async fn run_sent(
    pool: &PgPool,
    run: i64,
    thread: &ThreadId,
    message: &MessageId,
) -> Result<(), StoreError> {
    sqlx::query!(
        "UPDATE schedule_runs SET thread_id = $2, message_id = $3 WHERE id = $1",
        run,
        thread as &ThreadId,
        message as &MessageId,
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn run_failed(
    pool: &PgPool,
    run: i64,
    thread: Option<&ThreadId>,
    reason: &str,
) -> Result<(), StoreError> {
    sqlx::query!(
        "UPDATE schedule_runs SET status = 'failed', reason = $2,
                thread_id = COALESCE($3, thread_id)
         WHERE id = $1",
        run,
        reason,
        thread as Option<&ThreadId>,
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn schedule_runs(
    pool: &PgPool,
    schedule: &str,
    limit: u32,
) -> Result<Vec<ScheduleRunRow>, StoreError> {
    Ok(sqlx::query_as!(
        ScheduleRunRow,
        r#"SELECT r.id AS "id!", r.schedule_id, r.trigger AS "trigger: RunTrigger",
                  r.due_at::timestamptz AS "due_at!", r.status AS "status: RunStatus",
                  r.reason, r.thread_id AS "thread_id: ThreadId",
                  r.message_id AS "message_id: MessageId",
                  m.status AS "message_status?: MessageStatus", r.node,
                  r.created_at::timestamptz AS "created_at!"
           FROM schedule_runs r LEFT JOIN messages m ON m.id = r.message_id
           WHERE r.schedule_id = $1 ORDER BY r.id DESC LIMIT $2"#,
        schedule,
        i64::from(limit),
    )
    .fetch_all(pool)
    .await?)
}

async fn running_run(pool: &PgPool, schedule: &str) -> Result<Option<i64>, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT r.id AS "id!" FROM schedule_runs r JOIN messages m ON m.id = r.message_id
           WHERE r.schedule_id = $1 AND r.status = 'started' AND m.status = 'pending'
           ORDER BY r.id DESC LIMIT 1"#,
        schedule,
    )
    .fetch_optional(pool)
    .await?)
}
