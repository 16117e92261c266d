//! The threads themselves as MCP tools, for outside clients: `threads__create`, `threads__send`,
//! `threads__get`, `threads__list`. They are a [`Plugin`] like any other, so their input is checked
//! (and defaulted) by the same registry, their structured results checked against the output
//! schemas below, and their calls recorded and counted like every tool call.
//!
//! No state is kept between calls: each result carries the thread id, and each later call names
//! it. `threads__send` runs its message through the one [`Pipeline`], as `POST
//! /api/threads/{id}/messages` does (idempotent on `clientMessageId`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use plugin_contract::{
    async_trait, ContentBlock, MediaSource, Plugin, ThreadId, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec, UserContent,
};

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};

use crate::api::pages::{self, PageError, ThreadFilters};
use crate::caller::Caller;
use crate::cluster::{Cluster, ForwardError, Outgoing, Route, RouteError};
use crate::files::FileError;
use crate::pipeline::{NewMessage, Pipeline, PipelineError, TurnReply};
use crate::store::{
    Fence, MessageId, MessageRow, MessageStatus, NewThread, Store, StoreError, ThreadRow,
};
use crate::workspace::{WorkspaceError, WorkspaceRequest};

/// The plugin name: the tools are `threads__<tool>`.
pub const PLUGIN: &str = "threads";

/// `threads__send`'s name: the endpoint reports its progress and interrupts its turn.
pub const SEND: &str = "threads__send";

/// The tools that only read: a caller with `threads:read` alone may call them.
pub const READ_ONLY: [&str; 2] = ["threads__get", "threads__list"];

/// `threads__create`'s name.
pub const CREATE: &str = "threads__create";

/// The four thread tools, sharing the store and the pipeline.
pub struct ThreadsPlugin {
    store: Store,
    pipeline: Pipeline,
    /// With clustering, `threads__send` runs its turn on the thread's owner.
    cluster: Option<Cluster>,
    /// Bounds a `threads__send` call: the turn's own limit plus a margin, so the turn's timeout
    /// (an answer saying so) comes before the tool's (a bare "did not finish").
    send_timeout: Duration,
}

impl ThreadsPlugin {
    pub fn new(
        store: Store,
        pipeline: Pipeline,
        cluster: Option<Cluster>,
        turn_timeout: Duration,
    ) -> ThreadsPlugin {
        ThreadsPlugin {
            store,
            pipeline,
            cluster,
            send_timeout: turn_timeout + Duration::from_secs(30),
        }
    }
}

impl Plugin for ThreadsPlugin {
    fn name(&self) -> &str {
        PLUGIN
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(Create(self.pipeline.clone())),
            Arc::new(Send {
                store: self.store.clone(),
                pipeline: self.pipeline.clone(),
                cluster: self.cluster.clone(),
                timeout: self.send_timeout,
            }),
            Arc::new(Get(self.store.clone())),
            Arc::new(List(self.store.clone())),
        ]
    }
}

/// The thread fields every result shares; `threadId` is always there.
fn thread_schema() -> Value {
    json!({
        "threadId": {"type": "string", "minLength": 1},
        "title": {"type": ["string", "null"]},
        "model": {"type": ["string", "null"]},
        "parentId": {"type": ["string", "null"]},
        "workspace": {"type": ["object", "null"], "description": "Where the thread works; null: a folder of its own."},
        "profile": {"type": ["string", "null"], "description": "The thread's kind of agent; null: the daemon's default."},
        "createdAt": {"type": "string"},
        "updatedAt": {"type": "string"}
    })
}

fn thread_object_schema() -> Value {
    json!({
        "type": "object",
        "properties": thread_schema(),
        "required": ["threadId", "createdAt"]
    })
}

/// A thread as the tools show it (the fields of [`thread_schema`]).
fn thread_json(thread: &crate::api::Thread) -> Value {
    json!({
        "threadId": thread.id,
        "title": thread.title,
        "model": thread.model,
        "parentId": thread.parent_id,
        "workspace": thread.workspace,
        "profile": thread.profile,
        "createdAt": thread.created_at,
        "updatedAt": thread.updated_at,
    })
}

