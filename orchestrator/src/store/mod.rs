//! The store: threads, their messages, turn events and tool calls, in SQLite (the embedded
//! default, one machine) or PostgreSQL (`--db postgres://…`). All of the daemon's SQL lives in
//! this module and its children; the schema lives in `migrations/` (SQLite, [`MIGRATOR`]) and
//! `migrations/postgres/` ([`PG_MIGRATOR`]), applied when the store opens. Migration N is the same
//! change on both databases.
//!
//! - `threads.rs`: create, look up and list threads; the CLI session to resume; depth of a child.
//! - `messages.rs`: the life of a turn (user message pending → done/error/interrupted, assistant
//!   reply), history for a fresh session, crash recovery.
//! - `events.rs`: the per-thread event log that SSE replays.
//! - `tool_calls.rs`: a record of every tool call the MCP server served.
//! - `transcripts.rs`: the CLI's transcript entries as its processes mirror them, to restore a
//!   session the CLI's config dir no longer has.
//! - `leases.rs`: which node owns a thread when several share the database (take, renew,
//!   release, look up), and the [`Fence`] a turn's writes carry.
//! - `pg.rs`: reading PostgreSQL rows (the decoding the SQLite macros do for their side).
//! - `usage.rs`, `permissions.rs`: a turn's usage and the day's totals; tool permissions.
//!
//! Each operation is written once per database, side by side in a `match` on the backend. Every
//! SQLite statement is written out in a `sqlx::query!`-family macro, so the compiler checks it
//! against the schema: online when `DATABASE_URL` names a migrated database, otherwise from the
//! query data committed in `.sqlx/` at the workspace root (`just sqlx-prepare` regenerates it
//! after a query or a migration changes). PostgreSQL statements are run-time `sqlx::query` with
//! explicit row mapping (`pg.rs`): checking them at build time would need a server there; the
//! store's tests run every operation on both databases instead. `events.rs`, `messages.rs`,
//! `permissions.rs`, `tool_calls.rs`, `transcripts.rs` and `usage.rs` keep their PostgreSQL
//! side in a `postgres` module after their `impl Store` (before the tests); `threads.rs` and
//! `leases.rs` write it inline in each `match` arm.
//!
//! sqlx decodes every column: [`Role`] and [`MessageStatus`] derive `sqlx::Type` over their stored
//! strings (parsed with `FromStr` on PostgreSQL), [`MessageId`] is transparent over its text,
//! JSON columns decode as `serde_json::Value`, timestamps as `DateTime<Utc>`. A stored value that
//! does not decode becomes [`StoreError::Corrupt`] instead of a panic. Timestamps are written as
//! RFC 3339 UTC text of fixed width (microseconds, `Z`; see `now_text`) on both databases, so
//! text order is time order.
//!
//! Concurrency: SQLite runs each write under the database's one write lock (`BEGIN IMMEDIATE`
//! for transactions); PostgreSQL has no such lock, so what SQLite gets from it (a thread's next
//! `seq`, one message per `clientMessageId`) comes from locking the thread's row
//! (`FOR NO KEY UPDATE`) in the writing transaction.
//!
//! The contract's ids (`ThreadId`, `CliSessionId`) are converted at this edge (`thread.as_str()`
//! when binding, `from_string` when reading into a private `*Record` row), so `plugin-contract`
//! needs no sqlx. The macros borrow their arguments until the query runs, so a converted value
//! (`id.as_str()`, `now_text()`) is bound to a local first.
//!
//! **Invariant:** nothing here deletes rows; a thread, once created, exists for good. Code that
//! checks a thread exists and then writes relies on it.

mod events;
mod leases;
mod messages;
mod permissions;
mod pg;
mod threads;
mod tool_calls;
mod transcripts;
mod usage;

