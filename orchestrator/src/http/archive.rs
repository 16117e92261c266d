//! `POST /api/threads/{id}/archive`: a thread retired for good (see `Pipeline::archive_thread`).

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use plugin_contract::ThreadId;

use super::error::ErrorBody;
use super::{ApiError, ApiPath, ApiState};
use crate::api;
use crate::workspace::WorktreeDisposition;

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveReply {
    pub thread: api::Thread,
    /// What became of its worktree (`workspaces.on_archive`); absent for a thread without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeDisposition>,
}

/// Archives the thread: a running turn is interrupted, its process let go, its worktree kept or
/// removed as `workspaces.on_archive` says (never with uncommitted work under
/// `remove-if-clean`); it takes no more messages (409 `thread_archived`). Nothing is deleted:
/// its messages, events and transcript stay. Archiving again changes nothing (no `worktree`).
#[utoipa::path(post, path = "/threads/{id}/archive", operation_id = "archiveThread", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    responses(
        (status = 200, description = "The archived thread (`archivedAt` set), and what became of its worktree.", body = ArchiveReply),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 500, description = "Git failed removing the worktree (`git_failed`); the thread is archived.", body = ErrorBody),
    ))]
pub async fn archive(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ArchiveReply>, ApiError> {
    let archived = state
        .pipeline
        .archive_thread(&ThreadId::from_string(id))
        .await?;
    Ok(Json(ArchiveReply {
        thread: archived.thread.into(),
        worktree: archived.worktree,
    }))
}
