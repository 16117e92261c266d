//! Threads, their messages, prewarm, interrupt and the event stream.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::Json;
use futures::Stream;
use serde::{Deserialize, Serialize};
use tokio_stream::StreamExt;
use tracing::info;

use plugin_contract::{ThreadId, UserContent};

pub mod lifecycle;

use super::error::ErrorBody;
use super::openapi::ThreadEventRef;
use super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiState};
use crate::api;
use crate::api::events::StreamEvent;
use crate::budget::validate_usd;
use crate::pipeline::{NewMessage, Stopped, TurnReply};
use crate::store::{MessageId, NewThread, Usage};
use crate::workspace::WorkspaceRequest;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateThread {
    #[schema(max_length = 500)]
    title: Option<String>,
    /// A model name (1 to 200 characters, not blank); default: the profile's.
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    model: Option<String>,
    /// A JSON Schema (draft 2020-12, an object) every reply must match: `--json-schema`.
    #[schema(value_type = Option<Object>)]
    output_schema: Option<serde_json::Value>,
    /// Most USD the thread's turns may cost together; then its messages get 402.
    #[schema(minimum = 0.0)]
    max_budget_usd: Option<f64>,
    /// Where the thread works: `{"path": "/abs/dir"}`, or a worktree made for it:
    /// `{"repo": "/abs/repo", "worktree": true, "baseRef"?, "branch"?}`. Under
    /// `workspaces.roots` only. Default: a folder of its own.
    workspace: Option<WorkspaceRequest>,
    /// The kind of agent (`GET /api/profiles`); default: the daemon's default profile.
    profile: Option<String>,
    /// A turn cut by a crash, a shutdown or a takeover: `mark` (the default) leaves it
    /// `interrupted`; `retry` runs it again by itself once the thread has a process.
    on_interrupt: Option<crate::store::OnInterrupt>,
    /// The thread's own webhook endpoint: every webhook event of the thread goes there too
    /// (`turn.*`, `permission.requested`, `budget.reached`, `schedule.*`), signed with a
    /// secret of its own, which the answer carries once (`callbackSecret`). An `http(s)` URL;
    /// with `webhooks.allow_private_targets` off, not a loopback or private address.
    #[schema(format = "uri", pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://")]
    callback_url: Option<String>,
}

/// A thread just made: as `GET` shows it, and the secret of its own webhook endpoint, once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedThread {
    #[serde(flatten)]
    pub thread: api::Thread,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// `whsec_…` (Standard Webhooks): the key its callbacks are signed with. Shown only here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_secret: Option<String>,
}

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
    axum::Extension(caller): axum::Extension<crate::caller::Caller>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<impl IntoResponse, ApiError> {
    // Our JSON error for a body over the limit, not axum's plain-text one.
    let body = body?;
    let body: CreateThread = if no_body(&body) {
        CreateThread {
            title: None,
            model: None,
            output_schema: None,
            max_budget_usd: None,
            workspace: None,
            profile: None,
            on_interrupt: None,
            callback_url: None,
        }
    } else {
        super::error::parse_json(&body)?
    };
    if let Some(schema) = &body.output_schema {
        crate::mcp::schema::OutputSchema::compile(schema).map_err(ApiError::unprocessable)?;
    }
    if let Some(budget) = body.max_budget_usd {
        validate_usd(budget, "maxBudgetUsd").map_err(ApiError::unprocessable)?;
    }
    if let Some(url) = &body.callback_url {
        state
            .webhooks
            .check_callback(url)
            .map_err(|err| ApiError::unprocessable(format!("callbackUrl: {err}")))?;
    }
    let thread = state
        .pipeline
        .create_thread(
            NewThread {
                title: body.title,
                model: body.model,
                output_schema: body.output_schema,
                max_budget_usd: body.max_budget_usd,
                profile: body.profile,
                on_interrupt: body.on_interrupt.unwrap_or_default(),
                // The creator's tenant owns it.
                tenant: caller.tenant,
                ..NewThread::default()
            },
            body.workspace.as_ref(),
        )
        .await?;
    let callback_secret = match &body.callback_url {
        Some(url) => {
            let secret = crate::webhooks::Signer::generate_secret();
            state
                .store
                .set_thread_callback(&thread.id, url, &secret)
                .await?;
            Some(secret)
        }
        None => None,
    };
    info!(thread_id = %thread.id, callback = body.callback_url.is_some(), "Thread created.");
    Ok((
        StatusCode::CREATED,
        Json(CreatedThread {
            thread: api::Thread::from(thread),
            callback_url: body.callback_url,
            callback_secret,
        }),
    ))
}

