//! `goals`; see [`harness_db::GoalQueries`].

use harness_db::{now_text, GoalChange, GoalRow, MessageId, NewGoal, StoreError, GOAL_TURN_PREFIX};
use plugin_contract::ThreadId;
use sqlx::PgPool;

use crate::Postgres;

harness_db::goal_queries!(Postgres);

async fn insert_goal(pool: &PgPool, new: NewGoal<'_>) -> Result<Option<GoalRow>, StoreError> {
    let now = now_text();
    // Selecting FROM threads turns an unknown thread into "no row"; the unique index
    // `goals_unfinished` refuses a second unfinished goal, and NOT EXISTS avoids asking it.
    let done = sqlx::query!(
        "INSERT INTO goals (id, thread_id, description, rubric, max_iterations, iteration, state,
                            created_at, updated_at)
         SELECT $1, t.id, $3, $4, $5, 0, 'working', $6, $6 FROM threads t
         WHERE t.id = $2
           AND NOT EXISTS (SELECT 1 FROM goals g WHERE g.thread_id = $2 AND g.finished_at IS NULL)",
        new.id,
        new.thread_id as &ThreadId,
        new.description,
        new.rubric,
        new.max_iterations,
        now,
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(None);
    }
    goal(pool, new.id).await
}

/// Which goals [`select`] reads: one, a thread's, or every unfinished one.
#[derive(Clone, Copy, Default)]
struct Which<'a> {
    id: Option<&'a str>,
    thread: Option<&'a ThreadId>,
    unfinished: bool,
}

async fn select(pool: &PgPool, which: Which<'_>) -> Result<Vec<GoalRow>, StoreError> {
    let thread = which.thread.map(ThreadId::as_str);
    Ok(sqlx::query_as!(
        GoalRow,
        r#"SELECT id AS "id!", thread_id AS "thread_id!: ThreadId", description AS "description!",
                  rubric AS "rubric!", max_iterations AS "max_iterations!",
                  iteration AS "iteration!", state AS "state!", explanation AS "explanation?",
                  created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!",
                  finished_at::timestamptz AS "finished_at?"
           FROM goals
           WHERE ($1::text IS NULL OR id = $1) AND ($2::text IS NULL OR thread_id = $2)
             AND (NOT $3 OR finished_at IS NULL)
           ORDER BY created_at, id"#,
        which.id,
        thread,
        which.unfinished,
    )
    .fetch_all(pool)
    .await?)
}

async fn goal(pool: &PgPool, id: &str) -> Result<Option<GoalRow>, StoreError> {
    let which = Which {
        id: Some(id),
        ..Which::default()
    };
    Ok(select(pool, which).await?.pop())
}

async fn goals_of(pool: &PgPool, thread: &ThreadId) -> Result<Vec<GoalRow>, StoreError> {
    let which = Which {
        thread: Some(thread),
        ..Which::default()
    };
    select(pool, which).await
}

async fn unfinished_goals(pool: &PgPool) -> Result<Vec<GoalRow>, StoreError> {
    let which = Which {
        unfinished: true,
        ..Which::default()
    };
    select(pool, which).await
}

async fn update_goal(
    pool: &PgPool,
    id: &str,
    change: GoalChange<'_>,
) -> Result<Option<GoalRow>, StoreError> {
    let now = now_text();
    let finished = change.finished.then_some(now.as_str());
    let done = sqlx::query!(
        "UPDATE goals SET iteration = $2, state = $3, explanation = COALESCE($4, explanation),
                          updated_at = $5, finished_at = $6
         WHERE id = $1 AND finished_at IS NULL",
        id,
        change.iteration,
        change.state,
        change.explanation,
        now,
        finished,
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(None);
    }
    goal(pool, id).await
}

async fn goal_turns(pool: &PgPool, thread: &ThreadId) -> Result<Vec<MessageId>, StoreError> {
    let pattern = format!("{GOAL_TURN_PREFIX}%");
    Ok(sqlx::query_scalar!(
        r#"SELECT id AS "id!: MessageId" FROM messages
           WHERE thread_id = $1 AND client_message_id LIKE $2 ORDER BY seq"#,
        thread as &ThreadId,
        pattern,
    )
    .fetch_all(pool)
    .await?)
}
