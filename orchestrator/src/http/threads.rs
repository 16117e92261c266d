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
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tracing::{info, warn};

use plugin_contract::ThreadId;

use super::error::ErrorBody;
use super::openapi::ThreadEventRef;
use super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiState};
use crate::api;
use crate::api::events::StreamEvent;
use crate::budget::validate_usd;
use crate::pipeline::{NewMessage, TurnReply};
use crate::store::{EventRow, MessageId, NewThread, Usage};
use crate::workspace::WorkspaceRequest;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateThread {
    title: Option<String>,
    model: Option<String>,
    /// A JSON Schema (draft 2020-12) every reply must match: `--json-schema`.
    output_schema: Option<serde_json::Value>,
    /// Most USD the thread's turns may cost together; then its messages get 402.
    max_budget_usd: Option<f64>,
    /// Where the thread works: `{"path": "/abs/dir"}`, or a worktree made for it:
    /// `{"repo": "/abs/repo", "worktree": true, "baseRef"?, "branch"?}`. Under
    /// `workspaces.roots` only. Default: a folder of its own.
    workspace: Option<WorkspaceRequest>,
    /// The kind of agent (`GET /api/profiles`); default: the daemon's default profile.
    profile: Option<String>,
}

/// The body is optional: an empty POST creates an untitled thread with the default model.
#[utoipa::path(post, path = "/threads", operation_id = "createThread", tag = "threads",
    request_body(content = Option<CreateThread>, description = "Optional: an empty body makes an untitled thread on the default model."),
    responses(
        (status = 201, description = "The thread; a parked spare on the same model becomes its process.", body = api::Thread),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 409, description = "The worktree's `branch` exists already (`branch_exists`).", body = ErrorBody),
        (status = 422, description = "A mistyped field, an `outputSchema` that does not compile, an unknown `profile` or a field it keeps for itself (`overridable`), or a workspace refused (`invalid_workspace`: outside `workspaces.roots`, not a folder or repository, an unknown `baseRef`).", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<ApiState>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<impl IntoResponse, ApiError> {
    // Our JSON error for a body over the limit, not axum's plain-text one.
    let body = body?;
    let body: CreateThread = if body.iter().all(u8::is_ascii_whitespace) {
        CreateThread {
            title: None,
            model: None,
            output_schema: None,
            max_budget_usd: None,
            workspace: None,
            profile: None,
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
    let thread = state
        .pipeline
        .create_thread(
            NewThread {
                title: body.title,
                model: body.model,
                output_schema: body.output_schema,
                max_budget_usd: body.max_budget_usd,
                profile: body.profile,
                ..NewThread::default()
            },
            body.workspace.as_ref(),
        )
        .await?;
    info!(thread_id = %thread.id, "Thread created.");
    Ok((StatusCode::CREATED, Json(api::Thread::from(thread))))
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
    let body: ForkThread = if body.iter().all(u8::is_ascii_whitespace) {
        ForkThread::default()
    } else {
        super::error::parse_json(&body)?
    };
    let parent = ThreadId::from_string(id);
    let thread = state.pipeline.fork_thread(&parent, body.title).await?;
    Ok((StatusCode::CREATED, Json(api::Thread::from(thread))))
}

/// `GET /api/threads`: newest first, each with `lastActivityAt` and `running`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ThreadList {
    pub threads: Vec<api::ThreadSummary>,
}

/// Every thread, newest first.
#[utoipa::path(get, path = "/threads", operation_id = "listThreads", tag = "threads",
    responses((status = 200, description = "The threads.", body = ThreadList)))]
pub async fn list(State(state): State<ApiState>) -> Result<Json<ThreadList>, ApiError> {
    Ok(Json(ThreadList {
        threads: state
            .store
            .list_thread_summaries()
            .await?
            .into_iter()
            .map(api::ThreadSummary::from)
            .collect(),
    }))
}

/// `GET /api/threads/{id}`: the thread, what its turns cost together, and its messages (oldest
/// first, each reply with its own usage).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ThreadWithMessages {
    #[serde(flatten)]
    pub thread: api::Thread,
    pub usage: Usage,
    pub messages: Vec<api::Message>,
}

