//! `threads`: creating, forking, looking up and listing them, the CLI session each one resumes,
//! and how deep a delegated child sits.
//!
//! A fork runs in one `BEGIN IMMEDIATE` transaction (a [`ThreadTx`] on the new thread, with no
//! fence: nobody holds a lease on a thread that does not exist yet), so the copied messages are
//! the parent's as of one moment.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use harness_db::{
    now_text, workspace_text, Fence, MessageId, NewThread, OnInterrupt, StoreError, ThreadRow,
    Workspace, MAX_DEPTH_WALK,
};
use plugin_contract::{CliSessionId, ThreadId};
use sqlx::types::Json;
use sqlx::SqlitePool;

use crate::{Sqlite, ThreadTx};

harness_db::thread_queries!(Sqlite);

async fn create(
    pool: &SqlitePool,
    id: &ThreadId,
    new: &NewThread,
) -> Result<ThreadRow, StoreError> {
    let now = now_text();
    let schema = new.output_schema.as_ref().map(serde_json::Value::to_string);
    let workspace = new.workspace.as_ref().map(workspace_text).transpose()?;
    let on_interrupt = new.on_interrupt.as_str();
    Ok(sqlx::query_as!(
        ThreadRow,
        r#"INSERT INTO threads (id, title, model, cli_session_id, parent_id, output_schema,
                               max_budget_usd, workspace, profile, on_interrupt, created_at,
                               updated_at, tenant)
           VALUES (?1, ?2, ?3, NULL, ?4, ?5, ?6, ?8, ?9, ?10, ?7, ?7, ?11)
           RETURNING id AS "id!: ThreadId", title, model,
                     cli_session_id AS "cli_session_id: CliSessionId",
                     parent_id AS "parent_id: ThreadId",
                     output_schema AS "output_schema: serde_json::Value",
                     forked_session AS "forked_session: CliSessionId",
                     max_budget_usd,
                     workspace AS "workspace: Json<Workspace>", profile, tenant,
                  on_interrupt AS "on_interrupt: OnInterrupt",
                     archived_at AS "archived_at: DateTime<Utc>",
                     created_at AS "created_at: DateTime<Utc>",
                     updated_at AS "updated_at: DateTime<Utc>""#,
        id,
        new.title,
        new.model,
        new.parent_id,
        schema,
        new.max_budget_usd,
        now,
        workspace,
        new.profile,
        on_interrupt,
        new.tenant,
    )
    .fetch_one(pool)
    .await?)
}

/// The fork's own row: the parent's model, schema and budget limit, its session to fork.
async fn insert_fork(
    tx: &mut ThreadTx,
    id: &ThreadId,
    parent: &ThreadRow,
    title: &str,
) -> Result<ThreadRow, StoreError> {
    let now = now_text();
    let schema = parent
        .output_schema
        .as_ref()
        .map(serde_json::Value::to_string);
    let workspace = parent
        .workspace
        .as_ref()
        .map(|w| workspace_text(&w.0))
        .transpose()?;
    let on_interrupt = parent.on_interrupt.as_str();
    Ok(sqlx::query_as!(
        ThreadRow,
        r#"INSERT INTO threads (id, title, model, cli_session_id, parent_id, output_schema,
                               forked_session, max_budget_usd, workspace, profile, on_interrupt,
                               created_at, updated_at, tenant)
           VALUES (?1, ?2, ?3, NULL, ?4, ?5, ?6, ?7, ?9, ?10, ?11, ?8, ?8, ?12)
           RETURNING id AS "id!: ThreadId", title, model,
                     cli_session_id AS "cli_session_id: CliSessionId",
                     parent_id AS "parent_id: ThreadId",
                     output_schema AS "output_schema: serde_json::Value",
                     forked_session AS "forked_session: CliSessionId",
                     max_budget_usd,
                     workspace AS "workspace: Json<Workspace>", profile, tenant,
                  on_interrupt AS "on_interrupt: OnInterrupt",
                     archived_at AS "archived_at: DateTime<Utc>",
                     created_at AS "created_at: DateTime<Utc>",
                     updated_at AS "updated_at: DateTime<Utc>""#,
        id,
        title,
        parent.model,
        parent.id,
        schema,
        parent.cli_session_id,
        parent.max_budget_usd,
        now,
        workspace,
        parent.profile,
        on_interrupt,
        parent.tenant,
    )
    .fetch_one(tx.conn())
    .await?)
}

