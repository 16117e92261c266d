//! The store's vocabulary, shared by both databases' query crates (`harness-db-sqlite`,
//! `harness-db-postgres`) and the daemon's store facade (`orchestrator::store`): one row type
//! per table, the values stored in columns ([`MessageId`], [`MessageStatus`], [`Role`],
//! [`Origin`]), what a write is given ([`NewThread`], …), the lease [`Fence`] a thread's writes
//! carry, and [`StoreError`]. No SQL here.
//!
//! The operations are traits, one per table's module ([`ToolCallQueries`], [`UsageQueries`],
//! …), each implemented once per database, its wiring (which writes open a fenced `ThreadTx`)
//! written once in a macro beside the trait (`outcome_queries!`, …); the facade calls whichever
//! its database is, so an operation missing on one side does not compile. Writes that belong
//! to a thread take the [`Fence`] the facade picked; each implementation checks it inside the
//! write's own transaction (its `ThreadTx` can only be opened by passing it), so no such write
//! skips the check. Native `async fn`: the facade dispatches on the concrete backend, never
//! through `dyn`, so the futures' `Send`-ness is known where they are awaited.
//!
//! Timestamps are stored as RFC 3339 UTC text of fixed width ([`now_text`]) on both databases,
//! so text order is time order; JSON as its text; enums as their names.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use plugin_contract::{CliSessionId, ThreadId, UserContent};
use serde::{Deserialize, Serialize};

mod audit;
mod events;
mod files;
mod goals;
mod keys;
mod leases;
mod lifecycle;
mod managed;
mod messages;
mod model_requests;
mod oauth;
mod outcomes;
mod permissions;
mod schedules;
mod threads;
mod tool_calls;
mod transcripts;
mod usage;
mod view;
mod webhooks;

// Each module's trait, and the types only its operations use.
pub use audit::*;
pub use events::*;
pub use files::*;
pub use goals::*;
pub use keys::*;
pub use leases::*;
pub use lifecycle::*;
pub use managed::*;
pub use messages::*;
pub use model_requests::*;
pub use oauth::*;
pub use outcomes::*;
pub use permissions::*;
pub use schedules::*;
pub use threads::*;
pub use tool_calls::*;
pub use transcripts::*;
pub use usage::*;
pub use view::*;
pub use webhooks::*;

/// Why a store operation failed. Each variant says what the user of the API sees.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The caller named a thread we never created (directly, as a parent, or as the thread of a
    /// message, event or tool call). The API answers 404.
    #[error("thread {0} not found")]
    ThreadNotFound(ThreadId),
    /// The caller named a user message we do not have. The API answers 404.
    #[error("message {0} not found")]
    MessageNotFound(MessageId),
    /// Anything from the database or the pool (including failing to create the database's directory).
    /// Logged in full; users see "internal error" and a 500.
    #[error("database error: {0}")]
    Db(#[source] sqlx::Error),
    /// The migrations in `migrations/` could not be applied (or the database was migrated by a
    /// newer daemon). The daemon refuses to start.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored row does not parse (an unknown status, bad JSON, a bad timestamp). Someone edited
    /// the database by hand or it is damaged; users see "internal error" and a 500.
    #[error("corrupt row in the database: {0}")]
    Corrupt(String),
    /// A write fenced by a lease ([`Fence`]) found that this node no longer holds the thread's
    /// lease with that epoch: a peer took the thread over. Nothing was written; the API answers
    /// 503 (`lease_lost`), and the client's retry reaches the new owner.
    #[error("this node lost the lease on thread {0}")]
    LeaseLost(ThreadId),
}

impl From<sqlx::Error> for StoreError {
    /// A column sqlx could not decode (an unknown status, bad JSON, a bad timestamp, a NULL the
    /// schema forbids) is a corrupt row; so is a stored timestamp PostgreSQL's `::timestamptz`
    /// cast refuses ([`is_bad_stored_time`]). Anything else is a database error.
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(err.to_string())
            }
            err if is_bad_stored_time(&err) => StoreError::Corrupt(err.to_string()),
            err => StoreError::Db(err),
        }
    }
}

/// True when `err` is PostgreSQL refusing to read text as a timestamp (SQLSTATE 22007
/// `invalid_datetime_format`, 22008 `datetime_field_overflow`). The queries read the stored
/// RFC 3339 text as `col::timestamptz`, and bind timestamps only as text ([`now_text`]), so
/// the server raises these only for a stored value that is not a timestamp: a corrupt row, as
/// sqlx's own decoding reports it on SQLite. SQLite's codes are numbers, never these.
fn is_bad_stored_time(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "22007" || code == "22008")
}