/// A page that was not served, as a tool error: a bad cursor or limit is the caller's.
fn page_error(err: PageError) -> ToolError {
    match err {
        PageError::Invalid(why) => ToolError::InvalidInput(why),
        PageError::Store(err) => store_error(err),
    }
}

fn thread_id(input: &Value) -> ThreadId {
    ThreadId::from_string(input["threadId"].as_str().unwrap_or_default().to_owned())
}

fn optional_string(input: &Value, key: &str) -> Option<String> {
    input.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The thread `id`, when the call's caller sees it (`Caller::sees`); another tenant's thread is
/// answered as one that does not exist.
async fn visible(store: &Store, id: &ThreadId) -> Result<ThreadRow, ToolError> {
    crate::http::access::visible_thread(store, &the_caller()?, id)
        .await
        .map_err(store_error)
}

/// The caller the call runs for: `/mcp` runs every call for the caller its request was
/// authorized as.
fn the_caller() -> Result<Caller, ToolError> {
    crate::caller::current().ok_or_else(|| ToolError::Failed("no caller for this call".into()))
}

fn store_error(err: StoreError) -> ToolError {
    match err {
        StoreError::ThreadNotFound(id) => ToolError::InvalidInput(format!(
            "thread {id} not found; threads__list shows the threads there are"
        )),
        other => {
            tracing::warn!(error = %other, "Store failed during an MCP thread tool.");
            ToolError::Failed("internal error in the daemon's store".into())
        }
    }
}

/// `threads__create {title?, model?}` → the new thread, made by the pipeline as for
/// `POST /api/threads` (a parked spare becomes its process).
struct Create(Pipeline);

#[async_trait]
impl Tool for Create {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "create".into(),
            description: "Create a Harness thread: a conversation with Claude that keeps its \
                          history. Returns its threadId; pass it to threads__send."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": 500, "description": "A title to find the thread by."},
                    "model": {"type": "string", "minLength": 1, "maxLength": 200, "description": "The model for the thread's turns; the daemon's default when absent."},
                    "profile": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The kind of agent (GET /api/profiles); the daemon's default when absent."},
                    "workspace": {
                        "type": "object",
                        "description": "Where the thread works: {\"path\": \"/abs/dir\"}, or a git worktree made for it: {\"repo\": \"/abs/repo\", \"worktree\": true, \"baseRef\"?, \"branch\"?}. Only under the daemon's workspaces.roots.",
                        "properties": {
                            "path": {"type": "string"},
                            "repo": {"type": "string"},
                            "worktree": {"type": "boolean"},
                            "baseRef": {"type": "string"},
                            "branch": {"type": "string"}
                        },
                        "additionalProperties": false
                    }
                },
                "additionalProperties": false
            }),
            output_schema: Some(thread_object_schema()),
            timeout: None,
        }
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let workspace: Option<WorkspaceRequest> = match input.get("workspace") {
            Some(value) => Some(
                serde_json::from_value(value.clone())
                    .map_err(|err| ToolError::InvalidInput(format!("workspace: {err}")))?,
            ),
            None => None,
        };
        let new = NewThread {
            title: optional_string(&input, "title"),
            model: optional_string(&input, "model"),
            profile: optional_string(&input, "profile"),
            // The creator's tenant owns it.
            tenant: the_caller()?.tenant,
            ..NewThread::default()
        };
        let thread = self
            .0
            .create_thread(new, workspace.as_ref())
            .await
            .map_err(|err| match err {
                PipelineError::Store(err) => store_error(err),
                PipelineError::Workspace(err @ WorkspaceError::Git(_)) => {
                    tracing::warn!(error = %err, "Git failed making a workspace over MCP.");
                    ToolError::Failed(err.to_string())
                }
                PipelineError::Workspace(err) => ToolError::InvalidInput(err.to_string()),
                PipelineError::InvalidInput(message) => ToolError::InvalidInput(message),
                other => ToolError::Failed(other.to_string()),
            })?;
        tracing::info!(thread_id = %thread.id, "Thread created over MCP.");
        Ok(ToolOutput::structured(
            format!("Created thread {}.", thread.id),
            thread_json(&thread.into()),
        ))
    }
}

