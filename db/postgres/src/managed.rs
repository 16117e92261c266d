//! `managed_objects`, `managed_agent_versions` and `managed_sessions`; see
//! [`harness_db::ManagedQueries`]. An update reads and writes with the row locked (`FOR
//! UPDATE`), so of two updates from one version one wins and the other sees the new version.

use harness_db::{
    now_text, time_text, ManagedFilter, ManagedKind, ManagedRow, ManagedUpdate, NewManaged,
    NewSession, SessionFilter, SessionRow, StoreError,
};
use plugin_contract::ThreadId;
use sqlx::{PgConnection, PgPool};

use crate::Postgres;

harness_db::managed_queries!(Postgres);

async fn insert_managed(pool: &PgPool, new: NewManaged<'_>) -> Result<ManagedRow, StoreError> {
    let now = now_text();
    let kind = new.kind.as_str();
    let mut tx = pool.begin().await?;
    let row = sqlx::query_as!(
        ManagedRow,
        r#"INSERT INTO managed_objects (id, kind, owner, version, body, created_at, updated_at)
           VALUES ($1, $2, $3, 1, $4, $5, $5)
           RETURNING id AS "id!", kind AS "kind!", owner AS "owner!", version AS "version!",
                     body AS "body!", created_at::timestamptz AS "created_at!",
                     updated_at::timestamptz AS "updated_at!",
                     archived_at::timestamptz AS "archived_at?""#,
        new.id,
        kind,
        new.owner,
        new.body,
        now,
    )
    .fetch_one(&mut *tx)
    .await?;
    if new.kind == ManagedKind::Agent {
        insert_version(&mut tx, new.id, 1, new.body, &now).await?;
    }
    tx.commit().await?;
    Ok(row)
}

/// Keeps version `version` of the agent `id`.
async fn insert_version(
    conn: &mut PgConnection,
    id: &str,
    version: i64,
    body: &str,
    now: &str,
) -> Result<(), StoreError> {
    sqlx::query!(
        "INSERT INTO managed_agent_versions (agent_id, version, body, created_at)
         VALUES ($1, $2, $3, $4)",
        id,
        version,
        body,
        now,
    )
    .execute(conn)
    .await?;
    Ok(())
}

async fn managed(
    pool: &PgPool,
    kind: ManagedKind,
    id: &str,
    version: Option<i64>,
) -> Result<Option<ManagedRow>, StoreError> {
    match (kind, version) {
        (ManagedKind::Agent, Some(version)) => agent_version(pool, id, version).await,
        (ManagedKind::Environment, Some(version)) if version != 1 => Ok(None),
        _ => latest(&mut *pool.acquire().await?, kind, id).await,
    }
}

/// The `kind` row `id` as it is now.
async fn latest(
    conn: &mut PgConnection,
    kind: ManagedKind,
    id: &str,
) -> Result<Option<ManagedRow>, StoreError> {
    let kind = kind.as_str();
    Ok(sqlx::query_as!(
        ManagedRow,
        r#"SELECT id AS "id!", kind AS "kind!", owner AS "owner!", version AS "version!",
                  body AS "body!", created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!",
                  archived_at::timestamptz AS "archived_at?"
           FROM managed_objects WHERE id = $1 AND kind = $2"#,
        id,
        kind,
    )
    .fetch_optional(conn)
    .await?)
}

/// Version `version` of the agent `id`.
async fn agent_version(
    pool: &PgPool,
    id: &str,
    version: i64,
) -> Result<Option<ManagedRow>, StoreError> {
    Ok(sqlx::query_as!(
        ManagedRow,
        r#"SELECT o.id AS "id!", o.kind AS "kind!", o.owner AS "owner!", v.version AS "version!",
                  v.body AS "body!", o.created_at::timestamptz AS "created_at!",
                  v.created_at::timestamptz AS "updated_at!",
                  o.archived_at::timestamptz AS "archived_at?"
           FROM managed_objects o
           JOIN managed_agent_versions v ON v.agent_id = o.id
           WHERE o.id = $1 AND o.kind = 'agent' AND v.version = $2"#,
        id,
        version,
    )
    .fetch_optional(pool)
    .await?)
}