/// Our id for a message (`msg_` + 32 hex digits), generated by the daemon. Stored as its text.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(transparent)]
#[sqlx(transparent)]
#[schema(value_type = String, example = "msg_0123456789abcdef0123456789abcdef")]
pub struct MessageId(String);

impl MessageId {
    /// A fresh random id.
    pub fn generate() -> Self {
        Self(format!("msg_{}", uuid::Uuid::new_v4().simple()))
    }

    /// Wraps an id that came from storage or a client. No validation: an unknown id is answered
    /// by a lookup.
    pub fn from_string(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a message is in its turn. Only user messages move: an assistant message is written
/// `done` together with its user message. Stored as [`MessageStatus::as_str`]; serde and sqlx both
/// map the variants to the same lowercase names.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(rename_all = "lowercase")]
pub enum MessageStatus {
    /// The turn is running or waits in line (or the daemon died while it ran: the next start ends
    /// it, [`EndCause::Crash`]).
    Pending,
    /// The turn produced a reply.
    Done,
    /// The turn failed; `error` says why.
    Error,
    /// The turn was stopped (on request, or by a restart) before it finished.
    Interrupted,
    /// A budget stopped the turn before the CLI saw the message; `error` names it.
    Refused,
}

impl MessageStatus {
    /// Every status, in the order the schema lists them.
    pub const ALL: [MessageStatus; 5] = [
        MessageStatus::Pending,
        MessageStatus::Done,
        MessageStatus::Error,
        MessageStatus::Interrupted,
        MessageStatus::Refused,
    ];

    /// The value stored in `messages.status` (the schema's CHECK list).
    pub fn as_str(self) -> &'static str {
        match self {
            MessageStatus::Pending => "pending",
            MessageStatus::Done => "done",
            MessageStatus::Error => "error",
            MessageStatus::Interrupted => "interrupted",
            MessageStatus::Refused => "refused",
        }
    }
}

impl FromStr for MessageStatus {
    type Err = ParseEnumError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pending" => Ok(MessageStatus::Pending),
            "done" => Ok(MessageStatus::Done),
            "error" => Ok(MessageStatus::Error),
            "interrupted" => Ok(MessageStatus::Interrupted),
            "refused" => Ok(MessageStatus::Refused),
            other => Err(ParseEnumError {
                kind: "message status",
                value: other.to_owned(),
            }),
        }
    }
}

impl fmt::Display for MessageStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who wrote a message. Stored as [`Role::as_str`]; serde and sqlx both map the variants to the
/// same lowercase names.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    /// The value stored in `messages.role` (the schema's CHECK list) and used in
    /// `plugin_contract::HistoryMessage::role`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

impl FromStr for Role {
    type Err = ParseEnumError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            other => Err(ParseEnumError {
                kind: "role",
                value: other.to_owned(),
            }),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who started a turn: a client's message, or the CLI by itself (a cron, a wake-up, a
/// background task's notice; only with `claude.scheduling_tools`). Both messages of a turn carry
/// it. Stored in `messages.origin`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(rename_all = "lowercase")]
pub enum Origin {
    #[default]
    User,
    Cli,
}

impl Origin {
    /// The value stored in `messages.origin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Cli => "cli",
        }
    }
}

impl FromStr for Origin {
    type Err = ParseEnumError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(Origin::User),
            "cli" => Ok(Origin::Cli),
            other => Err(ParseEnumError {
                kind: "origin",
                value: other.to_owned(),
            }),
        }
    }
}

/// A string that is not one of an enum's stored values ([`MessageStatus`], [`Role`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}`")]
pub struct ParseEnumError {
    /// Which enum was being parsed, for the message.
    pub kind: &'static str,
    /// The string that did not match.
    pub value: String,
}

