//! The threads themselves as MCP tools, for outside clients: `threads__create`, `threads__send`,
//! `threads__get`, `threads__list`: adapters over the thread service
//! ([`crate::service::ThreadService`]), as `/api`'s handlers are. Each tool parses its arguments
//! with serde into the types the HTTP API takes (a bad argument is an invalid input naming the
//! problem), calls the service for the caller the endpoint hands it, and answers with the API's
//! types, its fields named as MCP clients know them ([`schemas::Fields`]: `id` is `threadId`).
//! Input and output schemas are derived from the same types ([`schemas`]), never written out.
//!
//! They are a [`Plugin`] like any other, so their input is checked (and defaulted) by the same
//! registry, their structured results checked against their output schemas, and their calls
//! recorded and counted like every tool call. The endpoint lists the tools of a
//! [`ThreadsPlugin`] without a caller, and calls those of [`ThreadsPlugin::for_caller`].
//!
//! Each tool declares its [`Policy`]: the scope a call needs, and whether it runs on the
//! thread's owner (`threads__send`: the endpoint then reports the turn's progress and a cancel
//! interrupts it).
//!
//! No state is kept between calls: each result carries the thread id, and each later call names
//! it. `threads__send` is idempotent on `clientMessageId`, as `POST /api/threads/{id}/messages`.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use plugin_contract::{
    async_trait, ContentBlock, MediaSource, Plugin, ThreadId, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec, UserContent,
};

use super::schemas::{self, Fields};
use crate::api::pages::{MessagePage, PageError, ThreadFilters, ThreadPage};
use crate::api::threads::{CreateThread, PostMessage};
use crate::api::{Thread, ThreadSummary};
use crate::caller::{Caller, Scope};
use crate::files::FileError;
use crate::pipeline::{PipelineError, TurnReply};
use crate::service::{Sent, ServiceError, ThreadService, TurnState, TurnView};
use crate::store::{MessageId, MessageStatus, StoreError};
use crate::workspace::WorkspaceError;

/// The plugin name: the tools are `threads__<tool>`.
pub const PLUGIN: &str = "threads";

/// Where a tool's call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// On the node the call arrived at.
    Anywhere,
    /// On the node that owns the thread it names (its turn needs the thread's process).
    Owner,
}

/// What a thread tool needs of its caller and where it runs, declared with the tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Beyond `/mcp`'s own `threads:read`.
    pub scope: Scope,
    pub runs: Runs,
}

impl Policy {
    /// Whether its calls change something: they need `threads:write` and are audited.
    pub fn changes(&self) -> bool {
        self.scope != Scope::ThreadsRead
    }
}

/// Every thread tool's policy, by its full name (`threads__…`).
pub const POLICIES: &[(&str, Policy)] = &[
    ("threads__create", Create::POLICY),
    ("threads__send", Send::POLICY),
    ("threads__get", Get::POLICY),
    ("threads__list", List::POLICY),
];

/// The policy of the thread tool `name`; `None` for another tool.
pub fn policy_of(name: &str) -> Option<Policy> {
    POLICIES
        .iter()
        .find(|(tool, _)| *tool == name)
        .map(|(_, policy)| *policy)
}

/// The four thread tools over the one service, calling for one caller (or for none: the copy
/// the endpoint lists).
#[derive(Clone)]
pub struct ThreadsPlugin {
    service: ThreadService,
    caller: Option<Caller>,
    /// Bounds a `threads__send` call: the turn's own limit plus a margin, so the turn's timeout
    /// (an answer saying so) comes before the tool's (a bare "did not finish").
    send_timeout: Duration,
}

impl ThreadsPlugin {
    /// The service the tools are adapters over.
    pub fn service(&self) -> &ThreadService {
        &self.service
    }

    pub fn new(service: ThreadService, turn_timeout: Duration) -> ThreadsPlugin {
        ThreadsPlugin {
            service,
            caller: None,
            send_timeout: turn_timeout + Duration::from_secs(30),
        }
    }

    /// The same tools, calling the service for `caller`.
    pub fn for_caller(&self, caller: Caller) -> ThreadsPlugin {
        ThreadsPlugin {
            caller: Some(caller),
            ..self.clone()
        }
    }

    /// The caller the calls are for; a copy made without one cannot call.
    fn caller(&self) -> Result<&Caller, ToolError> {
        self.caller
            .as_ref()
            .ok_or_else(|| ToolError::Failed("no caller for this call".into()))
    }
}

