//! Threads, their messages, prewarm, interrupt and the event stream: adapters over the thread
//! service (`crate::service`), whose bodies are `crate::api::threads`; the event stream is here.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::{Extension, Json};

use futures::{Stream, StreamExt};
use serde::Deserialize;

use plugin_contract::ThreadId;

pub mod lifecycle;

use super::error::ErrorBody;
use super::openapi::ThreadEventRef;
use super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiState};
use crate::api;
use crate::api::events::StreamEvent;
pub use crate::api::threads::{
    CreateThread, CreatedThread, ForkThread, Interrupted, MessageAccepted, ModelRequestList,
    OutcomeList, PostMessage, Prewarm, ThreadWithMessages, Warming,
};
use crate::caller::Caller;
use crate::service::SendMessage;
use crate::store::{EventRow, MessageId};

/// The body is optional: an empty POST creates an untitled thread with the default model.
#[utoipa::path(post, path = "/threads", operation_id = "createThread", tag = "threads",
    request_body(content = Option<CreateThread>, description = "Optional: an empty body makes an untitled thread on the default model."),
    responses(
        (status = 201, description = "The thread; a parked spare on the same model becomes its process. With a `callbackUrl`, the secret its callbacks are signed with, shown this once.", body = CreatedThread),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 409, description = "The worktree's `branch` exists already (`branch_exists`).", body = ErrorBody),
        (status = 422, description = "A mistyped field, an `outputSchema` that does not compile or that the CLI could not run (an unknown keyword, a non-ECMAScript pattern, a `$ref` cycle, over 64 KiB, 32 levels or 2,000 subschemas), an unknown `profile` or a field it keeps for itself (`overridable`), a `callbackUrl` refused (not http(s), or a private address while `webhooks.allow_private_targets` is off), or a workspace refused (`invalid_workspace`: outside `workspaces.roots`, not a folder or repository, an unknown `baseRef`).", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<impl IntoResponse, ApiError> {
    // Our JSON error for a body over the limit, not axum's plain-text one.
    let body = body?;
    let body: CreateThread = if no_body(&body) {
        CreateThread::default()
    } else {
        super::error::parse_json(&body)?
    };
    let created = state.threads.create(&caller, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// An optional body that is not there: empty, blank, or JSON `null` (as the document allows).
fn no_body(body: &[u8]) -> bool {
    let text = body.trim_ascii();
    text.is_empty() || text == b"null"
}

/// `POST /api/threads/{id}/fork` (body optional): 201, a new thread with `parentId` set that
/// carries the thread's history and forks its CLI session.
#[utoipa::path(post, path = "/threads/{id}/fork", operation_id = "forkThread", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    request_body(content = Option<ForkThread>, description = "Optional."),
    responses(
        (status = 201, description = "The new thread, `parentId` set, with a copy of the parent's finished messages.", body = api::Thread),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 422, description = "A mistyped field.", body = ErrorBody),
    ))]
pub async fn fork(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let body = body?;
    let body: ForkThread = if no_body(&body) {
        ForkThread::default()
    } else {
        super::error::parse_json(&body)?
    };
    let parent = ThreadId::from_string(id);
    let thread = state.threads.fork(&caller, &parent, body).await?;
    Ok((StatusCode::CREATED, Json(thread)))
}

/// How each run of a user message ended, oldest first: one entry per run (a re-driven message
/// has one per attempt).
#[utoipa::path(get, path = "/threads/{id}/messages/{message_id}/outcomes", operation_id = "listMessageOutcomes", tag = "threads",
    params(
        ("id" = String, Path, description = "The thread's id (`thr_…`)."),
        ("message_id" = String, Path, description = "A user message's id (`msg_…`)."),
    ),
    responses(
        (status = 200, description = "The runs' outcomes, oldest first (none while the first run goes on).", body = OutcomeList),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown thread, or no user message of it by that id.", body = ErrorBody),
    ))]
pub async fn outcomes(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath((id, message_id)): ApiPath<(String, String)>,
) -> Result<Json<OutcomeList>, ApiError> {
    let (id, message) = (
        ThreadId::from_string(id),
        MessageId::from_string(message_id),
    );
    Ok(Json(state.threads.outcomes(&caller, &id, &message).await?))
}