/// One thread with its messages, oldest first.
#[utoipa::path(get, path = "/threads/{id}", operation_id = "getThread", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    responses(
        (status = 200, description = "The thread and its messages.", body = ThreadWithMessages),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
    ))]
pub async fn get_one(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ThreadWithMessages>, ApiError> {
    let id = ThreadId::from_string(id);
    Ok(Json(thread_with_messages(&state, &id).await?))
}

async fn thread_with_messages(
    state: &ApiState,
    id: &ThreadId,
) -> Result<ThreadWithMessages, ApiError> {
    let thread = state.store.require_thread(id).await?;
    let usage = state.store.thread_usage(id).await?;
    let messages = state.store.list_messages(id).await?;
    Ok(ThreadWithMessages {
        thread: thread.into(),
        usage,
        messages: api::messages(messages),
    })
}

/// `PATCH /api/threads/{id}`: the fields given change; `"maxBudgetUsd": null` removes the limit.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchThread {
    /// Absent: unchanged; `null`: no limit; a number (USD, zero or more): the new limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>)]
    max_budget_usd: Option<Option<f64>>,
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

/// Changes the thread's settings: its budget.
#[utoipa::path(patch, path = "/threads/{id}", operation_id = "updateThread", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    request_body = PatchThread,
    responses(
        (status = 200, description = "The thread as `GET` shows it.", body = ThreadWithMessages),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`.", body = ErrorBody),
        (status = 422, description = "An unknown field, or an amount that is negative or not a number.", body = ErrorBody),
    ))]
pub async fn patch(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PatchThread>,
) -> Result<Json<ThreadWithMessages>, ApiError> {
    let id = ThreadId::from_string(id);
    if let Some(budget) = body.max_budget_usd {
        if let Some(usd) = budget {
            validate_usd(usd, "maxBudgetUsd").map_err(ApiError::unprocessable)?;
        }
        state.pipeline.set_thread_budget(&id, budget).await?;
        info!(thread_id = %id, max_budget_usd = ?budget, "Thread budget set.");
    }
    Ok(Json(thread_with_messages(&state, &id).await?))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostMessage {
    content: String,
    client_message_id: Option<String>,
    model: Option<String>,
    /// This turn's permission mode (`plan`, say), no wider than the profile's own.
    permission_mode: Option<String>,
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
        (status = 415, description = "A body that is not `application/json`.", body = ErrorBody),
        (status = 422, description = "A missing or invalid field.", body = ErrorBody),
        (status = 429, description = "Too many messages queued on the thread.", body = ErrorBody),
        (status = 502, description = "The CLI failed, `turn.max_tool_calls` was passed, or no valid structured output; with clustering, also the owning node failed to answer a forwarded request (`owner_failed`).", body = ErrorBody),
        (status = 503, description = "The CLI cannot be started, or the daemon is shutting down; with clustering, the thread is moving between nodes (`not_owner`) or another node took it over during the turn (`lease_lost`): retry with the same `clientMessageId`.", body = ErrorBody),
        (status = 504, description = "The turn timed out.", body = ErrorBody),
    ))]
pub async fn post_message(
    State(state): State<ApiState>,
    fence: Option<axum::Extension<crate::store::Fence>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<PostQuery>,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<axum::response::Response, ApiError> {
    let msg = NewMessage {
        thread_id: ThreadId::from_string(id),
        content: body.content,
        client_message_id: body.client_message_id,
        model: body.model,
        permission_mode: body.permission_mode,
        timeout: None,
        // Set by `routing::to_owner` when clustering is on.
        fence: fence.map(|axum::Extension(fence)| fence),
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
    headers: axum::http::HeaderMap,
    ApiJson(body): ApiJson<Prewarm>,
) -> Result<axum::response::Response, ApiError> {
    let thread_id = ThreadId::from_string(body.thread_id);
    // With clustering the process starts on the thread's owner.
    let forwarded_body = serde_json::json!({"threadId": thread_id, "model": body.model});
    if let Some(answer) = super::routing::elsewhere(
        &state,
        &thread_id,
        &headers,
        "/api/prewarm",
        forwarded_body.to_string().into(),
    )
    .await
    {
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
    /// False when no turn was running.
    pub interrupted: bool,
}

/// Interrupts the running turn; its message ends `interrupted`.
#[utoipa::path(post, path = "/threads/{id}/interrupt", operation_id = "interruptThread", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    responses(
        (status = 200, description = "Whether a turn was interrupted.", body = Interrupted),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 503, description = "With clustering: the thread is moving between nodes (`not_owner`); retry.", body = ErrorBody),
    ))]
pub async fn interrupt(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Interrupted>, ApiError> {
    let id = ThreadId::from_string(id);
    let interrupted = state.pipeline.interrupt(&id).await?;
    Ok(Json(Interrupted {
        thread_id: id,
        interrupted,
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
    ))]
pub async fn events(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let id = ThreadId::from_string(id);
    state.store.require_thread(&id).await?;
    let header_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let after = header_id.or(query.after).unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel::<EventRow>(256);
    // Subscribe before reading the store, so nothing falls between the two.
    let mut live = state.pipeline.subscribe(&id).await;
    let stop = state.pipeline.stopping().clone();
    let store = state.store.clone();
    // Ends with the client, with the daemon's shutdown, or when the bus closes.
    tokio::spawn(async move {
        let mut last = after;
        if !replay(&store, &id, &mut last, &tx).await {
            return;
        }
        loop {
            tokio::select! {
                received = live.recv() => match received {
                    Ok(row) if row.id > last => {
                        last = row.id;
                        if tx.send(row).await.is_err() { return; }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        if !replay(&store, &id, &mut last, &tx).await { return; }
                    }
                    Err(RecvError::Closed) => return,
                },
                _ = tx.closed() => return,
                _ = stop.cancelled() => return,
            }
        }
    });
    let stream = ReceiverStream::new(rx).map(|row| {
        let (id, kind) = (row.id.to_string(), row.kind.clone());
        let frame = serde_json::to_string(&StreamEvent::from(row)).unwrap_or_default();
        Ok(Event::default().id(id).event(kind).data(frame))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Sends stored events after `last`; false when the client has gone.
async fn replay(
    store: &crate::store::Store,
    thread: &ThreadId,
    last: &mut i64,
    tx: &tokio::sync::mpsc::Sender<EventRow>,
) -> bool {
    loop {
        let rows = match store.events_after(thread, *last, 500).await {
            Ok(rows) => rows,
            Err(err) => {
                warn!(thread_id = %thread, error = %err, "Could not read stored events.");
                return false;
            }
        };
        if rows.is_empty() {
            return true;
        }
        for row in rows {
            *last = row.id;
            if tx.send(row).await.is_err() {
                return false;
            }
        }
    }
}

/// The request parsers under arbitrary input (a property test through the whole router, no
/// socket), and the input limits. Messages are posted with `?wait=false`: the daemon's CLI is a
/// path that does not exist, and a turn that cannot start is a 503 by design, not a parser bug.
#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use proptest::prelude::*;
    use proptest::test_runner::{Config as RunnerConfig, TestRunner};
    use serde_json::{json, Map, Value};
    use tower::ServiceExt;

    use crate::config::Config;
    use crate::server::Daemon;
    use crate::store::NewThread;

    struct Fixture {
        runtime: tokio::runtime::Runtime,
        router: axum::Router,
        thread: String,
        _daemon: Daemon,
        _dir: tempfile::TempDir,
    }

    const MAX_BODY: usize = 4096;
    const MAX_CHARS: usize = 100;

    fn fixture() -> Fixture {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            data_dir: dir.path().to_path_buf(),
            db: Some(":memory:".into()),
            max_body_bytes: MAX_BODY,
            max_message_chars: MAX_CHARS,
            ..Default::default()
        };
        config.claude.bin = "/nonexistent/claude".into();
        config.turn.queue_limit = 1_000_000;
        let plugins: Vec<std::sync::Arc<dyn plugin_contract::Plugin>> =
            vec![std::sync::Arc::new(harness_plugin_time::TimePlugin)];
        let daemon = runtime.block_on(Daemon::build(config, plugins)).unwrap();
        let thread = runtime
            .block_on(daemon.store.create_thread(NewThread::default()))
            .unwrap()
            .id
            .to_string();
        Fixture {
            router: super::super::router(daemon.api_state()),
            runtime,
            thread,
            _daemon: daemon,
            _dir: dir,
        }
    }

    impl Fixture {
        fn call(&self, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Value) {
            let request = Request::builder()
                .method(method)
                .uri(uri)
                .header("host", "127.0.0.1:7878")
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap();
            self.runtime.block_on(async {
                let response = self.router.clone().oneshot(request).await.unwrap();
                let status = response.status();
                let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                    .await
                    .unwrap();
                (
                    status,
                    serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                )
            })
        }

        fn post_json(&self, uri: &str, body: Value) -> (StatusCode, Value) {
            self.call("POST", uri, body.to_string().into_bytes())
        }

        fn messages_uri(&self) -> String {
            format!("/api/threads/{}/messages?wait=false", self.thread)
        }
    }

    /// JSON that looks like our request bodies: the fields they have, values of any type.
    fn body_like() -> impl Strategy<Value = Vec<u8>> {
        let field = prop::sample::select(
            &[
                "content",
                "clientMessageId",
                "model",
                "title",
                "threadId",
                "wait",
                "",
            ][..],
        );
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,40}".prop_map(Value::String),
            "\\PC{0,200}".prop_map(Value::String),
        ];
        let value = leaf.prop_recursive(3, 24, 4, |inner| {
            prop::collection::vec(inner, 0..4).prop_map(Value::Array)
        });
        let object = prop::collection::vec((field, value), 0..5).prop_map(|fields| {
            Value::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect::<Map<_, _>>(),
            )
        });
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..600),
            ".{0,200}".prop_map(String::into_bytes),
            object.prop_map(|v| v.to_string().into_bytes()),
            prop::collection::vec(any::<u8>(), MAX_BODY - 8..MAX_BODY + 64),
        ]
    }

    #[test]
    fn arbitrary_bodies_never_get_a_5xx() {
        let fixture = fixture();
        let uris = [
            fixture.messages_uri(),
            "/api/prewarm".into(),
            "/api/threads".into(),
        ];
        let mut runner = TestRunner::new(RunnerConfig {
            cases: 200,
            ..RunnerConfig::default()
        });
        let text = || prop_oneof!["\\PC{0,150}", ".{0,20}", any::<String>()];
        let optional = || prop::option::of(text());
        let message = (text(), optional(), optional()).prop_map(|(content, client, model)| {
            json!({"content": content, "clientMessageId": client, "model": model})
        });
        let thread = (optional(), optional()).prop_map(|(t, m)| json!({"title": t, "model": m}));
        let known = fixture.thread.clone();
        let prewarm = (prop_oneof![Just(known), text()], optional())
            .prop_map(|(id, model)| json!({"threadId": id, "model": model}));
        let bytes = |v: Value| v.to_string().into_bytes();
        let strategy = prop_oneof![
            (prop::sample::select(uris.to_vec()), body_like()),
            message.prop_map(move |v| (uris[0].clone(), bytes(v))),
            thread.prop_map(move |v| ("/api/threads".to_owned(), bytes(v))),
            prewarm.prop_map(move |v| ("/api/prewarm".to_owned(), bytes(v))),
        ];
        runner
            .run(&strategy, |(uri, body)| {
                let (status, reply) = fixture.call("POST", &uri, body);
                prop_assert!(!status.is_server_error(), "{uri}: {status} {reply}");
                if !status.is_success() {
                    prop_assert!(
                        reply["error"]["code"].is_string(),
                        "{uri}: {status} {reply}"
                    );
                    prop_assert!(reply["error"]["message"].is_string(), "{uri}: {reply}");
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn arbitrary_thread_ids_are_404s() {
        let fixture = fixture();
        let mut runner = TestRunner::new(RunnerConfig {
            cases: 100,
            ..RunnerConfig::default()
        });
        let id = prop::collection::vec(any::<u8>(), 1..24);
        runner
            .run(&id, |bytes| {
                let id: String = bytes.iter().map(|b| format!("%{b:02X}")).collect();
                for (method, path) in [
                    ("GET", format!("/api/threads/{id}")),
                    ("POST", format!("/api/threads/{id}/messages?wait=false")),
                    ("POST", format!("/api/threads/{id}/interrupt")),
                    ("GET", format!("/api/threads/{id}/events")),
                ] {
                    let body = json!({"content": "hi"}).to_string().into_bytes();
                    let (status, reply) = fixture.call(method, &path, body);
                    prop_assert!(
                        matches!(status.as_u16(), 400 | 404),
                        "{method} {path}: {status} {reply}"
                    );
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn every_answer_carries_a_request_id_and_a_given_one_is_echoed() {
        let fixture = fixture();
        let call = |id: Option<&str>| {
            let mut request = Request::builder()
                .uri("/healthz")
                .header("host", "127.0.0.1:7878");
            if let Some(id) = id {
                request = request.header("x-request-id", id);
            }
            let request = request.body(Body::empty()).unwrap();
            fixture.runtime.block_on(async {
                let response = fixture.router.clone().oneshot(request).await.unwrap();
                response
                    .headers()
                    .get("x-request-id")
                    .map(|v| v.to_str().unwrap().to_owned())
            })
        };
        assert_eq!(call(Some("req-42")).as_deref(), Some("req-42"));
        let made = call(None).expect("a request id is made");
        assert_eq!(made.len(), 36, "a UUID: {made}");
    }

    #[test]
    fn limits_and_content_rules() {
        let fixture = fixture();
        let uri = fixture.messages_uri();

        let (status, body) = fixture.call("POST", &uri, vec![b' '; MAX_BODY + 1]);
        assert_eq!(status, 413, "{body}");
        assert_eq!(body["error"]["code"], "body_too_large");

        let long = "x".repeat(MAX_CHARS + 1);
        let (status, body) = fixture.post_json(&uri, json!({"content": long}));
        assert_eq!(status, 422, "{body}");
        assert_eq!(
            body["error"]["message"],
            format!(
                "content is {} characters; the limit is {MAX_CHARS}",
                MAX_CHARS + 1
            )
        );
        let (status, _) = fixture.post_json(&uri, json!({"content": "é".repeat(MAX_CHARS)}));
        assert_eq!(status, 202, "the limit counts characters, not bytes");

        for bad in ["bell \u{7}", "nul \u{0}", "escape \u{1b}[31m", "del \u{7f}"] {
            let (status, body) = fixture.post_json(&uri, json!({"content": bad}));
            assert_eq!(status, 422, "{bad:?}: {body}");
            let text = body["error"]["message"].as_str().unwrap();
            assert!(text.contains("control characters"), "{text}");
        }
        let (status, body) =
            fixture.post_json(&uri, json!({"content": "line one\n\tline two\r\nthree"}));
        assert_eq!(status, 202, "newlines and tabs are text: {body}");

        let (status, body) = fixture.call("POST", &uri, b"{\"content\": \"x\"".to_vec());
        assert_eq!(status, 400, "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("column"));

        let (status, body) = fixture.post_json(&uri, json!({"content": 5}));
        assert_eq!(status, 422, "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("content"));
        let (status, body) = fixture.post_json(&uri, json!({"content": "x", "colour": 1}));
        assert_eq!(status, 422, "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"));

        let (status, body) = fixture.post_json("/api/threads", json!({"title": 5}));
        assert_eq!(status, 422, "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("title"),
            "names the field: {body}"
        );
        let (status, body) = fixture.post_json("/api/prewarm", json!({"threadId": ["x"]}));
        assert_eq!(status, 422, "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("threadId"));
    }
}
