//! `/api/schedules`: prompts sent on a cron (see `crate::schedules`): create, list, read, change,
//! pause and resume, delete, run now, and each schedule's runs.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::Utc;
use serde::{Deserialize, Serialize};

use plugin_contract::ThreadId;

use super::error::ErrorBody;
use super::routing::Placed;
use super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiState};
use crate::api::schedules::{Schedule, ScheduleRun, ThreadTemplate};
use crate::schedules::cron::Cron;
use crate::schedules::{as_new, RunError};
use crate::store::{new_schedule_id, time_text, CatchUp, NewSchedule, Overlap, ScheduleRow};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSchedule {
    #[schema(max_length = 200)]
    name: Option<String>,
    /// Five fields (`*/5 * * * *`), or six with seconds first (`*/2 * * * * *`); names, ranges,
    /// steps, `L`, `#`, `W` and `@daily`-style aliases.
    #[schema(min_length = 1)]
    cron: String,
    /// An IANA time zone; default `UTC`.
    timezone: Option<String>,
    /// The thread every run talks to. Exactly one of `threadId` and `thread`.
    #[schema(value_type = Option<String>)]
    thread_id: Option<ThreadId>,
    /// A fresh thread per run, made of these fields.
    thread: Option<ThreadTemplate>,
    /// The message each run sends.
    #[schema(min_length = 1, pattern = r"\S")]
    prompt: String,
    /// While the previous run's turn still runs: `skip` (default) or `queue`.
    overlap: Option<Overlap>,
    /// Ticks missed while no node ran the schedule: `once` (default) or `skip`.
    catch_up: Option<CatchUp>,
    /// Default `true`; `false` creates it paused.
    enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchSchedule {
    #[schema(max_length = 200)]
    name: Option<String>,
    #[schema(min_length = 1)]
    cron: Option<String>,
    timezone: Option<String>,
    #[schema(min_length = 1, pattern = r"\S")]
    prompt: Option<String>,
    overlap: Option<Overlap>,
    catch_up: Option<CatchUp>,
    /// `false` pauses it, `true` resumes it from the next tick after now.
    enabled: Option<bool>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<Schedule>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunList {
    pub runs: Vec<ScheduleRun>,
}

/// A manual run: its record (`GET …/runs` shows how it goes).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStarted {
    pub run_id: i64,
    pub run: Option<ScheduleRun>,
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// At most this many, newest first (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// Creates a schedule; its first tick is the first after now.
#[utoipa::path(post, path = "/schedules", operation_id = "createSchedule", tag = "schedules",
    request_body = CreateSchedule,
    responses(
        (status = 201, description = "The schedule.", body = Schedule),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`.", body = ErrorBody),
        (status = 422, description = "A mistyped field, a cron or time zone that does not parse (or a cron that never fires), a blank prompt, an unknown thread or profile, or not exactly one of `threadId` and `thread`.", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<ApiState>,
    Extension(caller): Extension<crate::caller::Caller>,
    ApiJson(body): ApiJson<CreateSchedule>,
) -> Result<(StatusCode, Json<Schedule>), ApiError> {
    let timezone = body.timezone.unwrap_or_else(|| "UTC".into());
    let cron = Cron::parse(&body.cron, &timezone).map_err(ApiError::unprocessable)?;
    check_prompt(&state, &body.prompt)?;
    check_name(body.name.as_deref())?;
    match (&body.thread_id, &body.thread) {
        (Some(thread), None) => {
            // Another tenant's thread does not exist for the caller.
            if super::access::visible_thread(&state.store, &caller, thread)
                .await
                .is_err()
            {
                return Err(ApiError::unprocessable(format!(
                    "threadId: thread {thread} not found"
                )));
            }
        }
        (None, Some(template)) => check_template(&state, template)?,
        _ => {
            return Err(ApiError::unprocessable(
                "give exactly one of threadId (runs talk to that thread) and thread (a fresh \
                 thread per run)",
            ))
        }
    }
    let template = body
        .thread
        .as_ref()
        .map(serde_json::to_value)
        .transpose()
        .map_err(|err| ApiError::unprocessable(format!("thread: {err}")))?;
    let next = first_tick(&cron)?;
    let id = new_schedule_id();
    let row = state
        .store
        .create_schedule(
            &id,
            NewSchedule {
                name: body.name.as_deref(),
                cron: &body.cron,
                timezone: &timezone,
                thread_id: body.thread_id.as_ref(),
                template: template.as_ref(),
                prompt: &body.prompt,
                overlap: body.overlap.unwrap_or(Overlap::Skip),
                catch_up: body.catch_up.unwrap_or(CatchUp::Once),
                enabled: body.enabled.unwrap_or(true),
                next_run_at: &next,
                // The creator's tenant owns it; its runs act for that tenant, and as the key
                // that made it, if a key did.
                tenant: caller.tenant.as_deref(),
                created_by: crate::keys::is_key_id(&caller.subject)
                    .then_some(caller.subject.as_str()),
            },
        )
        .await?;
    tracing::info!(schedule_id = %row.id, cron = %row.cron, timezone = %row.timezone, "Schedule created.");
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// Every schedule, oldest first.
#[utoipa::path(get, path = "/schedules", operation_id = "listSchedules", tag = "schedules",
    responses(
        (status = 200, description = "The schedules.", body = ScheduleList),
        (status = 400, description = "A bad request.", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<ApiState>,
    Extension(caller): Extension<crate::caller::Caller>,
) -> Result<Json<ScheduleList>, ApiError> {
    let rows = state.store.list_schedules().await?;
    Ok(Json(ScheduleList {
        schedules: rows
            .into_iter()
            .filter(|schedule| caller.sees(schedule.tenant.as_deref()))
            .map(Schedule::from)
            .collect(),
    }))
}

/// One schedule.
#[utoipa::path(get, path = "/schedules/{id}", operation_id = "getSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id (`sch_…`).")),
    responses(
        (status = 200, description = "The schedule.", body = Schedule),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown (or deleted) schedule.", body = ErrorBody),
    ))]
pub async fn get_one(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Schedule>, ApiError> {
    Ok(Json(existing(&state, &id).await?.into()))
}

/// Changes a schedule: a new cron or time zone, or resuming it, starts from the next tick
/// after now.
#[utoipa::path(patch, path = "/schedules/{id}", operation_id = "updateSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id (`sch_…`).")),
    request_body = PatchSchedule,
    responses(
        (status = 200, description = "The schedule as it is now.", body = Schedule),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 404, description = "Unknown (or deleted) schedule.", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`.", body = ErrorBody),
        (status = 422, description = "A mistyped field, a cron or time zone that does not parse, a blank prompt.", body = ErrorBody),
    ))]
