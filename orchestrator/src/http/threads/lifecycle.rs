//! Threads by the hundred thousand: the list in pages (`GET /api/threads`), a thread's messages
//! in pages (`GET /api/threads/{id}/messages`), renaming, tagging, archiving and unarchiving
//! (`PATCH /api/threads/{id}`), and deleting (`DELETE /api/threads/{id}`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use tracing::info;

use plugin_contract::ThreadId;

use super::super::error::ErrorBody;
use super::super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiState};
use super::{thread_with_messages, ThreadWithMessages};
use crate::api::pages::{self, MessagePage, ThreadFilters, ThreadPage};
use crate::budget::validate_usd;
use crate::caller::Caller;
use crate::store::ThreadChange;

/// Most tags a thread has; each is 1 to 64 characters.
const MAX_TAGS: usize = 20;
const MAX_TAG_CHARS: usize = 64;

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
    Ok(Json(pages::threads(&state.store, &caller, &filters).await?))
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
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<Json<MessagePage>, ApiError> {
    let id = ThreadId::from_string(id);
    state.store.require_thread(&id).await?;
    let limit = pages::limit(query.limit)?;
    Ok(Json(
        pages::messages(&state.store, &id, query.before.as_deref(), limit).await?,
    ))
}

/// `PATCH /api/threads/{id}`: the fields given change, the others stay.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchThread {
    /// Absent: unchanged; `null`: no limit; a number (USD, zero or more): the new limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>, minimum = 0.0)]
    max_budget_usd: Option<Option<f64>>,
    /// A new title (1 to 200 characters, not blank); `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200,
             pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]")]
    title: Option<Option<String>>,
    /// The thread's tags, all of them (bounds: [`check_tags`], stated by [`tags_schema`]).
    #[schema(schema_with = tags_schema)]
    tags: Option<Vec<String>>,
    /// `true` archives the thread (as `POST …/archive` does); `false` unarchives it: it takes
    /// messages again.
    archived: Option<bool>,
}

/// `tags` for the document: [`check_tags`]' bounds.
fn tags_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};
    let tag = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_TAG_CHARS))
        .pattern(Some(crate::api::doc::NOT_BLANK));
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .description(Some(
            "The thread's tags, all of them (up to 20, each 1 to 64 characters, not blank; each \
             is trimmed, repeats count once).",
        ))
        .items(tag)
        .max_items(Some(MAX_TAGS))
        .build()
}

/// Tells a field that is present (`Some`, even when `null`) from one that is absent (`None`,
/// through `#[serde(default)]`).
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
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
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PatchThread>,
) -> Result<Json<ThreadWithMessages>, ApiError> {
    let id = ThreadId::from_string(id);
    let title = body.title.as_ref().map(|t| t.as_deref());
    if let Some(Some(title)) = title {
        if title.trim().is_empty() || title.chars().count() > 200 {
            return Err(ApiError::unprocessable(
                "title is 1 to 200 characters, not blank",
            ));
        }
    }
    let tags = match body.tags {
        Some(tags) => Some(check_tags(tags)?),
        None => None,
    };
    state.store.require_thread(&id).await?;
    if let Some(budget) = body.max_budget_usd {
        if let Some(usd) = budget {
            validate_usd(usd, "maxBudgetUsd").map_err(ApiError::unprocessable)?;
        }
        state.pipeline.set_thread_budget(&id, budget).await?;
        info!(thread_id = %id, max_budget_usd = ?budget, "Thread budget set.");
    }
    let change = ThreadChange {
        title,
        tags: tags.as_deref(),
        unarchive: body.archived == Some(false),
    };
    if change.title.is_some() || change.tags.is_some() || change.unarchive {
        state.store.change_thread(&id, &change).await?;
    }
    if body.archived == Some(true) {
        state.pipeline.archive_thread(&id).await?;
    }
    Ok(Json(thread_with_messages(&state, &id).await?))
}

/// Tags trimmed, each 1 to 64 characters, at most 20, without repeats.
fn check_tags(tags: Vec<String>) -> Result<Vec<String>, ApiError> {
    let mut out: Vec<String> = Vec::new();
    for tag in tags {
        let tag = tag.trim().to_owned();
        if tag.is_empty() || tag.chars().count() > MAX_TAG_CHARS {
            return Err(ApiError::unprocessable(format!(
                "a tag is 1 to {MAX_TAG_CHARS} characters, not {tag:?}"
            )));
        }
        if !out.contains(&tag) {
            out.push(tag);
        }
    }
    if out.len() > MAX_TAGS {
        return Err(ApiError::unprocessable(format!(
            "a thread has at most {MAX_TAGS} tags"
        )));
    }
    Ok(out)
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
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let id = ThreadId::from_string(id);
    let cascade = state.config.threads.cascade_delete();
    state.pipeline.delete_thread(&id, cascade).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