pub use events::{EventListener, SharedEvents, Wakeup, EVENTS_CHANNEL};
pub use leases::{Claim, Fence, ThreadLease, TAKEOVER_REASON};
pub use permissions::{NewPermission, PermissionRow};
pub use transcripts::TranscriptEntry;

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use plugin_contract::{CliSessionId, HistoryMessage, ThreadId, ThreadInfo};
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// The SQLite schema migrations, embedded at compile time. Run by [`Store::open`]; tests that
/// build their own pool run it too.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// The PostgreSQL schema migrations (`migrations/postgres/`, the same tables), run by
/// [`Store::open`] for a `postgres://` URL.
pub static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// How long a connection waits for another writer's lock before failing with "database is locked".
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections for a file database. SQLite serializes writers anyway; a few connections let reads
/// (SSE replays, history) proceed while a write waits.
const FILE_POOL_SIZE: u32 = 8;

/// Connections to a PostgreSQL server: writers of different threads run at once there.
const PG_POOL_SIZE: u32 = 16;

/// PostgreSQL's `idle_in_transaction_session_timeout` for every connection of the daemon. Our
/// transactions run their statements back to back and never wait on anything else, so a
/// session idle inside one for this long belongs to a daemon that stopped (frozen, paused,
/// SIGSTOPped) mid-write: the server ends it, and the lease row it locked (`FOR SHARE` in every
/// fenced write) is free again for the node taking the thread over. Measured: without it, a
/// node frozen inside a transcript write held a takeover's `FOR UPDATE` for good.
const PG_IDLE_IN_TRANSACTION: &str = "5s";

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
    /// schema forbids) is a corrupt row; anything else is a database error.
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(err.to_string())
            }
            err => StoreError::Db(err),
        }
    }
}

/// The daemon's handle on its database. Cheap to clone: clones share one pool.
#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
    /// Latency of store calls, shared by every clone; registered in `/metrics`.
    metrics: crate::metrics::StoreMetrics,
    /// This node's leases when several nodes share the database ([`Store::as_node`]): every
    /// write of a thread's turn checks the fence held here. `None`: a single node.
    node: Option<std::sync::Arc<leases::NodeLeases>>,
}

/// Which database the store runs on; every operation matches on it.
#[derive(Clone, Debug)]
enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// True when `db` (the `db` setting) names a PostgreSQL server: a `postgres://` or
/// `postgresql://` URL. Anything else is a SQLite file (or `:memory:`).
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// A PostgreSQL database as logs show it, `postgres://user@host:port/database`: the URL without
/// its password (or any other parameter).
struct PgLocation(String);

impl PgLocation {
    fn of(options: &PgConnectOptions) -> PgLocation {
        PgLocation(format!(
            "postgres://{}@{}:{}/{}",
            options.get_username(),
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or_default()
        ))
    }
}

impl fmt::Display for PgLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Store {
    /// Opens the database `db` names and runs its migrations: a `postgres://` URL (see
    /// [`is_postgres_url`]) connects to PostgreSQL and runs [`PG_MIGRATOR`]; anything else is a
    /// SQLite file path or `":memory:"`, created if missing, migrated by [`MIGRATOR`].
    ///
    /// A PostgreSQL URL's password is never logged: the log names host, port, database and user.
    ///
    /// A file database gets WAL journaling (readers do not block the writer), foreign keys,
    /// a 5 s busy timeout and `synchronous = NORMAL` (durable at checkpoints, safe against
    /// corruption). Its parent directory is created if missing.
    ///
    /// `":memory:"` gets a pool of exactly one connection that never expires: each in-memory
    /// connection is its own database, so a second connection (or a reconnect) would see an empty,
    /// unmigrated one.
    pub async fn open(db: &str) -> Result<Store, StoreError> {
        if is_postgres_url(db) {
            return Self::open_postgres(db).await;
        }
        let path = db;
        let in_memory = path == ":memory:";
        let base = SqliteConnectOptions::new()
            .filename(path)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT)
            .synchronous(SqliteSynchronous::Normal);

        let pool = if in_memory {
            // Journal mode WAL is meaningless for a memory database (SQLite keeps "memory").
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(base.in_memory(true))
                .await?
        } else {
            if let Some(parent) = Path::new(path).parent() {
                if !parent.as_os_str().is_empty() {
                    std::fs::create_dir_all(parent).map_err(sqlx::Error::Io)?;
                }
            }
            SqlitePoolOptions::new()
                .max_connections(FILE_POOL_SIZE)
                .connect_with(
                    base.create_if_missing(true)
                        .journal_mode(SqliteJournalMode::Wal),
                )
                .await?
        };

