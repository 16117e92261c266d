//! `GET /api/threads/{id}/diff`: what a thread on a workspace changed (see `crate::workspace`).

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use plugin_contract::ThreadId;

use super::error::ErrorBody;
use super::{ApiError, ApiPath, ApiQuery, ApiState};
use crate::workspace::DiffSummary;

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DiffQuery {
    /// `patch` (`text/x-diff`) or `json` (the files with their line counts). Default: `json`
    /// when the `Accept` header asks for `application/json`, else `patch`.
    #[param(value_type = Option<DiffFormat>, inline)]
    format: Option<String>,
}

/// A patch (`text/x-diff`), or the files changed with their line counts (JSON).
// Named for the document only: `format` is read as a string, so that a bad one is a `422`
// naming the two.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // Never built: it names the values in the document.
enum DiffFormat {
    Patch,
    Json,
}

/// The thread's changes against its workspace's base (the commit its worktree started from, or
/// the `HEAD` of a `path` in git), tracked and untracked files alike; the workspace's own index
/// is left as it is.
#[utoipa::path(get, path = "/threads/{id}/diff", operation_id = "getThreadDiff", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`)."), DiffQuery),
    responses(
        (status = 200, description = "The patch (`text/x-diff`), or with `format=json` the files changed.", body = DiffSummary,
            content((String = "text/x-diff"), (DiffSummary = "application/json"))),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 409, description = "The thread has no workspace in git (`no_diff`), or its workspace is not on this node (`workspace_unavailable`).", body = ErrorBody),
        (status = 422, description = "An unknown `format`.", body = ErrorBody),
    ))]
pub async fn diff(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<DiffQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let thread = ThreadId::from_string(id);
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("application/json"));
    let json = match query.format.as_deref() {
        Some("json") => true,
        Some("patch") => false,
        None => wants_json,
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "`format` is `patch` or `json`, not {other:?}"
            )))
        }
    };
    if json {
        Ok(Json(state.pipeline.diff_summary(&thread).await?).into_response())
    } else {
        let patch = state.pipeline.diff_patch(&thread).await?;
        Ok((
            [(header::CONTENT_TYPE, "text/x-diff; charset=utf-8")],
            patch,
        )
            .into_response())
    }
}