/// `threads__send {threadId, content, clientMessageId?, model?}` → the reply.
struct Send {
    store: Store,
    pipeline: Pipeline,
    cluster: Option<Cluster>,
    timeout: Duration,
}

/// Where a `threads__send` turn ran, with clustering.
enum Placed {
    /// It runs here, under this node's lease.
    Here(Fence),
    /// It ran on the thread's owner; this is how it ended.
    There(ToolOutput),
}

#[async_trait]
impl Tool for Send {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "send".into(),
            description:
                "Send a message to a Harness thread and wait for Claude's reply. Turns of \
                          one thread run one at a time, in order. Repeating a call with the same \
                          clientMessageId returns the first call's reply instead of running the \
                          turn again (use it to retry safely)."
                    .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "threadId": {"type": "string", "minLength": 1, "description": "From threads__create or threads__list."},
                    "content": {"type": "string", "description": "The message's text (may be empty when it has attachments)."},
                    "attachments": {
                        "type": "array",
                        "description": "Images and PDFs sent with the message, as MCP content: an image, or an embedded resource with a base64 blob (PNG, JPEG, GIF, WebP or PDF) or with text.",
                        "items": {"oneOf": [
                            {
                                "type": "object",
                                "properties": {
                                    "type": {"const": "image"},
                                    "data": {"type": "string", "description": "Base64."},
                                    "mimeType": {"type": "string"}
                                },
                                "required": ["type", "data", "mimeType"]
                            },
                            {
                                "type": "object",
                                "properties": {
                                    "type": {"const": "resource"},
                                    "resource": {
                                        "type": "object",
                                        "properties": {
                                            "uri": {"type": "string"},
                                            "mimeType": {"type": "string"},
                                            "blob": {"type": "string", "description": "Base64."},
                                            "text": {"type": "string"}
                                        },
                                        "required": ["uri"]
                                    }
                                },
                                "required": ["type", "resource"]
                            }
                        ]}
                    },
                    "clientMessageId": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Your idempotency key for this message."},
                    "model": {"type": "string", "minLength": 1, "maxLength": 200, "description": "The model for this turn only."}
                },
                "required": ["threadId"],
                "additionalProperties": false
            }),
            output_schema: Some(json!({
                "type": "object",
                "properties": {
                    "threadId": {"type": "string", "minLength": 1},
                    "messageId": {"type": "string", "minLength": 1, "description": "The id of the message sent."},
                    "reply": {"type": ["string", "null"], "description": "The reply; null when the turn did not finish."},
                    "replyMessageId": {"type": ["string", "null"]},
                    "status": {"enum": ["done", "error", "interrupted"]},
                    "error": {"type": ["string", "null"], "description": "Why the turn did not finish."},
                    "duplicate": {"type": "boolean", "description": "A repeated clientMessageId: this is the first call's outcome."}
                },
                "required": ["threadId", "messageId", "reply", "status"]
            })),
            timeout: Some(self.timeout),
        }
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let thread = thread_id(&input);
        let caller = the_caller()?;
        visible(&self.store, &thread).await?;
        let fence = match &self.cluster {
            None => None,
            Some(cluster) => match self.at_owner(cluster, &thread, &input, &caller).await? {
                Placed::Here(fence) => Some(fence),
                Placed::There(output) => return Ok(output),
            },
        };
        let msg = NewMessage {
            thread_id: thread.clone(),
            content: mcp_content(&input)?,
            client_message_id: optional_string(&input, "clientMessageId"),
            model: optional_string(&input, "model"),
            permission_mode: None,
            mcp_servers: None,
            timeout: None,
            fence,
            unattended: false,
            caller,
            traceparent: crate::traces::parent(),
        };
        let accepted = self
            .pipeline
            .accept_message(msg)
            .await
            .map_err(pipeline_error)?;
        let (message, duplicate) = (accepted.message_id.clone(), accepted.duplicate);
        sent(&thread, &message, duplicate, accepted.finish().await)
    }
}