/// What the caller chooses when creating a thread; the store picks the id and timestamps.
#[derive(Clone, Debug, Default)]
pub struct NewThread {
    /// The id to give the thread (one reserved for it, say); a fresh one when `None`.
    pub id: Option<ThreadId>,
    pub title: Option<String>,
    /// The thread's model; `None` lets the daemon's default apply.
    pub model: Option<String>,
    /// Set for a delegated child thread or a fork. Must name an existing thread.
    pub parent_id: Option<ThreadId>,
    /// A JSON Schema every reply must match (`--json-schema`).
    pub output_schema: Option<serde_json::Value>,
    /// Most USD the thread's turns may cost together.
    pub max_budget_usd: Option<f64>,
    /// Where its processes work; `None`: a folder of its own.
    pub workspace: Option<Workspace>,
    /// Its agent profile; `None`: the daemon's default.
    pub profile: Option<String>,
    /// The tenant it belongs to: its creator's (a delegated child's parent's, a fork's
    /// source's); `None`: the operator's.
    pub tenant: Option<String>,
    /// What happens to a turn the daemon's own life cuts.
    pub on_interrupt: OnInterrupt,
}

/// What happens to a turn cut by a crash, a shutdown or a takeover (`threads.on_interrupt`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(rename_all = "lowercase")]
pub enum OnInterrupt {
    /// It stays `interrupted`; sending it again runs it.
    #[default]
    Mark,
    /// It runs again by itself, told that its previous attempt was cut.
    Retry,
}

impl OnInterrupt {
    /// The value stored in `threads.on_interrupt`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnInterrupt::Mark => "mark",
            OnInterrupt::Retry => "retry",
        }
    }
}

/// Where a thread's processes work when it is not their own folder (`threads.workspace`, stored
/// as JSON; `None` there: `<claude.workdir>/<thread id>`). Set once, when the thread is created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Workspace {
    /// A folder, used as it is.
    Path {
        /// Canonical (no symlink, no `..`).
        #[schema(value_type = String)]
        path: PathBuf,
    },
    /// A git worktree of `repo` made for the thread at `path`, on its own `branch`, from
    /// `base_commit` (what `base_ref` named then).
    Worktree {
        #[schema(value_type = String)]
        repo: PathBuf,
        #[schema(value_type = String)]
        path: PathBuf,
        branch: String,
        base_ref: String,
        base_commit: String,
    },
}

impl Workspace {
    /// The folder the thread's processes work in.
    pub fn path(&self) -> &Path {
        match self {
            Workspace::Path { path } | Workspace::Worktree { path, .. } => path,
        }
    }
}

/// A workspace as its column holds it.
pub fn workspace_text(workspace: &Workspace) -> Result<String, StoreError> {
    serde_json::to_string(workspace).map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// A thread as stored. What clients see is `api::Thread`, built from it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ThreadRow {
    pub id: ThreadId,
    pub title: Option<String>,
    pub model: Option<String>,
    /// The CLI session to `--resume` when no warm process serves the thread. It changes over the
    /// thread's life; never a key.
    pub cli_session_id: Option<CliSessionId>,
    /// The thread that delegated to this one, or that this one forked.
    pub parent_id: Option<ThreadId>,
    /// The JSON Schema every reply matches (`structuredOutput`); `None`: plain text replies.
    pub output_schema: Option<serde_json::Value>,
    /// For a fork: the CLI session it forked, which its first turn resumes with
    /// `--fork-session` (until then `cli_session_id` is empty).
    pub forked_session: Option<CliSessionId>,
    /// Most USD the thread's turns may cost together; `None`: only the daemon's daily budget.
    pub max_budget_usd: Option<f64>,
    /// Where its processes work; `None`: a folder of its own.
    pub workspace: Option<sqlx::types::Json<Workspace>>,
    /// Its agent profile (`[profiles.NAME]`, `standard`, `lean`); `None`: the daemon's default.
    pub profile: Option<String>,
    /// The tenant it belongs to (`orchestrator::keys`); `None`: the operator's.
    pub tenant: Option<String>,
    /// When it was archived (it takes no more messages); `None`: a live thread.
    pub archived_at: Option<DateTime<Utc>>,
    /// What happens to a turn the daemon's own life cuts.
    pub on_interrupt: OnInterrupt,
    pub created_at: DateTime<Utc>,
    /// Last change to the thread row itself (its session), not to its messages.
    pub updated_at: DateTime<Utc>,
}

/// A thread with when something last happened in it, and whether a turn is under way (a user
/// message still `pending`).
#[derive(Clone, Debug)]
pub struct ThreadSummaryRow {
    pub thread: ThreadRow,
    /// The newest change to the thread or any of its messages.
    pub last_activity_at: DateTime<Utc>,
    pub running: bool,
}