        MIGRATOR.run(&pool).await?;
        tracing::info!(path, "Opened the store.");
        Ok(Store {
            db: Db::Sqlite(pool),
            metrics: Default::default(),
            node: None,
        })
    }

    /// Connects to the PostgreSQL server `url` names and runs [`PG_MIGRATOR`] (which holds
    /// PostgreSQL's advisory lock, so two daemons starting at once migrate once).
    async fn open_postgres(url: &str) -> Result<Store, StoreError> {
        let options: PgConnectOptions = url.parse()?;
        let options = options.options([(
            "idle_in_transaction_session_timeout",
            PG_IDLE_IN_TRANSACTION,
        )]);
        let shown = PgLocation::of(&options);
        let pool = PgPoolOptions::new()
            .max_connections(PG_POOL_SIZE)
            .connect_with(options)
            .await?;
        PG_MIGRATOR.run(&pool).await?;
        tracing::info!(database = %shown, "Opened the store on PostgreSQL.");
        Ok(Store {
            db: Db::Postgres(pool),
            metrics: Default::default(),
            node: None,
        })
    }

    /// The latency histograms of this store's calls.
    pub fn metrics(&self) -> &crate::metrics::StoreMetrics {
        &self.metrics
    }

    /// Which database this is, for logs and tests: `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        match self.db {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    /// True when the database looks sound: SQLite's `PRAGMA integrity_check` reports `ok`; on
    /// PostgreSQL (which checks its pages itself) a query answers. The health check uses it.
    pub async fn integrity_ok(&self) -> Result<bool, StoreError> {
        match &self.db {
            Db::Sqlite(pool) => {
                let rows = sqlx::query_scalar!("PRAGMA integrity_check")
                    .fetch_all(pool)
                    .await?;
                Ok(rows.len() == 1 && rows[0].as_deref() == Some("ok"))
            }
            Db::Postgres(pool) => {
                let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(pool).await?;
                Ok(one == 1)
            }
        }
    }

    /// Closes every connection, waiting for checked-out ones to come back. Call at shutdown so the
    /// WAL is checkpointed; later calls on any clone fail with [`StoreError::Db`].
    pub async fn close(&self) {
        match &self.db {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pool) => pool.close().await,
        }
    }
}

#[async_trait::async_trait]
impl plugin_contract::ThreadStore for Store {
    async fn thread(&self, id: &ThreadId) -> Result<Option<ThreadInfo>, String> {
        let thread = self.get_thread(id).await.map_err(|e| e.to_string())?;
        Ok(thread.map(|t| ThreadInfo {
            id: t.id,
            title: t.title,
            model: t.model,
            parent_id: t.parent_id,
        }))
    }

    async fn history(&self, id: &ThreadId) -> Result<Vec<HistoryMessage>, String> {
        Store::history(self, id).await.map_err(|e| e.to_string())
    }

    async fn depth(&self, id: &ThreadId) -> Result<u32, String> {
        self.thread_depth(id).await.map_err(|e| e.to_string())
    }
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
    /// The turn is running (or the daemon died while it ran; see [`Store::interrupt_pending`]).
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
    /// [`HistoryMessage::role`].
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
}

/// A conversation.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    #[schema(value_type = String, example = "thr_0123456789abcdef0123456789abcdef")]
    pub id: ThreadId,
    pub title: Option<String>,
    pub model: Option<String>,
    /// The CLI session to `--resume` when no warm process serves the thread. It changes over the
    /// thread's life; never a key.
    #[schema(value_type = Option<String>)]
    pub cli_session_id: Option<CliSessionId>,
    /// The thread that delegated to this one, or that this one forked.
    #[schema(value_type = Option<String>)]
    pub parent_id: Option<ThreadId>,
    /// The JSON Schema every reply matches (`structuredOutput`); `None`: plain text replies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// For a fork: the CLI session it forked, which its first turn resumes with
    /// `--fork-session` (until then `cli_session_id` is empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub forked_session: Option<CliSessionId>,
    /// Most USD the thread's turns may cost together; `None`: only the daemon's daily budget.
    pub max_budget_usd: Option<f64>,
    pub created_at: DateTime<Utc>,
    /// Last change to the thread row itself (its session), not to its messages.
    pub updated_at: DateTime<Utc>,
}

