//! The bodies of the thread operations, asked and answered: what `POST /api/threads` takes and
//! answers, a message, a patch, an interrupt, a prewarm. The thread service
//! (`crate::service::ThreadService`) takes and returns these, so every door (`/api`, `/mcp`) speaks
//! the same types, and the OpenAPI document and `/mcp`'s tool schemas are derived from them.

use serde::{Deserialize, Serialize};

use plugin_contract::{ThreadId, UserContent};

use crate::api;
use crate::config::WorkspaceRequest;
use crate::store::{MessageId, Usage};

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateThread {
    #[schema(max_length = 500)]
    pub title: Option<String>,
    /// A model name (1 to 200 characters, not blank); default: the profile's.
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    pub model: Option<String>,
    /// A JSON Schema (draft 2020-12, an object) every reply must match: `--json-schema`.
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<serde_json::Value>,
    /// Most USD the thread's turns may cost together; then its messages get 402.
    #[schema(minimum = 0.0)]
    pub max_budget_usd: Option<f64>,
    /// Where the thread works: `{"path": "/abs/dir"}`, or a worktree made for it:
    /// `{"repo": "/abs/repo", "worktree": true, "baseRef"?, "branch"?}`. Under
    /// `workspaces.roots` only. Default: a folder of its own.
    pub workspace: Option<WorkspaceRequest>,
    /// The kind of agent (`GET /api/profiles`); default: the daemon's default profile.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$")]
    pub profile: Option<String>,
    /// A turn cut by a crash, a shutdown or a takeover: `mark` (the default) leaves it
    /// `interrupted`; `retry` runs it again by itself once the thread has a process.
    pub on_interrupt: Option<crate::store::OnInterrupt>,
    /// The thread's own webhook endpoint: every webhook event of the thread goes there too
    /// (`turn.*`, `permission.requested`, `budget.reached`, `schedule.*`), signed with a
    /// secret of its own, which the answer carries once (`callbackSecret`). An `http(s)` URL;
    /// with `webhooks.allow_private_targets` off, not a loopback or private address.
    #[schema(format = "uri", pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://")]
    pub callback_url: Option<String>,
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

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkThread {
    pub title: Option<String>,
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

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequestList {
    pub model_requests: Vec<api::ModelRequest>,
}

/// Serialized too: a message forwarded to the thread's owner is sent as this body.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostMessage {
    /// The message: a string (not blank, at most `max_message_chars`), or a list of content
    /// blocks in the Messages API's shape: `text`, and `image` or `document` whose `source` is
    /// `{"type": "base64", "media_type", "data"}` or a file uploaded before,
    /// `{"type": "file", "fileId": "file_…"}`. Images are PNG, JPEG, GIF or WebP; documents PDF.
    pub content: UserContent,
    pub client_message_id: Option<String>,
    /// This turn's model (1 to 200 characters, not blank).
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    pub model: Option<String>,
    /// This turn's permission mode (`plan`, say), no wider than the profile's own.
    #[schema(value_type = Option<PermissionModeName>)]
    pub permission_mode: Option<String>,
    /// This turn's external MCP servers, by name: some of the profile's; the others are
    /// switched off for the turn, in place. Omitted: all of the profile's.
    pub mcp_servers: Option<Vec<String>>,
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

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prewarm {
    pub thread_id: String,
    /// The model to start it on (1 to 200 characters, not blank); default: the thread's.
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    pub model: Option<String>,
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

/// Most tags a thread has; each is 1 to 64 characters.
pub const MAX_TAGS: usize = 20;
pub const MAX_TAG_CHARS: usize = 64;

/// `PATCH /api/threads/{id}`: the fields given change, the others stay.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchThread {
    /// Absent: unchanged; `null`: no limit; a number (USD, zero or more): the new limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>, minimum = 0.0)]
    pub max_budget_usd: Option<Option<f64>>,
    /// A new title (1 to 200 characters, not blank); `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200,
             pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]")]
    pub title: Option<Option<String>>,
    /// The thread's tags, all of them (bounds: [`MAX_TAGS`], [`MAX_TAG_CHARS`], stated by [`tags_schema`]).
    #[schema(schema_with = tags_schema)]
    pub tags: Option<Vec<String>>,
    /// `true` archives the thread (as `POST …/archive` does); `false` unarchives it: it takes
    /// messages again.
    pub archived: Option<bool>,
}

/// `tags` for the document: the bounds the service checks.
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
pub(crate) fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// `POST /api/threads/{id}/archive`: the archived thread, and what became of its worktree.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveReply {
    pub thread: api::Thread,
    /// What became of its worktree (`workspaces.on_archive`); absent for a thread without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<api::WorktreeDisposition>,
}