/// A user message to store before its turn runs.
#[derive(Clone, Debug)]
pub struct NewUserMessage {
    pub thread_id: ThreadId,
    /// Its text, images and documents; images and documents as file references
    /// ([`MediaSource::File`]), never their bytes.
    pub content: UserContent,
    /// The client's idempotency key: a retry with the same key on the same thread returns the
    /// first message instead of running the turn twice.
    pub client_message_id: Option<String>,
    /// The model asked for this turn, if any.
    pub model: Option<String>,
    /// Who starts the turn: a client, or the CLI by itself.
    pub origin: Origin,
    /// Who sent it (`None`: the CLI's own turn).
    pub caller: Option<CallerId>,
}

impl NewUserMessage {
    /// The stored `blocks` column: the blocks as JSON when the message was sent as blocks, else
    /// `None` (the `content` column, its text, is all of it).
    pub fn blocks_json(&self) -> Option<String> {
        match &self.content {
            UserContent::Text(_) => None,
            UserContent::Blocks(blocks) => serde_json::to_string(blocks).ok(),
        }
    }
}

/// Who sent a message or answered a permission, as stored: the subject (`operator`, an API
/// key's id, `schedule:<id>`, …) and its tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CallerId {
    pub subject: String,
    /// `None`: the operator's, which owns every thread.
    pub tenant: Option<String>,
}

/// The outcome of storing a user message (`Store::insert_user_message`).
#[derive(Clone, Debug)]
pub enum Inserted {
    /// A new message; its turn should run.
    New(MessageRow),
    /// The client already sent this `client_message_id` on this thread; this is the first message,
    /// and nothing was inserted.
    Duplicate(MessageRow),
}

impl Inserted {
    /// The message, new or existing.
    pub fn message(&self) -> &MessageRow {
        match self {
            Inserted::New(m) | Inserted::Duplicate(m) => m,
        }
    }
}

/// The user message a turn answers, by its thread and id: what ending the turn needs. The
/// thread picks the fence and scopes the write (a message of another thread is not found), so
/// nothing is looked up first.
#[derive(Clone, Copy, Debug)]
pub struct TurnKey<'a> {
    pub thread: &'a ThreadId,
    pub message: &'a MessageId,
}

/// A message as stored (`messages`). What clients see is `api::Message`, built from it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct MessageRow {
    pub id: MessageId,
    pub thread_id: ThreadId,
    /// Position in the thread, from 1, in arrival order.
    pub seq: i64,
    pub role: Role,
    pub content: String,
    pub status: MessageStatus,
    /// Why the turn failed, for `error` and `interrupted`.
    pub error: Option<String>,
    pub client_message_id: Option<String>,
    /// For an assistant message: the user message it answers.
    pub reply_to: Option<MessageId>,
    pub model: Option<String>,
    /// Who started the turn this message belongs to: `user` (a message sent to the API) or `cli`
    /// (the CLI started it by itself).
    pub origin: Origin,
    /// Who sent a user message ([`MessageRow::caller`]); `None` for replies.
    pub caller_subject: Option<String>,
    pub caller_tenant: Option<String>,
    /// A reply of a thread with an `outputSchema`: the value, validated against it.
    pub structured_output: Option<serde_json::Value>,
    /// A user message sent as blocks: the blocks ([`MessageRow::user_content`]).
    pub blocks: Option<serde_json::Value>,
    // What the turn cost ([`MessageRow::usage`]): on the reply of a turn that replied, on the
    // user message of a turn that failed after reaching the API. Written together.
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
    pub api_ms: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl MessageRow {
    /// The blocks of a message sent as blocks; `None` for plain text.
    pub fn content_blocks(&self) -> Option<Vec<plugin_contract::ContentBlock>> {
        self.blocks
            .is_some()
            .then(|| self.user_content().into_blocks())
    }

    /// What the message says: its blocks when it was sent as blocks, else its text.
    pub fn user_content(&self) -> UserContent {
        self.blocks
            .as_ref()
            .and_then(|blocks| serde_json::from_value(blocks.clone()).ok())
            .map(UserContent::Blocks)
            .unwrap_or_else(|| UserContent::Text(self.content.clone()))
    }

    /// Who sent it, when it was stored with a caller.
    pub fn caller(&self) -> Option<CallerId> {
        self.caller_subject.clone().map(|subject| CallerId {
            subject,
            tenant: self.caller_tenant.clone(),
        })
    }

    /// This user message as the turn that answers it ([`TurnKey`]).
    pub fn turn_key(&self) -> TurnKey<'_> {
        TurnKey {
            thread: &self.thread_id,
            message: &self.id,
        }
    }

    /// What the turn cost, when the message has usage: its columns are written together, so the
    /// cost stands for all of them.
    pub fn usage(&self) -> Option<Usage> {
        self.cost_usd.map(|cost_usd| Usage {
            input_tokens: self.input_tokens.unwrap_or_default(),
            output_tokens: self.output_tokens.unwrap_or_default(),
            cache_read_tokens: self.cache_read_tokens.unwrap_or_default(),
            cache_write_tokens: self.cache_write_tokens.unwrap_or_default(),
            cost_usd,
            api_ms: self.api_ms.unwrap_or_default(),
        })
    }
}