/// `threads__send`'s message: its `content` text, then its `attachments` (MCP image and
/// embedded-resource content) as Messages API blocks; the text alone when there are none.
fn mcp_content(input: &Value) -> Result<UserContent, ToolError> {
    let text = optional_string(input, "content").unwrap_or_default();
    let Some(attachments) = input.get("attachments").and_then(Value::as_array) else {
        return Ok(UserContent::Text(text));
    };
    let mut blocks = Vec::with_capacity(attachments.len() + 1);
    if !text.is_empty() {
        blocks.push(ContentBlock::Text { text });
    }
    for (index, item) in attachments.iter().enumerate() {
        let field =
            |value: &Value, name: &str| value.get(name).and_then(Value::as_str).map(str::to_owned);
        let (media_type, data) = match item.get("type").and_then(Value::as_str) {
            Some("image") => (field(item, "mimeType"), field(item, "data")),
            Some("resource") => {
                let resource = item.get("resource").unwrap_or(&Value::Null);
                if let Some(text) = field(resource, "text") {
                    blocks.push(ContentBlock::Text { text });
                    continue;
                }
                (field(resource, "mimeType"), field(resource, "blob"))
            }
            _ => (None, None),
        };
        let (Some(media_type), Some(data)) = (media_type, data) else {
            return Err(ToolError::InvalidInput(format!(
                "attachments[{index}]: an image needs data and mimeType; a resource needs a blob and its mimeType, or text"
            )));
        };
        let source = MediaSource::Base64 { media_type, data };
        blocks.push(match source.media_type() {
            Some(kind) if kind.starts_with("image/") => ContentBlock::Image { source },
            _ => ContentBlock::Document { source },
        });
    }
    Ok(UserContent::Blocks(blocks))
}

/// `threads__send`'s result for how the turn of user message `message` ended.
fn sent(
    thread: &ThreadId,
    message: &MessageId,
    duplicate: bool,
    outcome: Result<TurnReply, PipelineError>,
) -> Result<ToolOutput, ToolError> {
    match outcome {
        Ok(reply) => Ok(replied(&reply.message, &reply.user_message_id, duplicate)),
        Err(PipelineError::Turn { status, error, .. }) => Ok(ended(
            thread,
            message,
            status.as_str(),
            &error.to_string(),
            duplicate,
        )),
        // Refused before it reached the model (a budget).
        Err(PipelineError::PreviousFailure {
            status: MessageStatus::Refused,
            error,
            ..
        }) => Err(ToolError::Failed(error)),
        Err(PipelineError::PreviousFailure { status, error, .. }) => {
            Ok(ended(thread, message, status.as_str(), &error, duplicate))
        }
        Err(other) => Err(pipeline_error(other)),
    }
}

impl Send {
    /// With clustering, the turn runs on the node that owns the thread, like a `POST
    /// /api/threads/{id}/messages`: here under this node's lease, or at the live owner, which the
    /// message is forwarded to (`wait=false`); its outcome is then awaited as a repeat of the
    /// message would be ([`Pipeline::outcome`]). An owner that cannot be reached is waited out:
    /// when its lease expires this node takes the thread.
    async fn at_owner(
        &self,
        cluster: &Cluster,
        thread: &ThreadId,
        input: &Value,
        caller: &Caller,
    ) -> Result<Placed, ToolError> {
        let url = match cluster.route(thread, false).await {
            Ok(Route::Local(fence)) => return Ok(Placed::Here(fence)),
            Ok(Route::Forward(url)) => url,
            Err(RouteError::Store(err)) => return Err(store_error(err)),
            Err(err @ RouteError::NotOwner { .. }) => {
                return Err(ToolError::Failed(err.to_string()))
            }
        };
        let mut body = serde_json::Map::new();
        for key in ["content", "clientMessageId", "model"] {
            if let Some(value) = input.get(key) {
                body.insert(key.to_owned(), value.clone());
            }
        }
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let path = format!("/api/threads/{thread}/messages?wait=false");
        let answer = cluster
            .forward(
                thread,
                &url,
                Outgoing {
                    method: Method::POST,
                    path_and_query: &path,
                    headers: &headers,
                    body: Value::Object(body).to_string().into(),
                    caller,
                },
            )
            .await;
        let accepted = match answer {
            Ok(answer) if answer.status == StatusCode::ACCEPTED => {
                serde_json::from_slice::<Value>(&answer.body).unwrap_or_default()
            }
            Ok(answer) => return Err(api_error(answer.status, &answer.body)),
            Err(ForwardError::Unreachable { .. }) => {
                return match cluster.take_when_expired(thread).await {
                    Ok(Route::Local(fence)) => Ok(Placed::Here(fence)),
                    Ok(Route::Forward(_)) | Err(_) => Err(ToolError::Failed(format!(
                        "thread {thread} is moving between nodes; retry with the same clientMessageId"
                    ))),
                };
            }
            Err(err @ (ForwardError::Failed { .. } | ForwardError::OwnerLost { .. })) => {
                return Err(ToolError::Failed(format!(
                    "{err}; retry with the same clientMessageId"
                )))
            }
        };
        let message = MessageId::from_string(accepted["messageId"].as_str().unwrap_or_default());
        let duplicate = accepted["duplicate"].as_bool().unwrap_or(false);
        // Followed on the shared event log and read from the shared database. Should the owner
        // stop renewing its lease first, this node takes the thread over, which ends the turn
        // (`interrupted`).
        loop {
            tokio::select! {
                outcome = self.pipeline.outcome(&message) => {
                    return sent(thread, &message, duplicate, outcome).map(Placed::There);
                }
                () = cluster.owner_gone(thread, &url) => {
                    cluster.take(thread).await.map_err(store_error)?;
                }
            }
        }
    }
}