/// The model requests of a user message's turns, oldest first, as the model gateway metered
/// them: tokens, cost, latency and status of each, its refusals included.
#[utoipa::path(get, path = "/threads/{id}/messages/{message_id}/model-requests", operation_id = "listModelRequests", tag = "threads",
    params(
        ("id" = String, Path, description = "The thread's id (`thr_…`)."),
        ("message_id" = String, Path, description = "A user message's id (`msg_…`)."),
    ),
    responses(
        (status = 200, description = "Its model requests, oldest first (none with `gateway.enabled = false`).", body = ModelRequestList),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown thread, or no user message of it by that id.", body = ErrorBody),
    ))]
pub async fn model_requests(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath((id, message_id)): ApiPath<(String, String)>,
) -> Result<Json<ModelRequestList>, ApiError> {
    let (id, message) = (
        ThreadId::from_string(id),
        MessageId::from_string(message_id),
    );
    Ok(Json(
        state.threads.model_requests(&caller, &id, &message).await?,
    ))
}

/// One thread with its last page of messages, oldest first.
#[utoipa::path(get, path = "/threads/{id}", operation_id = "getThread", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    responses(
        (status = 200, description = "The thread and its last page of messages.", body = ThreadWithMessages),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
    ))]
pub async fn get_one(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ThreadWithMessages>, ApiError> {
    let id = ThreadId::from_string(id);
    Ok(Json(state.threads.get(&caller, &id).await?))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PostQuery {
    /// `false`: answer 202 as soon as the message is stored; the reply comes as events.
    wait: Option<bool>,
}

/// Stores the message, runs its turn (one at a time per thread) and answers with the reply. A
/// repeated `clientMessageId` answers with the first run's outcome.
#[utoipa::path(post, path = "/threads/{id}/messages", operation_id = "postMessage", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`)."), PostQuery),
    request_body = PostMessage,
    responses(
        (status = 200, description = "The reply.", body = api::Reply),
        (status = 202, description = "With `wait=false`: stored; the reply comes on the event stream.", body = MessageAccepted),
        (status = 402, description = "A budget is spent (`budget_exceeded`, with `budget`, `limitUsd`, `spentUsd`): the message is stored `refused`; nothing reached the model.", body = ErrorBody),
        (status = 400, description = "Malformed JSON or query.", body = ErrorBody),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 409, description = "A `clientMessageId` reused with other content, the turn was interrupted, or the thread's workspace is not on this node (`workspace_unavailable`).", body = ErrorBody),
        (status = 413, description = "The body, a file or the message's files together are larger than allowed (`max_body_bytes`, `files.max_file_bytes`, `files.max_message_bytes`).", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`, or an image or document of a type the API does not take (`unsupported_media_type`).", body = ErrorBody),
        (status = 422, description = "A missing or invalid field; an image or document whose bytes are not its media type (`media_type_mismatch`), whose base64 does not decode, or a file reference to no file of the caller's (`invalid_content`).", body = ErrorBody),
        (status = 429, description = "Too many messages queued on the thread.", body = ErrorBody),
        (status = 502, description = "The CLI failed, `turn.max_tool_calls` was passed, or no valid structured output; with clustering, also the owning node failed to answer a forwarded request (`owner_failed`).", body = ErrorBody),
        (status = 503, description = "The CLI cannot be started, or the daemon is shutting down; with clustering, the thread is moving between nodes (`not_owner`) or another node took it over during the turn (`lease_lost`): retry with the same `clientMessageId`.", body = ErrorBody),
        (status = 504, description = "The turn timed out.", body = ErrorBody),
    ))]
pub async fn post_message(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    fence: Option<Extension<crate::store::Fence>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<PostQuery>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<axum::response::Response, ApiError> {
    let message = SendMessage {
        thread: ThreadId::from_string(id),
        body,
        // Set by `routing::to_owner` when clustering is on.
        fence: fence.map(|Extension(fence)| fence),
        traceparent: crate::traces::traceparent_of(&headers),
    };
    let accepted = state.threads.send(&caller, message).await?;
    if query.wait == Some(false) {
        let body = MessageAccepted {
            message_id: accepted.message_id.clone(),
            thread_id: accepted.thread_id.clone(),
            duplicate: accepted.duplicate,
            status: "accepted",
        };
        return Ok((StatusCode::ACCEPTED, Json(body)).into_response());
    }
    let reply = accepted.finish().await?;
    Ok(Json(api::Reply::from(reply)).into_response())
}

/// Starts the thread's process in the background; answers at once.
#[utoipa::path(post, path = "/prewarm", operation_id = "prewarm", tag = "pool",
    request_body = Prewarm,
    responses(
        (status = 202, description = "The process is starting (with clustering: on the node that owns the thread).", body = Warming),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 503, description = "With clustering: the thread's owner cannot be reached, or the thread is moving between nodes (`not_owner`); retry.", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`.", body = ErrorBody),
        (status = 422, description = "A missing or invalid field.", body = ErrorBody),
    ))]