/// What turns cost: one turn's figures from the CLI's `result` line, or their sums.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    /// As the CLI prices it (list prices of the models it used).
    pub cost_usd: f64,
    /// Time spent in Messages API requests, in milliseconds.
    pub api_ms: i64,
}

impl Usage {
    /// The figures by `harness_tokens_total`'s `kind` label.
    pub fn tokens(&self) -> [(&'static str, i64); 4] {
        [
            ("input", self.input_tokens),
            ("output", self.output_tokens),
            ("cache_read", self.cache_read_tokens),
            ("cache_write", self.cache_write_tokens),
        ]
    }
}

/// One entry of a thread's event log. `id` is the SSE event id: monotonic across the daemon, so a
/// client resumes with `Last-Event-ID`.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct EventRow {
    pub id: i64,
    pub thread_id: ThreadId,
    /// The user message whose turn produced the event, if any.
    pub message_id: Option<MessageId>,
    /// The SSE event name.
    pub kind: String,
    pub data: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

/// A tool call to record after it finished.
#[derive(Clone, Debug)]
pub struct NewToolCall {
    /// The thread whose process called the tool; `None` for calls outside any thread.
    pub thread_id: Option<ThreadId>,
    /// The full tool name (`<plugin>__<tool>`).
    pub tool: String,
    /// The model's id for the call, when the CLI passed it on.
    pub tool_use_id: Option<String>,
    pub input: serde_json::Value,
    /// What went back to the model; `None` when there was nothing (a timeout, say).
    pub result: Option<serde_json::Value>,
    pub is_error: bool,
    pub duration_ms: u64,
}

/// A recorded tool call (`tool_calls`). What clients see is `api::ToolCall`, built from it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ToolCallRow {
    pub id: i64,
    pub thread_id: Option<ThreadId>,
    pub tool: String,
    pub tool_use_id: Option<String>,
    pub input: serde_json::Value,
    pub result: Option<serde_json::Value>,
    pub is_error: bool,
    /// Never negative: written from a `u64`, clamped to `i64::MAX`.
    pub duration_ms: i64,
    pub created_at: DateTime<Utc>,
}

/// A time as stored: RFC 3339 UTC with microseconds and `Z`. The fixed width makes text order
/// time order, which `ORDER BY created_at` and the comparisons of stored times rely on.
/// Timestamps are bound as this text rather than as `DateTime<Utc>`, whose sqlx encoding
/// (`+00:00`, variable precision) would break that order; sqlx decodes the text back into
/// `DateTime<Utc>`.
pub fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Now, as stored ([`time_text`]).
pub fn now_text() -> String {
    time_text(Utc::now())
}

/// True when `err` is SQLite refusing a foreign key: the named thread does not exist.
pub fn is_foreign_key_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.is_foreign_key_violation())
}

/// True when `err` is a UNIQUE index refusing a row.
pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.is_unique_violation())
}

/// What a turn's writes must still hold to succeed: this node's lease on the thread, at the epoch
/// it took. `None` where a fence is optional means clustering is off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The owning node's id.
    pub owner: String,
    /// The epoch the node took the lease at; a takeover increments it.
    pub epoch: i64,
}

/// A thread's lease as stored.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct ThreadLease {
    pub thread_id: ThreadId,
    pub owner: String,
    /// Where peers forward the thread's requests.
    pub owner_url: String,
    pub epoch: i64,
    pub expires_at: DateTime<Utc>,
}

impl ThreadLease {
    /// True while the owner's last heartbeat still covers `now`.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        self.expires_at > now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_times_have_one_width() {
        let at = DateTime::parse_from_rfc3339("2026-03-01T10:00:02Z")
            .expect("a time")
            .with_timezone(&Utc);
        assert_eq!(time_text(at), "2026-03-01T10:00:02.000000Z");
    }
}