impl Plugin for ThreadsPlugin {
    fn name(&self) -> &str {
        PLUGIN
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(Create(self.clone())),
            Arc::new(Send(self.clone())),
            Arc::new(Get(self.clone())),
            Arc::new(List(self.clone())),
        ]
    }
}

/// The fields of a thread every result shows.
const THREAD: Fields = Fields(&[
    ("id", "threadId"),
    ("title", "title"),
    ("model", "model"),
    ("parentId", "parentId"),
    ("workspace", "workspace"),
    ("profile", "profile"),
    ("createdAt", "createdAt"),
    ("updatedAt", "updatedAt"),
]);

/// A thread in `threads__list`: [`THREAD`]'s fields, and what a list adds.
const SUMMARY: Fields = Fields(&[
    ("id", "threadId"),
    ("title", "title"),
    ("model", "model"),
    ("parentId", "parentId"),
    ("workspace", "workspace"),
    ("profile", "profile"),
    ("createdAt", "createdAt"),
    ("updatedAt", "updatedAt"),
    ("lastActivityAt", "lastActivityAt"),
    ("running", "running"),
    ("tags", "tags"),
]);

/// The arguments of `threads__create`: these of `POST /api/threads`'s body.
const CREATE_ARGUMENTS: Fields = Fields(&[
    ("title", "title"),
    ("model", "model"),
    ("profile", "profile"),
    ("workspace", "workspace"),
]);

/// The arguments of `threads__list`: these of `GET /api/threads`'s filters.
const LIST_ARGUMENTS: Fields = Fields(&[
    ("limit", "limit"),
    ("cursor", "cursor"),
    ("archived", "archived"),
    ("q", "q"),
    ("tag", "tag"),
    ("profile", "profile"),
]);

/// A page of messages in `threads__get`.
const MESSAGES: Fields = Fields(&[("messages", "messages"), ("nextCursor", "messagesCursor")]);

/// A page of threads in `threads__list`.
const THREADS: Fields = Fields(&[("threads", "threads"), ("nextCursor", "nextCursor")]);

/// `value` (an API type) as JSON, projected on `fields`.
fn shown<T: Serialize>(fields: Fields, value: &T) -> Result<Value, ToolError> {
    let value = serde_json::to_value(value)
        .map_err(|err| ToolError::Failed(format!("cannot encode the result: {err}")))?;
    Ok(Value::Object(fields.value(&value)))
}

/// The arguments, as the type they are: a bad one is an invalid input naming the problem.
fn arguments<T: serde::de::DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    serde_json::from_value(input).map_err(|err| ToolError::InvalidInput(err.to_string()))
}

/// `threads__create {title?, model?, profile?, workspace?}` → the new thread, made as for
/// `POST /api/threads` (a parked spare becomes its process).
struct Create(ThreadsPlugin);

impl Create {
    const POLICY: Policy = Policy {
        scope: Scope::ThreadsWrite,
        runs: Runs::Anywhere,
    };

    /// The tool's name, description and schemas.
    fn spec_only() -> ToolSpec {
        ToolSpec {
            name: "create".into(),
            description: "Create a Harness thread: a conversation with Claude that keeps its \
                          history. Returns its threadId; pass it to threads__send."
                .into(),
            input_schema: schemas::closed(CREATE_ARGUMENTS.schema(&schemas::of::<CreateThread>())),
            output_schema: Some(THREAD.schema(&schemas::of::<Thread>())),
            timeout: None,
        }
    }
}

#[async_trait]
impl Tool for Create {
    fn spec(&self) -> ToolSpec {
        Self::spec_only()
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let body: CreateThread = arguments(input)?;
        let created = self
            .0
            .service
            .create(self.0.caller()?, body)
            .await
            .map_err(create_error)?;
        tracing::info!(thread_id = %created.thread.id, "Thread created over MCP.");
        Ok(ToolOutput::structured(
            format!("Created thread {}.", created.thread.id),
            shown(THREAD, &created.thread)?,
        ))
    }
}

/// `threads__send`'s arguments: a message as MCP clients hold one (text, and images and
/// resources as MCP content), which becomes the body of `POST /api/threads/{id}/messages`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SendArguments {
    /// From threads__create or threads__list.
    #[schema(min_length = 1)]
    thread_id: String,
    /// The message's text (may be empty when it has attachments).
    content: Option<String>,
    /// Images and PDFs sent with the message, as MCP content: an image, or an embedded resource
    /// with a base64 blob (PNG, JPEG, GIF, WebP or PDF) or with text.
    attachments: Option<Vec<Attachment>>,
    /// Your idempotency key for this message.
    #[schema(min_length = 1, max_length = 200)]
    client_message_id: Option<String>,
    /// The model for this turn only (1 to 200 characters, not blank).
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    model: Option<String>,
}