/// An optional body that is not there: empty, blank, or JSON `null` (as the document allows).
fn no_body(body: &[u8]) -> bool {
    let text = body.trim_ascii();
    text.is_empty() || text == b"null"
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkThread {
    title: Option<String>,
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
    let thread = state.pipeline.fork_thread(&parent, body.title).await?;
    Ok((StatusCode::CREATED, Json(api::Thread::from(thread))))
}

/// `GET /api/threads/{id}`: the thread, what its turns cost together, and its messages (oldest
/// first, each reply with its own usage).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ThreadWithMessages {
    #[serde(flatten)]
    pub thread: api::Thread,
    /// The thread's own webhook endpoint, when it was made with one (its secret is never shown
    /// again).
    #[serde(rename = "callbackUrl", skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    pub usage: Usage,
    pub tags: Vec<String>,
    /// The last page of its messages (50), oldest first.
    pub messages: Vec<api::Message>,
    /// `before` for `GET /api/threads/{id}/messages`: the page of messages older than these;
    /// `null` when these are all of them.
    #[serde(rename = "messagesCursor")]
    pub messages_cursor: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OutcomeList {
    pub outcomes: Vec<api::Outcome>,
}

/// The id of thread `id`'s user message `message_id`; 404 when the thread has none by it.
async fn user_message(
    state: &ApiState,
    id: String,
    message_id: String,
) -> Result<MessageId, ApiError> {
    let (id, message_id) = (
        ThreadId::from_string(id),
        MessageId::from_string(message_id),
    );
    let message = state.store.get_message(&message_id).await?;
    if !message.is_some_and(|m| m.thread_id == id && m.role == crate::store::Role::User) {
        return Err(ApiError::not_found(format!(
            "thread {id} has no user message {message_id}"
        )));
    }
    Ok(message_id)
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
    ApiPath((id, message_id)): ApiPath<(String, String)>,
) -> Result<Json<OutcomeList>, ApiError> {
    let message_id = user_message(&state, id, message_id).await?;
    let rows = state.store.outcomes_of(&message_id).await?;
    Ok(Json(OutcomeList {
        outcomes: rows.into_iter().map(api::Outcome::from).collect(),
    }))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequestList {
    pub model_requests: Vec<api::ModelRequest>,
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
    ApiPath((id, message_id)): ApiPath<(String, String)>,
) -> Result<Json<ModelRequestList>, ApiError> {
    let message_id = user_message(&state, id, message_id).await?;
    let rows = state.store.model_requests_of(&message_id).await?;
    Ok(Json(ModelRequestList {
        model_requests: rows.into_iter().map(api::ModelRequest::from).collect(),
    }))
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
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ThreadWithMessages>, ApiError> {
    let id = ThreadId::from_string(id);
    Ok(Json(thread_with_messages(&state, &id).await?))
}

pub(super) async fn thread_with_messages(
    state: &ApiState,
    id: &ThreadId,
) -> Result<ThreadWithMessages, ApiError> {
    let thread = state.store.require_thread(id).await?;
    let usage = state.store.thread_usage(id).await?;
    let mut page = api::pages::messages(&state.store, id, None, api::pages::DEFAULT_LIMIT)
        .await
        .map_err(ApiError::from)?;
    page.messages.reverse();
    let callback = state.store.thread_callback(id).await?;
    let tags = state.store.tags_of(std::slice::from_ref(id)).await?;
    Ok(ThreadWithMessages {
        thread: thread.into(),
        callback_url: callback.map(|c| c.url),
        usage,
        tags: tags.into_iter().map(|(_, tag)| tag).collect(),
        messages: page.messages,
        messages_cursor: page.next_cursor,
    })
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostMessage {
    /// The message: a string (not blank, at most `max_message_chars`), or a list of content
    /// blocks in the Messages API's shape: `text`, and `image` or `document` whose `source` is
    /// `{"type": "base64", "media_type", "data"}` or a file uploaded before,
    /// `{"type": "file", "fileId": "file_…"}`. Images are PNG, JPEG, GIF or WebP; documents PDF.
    content: UserContent,
    client_message_id: Option<String>,
    /// This turn's model (1 to 200 characters, not blank).
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    model: Option<String>,
    /// This turn's permission mode (`plan`, say), no wider than the profile's own.
    #[schema(value_type = Option<PermissionModeName>)]
    permission_mode: Option<String>,
    /// This turn's external MCP servers, by name: some of the profile's; the others are
    /// switched off for the turn, in place. Omitted: all of the profile's.
    mcp_servers: Option<Vec<String>>,
}

/// A permission mode, as the CLI names it (for the document: the field is checked against the
/// profile's own mode as a string).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // Never built: it names the values in the document.
pub enum PermissionModeName {
    Plan,
    DontAsk,
    Default,
    AcceptEdits,
    BypassPermissions,
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PostQuery {
    /// `false`: answer 202 as soon as the message is stored; the reply comes as events.
    wait: Option<bool>,
}

/// `202` to `POST …/messages?wait=false`: the message is stored; its reply comes as events.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageAccepted {
    pub message_id: MessageId,
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    /// A repeat of a `clientMessageId` already seen.
    pub duplicate: bool,
    /// Always `accepted`.
    pub status: &'static str,
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
    axum::Extension(caller): axum::Extension<crate::caller::Caller>,
    fence: Option<axum::Extension<crate::store::Fence>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<PostQuery>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<axum::response::Response, ApiError> {
    let msg = NewMessage {
        traceparent: crate::traces::traceparent_of(&headers),
        thread_id: ThreadId::from_string(id),
        content: body.content,
        client_message_id: body.client_message_id,
        model: body.model,
        permission_mode: body.permission_mode,
        mcp_servers: body.mcp_servers,
        timeout: None,
        // Set by `routing::to_owner` when clustering is on.
        fence: fence.map(|axum::Extension(fence)| fence),
        unattended: false,
        caller,
    };
    let accepted = state.pipeline.accept_message(msg).await?;
    if query.wait == Some(false) {
        let body = MessageAccepted {
            message_id: accepted.message_id.clone(),
            thread_id: accepted.thread_id.clone(),
            duplicate: accepted.duplicate,
            status: "accepted",
        };
        return Ok((StatusCode::ACCEPTED, Json(body)).into_response());
    }
    let reply: TurnReply = accepted.finish().await?;
    Ok(Json(api::Reply::from(reply)).into_response())
}

impl From<TurnReply> for api::Reply {
    fn from(reply: TurnReply) -> Self {
        api::Reply {
            message: reply.message.into(),
            thread_id: reply.thread_id,
            session_id: reply.session_id,
            user_message_id: reply.user_message_id,
        }
    }
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prewarm {
    thread_id: String,
    /// The model to start it on (1 to 200 characters, not blank); default: the thread's.
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    model: Option<String>,
}

/// `202` to `POST /api/prewarm`: the process starts in the background.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Warming {
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    /// Always `warming`.
    pub status: &'static str,
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
    axum::Extension(caller): axum::Extension<crate::caller::Caller>,
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
    state.pipeline.prewarm(&thread_id, body.model).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Warming {
            thread_id,
            status: "warming",
        }),
    )
        .into_response())
}

/// `POST /api/threads/{id}/interrupt`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interrupted {
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    /// False when no turn (of that message, with `clientMessageId`) was running.
    pub interrupted: bool,
    /// With `clientMessageId`: the message still waited in line, and will not run.
    pub withdrawn: bool,
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
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<InterruptQuery>,
) -> Result<Json<Interrupted>, ApiError> {
    let id = ThreadId::from_string(id);
    let (interrupted, withdrawn) = match &query.client_message_id {
        Some(client) => {
            state.store.require_thread(&id).await?;
            match state.pipeline.stop_message(&id, client).await? {
                Stopped::Withdrawn => (false, true),
                Stopped::Interrupted => (true, false),
                Stopped::Neither => (false, false),
            }
        }
        None => (state.pipeline.interrupt(&id).await?, false),
    };
    Ok(Json(Interrupted {
        thread_id: id,
        interrupted,
        withdrawn,
    }))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Same as the `Last-Event-ID` header: only events after this id.
    after: Option<i64>,
}

/// Server-Sent Events of the thread's turns. Replays stored events after `Last-Event-ID`, then
/// streams live ones; keep-alive comments hold idle connections open.
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
    let Ok(permit) = state.streams.clone().try_acquire_owned() else {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "every event stream this daemon allows is open (http.max_streams); try again later",
        ));
    };
    let header_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let after = header_id.or(query.after).unwrap_or(0);
    // Ends with the client, with the daemon's shutdown, or when the bus closes.
    let follow = state.pipeline.follow(&id, after).await;
    let stream = follow.into_stream(state.pipeline.stopping().clone());
    let stream = stream.map(move |row| {
        let _held = &permit;
        let (id, kind) = (row.id.to_string(), row.kind.clone());
        let frame = serde_json::to_string(&StreamEvent::from(row)).unwrap_or_default();
        Ok(Event::default().id(id).event(kind).data(frame))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The request parsers under arbitrary input (a property test through the whole router, no
/// socket), and the input limits. Messages are posted with `?wait=false`: the daemon's CLI is a
/// path that does not exist, and a turn that cannot start is a 503 by design, not a parser bug.
#[cfg(test)]
mod tests;