/// A thread as a list of threads shows it: when something last happened in it, and whether a
/// turn is under way (a user message still `pending`).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadSummary {
    #[serde(flatten)]
    pub thread: Thread,
    /// The newest change to the thread or any of its messages.
    pub last_activity_at: DateTime<Utc>,
    pub running: bool,
}

/// A user message to store before its turn runs.
#[derive(Clone, Debug)]
pub struct NewUserMessage {
    pub thread_id: ThreadId,
    pub content: String,
    /// The client's idempotency key: a retry with the same key on the same thread returns the
    /// first message instead of running the turn twice.
    pub client_message_id: Option<String>,
    /// The model asked for this turn, if any.
    pub model: Option<String>,
    /// Who starts the turn: a client, or the CLI by itself.
    pub origin: Origin,
}

/// The outcome of [`Store::insert_user_message`].
#[derive(Clone, Debug)]
pub enum Inserted {
    /// A new message; its turn should run.
    New(Message),
    /// The client already sent this `client_message_id` on this thread; this is the first message,
    /// and nothing was inserted.
    Duplicate(Message),
}

impl Inserted {
    /// The message, new or existing.
    pub fn message(&self) -> &Message {
        match self {
            Inserted::New(m) | Inserted::Duplicate(m) => m,
        }
    }
}

/// One message of a thread.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub id: MessageId,
    #[schema(value_type = String)]
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
    /// A reply of a thread with an `outputSchema`: the value, validated against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<serde_json::Value>,
    /// What the turn cost: on the reply of a turn that replied, on the user message of a turn
    /// that failed after reaching the API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
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
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
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

/// A recorded tool call.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRow {
    pub id: i64,
    #[schema(value_type = Option<String>)]
    pub thread_id: Option<ThreadId>,
    pub tool: String,
    pub tool_use_id: Option<String>,
    pub input: serde_json::Value,
    pub result: Option<serde_json::Value>,
    pub is_error: bool,
    pub duration_ms: u64,
    pub created_at: DateTime<Utc>,
}

/// Now, as stored: RFC 3339 UTC with microseconds and `Z`. The fixed width makes text order time
/// order, which `ORDER BY created_at` relies on. Timestamps are bound as this text rather than as
/// `DateTime<Utc>`, whose sqlx encoding (`+00:00`, variable precision) would break that order;
/// sqlx decodes the text back into `DateTime<Utc>`.
fn now_text() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// True when `err` is SQLite refusing a foreign key: the named thread does not exist.
fn is_foreign_key_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.is_foreign_key_violation())
}