pub async fn patch(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PatchSchedule>,
) -> Result<Json<Schedule>, ApiError> {
    Ok(Json(update(&state, &id, body).await?.into()))
}

/// Pauses a schedule: no tick runs until it is resumed (a manual run still does).
#[utoipa::path(post, path = "/schedules/{id}/pause", operation_id = "pauseSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id (`sch_…`).")),
    responses(
        (status = 200, description = "The schedule, paused.", body = Schedule),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown (or deleted) schedule.", body = ErrorBody),
    ))]
pub async fn pause(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Schedule>, ApiError> {
    let body = PatchSchedule {
        enabled: Some(false),
        ..PatchSchedule::default()
    };
    Ok(Json(update(&state, &id, body).await?.into()))
}

/// Resumes a paused schedule from the next tick after now (the ticks while paused are not
/// caught up).
#[utoipa::path(post, path = "/schedules/{id}/resume", operation_id = "resumeSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id (`sch_…`).")),
    responses(
        (status = 200, description = "The schedule, running.", body = Schedule),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown (or deleted) schedule.", body = ErrorBody),
    ))]
pub async fn resume(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Schedule>, ApiError> {
    let body = PatchSchedule {
        enabled: Some(true),
        ..PatchSchedule::default()
    };
    Ok(Json(update(&state, &id, body).await?.into()))
}

/// Deletes a schedule (its runs stay on record, and its threads).
#[utoipa::path(delete, path = "/schedules/{id}", operation_id = "deleteSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id (`sch_…`).")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown (or deleted) schedule.", body = ErrorBody),
    ))]
pub async fn delete(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    if !state.store.delete_schedule(&id).await? {
        return Err(not_found(&id));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Runs a schedule now, paused or not (trigger `manual`); the turn goes on in the background.
#[utoipa::path(post, path = "/schedules/{id}/run", operation_id = "runSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id (`sch_…`).")),
    responses(
        (status = 202, description = "The run, started.", body = RunStarted),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown (or deleted) schedule.", body = ErrorBody),
        (status = 503, description = "The schedule's thread is held by a node that cannot be reached.", body = ErrorBody),
    ))]
pub async fn run(
    State(state): State<ApiState>,
    Extension(caller): Extension<crate::caller::Caller>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let schedule = existing(&state, &id).await?;
    let fence = match &schedule.thread_id {
        Some(thread) => {
            // A thread's run goes where the thread runs.
            let path = format!("/api/schedules/{id}/run");
            let body = axum::body::Bytes::new();
            match super::routing::elsewhere(&state, thread, &headers, &path, body, &caller).await {
                Placed::Here(fence) => fence,
                Placed::There(answer) => return Ok(answer),
            }
        }
        None => None,
    };
    let run_id = state
        .schedules
        .run_now(&id, fence)
        .await
        .map_err(|err| match err {
            RunError::NotFound(id) => not_found(&id),
            RunError::Store(err) => err.into(),
        })?;
    let run = state
        .store
        .schedule_runs(&id, 20)
        .await?
        .into_iter()
        .find(|r| r.id == run_id)
        .map(ScheduleRun::from);
    Ok((StatusCode::ACCEPTED, Json(RunStarted { run_id, run })).into_response())
}

