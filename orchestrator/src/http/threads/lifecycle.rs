//! Threads by the hundred thousand: the list in pages (`GET /api/threads`), a thread's messages
//! in pages (`GET /api/threads/{id}/messages`), renaming, tagging, archiving and unarchiving
//! (`PATCH /api/threads/{id}`), and deleting (`DELETE /api/threads/{id}`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;

use plugin_contract::ThreadId;

use super::super::error::ErrorBody;
use super::super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiState};
use crate::api::pages::{MessagePage, ThreadFilters, ThreadPage};
pub use crate::api::threads::PatchThread;
use crate::api::threads::ThreadWithMessages;
use crate::caller::Caller;

/// The threads the caller sees, a page at a time, newest activity first (archived ones only
/// when asked for).
#[utoipa::path(get, path = "/threads", operation_id = "listThreads", tag = "threads",
    params(ThreadFilters),
    responses(
        (status = 200, description = "A page of threads, and the cursor of the next.", body = ThreadPage),
        (status = 400, description = "A query parameter that does not parse (a time that is not RFC 3339).", body = ErrorBody),
        (status = 422, description = "A `limit` out of 1–500, an `archived` other than `false`, `true` or `all`, or a cursor this daemon did not give out.", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(filters): ApiQuery<ThreadFilters>,
) -> Result<Json<ThreadPage>, ApiError> {
    Ok(Json(state.threads.list(&caller, &filters).await?))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MessagesQuery {
    /// Messages per page: 1 to 500, default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// `nextCursor` of the previous page (or `messagesCursor` of the thread): older messages.
    /// One this daemon gave out; another is refused.
    #[param(pattern = r"^[A-Za-z0-9_-]*$")]
    before: Option<String>,
}

/// The thread's messages, newest first, a page at a time.
#[utoipa::path(get, path = "/threads/{id}/messages", operation_id = "listMessages", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`)."), MessagesQuery),
    responses(
        (status = 200, description = "A page of messages, and the cursor of older ones.", body = MessagePage),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 422, description = "A `limit` out of 1–500, or a cursor this daemon did not give out.", body = ErrorBody),
    ))]
pub async fn messages(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<Json<MessagePage>, ApiError> {
    let id = ThreadId::from_string(id);
    let (limit, before) = (query.limit, query.before.as_deref());
    Ok(Json(
        state.threads.messages(&caller, &id, limit, before).await?,
    ))
}

/// Changes the thread: its budget, title, tags, or whether it is archived.
#[utoipa::path(patch, path = "/threads/{id}", operation_id = "updateThread", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    request_body = PatchThread,
    responses(
        (status = 200, description = "The thread as `GET` shows it.", body = ThreadWithMessages),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`.", body = ErrorBody),
        (status = 422, description = "An unknown field, an amount that is negative or not a number, a blank or overlong title, or too many or bad tags.", body = ErrorBody),
    ))]
pub async fn patch(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PatchThread>,
) -> Result<Json<ThreadWithMessages>, ApiError> {
    let id = ThreadId::from_string(id);
    Ok(Json(state.threads.update(&caller, &id, body).await?))
}

/// Deletes the thread and everything of it (see `Pipeline::delete_thread`); its children go too
/// when `threads.delete_children` is `cascade`.
#[utoipa::path(delete, path = "/threads/{id}", operation_id = "deleteThread", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    responses(
        (status = 204, description = "Deleted: nothing of it is left."),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
    ))]
pub async fn delete(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let id = ThreadId::from_string(id);
    state.threads.delete(&caller, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
