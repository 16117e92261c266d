//! `POST /api/threads/{id}/archive`: a thread retired for good (see `Pipeline::archive_thread`).

use axum::extract::State;
use axum::{Extension, Json};

use plugin_contract::ThreadId;

use super::error::ErrorBody;
use super::{ApiError, ApiPath, ApiState};
pub use crate::api::threads::ArchiveReply;
use crate::caller::Caller;

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
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ArchiveReply>, ApiError> {
    let id = ThreadId::from_string(id);
    Ok(Json(state.threads.archive(&caller, &id).await?))
}