async fn list_managed(
    pool: &PgPool,
    filter: ManagedFilter<'_>,
) -> Result<Vec<ManagedRow>, StoreError> {
    let kind = filter.kind.as_str();
    let gte = filter.created_gte.map(time_text);
    let lte = filter.created_lte.map(time_text);
    let after_at = filter.after.as_ref().map(|a| time_text(a.created_at));
    let after_id = filter.after.as_ref().map(|a| a.id.as_str());
    Ok(sqlx::query_as!(
        ManagedRow,
        r#"SELECT id AS "id!", kind AS "kind!", owner AS "owner!", version AS "version!",
                  body AS "body!", created_at::timestamptz AS "created_at!",
                  updated_at::timestamptz AS "updated_at!",
                  archived_at::timestamptz AS "archived_at?"
           FROM managed_objects
           WHERE kind = $1
             AND ($2::text IS NULL OR owner = $2)
             AND ($3 OR archived_at IS NULL)
             AND ($4::text IS NULL OR created_at >= $4)
             AND ($5::text IS NULL OR created_at <= $5)
             AND ($6::text IS NULL OR created_at < $6 OR (created_at = $6 AND id < $7))
           ORDER BY created_at DESC, id DESC
           LIMIT $8"#,
        kind,
        filter.owner,
        filter.include_archived,
        gte,
        lte,
        after_at,
        after_id,
        filter.limit,
    )
    .fetch_all(pool)
    .await?)
}