/// The schedule's runs and skipped ticks, newest first: trigger, thread, message, outcome.
#[utoipa::path(get, path = "/schedules/{id}/runs", operation_id = "listScheduleRuns", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id (`sch_…`)."), RunsQuery),
    responses(
        (status = 200, description = "The runs, newest first.", body = RunList),
        (status = 400, description = "A bad path or query string.", body = ErrorBody),
        (status = 404, description = "Unknown (or deleted) schedule.", body = ErrorBody),
        (status = 422, description = "`limit` out of range.", body = ErrorBody),
    ))]
pub async fn runs(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> Result<Json<RunList>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::unprocessable("limit must be between 1 and 1000"));
    }
    existing(&state, &id).await?;
    let rows = state.store.schedule_runs(&id, limit).await?;
    Ok(Json(RunList {
        runs: rows.into_iter().map(ScheduleRun::from).collect(),
    }))
}

async fn existing(state: &ApiState, id: &str) -> Result<ScheduleRow, ApiError> {
    state.store.schedule(id).await?.ok_or_else(|| not_found(id))
}

pub(super) fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("schedule {id} not found"))
}

/// Applies `body` to the schedule; a new cron, time zone or a resume moves its next tick to
/// the first after now.
async fn update(state: &ApiState, id: &str, body: PatchSchedule) -> Result<ScheduleRow, ApiError> {
    let current = existing(state, id).await?;
    let cron = body.cron.clone().unwrap_or_else(|| current.cron.clone());
    let timezone = body
        .timezone
        .clone()
        .unwrap_or_else(|| current.timezone.clone());
    let parsed = Cron::parse(&cron, &timezone).map_err(ApiError::unprocessable)?;
    if let Some(prompt) = &body.prompt {
        check_prompt(state, prompt)?;
    }
    check_name(body.name.as_deref())?;
    let enabled = body.enabled.unwrap_or(current.enabled);
    let restart = body.cron.is_some() || body.timezone.is_some() || (enabled && !current.enabled);
    let next = match restart {
        true => first_tick(&parsed)?,
        false => time_text(current.next_run_at),
    };
    let prompt = body
        .prompt
        .clone()
        .unwrap_or_else(|| current.prompt.clone());
    let name = body.name.clone().or_else(|| current.name.clone());
    let changed = NewSchedule {
        name: name.as_deref(),
        cron: &cron,
        timezone: &timezone,
        prompt: &prompt,
        overlap: body.overlap.unwrap_or(current.overlap),
        catch_up: body.catch_up.unwrap_or(current.catch_up),
        enabled,
        ..as_new(&current, &next)
    };
    state
        .store
        .update_schedule(id, changed)
        .await?
        .ok_or_else(|| not_found(id))
}

fn first_tick(cron: &Cron) -> Result<String, ApiError> {
    cron.next_after(Utc::now())
        .map(time_text)
        .ok_or_else(|| ApiError::unprocessable("cron: it never fires again"))
}

fn check_prompt(state: &ApiState, prompt: &str) -> Result<(), ApiError> {
    if prompt.trim().is_empty() {
        return Err(ApiError::unprocessable("prompt must not be blank"));
    }
    let chars = prompt.chars().count();
    let max = state.config.max_message_chars;
    if chars > max {
        return Err(ApiError::unprocessable(format!(
            "prompt is {chars} characters; the limit is {max}"
        )));
    }
    Ok(())
}

fn check_name(name: Option<&str>) -> Result<(), ApiError> {
    match name {
        Some(name) if name.chars().count() > 200 => Err(ApiError::unprocessable(
            "name must be at most 200 characters",
        )),
        _ => Ok(()),
    }
}

fn check_template(state: &ApiState, template: &ThreadTemplate) -> Result<(), ApiError> {
    if let Some(profile) = &template.profile {
        if !state.config.profile_names().contains(profile) {
            return Err(ApiError::unprocessable(format!(
                "thread.profile: no profile {profile:?}; GET /api/profiles lists them"
            )));
        }
    }
    if let Some(title) = &template.title {
        if title.chars().count() > 500 {
            return Err(ApiError::unprocessable(
                "thread.title must be at most 500 characters",
            ));
        }
    }
    Ok(())
}