/// An MCP content item sent with a message.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Attachment {
    Image {
        /// Base64.
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    Resource {
        resource: EmbeddedResource,
    },
}

/// An MCP embedded resource: a base64 blob, or text.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct EmbeddedResource {
    /// Required by MCP; the message does not need it.
    #[allow(dead_code)]
    uri: String,
    mime_type: Option<String>,
    /// Base64.
    blob: Option<String>,
    text: Option<String>,
}

/// How a `threads__send` ended.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct SendResult {
    #[schema(value_type = String, min_length = 1)]
    thread_id: ThreadId,
    /// The id of the message sent.
    #[schema(min_length = 1)]
    message_id: MessageId,
    /// The reply; null when the turn did not finish.
    reply: Option<String>,
    reply_message_id: Option<MessageId>,
    #[schema(value_type = SendStatus)]
    status: String,
    /// Why the turn did not finish.
    error: Option<String>,
    /// A repeated clientMessageId: this is the first call's outcome.
    duplicate: bool,
}

/// How a turn a `threads__send` waited for ended (named for the schema).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // Never built: it names the values in the schema.
enum SendStatus {
    Done,
    Error,
    Interrupted,
}

/// `threads__send {threadId, content, attachments?, clientMessageId?, model?}` → the reply.
struct Send(ThreadsPlugin);

impl Send {
    const POLICY: Policy = Policy {
        scope: Scope::ThreadsWrite,
        runs: Runs::Owner,
    };

    /// The tool's name, description and schemas.
    fn spec_only() -> ToolSpec {
        ToolSpec {
            name: "send".into(),
            description:
                "Send a message to a Harness thread and wait for Claude's reply. Turns of \
                          one thread run one at a time, in order. Repeating a call with the same \
                          clientMessageId returns the first call's reply instead of running the \
                          turn again (use it to retry safely)."
                    .into(),
            input_schema: schemas::of::<SendArguments>(),
            output_schema: Some(schemas::of::<SendResult>()),
            timeout: None,
        }
    }
}

#[async_trait]
impl Tool for Send {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            timeout: Some(self.0.send_timeout),
            ..Self::spec_only()
        }
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let (thread, body) = send_message(input)?;
        let sent = self
            .0
            .service
            .send_and_wait(self.0.caller()?, thread, body, crate::traces::parent())
            .await
            .map_err(tool_error)?;
        answer(sent)
    }
}

/// `threads__send`'s spec as listed (for a registry that only answers, in tests).
#[cfg(test)]
pub(super) fn send_spec() -> ToolSpec {
    Send::spec_only()
}

/// A `threads__send`'s thread and message, from its arguments.
pub fn send_message(input: Value) -> Result<(ThreadId, PostMessage), ToolError> {
    let arguments: SendArguments = arguments(input)?;
    let thread = ThreadId::from_string(arguments.thread_id.clone());
    let body = PostMessage {
        content: mcp_content(arguments.content, arguments.attachments)?,
        client_message_id: arguments.client_message_id,
        model: arguments.model,
        permission_mode: None,
        mcp_servers: None,
    };
    Ok((thread, body))
}

/// Starts a `threads__send` without waiting for its turn (an MCP task): the turn's handle.
pub async fn start_send(
    service: &ThreadService,
    caller: &Caller,
    input: Value,
) -> Result<TurnView, ToolError> {
    let (thread, body) = send_message(input)?;
    service
        .start(caller, thread, body, crate::traces::parent())
        .await
        .map_err(tool_error)
}