/// `threads__send`'s result for a turn that replied.
fn replied(reply: &MessageRow, user_message: &MessageId, duplicate: bool) -> ToolOutput {
    ToolOutput::structured(
        reply.content.clone(),
        json!({
            "threadId": reply.thread_id, "messageId": user_message,
            "reply": reply.content, "replyMessageId": reply.id,
            "status": "done", "error": null, "duplicate": duplicate,
        }),
    )
}

/// `threads__send`'s result for a turn that ended without a reply.
fn ended(
    thread: &ThreadId,
    message: &MessageId,
    status: &str,
    error: &str,
    duplicate: bool,
) -> ToolOutput {
    ToolOutput::structured(
        format!("The turn ended as {status}: {error}"),
        json!({
            "threadId": thread, "messageId": message, "reply": null,
            "replyMessageId": null, "status": status, "error": error,
            "duplicate": duplicate,
        }),
    )
}

/// A refusal from the owner's HTTP API (`{"error": {"code", "message"}}`) as the tool's error:
/// the caller's mistakes as invalid input, the rest as failures.
fn api_error(status: StatusCode, body: &[u8]) -> ToolError {
    let body: Value = serde_json::from_slice(body).unwrap_or_default();
    let message = body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("the thread's node answered {status}"));
    match status {
        StatusCode::NOT_FOUND | StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY => {
            ToolError::InvalidInput(message)
        }
        _ => ToolError::Failed(message),
    }
}

/// What the caller reads when a message was not taken or its turn could not be waited for.
fn pipeline_error(err: PipelineError) -> ToolError {
    match err {
        PipelineError::InvalidInput(_)
        | PipelineError::ThreadNotFound(_)
        | PipelineError::ClientIdConflict { .. } => ToolError::InvalidInput(err.to_string()),
        PipelineError::File(FileError::Store(store)) => store_error(store),
        PipelineError::File(err) => ToolError::InvalidInput(err.to_string()),
        PipelineError::Store(store) => store_error(store),
        other => ToolError::Failed(other.to_string()),
    }
}

/// `threads__get {threadId}` → the thread and its messages, oldest first.
struct Get(Store);