/// Copies `from`'s `done` messages into `to`: new ids, `seq` from 1 in the same order, each
/// reply pointing at the copy of its question. The text columns (the blocks, whose files the
/// fork's tenant owns too, among them) are copied as they are.
async fn copy_done_messages(
    tx: &mut ThreadTx,
    from: &ThreadId,
    to: &ThreadId,
) -> Result<(), StoreError> {
    let now = now_text();
    let messages = sqlx::query!(
        r#"SELECT id AS "id!: MessageId", role, content, reply_to AS "reply_to: MessageId",
                  model, structured_output, blocks
           FROM messages WHERE thread_id = ?1 AND status = 'done' ORDER BY seq"#,
        from,
    )
    .fetch_all(tx.conn())
    .await?;
    let mut new_ids = HashMap::new();
    for (seq, m) in (1_i64..).zip(messages) {
        let new_id = MessageId::generate();
        let reply_to = m.reply_to.as_ref().and_then(|old| new_ids.get(old));
        sqlx::query!(
            "INSERT INTO messages (id, thread_id, seq, role, content, status, error,
                                   client_message_id, reply_to, model, structured_output,
                                   created_at, updated_at, blocks)
             VALUES (?1, ?2, ?3, ?4, ?5, 'done', NULL, NULL, ?6, ?7, ?8, ?9, ?9, ?10)",
            new_id,
            to,
            seq,
            m.role,
            m.content,
            reply_to,
            m.model,
            m.structured_output,
            now,
            m.blocks,
        )
        .execute(tx.conn())
        .await?;
        new_ids.insert(m.id, new_id);
    }
    Ok(())
}

async fn one(pool: &SqlitePool, id: &ThreadId) -> Result<Option<ThreadRow>, StoreError> {
    Ok(sqlx::query_as!(
        ThreadRow,
        r#"SELECT id AS "id!: ThreadId", title, model,
                  cli_session_id AS "cli_session_id: CliSessionId",
                  parent_id AS "parent_id: ThreadId",
                  output_schema AS "output_schema: serde_json::Value",
                  forked_session AS "forked_session: CliSessionId",
                  max_budget_usd,
                  workspace AS "workspace: Json<Workspace>", profile, tenant,
                  on_interrupt AS "on_interrupt: OnInterrupt",
                     archived_at AS "archived_at: DateTime<Utc>",
                  created_at AS "created_at: DateTime<Utc>",
                  updated_at AS "updated_at: DateTime<Utc>"
           FROM threads WHERE id = ?1"#,
        id,
    )
    .fetch_optional(pool)
    .await?)
}

async fn all(pool: &SqlitePool) -> Result<Vec<ThreadRow>, StoreError> {
    Ok(sqlx::query_as!(
        ThreadRow,
        r#"SELECT id AS "id!: ThreadId", title, model,
                  cli_session_id AS "cli_session_id: CliSessionId",
                  parent_id AS "parent_id: ThreadId",
                  output_schema AS "output_schema: serde_json::Value",
                  forked_session AS "forked_session: CliSessionId",
                  max_budget_usd,
                  workspace AS "workspace: Json<Workspace>", profile, tenant,
                  on_interrupt AS "on_interrupt: OnInterrupt",
                     archived_at AS "archived_at: DateTime<Utc>",
                  created_at AS "created_at: DateTime<Utc>",
                  updated_at AS "updated_at: DateTime<Utc>"
           FROM threads ORDER BY created_at DESC, rowid DESC"#,
    )
    .fetch_all(pool)
    .await?)
}

async fn set_cli_session(
    tx: &mut ThreadTx,
    id: &ThreadId,
    session: Option<&CliSessionId>,
) -> Result<(), StoreError> {
    let now = now_text();
    let done = sqlx::query!(
        "UPDATE threads SET cli_session_id = ?1, updated_at = ?2 WHERE id = ?3",
        session,
        now,
        id,
    )
    .execute(tx.conn())
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::ThreadNotFound(id.clone()));
    }
    Ok(())
}

/// Sets `archived_at` unless it is set; the row as it is then, `None` for an unknown thread.
async fn archive(tx: &mut ThreadTx, id: &ThreadId) -> Result<Option<ThreadRow>, StoreError> {
    let now = now_text();
    Ok(sqlx::query_as!(
        ThreadRow,
        r#"UPDATE threads SET archived_at = COALESCE(archived_at, ?1), updated_at = ?1
           WHERE id = ?2
           RETURNING id AS "id!: ThreadId", title, model,
                     cli_session_id AS "cli_session_id: CliSessionId",
                     parent_id AS "parent_id: ThreadId",
                     output_schema AS "output_schema: serde_json::Value",
                     forked_session AS "forked_session: CliSessionId",
                     max_budget_usd,
                     workspace AS "workspace: Json<Workspace>", profile, tenant,
                  on_interrupt AS "on_interrupt: OnInterrupt",
                     archived_at AS "archived_at: DateTime<Utc>",
                     created_at AS "created_at: DateTime<Utc>",
                     updated_at AS "updated_at: DateTime<Utc>""#,
        now,
        id,
    )
    .fetch_optional(tx.conn())
    .await?)
}

async fn depth(pool: &SqlitePool, id: &ThreadId) -> Result<Option<i64>, StoreError> {
    // MAX over no rows (an unknown thread) is NULL.
    Ok(sqlx::query_scalar!(
        r#"WITH RECURSIVE chain(id, parent_id, depth) AS (
               SELECT id, parent_id, 0 FROM threads WHERE id = ?1
               UNION ALL
               SELECT t.id, t.parent_id, chain.depth + 1
               FROM threads t JOIN chain ON t.id = chain.parent_id
               WHERE chain.depth < ?2
           )
           SELECT MAX(depth) AS "depth?: i64" FROM chain"#,
        id,
        MAX_DEPTH_WALK,
    )
    .fetch_one(pool)
    .await?)
}
