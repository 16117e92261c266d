//! A thread's tool permissions waiting for a person (`approvals.mode = ask`): list them, answer
//! one.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use plugin_contract::ThreadId;

use super::error::ErrorBody;
use super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiState};
use crate::api;
use crate::approvals::Answer;
use crate::caller::Caller;
use crate::service::ServiceError;

/// A page of a thread's permissions, oldest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub permissions: Vec<api::Permission>,
    /// The next page's `cursor`; `null` on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// `true`: decided ones too, each with its decision and who made it.
    #[serde(default)]
    all: bool,
    /// Permissions per page: 1 to 500, default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// `nextCursor` of the previous page (one this list gave out: another is refused).
    #[param(pattern = r"^[A-Za-z0-9_-]*$")]
    cursor: Option<String>,
}

/// `GET /api/threads/{id}/permissions[?all=true&limit=&cursor=]`: the pending ones (or all),
/// oldest first, a page at a time.
#[utoipa::path(get, path = "/threads/{id}/permissions", operation_id = "listPermissions", tag = "tools",
    params(("id" = String, Path, description = "The thread's id (`thr_…`)."), ListQuery),
    responses(
        (status = 200, description = "A page of the permissions, oldest first.", body = Pending),
        (status = 400, description = "A bad query string.", body = ErrorBody),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 422, description = "`limit` out of range, or a `cursor` this list did not give.", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Pending>, ApiError> {
    let thread = state
        .store
        .require_thread(&ThreadId::from_string(id))
        .await?;
    let limit = api::pages::limit(query.limit)?;
    let after = query
        .cursor
        .as_deref()
        .map(api::pages::row_cursor)
        .transpose()?;
    let after = after.as_ref().map(|(at, id)| (at.as_str(), id.as_str()));
    let mut rows = state
        .store
        .permission_page(&thread.id, !query.all, after, Some(limit + 1))
        .await?;
    let next_cursor = api::pages::trim(&mut rows, limit, |row| {
        api::cursor::at_row(row.created_at, &row.request_id)
    });
    Ok(Json(Pending {
        permissions: rows.into_iter().map(api::Permission::from).collect(),
        next_cursor,
    }))
}

#[derive(Clone, Copy, Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnswerBody {
    decision: Decision,
    /// For a denial, what the model reads.
    message: Option<String>,
    /// For an allow, the input the tool runs with instead of the model's: a JSON object.
    #[schema(value_type = Option<Object>)]
    updated_input: Option<Value>,
}

/// `POST /api/threads/{id}/permissions/{requestId}`: 200 with the decided request; 404 when the
/// thread has no such request; 409 when it was already decided.
#[utoipa::path(post, path = "/threads/{id}/permissions/{request_id}", operation_id = "answerPermission", tag = "tools",
    params(("id" = String, Path, description = "The thread's id (`thr_…`)."),
        ("request_id" = String, Path, description = "The permission's `requestId`.")),
    request_body = AnswerBody,
    responses(
        (status = 200, description = "The decided permission.", body = api::Permission),
        (status = 404, description = "Unknown thread or request.", body = ErrorBody),
        (status = 409, description = "Already decided (by a person, the timeout or an interrupt).", body = ErrorBody),
        (status = 422, description = "A missing or invalid field.", body = ErrorBody),
        (status = 503, description = "With clustering: the thread is moving between nodes (`not_owner`); retry.", body = ErrorBody),
    ))]
pub async fn answer(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath((id, request_id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<AnswerBody>,
) -> Result<Json<api::Permission>, ApiError> {
    let thread = state
        .store
        .require_thread(&ThreadId::from_string(id))
        .await?;
    let allow = matches!(body.decision, Decision::Allow);
    if !allow && body.updated_input.is_some() {
        return Err(ApiError::unprocessable(
            "updatedInput is only for \"decision\": \"allow\"",
        ));
    }
    if body.updated_input.as_ref().is_some_and(|v| !v.is_object()) {
        return Err(ApiError::unprocessable(
            "updatedInput must be a JSON object: the tool's whole input",
        ));
    }
    let answer = Answer {
        allow,
        message: body.message,
        updated_input: body.updated_input,
        by: caller.clone(),
    };
    match state
        .threads
        .answer_permission(&caller, &thread.id, &request_id, answer)
        .await
    {
        Ok(permission) => Ok(Json(permission)),
        Err(ServiceError::NotFound(message)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "permission_not_found",
            message,
        )),
        Err(ServiceError::Conflict(message)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "permission_already_decided",
            message,
        )),
        Err(other) => Err(other.into()),
    }
}