#[async_trait]
impl Tool for Get {
    fn spec(&self) -> ToolSpec {
        let mut properties = thread_schema();
        // Every status a stored message can have (a budget's `refused` included).
        let statuses: Vec<&str> = MessageStatus::ALL.iter().map(|s| s.as_str()).collect();
        properties["messagesCursor"] = json!({"type": ["string", "null"], "description": "`before` for the page of older messages; null when these are all."});
        properties["messages"] = json!({
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "seq": {"type": "integer"},
                    "role": {"enum": ["user", "assistant"]},
                    "content": {"type": "string"},
                    "status": {"enum": statuses},
                    "error": {"type": ["string", "null"]},
                    "clientMessageId": {"type": ["string", "null"]},
                    "replyTo": {"type": ["string", "null"]}
                },
                "required": ["id", "seq", "role", "content", "status"]
            }
        });
        ToolSpec {
            name: "get".into(),
            description: "A Harness thread with its last page of messages, oldest first; \
                          messagesCursor, when there are older ones, is `before` for the page \
                          before it."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "threadId": {"type": "string", "minLength": 1},
                    "limit": {"type": "integer", "minimum": 1, "maximum": pages::MAX_LIMIT, "default": pages::DEFAULT_LIMIT, "description": "Messages per page."},
                    "before": {"type": "string", "minLength": 1, "description": "messagesCursor of a page: the messages before it."}
                },
                "required": ["threadId"],
                "additionalProperties": false
            }),
            output_schema: Some(json!({
                "type": "object",
                "properties": properties,
                "required": ["threadId", "createdAt", "messages", "messagesCursor"]
            })),
            timeout: None,
        }
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let id = thread_id(&input);
        let thread = visible(&self.0, &id).await?;
        let limit = pages::limit(input["limit"].as_i64()).map_err(page_error)?;
        let before = optional_string(&input, "before");
        let mut page = pages::messages(&self.0, &id, before.as_deref(), limit)
            .await
            .map_err(page_error)?;
        page.messages.reverse();
        let mut structured = thread_json(&thread.clone().into());
        structured["messages"] = serde_json::to_value(&page.messages)
            .map_err(|err| ToolError::Failed(format!("cannot encode the messages: {err}")))?;
        structured["messagesCursor"] = json!(page.next_cursor);
        let text = format!(
            "Thread {} ({} message(s) shown{}).",
            thread.id,
            page.messages.len(),
            if page.next_cursor.is_some() {
                "; older ones before them"
            } else {
                ""
            }
        );
        Ok(ToolOutput::structured(text, structured))
    }
}

/// `threads__list {limit?}` → threads, newest first.
struct List(Store);

#[async_trait]
impl Tool for List {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list".into(),
            description: "Harness threads, newest activity first, a page at a time: pass the \
                          nextCursor you got as cursor for the next page."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": pages::MAX_LIMIT, "default": pages::DEFAULT_LIMIT, "description": "Threads per page."},
                    "cursor": {"type": "string", "minLength": 1, "description": "nextCursor of the previous page."},
                    "archived": {"enum": ["false", "true", "all"], "default": "false", "description": "Live threads (the default), archived ones, or all."},
                    "q": {"type": "string", "minLength": 1, "description": "Words the thread's title or messages all hold; best match first."},
                    "tag": {"type": "string", "minLength": 1, "description": "Threads with this tag only."},
                    "profile": {"type": "string", "minLength": 1, "description": "Threads of this profile only."}
                },
                "additionalProperties": false
            }),
            output_schema: Some(json!({
                "type": "object",
                "properties": {
                    "threads": {"type": "array", "items": thread_object_schema()},
                    "nextCursor": {"type": ["string", "null"], "description": "The next page's cursor; null on the last page."}
                },
                "required": ["threads", "nextCursor"]
            })),
            timeout: None,
        }
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let caller = the_caller()?;
        let filters = ThreadFilters {
            limit: input["limit"].as_i64(),
            cursor: optional_string(&input, "cursor"),
            archived: optional_string(&input, "archived"),
            tag: optional_string(&input, "tag"),
            q: optional_string(&input, "q"),
            profile: optional_string(&input, "profile"),
            ..ThreadFilters::default()
        };
        let page = pages::threads(&self.0, &caller, &filters)
            .await
            .map_err(page_error)?;
        let threads: Vec<Value> = page
            .threads
            .iter()
            .map(|summary| {
                let mut json = thread_json(&summary.thread);
                json["lastActivityAt"] = json!(summary.last_activity_at);
                json["running"] = json!(summary.running);
                json["tags"] = json!(summary.tags);
                json
            })
            .collect();
        let text = format!("{} thread(s).", threads.len());
        Ok(ToolOutput::structured(
            text,
            json!({"threads": threads, "nextCursor": page.next_cursor}),
        ))
    }
}