async fn update_managed(
    pool: &PgPool,
    kind: ManagedKind,
    id: &str,
    expected: Option<i64>,
    body: &str,
) -> Result<ManagedUpdate, StoreError> {
    let mut tx = pool.begin().await?;
    // The row stays locked until COMMIT: a second update from the same version waits, then
    // sees the new one.
    sqlx::query!(
        "SELECT 1 AS one FROM managed_objects WHERE id = $1 FOR UPDATE",
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(current) = latest(&mut tx, kind, id).await? else {
        return Ok(ManagedUpdate::NotFound);
    };
    if current.archived_at.is_some() {
        return Ok(ManagedUpdate::Archived);
    }
    if expected.is_some_and(|expected| expected != current.version) {
        return Ok(ManagedUpdate::Conflict {
            current: current.version,
        });
    }
    if current.body == body {
        return Ok(ManagedUpdate::Unchanged(current));
    }
    let now = now_text();
    let version = match kind {
        ManagedKind::Agent => current.version + 1,
        ManagedKind::Environment => current.version,
    };
    if kind == ManagedKind::Agent {
        insert_version(&mut tx, id, version, body, &now).await?;
    }
    let row = sqlx::query_as!(
        ManagedRow,
        r#"UPDATE managed_objects SET version = $2, body = $3, updated_at = $4 WHERE id = $1
           RETURNING id AS "id!", kind AS "kind!", owner AS "owner!", version AS "version!",
                     body AS "body!", created_at::timestamptz AS "created_at!",
                     updated_at::timestamptz AS "updated_at!",
                     archived_at::timestamptz AS "archived_at?""#,
        id,
        version,
        body,
        now,
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(ManagedUpdate::Updated(row))
}

async fn archive_managed(
    pool: &PgPool,
    kind: ManagedKind,
    id: &str,
) -> Result<Option<ManagedRow>, StoreError> {
    let now = now_text();
    let kind = kind.as_str();
    Ok(sqlx::query_as!(
        ManagedRow,
        r#"UPDATE managed_objects SET archived_at = COALESCE(archived_at, $3)
           WHERE id = $1 AND kind = $2
           RETURNING id AS "id!", kind AS "kind!", owner AS "owner!", version AS "version!",
                     body AS "body!", created_at::timestamptz AS "created_at!",
                     updated_at::timestamptz AS "updated_at!",
                     archived_at::timestamptz AS "archived_at?""#,
        id,
        kind,
        now,
    )
    .fetch_optional(pool)
    .await?)
}

async fn delete_managed(pool: &PgPool, kind: ManagedKind, id: &str) -> Result<bool, StoreError> {
    let kind = kind.as_str();
    let mut tx = pool.begin().await?;
    // The versions go first, whatever the foreign keys' cascade.
    sqlx::query!(
        "DELETE FROM managed_agent_versions WHERE agent_id IN
             (SELECT id FROM managed_objects WHERE id = $1 AND kind = $2)",
        id,
        kind,
    )
    .execute(&mut *tx)
    .await?;
    let done = sqlx::query!(
        "DELETE FROM managed_objects WHERE id = $1 AND kind = $2",
        id,
        kind,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}

async fn agent_versions(
    pool: &PgPool,
    id: &str,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<ManagedRow>, StoreError> {
    Ok(sqlx::query_as!(
        ManagedRow,
        r#"SELECT o.id AS "id!", o.kind AS "kind!", o.owner AS "owner!", v.version AS "version!",
                  v.body AS "body!", o.created_at::timestamptz AS "created_at!",
                  v.created_at::timestamptz AS "updated_at!",
                  o.archived_at::timestamptz AS "archived_at?"
           FROM managed_objects o
           JOIN managed_agent_versions v ON v.agent_id = o.id
           WHERE o.id = $1 AND o.kind = 'agent' AND ($2::bigint IS NULL OR v.version < $2)
           ORDER BY v.version DESC
           LIMIT $3"#,
        id,
        before,
        limit,
    )
    .fetch_all(pool)
    .await?)
}

async fn insert_session(pool: &PgPool, new: NewSession<'_>) -> Result<SessionRow, StoreError> {
    let now = now_text();
    // Selecting FROM threads turns an unknown thread into "no row" rather than a foreign key
    // error.
    let done = sqlx::query!(
        "INSERT INTO managed_sessions (thread_id, agent_id, agent_version, environment_id, body,
                                       created_at, updated_at)
         SELECT t.id, $2, $3, $4, $5, $6, $6 FROM threads t WHERE t.id = $1",
        new.thread_id as &ThreadId,
        new.agent_id,
        new.agent_version,
        new.environment_id,
        new.body,
        now,
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::ThreadNotFound(new.thread_id.clone()));
    }
    session(pool, new.thread_id).await?.ok_or_else(|| {
        StoreError::Corrupt(format!(
            "session {} vanished after its insert",
            new.thread_id
        ))
    })
}

async fn session(pool: &PgPool, thread: &ThreadId) -> Result<Option<SessionRow>, StoreError> {
    Ok(sqlx::query_as!(
        SessionRow,
        r#"SELECT s.thread_id AS "thread_id!: ThreadId", s.agent_id AS "agent_id!",
                  s.agent_version AS "agent_version!", s.environment_id AS "environment_id!",
                  s.body AS "body!", t.tenant AS "tenant?", t.title AS "title?",
                  s.created_at::timestamptz AS "created_at!",
                  s.updated_at::timestamptz AS "updated_at!",
                  t.archived_at::timestamptz AS "archived_at?"
           FROM managed_sessions s JOIN threads t ON t.id = s.thread_id
           WHERE s.thread_id = $1"#,
        thread as &ThreadId,
    )
    .fetch_optional(pool)
    .await?)
}

async fn update_session(
    pool: &PgPool,
    thread: &ThreadId,
    body: &str,
) -> Result<Option<SessionRow>, StoreError> {
    let now = now_text();
    let done = sqlx::query!(
        "UPDATE managed_sessions SET body = $2, updated_at = $3 WHERE thread_id = $1",
        thread as &ThreadId,
        body,
        now,
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(None);
    }
    session(pool, thread).await
}

async fn list_sessions(
    pool: &PgPool,
    filter: SessionFilter<'_>,
) -> Result<Vec<SessionRow>, StoreError> {
    let after_at = filter.after.as_ref().map(|(at, _)| time_text(*at));
    let after_id = filter.after.as_ref().map(|(_, id)| id);
    // The order is chosen by `$5`: one CASE per direction, the other's always NULL.
    Ok(sqlx::query_as!(
        SessionRow,
        r#"SELECT s.thread_id AS "thread_id!: ThreadId", s.agent_id AS "agent_id!",
                  s.agent_version AS "agent_version!", s.environment_id AS "environment_id!",
                  s.body AS "body!", t.tenant AS "tenant?", t.title AS "title?",
                  s.created_at::timestamptz AS "created_at!",
                  s.updated_at::timestamptz AS "updated_at!",
                  t.archived_at::timestamptz AS "archived_at?"
           FROM managed_sessions s JOIN threads t ON t.id = s.thread_id
           WHERE ($1::text IS NULL OR t.tenant = $1)
             AND ($2::text IS NULL OR s.agent_id = $2)
             AND ($3::bigint IS NULL OR s.agent_version = $3)
             AND ($4 OR t.archived_at IS NULL)
             AND ($6::text IS NULL
                  OR ($5 AND (s.created_at < $6 OR (s.created_at = $6 AND s.thread_id < $7)))
                  OR (NOT $5 AND (s.created_at > $6 OR (s.created_at = $6 AND s.thread_id > $7))))
           ORDER BY CASE WHEN $5 THEN s.created_at END DESC,
                    CASE WHEN $5 THEN s.thread_id END DESC,
                    CASE WHEN NOT $5 THEN s.created_at END ASC,
                    CASE WHEN NOT $5 THEN s.thread_id END ASC
           LIMIT $8"#,
        filter.tenant,
        filter.agent_id,
        filter.agent_version,
        filter.include_archived,
        filter.descending,
        after_at,
        after_id as Option<&ThreadId>,
        filter.limit,
    )
    .fetch_all(pool)
    .await?)
}