/// `threads__send`'s message: its text, then its attachments (MCP image and embedded-resource
/// content) as Messages API blocks; the text alone when there are none.
fn mcp_content(
    text: Option<String>,
    attachments: Option<Vec<Attachment>>,
) -> Result<UserContent, ToolError> {
    let text = text.unwrap_or_default();
    let Some(attachments) = attachments else {
        return Ok(UserContent::Text(text));
    };
    let mut blocks = Vec::with_capacity(attachments.len() + 1);
    if !text.is_empty() {
        blocks.push(ContentBlock::Text { text });
    }
    for (index, item) in attachments.into_iter().enumerate() {
        let (media_type, data) = match item {
            Attachment::Image { data, mime_type } => (Some(mime_type), Some(data)),
            Attachment::Resource { resource } => {
                if let Some(text) = resource.text {
                    blocks.push(ContentBlock::Text { text });
                    continue;
                }
                (resource.mime_type, resource.blob)
            }
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

/// How a `threads__send`'s turn ended, wherever that was read (its outcome, or the thread).
enum Ended {
    Replied {
        text: String,
        reply: MessageId,
    },
    /// Without a reply (`error`, `interrupted`).
    Stopped {
        status: MessageStatus,
        error: String,
    },
    /// Refused before it reached the model (a budget).
    Refused(String),
}

/// `threads__send`'s result for how its turn ended.
fn answer(sent: Sent) -> Result<ToolOutput, ToolError> {
    let Sent {
        thread,
        message,
        duplicate,
        outcome,
    } = sent;
    let ended = match outcome {
        Ok(TurnReply {
            message: reply,
            user_message_id,
            ..
        }) => {
            let ended = Ended::Replied {
                text: reply.content,
                reply: reply.id,
            };
            return answer_ended(reply.thread_id, user_message_id, duplicate, ended);
        }
        Err(PipelineError::Turn { status, error, .. }) => Ended::Stopped {
            status,
            error: error.to_string(),
        },
        Err(PipelineError::PreviousFailure {
            status: MessageStatus::Refused,
            error,
            ..
        }) => Ended::Refused(error),
        Err(PipelineError::PreviousFailure { status, error, .. }) => {
            Ended::Stopped { status, error }
        }
        Err(other) => return Err(pipeline_error(other)),
    };
    answer_ended(thread, message, duplicate, ended)
}

/// The result a `threads__send` would have answered for the turn `view`, once it has ended
/// (an MCP task's result); `None` while it runs.
pub fn turn_answer(view: &TurnView) -> Option<Result<ToolOutput, ToolError>> {
    let ended = match &view.state {
        TurnState::Working | TurnState::AwaitingApproval(_) => return None,
        TurnState::Replied(reply) => Ended::Replied {
            text: reply.content.clone(),
            reply: reply.id.clone(),
        },
        TurnState::Failed {
            status: MessageStatus::Refused,
            error,
        } => Ended::Refused(error.clone()),
        TurnState::Failed { status, error } => Ended::Stopped {
            status: *status,
            error: error.clone(),
        },
        TurnState::Stopped { error } => Ended::Stopped {
            status: MessageStatus::Interrupted,
            error: error.clone(),
        },
    };
    Some(answer_ended(
        view.thread.clone(),
        view.message.clone(),
        false,
        ended,
    ))
}

fn answer_ended(
    thread: ThreadId,
    message: MessageId,
    duplicate: bool,
    ended: Ended,
) -> Result<ToolOutput, ToolError> {
    let mut result = SendResult {
        thread_id: thread,
        message_id: message,
        reply: None,
        reply_message_id: None,
        status: String::new(),
        error: None,
        duplicate,
    };
    let text = match ended {
        Ended::Replied { text, reply } => {
            result.reply = Some(text.clone());
            result.reply_message_id = Some(reply);
            result.status = "done".into();
            text
        }
        Ended::Stopped { status, error } => {
            result.status = status.as_str().to_owned();
            let text = format!("The turn ended as {}: {error}", status.as_str());
            result.error = Some(error);
            text
        }
        Ended::Refused(error) => return Err(ToolError::Failed(error)),
    };
    let structured = serde_json::to_value(&result)
        .map_err(|err| ToolError::Failed(format!("cannot encode the result: {err}")))?;
    Ok(ToolOutput::structured(text, structured))
}

/// `threads__get`'s arguments.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GetArguments {
    #[schema(min_length = 1)]
    thread_id: String,
    /// Messages per page.
    #[schema(minimum = 1, maximum = 500, default = 50)]
    limit: Option<i64>,
    /// messagesCursor of a page: the messages before it.
    #[schema(min_length = 1)]
    before: Option<String>,
}

/// `threads__get {threadId, limit?, before?}` → the thread and a page of its messages, oldest
/// first.
struct Get(ThreadsPlugin);

impl Get {
    const POLICY: Policy = Policy {
        scope: Scope::ThreadsRead,
        runs: Runs::Anywhere,
    };

    /// The tool's name, description and schemas.
    fn spec_only() -> ToolSpec {
        let mut output = schemas::merged(
            THREAD.schema(&schemas::of::<Thread>()),
            &MESSAGES.schema(&schemas::of::<MessagePage>()),
        );
        // The page, turned: oldest first here.
        output["properties"]["messages"]["description"] = json!("Oldest first.");
        ToolSpec {
            name: "get".into(),
            description: "A Harness thread with its last page of messages, oldest first; \
                          messagesCursor, when there are older ones, is `before` for the page \
                          before it."
                .into(),
            input_schema: schemas::of::<GetArguments>(),
            output_schema: Some(output),
            timeout: None,
        }
    }
}

#[async_trait]
impl Tool for Get {
    fn spec(&self) -> ToolSpec {
        Self::spec_only()
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let arguments: GetArguments = arguments(input)?;
        let (service, caller) = (&self.0.service, self.0.caller()?);
        let id = ThreadId::from_string(arguments.thread_id);
        let thread = service.thread(caller, &id).await.map_err(tool_error)?;
        let before = arguments.before.as_deref();
        let mut page = service
            .messages(caller, &id, arguments.limit, before)
            .await
            .map_err(tool_error)?;
        page.messages.reverse();
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
        let mut structured = shown(THREAD, &thread)?;
        if let (Value::Object(all), Value::Object(more)) =
            (&mut structured, shown(MESSAGES, &page)?)
        {
            all.extend(more);
        }
        Ok(ToolOutput::structured(text, structured))
    }
}

/// `threads__list {limit?, cursor?, archived?, q?, tag?, profile?}` → threads, newest activity
/// first.
struct List(ThreadsPlugin);

impl List {
    const POLICY: Policy = Policy {
        scope: Scope::ThreadsRead,
        runs: Runs::Anywhere,
    };

    /// The tool's name, description and schemas.
    fn spec_only() -> ToolSpec {
        let mut output = THREADS.schema(&schemas::of::<ThreadPage>());
        output["properties"]["threads"]["items"] = SUMMARY.schema(&schemas::of::<ThreadSummary>());
        ToolSpec {
            name: "list".into(),
            description: "Harness threads, newest activity first, a page at a time: pass the \
                          nextCursor you got as cursor for the next page."
                .into(),
            input_schema: schemas::closed(LIST_ARGUMENTS.schema(&schemas::of::<ThreadFilters>())),
            output_schema: Some(output),
            timeout: None,
        }
    }
}

#[async_trait]
impl Tool for List {
    fn spec(&self) -> ToolSpec {
        Self::spec_only()
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let filters: ThreadFilters = arguments(input)?;
        let page = self
            .0
            .service
            .list(self.0.caller()?, &filters)
            .await
            .map_err(tool_error)?;
        let threads = page
            .threads
            .iter()
            .map(|summary| shown(SUMMARY, summary))
            .collect::<Result<Vec<Value>, ToolError>>()?;
        let text = format!("{} thread(s).", threads.len());
        Ok(ToolOutput::structured(
            text,
            json!({"threads": threads, "nextCursor": page.next_cursor}),
        ))
    }
}

/// The service's error as a tool's: the caller's mistakes as invalid input, the rest as
/// failures.
fn tool_error(err: ServiceError) -> ToolError {
    match err {
        ServiceError::Pipeline(err) => pipeline_error(err),
        ServiceError::Store(err) => store_error(err),
        ServiceError::Page(PageError::Invalid(why)) => ToolError::InvalidInput(why),
        ServiceError::Page(PageError::Store(err)) => store_error(err),
        ServiceError::Invalid(why) | ServiceError::NotFound(why) | ServiceError::Conflict(why) => {
            ToolError::InvalidInput(why)
        }
        // A refusal from the owner's HTTP API.
        ServiceError::Owner { status, message } => match status.as_u16() {
            404 | 409 | 422 => ToolError::InvalidInput(message),
            _ => ToolError::Failed(message),
        },
        ServiceError::Moving(why) => ToolError::Failed(why),
    }
}

/// [`tool_error`], where a workspace refused is the caller's mistake and git failing is ours.
fn create_error(err: ServiceError) -> ToolError {
    match err {
        ServiceError::Pipeline(PipelineError::Workspace(err @ WorkspaceError::Git(_))) => {
            tracing::warn!(error = %err, "Git failed making a workspace over MCP.");
            ToolError::Failed(err.to_string())
        }
        ServiceError::Pipeline(PipelineError::Workspace(err)) => {
            ToolError::InvalidInput(err.to_string())
        }
        other => tool_error(other),
    }
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

#[cfg(test)]
mod tests;