/// True when `err` is a UNIQUE index refusing a row.
fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.is_unique_violation())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The usage migration rebuilds `messages` (for the `refused` status): a database from before
    /// it keeps every message, its reply links, the permissions that point at messages, and its
    /// foreign keys.
    #[tokio::test]
    async fn the_usage_migration_keeps_messages_and_what_points_at_them() {
        use std::borrow::Cow;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let old = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(&path)
                    .create_if_missing(true)
                    .foreign_keys(true),
            )
            .await
            .unwrap();
        let before = sqlx::migrate::Migrator {
            migrations: Cow::Owned(MIGRATOR.migrations[..4].to_vec()),
            ..sqlx::migrate::Migrator::DEFAULT
        };
        before.run(&old).await.unwrap();
        sqlx::raw_sql(
            "INSERT INTO threads (id, created_at, updated_at) VALUES ('t', 'x', 'x');
             INSERT INTO messages (id, thread_id, seq, role, content, status, created_at, updated_at)
                 VALUES ('q', 't', 1, 'user', 'hi', 'done', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z');
             INSERT INTO messages (id, thread_id, seq, role, content, status, reply_to, created_at, updated_at)
                 VALUES ('a', 't', 2, 'assistant', 'yo', 'done', 'q', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z');
             INSERT INTO permissions (id, thread_id, message_id, tool_name, input, status, created_at)
                 VALUES ('p', 't', 'q', 'Bash', '{}', 'allowed', 'x');",
        )
        .execute(&old)
        .await
        .unwrap();
        old.close().await;

        let store = Store::open(path.to_str().unwrap()).await.unwrap();
        let thread = ThreadId::from_string("t");
        let messages = store.list_messages(&thread).await.unwrap();
        let ids: Vec<_> = messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["q", "a"]);
        assert_eq!(
            messages[1].reply_to.as_ref().map(MessageId::as_str),
            Some("q")
        );
        let pointing: Vec<(String,)> =
            sqlx::query_as("SELECT message_id FROM permissions WHERE id = 'p'")
                .fetch_all(store.sqlite_pool())
                .await
                .unwrap();
        assert_eq!(pointing, [("q".to_owned(),)]);
        let broken: Vec<(String,)> =
            sqlx::query_as("SELECT \"table\" FROM pragma_foreign_key_check")
                .fetch_all(store.sqlite_pool())
                .await
                .unwrap();
        assert!(broken.is_empty(), "{broken:?}");
        // The reply link is still a foreign key, now on the new table.
        let dangling = sqlx::raw_sql(
            "INSERT INTO messages (id, thread_id, seq, role, content, status, reply_to, created_at, updated_at)
                 VALUES ('b', 't', 3, 'assistant', 'x', 'done', 'nope', 'x', 'x')",
        )
        .execute(store.sqlite_pool())
        .await;
        assert!(dangling.is_err());
        // And the new status is allowed.
        store
            .fail_turn(
                &MessageId::from_string("q"),
                MessageStatus::Refused,
                "budget",
                None,
                None,
            )
            .await
            .unwrap();
    }

    /// A fresh migrated in-memory store.
    pub(crate) async fn memory_store() -> Store {
        Store::open(":memory:").await.unwrap()
    }

    /// A fresh migrated store on PostgreSQL: a new database on this test process's server
    /// (`pg_test`). `None` only when `HARNESS_TEST_PG=skip` is set and no server can start;
    /// otherwise a server that cannot start fails the test with the reason.
    pub(crate) async fn pg_store() -> Option<Store> {
        if std::env::var("HARNESS_TEST_PG").as_deref() == Ok("skip") && !pg_test::available() {
            eprintln!("HARNESS_TEST_PG=skip and no PostgreSQL: skipping the PostgreSQL variant");
            return None;
        }
        let url = pg_test::database_url().await.expect("a test PostgreSQL");
        Some(Store::open(&url).await.unwrap())
    }

    /// The SQLite openers the store's tests choose from: a store and what keeps it alive.
    pub(crate) async fn sqlite_memory() -> (Store, Option<tempfile::TempDir>) {
        (memory_store().await, None)
    }

    /// A file database (with WAL and a pool of several connections), for tests of concurrency.
    pub(crate) async fn sqlite_file() -> (Store, Option<tempfile::TempDir>) {
        let (store, dir) = file_store().await;
        (store, Some(dir))
    }

    /// Runs a store test on both databases: `async fn name(store: sqlite_memory) { … }` makes
    /// the tests `name::sqlite` (the store from the named opener) and `name::postgres` (a fresh
    /// database from [`pg_store`]).
    /// Every table the migrations create, by name (the same on both databases).
    const TABLES: [&str; 8] = [
        "events",
        "leases",
        "messages",
        "permissions",
        "threads",
        "tool_calls",
        "transcript_entries",
        "usage_days",
    ];

    macro_rules! store_tests {
        ($($(#[$meta:meta])* async fn $name:ident($store:ident: $sqlite:ident) $body:block)*) => {$(
            $(#[$meta])*
            mod $name {
                #[allow(unused_imports)]
                use super::*;

                #[tokio::test]
                async fn sqlite() {
                    let ($store, _kept) = $crate::store::tests::$sqlite().await;
                    $body
                }

                #[tokio::test]
                async fn postgres() {
                    let Some($store) = $crate::store::tests::pg_store().await else {
                        return;
                    };
                    $body
                }
            }
        )*};
    }
    pub(crate) use store_tests;

    /// SQL the store does not offer, for tests on either database (no parameters: tests write
    /// their values into the text).
    impl Store {
        /// The SQLite pool, for tests of SQLite itself. Panics on PostgreSQL.
        pub(crate) fn sqlite_pool(&self) -> &SqlitePool {
            match &self.db {
                Db::Sqlite(pool) => pool,
                Db::Postgres(_) => panic!("a SQLite test got a PostgreSQL store"),
            }
        }

        pub(crate) async fn test_execute(&self, sql: &str) {
            match &self.db {
                Db::Sqlite(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
                Db::Postgres(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
            }
            .unwrap();
        }

        pub(crate) async fn test_count(&self, sql: &str) -> i64 {
            match &self.db {
                Db::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
                Db::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            }
            .unwrap()
        }

        pub(crate) async fn test_text(&self, sql: &str) -> String {
            match &self.db {
                Db::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
                Db::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            }
            .unwrap()
        }
    }

    /// A fresh migrated file store in a temp dir (kept alive by the returned guard).
    pub(crate) async fn file_store() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/dir/harness.db");
        let store = Store::open(path.to_str().unwrap()).await.unwrap();
        (store, dir)
    }

    #[tokio::test]
    async fn memory_store_is_migrated_and_keeps_data_on_one_connection() {
        let store = memory_store().await;
        // PRAGMA settings stay run-time queries: sqlx cannot describe their result type
        // (`query!` may see a column of type NULL; the `pragma_*` functions have no column
        // metadata), so these checks name the type themselves.
        let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(store.sqlite_pool())
            .await
            .unwrap();
        assert_eq!(fk, 1);
        let tables = sqlx::query_scalar!(
            r#"SELECT name AS "name!" FROM sqlite_master
               WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx%'
               ORDER BY name"#
        )
        .fetch_all(store.sqlite_pool())
        .await
        .unwrap();
        assert_eq!(tables, TABLES);
        assert_eq!(store.sqlite_pool().size(), 1);

        // Data written through one clone is seen through another: the same single database.
        let thread = store.create_thread(NewThread::default()).await.unwrap();
        let clone = store.clone();
        assert!(clone.get_thread(&thread.id).await.unwrap().is_some());
        assert!(store.integrity_ok().await.unwrap());
    }

    #[tokio::test]
    async fn file_store_uses_wal_and_creates_its_directory() {
        let (store, dir) = file_store().await;
        assert!(dir.path().join("nested/dir/harness.db").is_file());
        // PRAGMA settings stay run-time queries: sqlx cannot describe their result type.
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(store.sqlite_pool())
            .await
            .unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(store.sqlite_pool())
            .await
            .unwrap();
        assert_eq!(fk, 1);
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(store.sqlite_pool())
            .await
            .unwrap();
        assert_eq!(sync, 1, "synchronous NORMAL");
        let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(store.sqlite_pool())
            .await
            .unwrap();
        assert_eq!(busy, 5000);
        assert!(store.integrity_ok().await.unwrap());
    }

    /// A `postgres://` URL opens PostgreSQL with the same tables; opening it again (a restart)
    /// finds the migrations applied and the data kept.
    #[tokio::test]
    async fn postgres_store_is_migrated_and_persists_across_reopen() {
        if pg_store().await.is_none() {
            return;
        }
        // The test server trusts loopback, so any password opens it.
        let url = pg_test::database_url()
            .await
            .unwrap()
            .replace("postgres@", "postgres:s3cret-pw@");
        assert!(is_postgres_url(&url));
        let store = Store::open(&url).await.unwrap();
        assert_eq!(store.backend(), "postgres");
        assert!(!format!("{store:?}").contains("s3cret-pw"));
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::TEXT FROM information_schema.tables
             WHERE table_schema = 'public' AND table_name NOT LIKE '\\_sqlx%'
             ORDER BY table_name",
        )
        .fetch_all(match &store.db {
            Db::Postgres(pool) => pool,
            Db::Sqlite(_) => unreachable!(),
        })
        .await
        .unwrap();
        assert_eq!(tables, TABLES);
        // A daemon frozen mid-transaction cannot hold its locks for good.
        let idle_limit: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
            .fetch_one(match &store.db {
                Db::Postgres(pool) => pool,
                Db::Sqlite(_) => unreachable!(),
            })
            .await
            .unwrap();
        assert_eq!(idle_limit, PG_IDLE_IN_TRANSACTION);
        assert_eq!(
            PG_MIGRATOR.migrations.len(),
            MIGRATOR.migrations.len(),
            "migration N is the same change on both databases"
        );
        let thread = store
            .create_thread(NewThread {
                title: Some("kept".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(store.integrity_ok().await.unwrap());
        store.close().await;

        let reopened = Store::open(&url.replace("postgres://", "postgresql://"))
            .await
            .unwrap();
        let got = reopened.require_thread(&thread.id).await.unwrap();
        assert_eq!(got.title.as_deref(), Some("kept"));
    }

    #[test]
    fn a_postgres_url_is_logged_without_its_password() {
        let options: PgConnectOptions =
            "postgresql://harness:s3cret-pw@db.internal:6543/threads?sslmode=require"
                .parse()
                .unwrap();
        assert_eq!(
            PgLocation::of(&options).to_string(),
            "postgres://harness@db.internal:6543/threads"
        );
    }

    #[test]
    fn only_postgres_urls_select_postgres() {
        assert!(is_postgres_url("postgres://u:secret@db.example/harness"));
        assert!(is_postgres_url("postgresql://localhost/harness"));
        for sqlite in [
            ":memory:",
            "/var/lib/harness.db",
            "postgres.db",
            "sqlite://x.db",
        ] {
            assert!(!is_postgres_url(sqlite), "{sqlite}");
        }
    }

    #[tokio::test]
    async fn file_store_persists_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("harness.db");
        let path = path.to_str().unwrap();
        let store = Store::open(path).await.unwrap();
        let thread = store
            .create_thread(NewThread {
                id: None,
                title: Some("kept".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        store.close().await;

        let reopened = Store::open(path).await.unwrap();
        let got = reopened.require_thread(&thread.id).await.unwrap();
        assert_eq!(got.title.as_deref(), Some("kept"));
    }

    store_tests! {
        async fn closed_store_reports_db_error(store: sqlite_memory) {
            store.close().await;
            let err = store.list_threads().await.unwrap_err();
            assert!(matches!(err, StoreError::Db(_)), "{err:?}");
        }
    }

    store_tests! {
        async fn thread_store_impl_serves_plugins(store: sqlite_memory) {
            use plugin_contract::ThreadStore;

            let parent = store.create_thread(NewThread::default()).await.unwrap();
            let child = store
                .create_thread(NewThread {
                    id: None,
                    title: Some("child".into()),
                    model: Some("haiku".into()),
                    parent_id: Some(parent.id.clone()),
                    output_schema: None,
                    max_budget_usd: None,
                })
                .await
                .unwrap();
            let question = store
                .insert_user_message(NewUserMessage {
                    thread_id: child.id.clone(),
                    content: "ping".into(),
                    client_message_id: None,
                    model: None,
                    origin: crate::store::Origin::User,
                })
                .await
                .unwrap();
            store
                .complete_turn(&question.message().id, "pong", None, None, None, None)
                .await
                .unwrap();

            let plugin_view: std::sync::Arc<dyn ThreadStore> = std::sync::Arc::new(store.clone());
            let info = plugin_view.thread(&child.id).await.unwrap().unwrap();
            assert_eq!(
                info,
                ThreadInfo {
                    id: child.id.clone(),
                    title: Some("child".into()),
                    model: Some("haiku".into()),
                    parent_id: Some(parent.id.clone()),
                }
            );
            assert_eq!(
                plugin_view
                    .thread(&ThreadId::from_string("thr_nope"))
                    .await
                    .unwrap(),
                None
            );
            assert_eq!(
                plugin_view.history(&child.id).await.unwrap(),
                [
                    HistoryMessage {
                        role: "user".into(),
                        content: "ping".into()
                    },
                    HistoryMessage {
                        role: "assistant".into(),
                        content: "pong".into()
                    },
                ]
            );

            store.close().await;
            let err = plugin_view.thread(&child.id).await.unwrap_err();
            assert!(err.starts_with("database error"), "{err}");
        }
    }

    #[test]
    fn enums_round_trip_through_their_stored_strings() {
        for status in [
            MessageStatus::Pending,
            MessageStatus::Done,
            MessageStatus::Error,
            MessageStatus::Interrupted,
        ] {
            assert_eq!(status.as_str().parse::<MessageStatus>().unwrap(), status);
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::Value::String(status.as_str().into())
            );
        }
        for role in [Role::User, Role::Assistant] {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        }
        let err = "Done".parse::<MessageStatus>().unwrap_err();
        assert_eq!(err.to_string(), "unknown message status `Done`");
        assert!("system".parse::<Role>().is_err());
    }

    #[test]
    fn message_ids_are_prefixed_and_unique() {
        let a = MessageId::generate();
        let b = MessageId::generate();
        assert!(a.as_str().starts_with("msg_"));
        assert_eq!(a.as_str().len(), 4 + 32);
        assert_ne!(a, b);
        assert_eq!(MessageId::from_string("msg_x").to_string(), "msg_x");
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::json!(a.as_str())
        );
    }

    #[tokio::test]
    async fn enums_are_stored_as_their_strings() {
        let store = memory_store().await;
        for status in [
            MessageStatus::Pending,
            MessageStatus::Done,
            MessageStatus::Error,
            MessageStatus::Interrupted,
        ] {
            let row = sqlx::query!(
                r#"SELECT ?1 AS "text!: String", ?1 AS "back!: MessageStatus""#,
                status
            )
            .fetch_one(store.sqlite_pool())
            .await
            .unwrap();
            assert_eq!((row.text.as_str(), row.back), (status.as_str(), status));
        }
        for role in [Role::User, Role::Assistant] {
            let row = sqlx::query!(r#"SELECT ?1 AS "text!: String", ?1 AS "back!: Role""#, role)
                .fetch_one(store.sqlite_pool())
                .await
                .unwrap();
            assert_eq!((row.text.as_str(), row.back), (role.as_str(), role));
        }
    }

    /// Decodes `text` the way the store reads its timestamp columns.
    async fn stored_time(store: &Store, text: &str) -> Result<DateTime<Utc>, StoreError> {
        Ok(
            sqlx::query_scalar!(r#"SELECT ?1 AS "t!: DateTime<Utc>""#, text)
                .fetch_one(store.sqlite_pool())
                .await?,
        )
    }

    #[tokio::test]
    async fn stored_times_have_fixed_width_and_parse_back() {
        let store = memory_store().await;
        let text = now_text();
        assert_eq!(text.len(), "2024-01-01T00:00:00.000000Z".len());
        assert!(text.ends_with('Z'));
        let parsed = stored_time(&store, &text).await.unwrap();
        assert_eq!(parsed.to_rfc3339_opts(SecondsFormat::Micros, true), text);
        assert!(matches!(
            stored_time(&store, "yesterday").await,
            Err(StoreError::Corrupt(_))
        ));
    }

    #[test]
    fn errors_display_what_users_see() {
        let id = ThreadId::from_string("thr_1");
        assert_eq!(
            StoreError::ThreadNotFound(id).to_string(),
            "thread thr_1 not found"
        );
        let db = StoreError::from(sqlx::Error::RowNotFound);
        assert!(db.to_string().starts_with("database error: "), "{db}");
    }
}