pub async fn prewarm(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: axum::http::HeaderMap,
    ApiJson(body): ApiJson<Prewarm>,
) -> Result<axum::response::Response, ApiError> {
    let thread_id = ThreadId::from_string(body.thread_id);
    super::access::visible_thread(&state.store, &caller, &thread_id).await?;
    // With clustering the process starts on the thread's owner.
    let forwarded_body = serde_json::json!({"threadId": thread_id, "model": body.model});
    let placed = super::routing::elsewhere(
        &state,
        &thread_id,
        &headers,
        "/api/prewarm",
        forwarded_body.to_string().into(),
        &caller,
    )
    .await;
    if let super::routing::Placed::There(answer) = placed {
        return Ok(answer);
    }
    let warming = state
        .threads
        .prewarm(&caller, &thread_id, body.model)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(warming)).into_response())
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct InterruptQuery {
    /// Stop only this message (its `clientMessageId`): withdrawn while it waits in line,
    /// interrupted once it runs; another message's turn goes on.
    client_message_id: Option<String>,
}

/// Interrupts the running turn; its message ends `interrupted`. With `clientMessageId`, only
/// that message's: a message still waiting in line is withdrawn instead.
#[utoipa::path(post, path = "/threads/{id}/interrupt", operation_id = "interruptThread", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`)."), InterruptQuery),
    responses(
        (status = 200, description = "Whether a turn was interrupted, or the message withdrawn.", body = Interrupted),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 503, description = "With clustering: the thread is moving between nodes (`not_owner`); retry.", body = ErrorBody),
    ))]
pub async fn interrupt(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<InterruptQuery>,
) -> Result<Json<Interrupted>, ApiError> {
    let id = ThreadId::from_string(id);
    let client = query.client_message_id.as_deref();
    Ok(Json(state.threads.interrupt(&caller, &id, client).await?))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Same as the `Last-Event-ID` header: only events after this id.
    after: Option<i64>,
    /// `false`: the stored events only; the stream ends after the newest (a replay of the log,
    /// with no live events). Default `true`.
    live: Option<bool>,
}

/// Server-Sent Events of the thread's turns. Replays stored events after `Last-Event-ID`, then
/// streams live ones; keep-alive comments hold idle connections open. With `live=false` it ends
/// after the stored ones.
#[utoipa::path(get, path = "/threads/{id}/events", operation_id = "threadEvents", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`)."), EventsQuery,
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event id (wins over `after`).")),
    responses(
        (status = 200, description = "Server-Sent Events: each frame's `event:` is the kind, `id:` the event id, `data:` a `ThreadEvent` (see the `…Event` schemas for each kind's `data`).",
         content_type = "text/event-stream", body = inline(ThreadEventRef)),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 503, description = "Every event stream the daemon allows is open (`too_many_streams`, `http.max_streams`).", body = ErrorBody),
    ))]
pub async fn events(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let id = ThreadId::from_string(id);
    state.store.require_thread(&id).await?;
    // Held while the stream runs: streams alone cannot take every connection.
    let permit = state.streams.take()?;
    let header_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let after = header_id.or(query.after).unwrap_or(0);
    let frame = move |row: EventRow| {
        let _held = &permit;
        let (id, kind) = (row.id.to_string(), row.kind.clone());
        let frame = serde_json::to_string(&StreamEvent::from(row)).unwrap_or_default();
        Ok::<_, Infallible>(Event::default().id(id).event(kind).data(frame))
    };
    // Ends with the client, with the daemon's shutdown, or when the bus closes; with
    // `live=false` after the newest stored event.
    let follow = match query.live {
        Some(false) => state.pipeline.stored_events(&id, after),
        _ => state.pipeline.follow(&id, after).await,
    };
    let stream = follow.into_stream(state.pipeline.stopping().clone());
    let stream = stream.map(frame);
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The request parsers under arbitrary input (a property test through the whole router, no
/// socket), and the input limits. Messages are posted with `?wait=false`: the daemon's CLI is a
/// path that does not exist, and a turn that cannot start is a 503 by design, not a parser bug.
#[cfg(test)]
mod tests;
