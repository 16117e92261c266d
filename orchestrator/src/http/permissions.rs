//! A thread's tool permissions waiting for a person (`approvals.mode = ask`): list them, answer
//! one; and the rules people added to the thread by allowing a request always.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
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
    /// For an allow: allow it always on this thread. The narrowest rules that name the request
    /// (`Bash(npm test)`, `Edit(//w/src/main.rs)`, `WebFetch(domain:docs.rs)`, the tool) are
    /// added to the thread (`GET /api/threads/{id}/rules`); a request no rule names exactly is
    /// allowed once, and the decision's `reason` says so. Not with `updatedInput`.
    #[serde(default)]
    always: bool,
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
    if body.always && (!allow || body.updated_input.is_some()) {
        return Err(ApiError::unprocessable(
            "always is only for \"decision\": \"allow\" without updatedInput: the rule names \
             the request as the model made it",
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
        always: body.always,
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

/// An allow rule a person added to the thread by allowing a request always: it allows what it
/// names on this thread after the profile's deny and allow rules (see docs/approvals.md).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadRule {
    /// `rul_…`: what `DELETE /api/threads/{id}/rules/{ruleId}` takes.
    pub id: String,
    /// In the CLI's rule syntax (`Bash(npm test)`).
    pub rule: String,
    /// The permission whose answer added it.
    pub request_id: String,
    /// The caller who answered.
    pub added_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// The thread's rules, oldest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ThreadRules {
    pub rules: Vec<ThreadRule>,
}

/// `GET /api/threads/{id}/rules`.
#[utoipa::path(get, path = "/threads/{id}/rules", operation_id = "listThreadRules", tag = "tools",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    responses(
        (status = 200, description = "The rules people added to the thread, oldest first.", body = ThreadRules),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
    ))]
pub async fn rules(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ThreadRules>, ApiError> {
    let thread = state
        .store
        .require_thread(&ThreadId::from_string(id))
        .await?;
    let rows = state.store.thread_rules(&thread.id).await?;
    let rules = rows
        .into_iter()
        .map(|row| ThreadRule {
            id: row.id,
            rule: row.rule,
            request_id: row.request_id,
            added_by: row.added_by,
            created_at: row.created_at,
        })
        .collect();
    Ok(Json(ThreadRules { rules }))
}

/// `DELETE /api/threads/{id}/rules/{ruleId}`: the thread's next requests are decided without it.
#[utoipa::path(delete, path = "/threads/{id}/rules/{rule_id}", operation_id = "deleteThreadRule", tag = "tools",
    params(("id" = String, Path, description = "The thread's id (`thr_…`)."),
        ("rule_id" = String, Path, description = "The rule's `id` (`rul_…`).")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown thread, or the thread has no such rule.", body = ErrorBody),
    ))]
pub async fn delete_rule(
    State(state): State<ApiState>,
    ApiPath((id, rule_id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let thread = state
        .store
        .require_thread(&ThreadId::from_string(id))
        .await?;
    if !state.store.delete_thread_rule(&thread.id, &rule_id).await? {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "rule_not_found",
            format!("thread {} has no rule {rule_id}", thread.id),
        ));
    }
    Ok(StatusCode::NO_CONTENT)
}
