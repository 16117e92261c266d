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
// The store's vocabulary and the query traits, from the crate both databases share.
pub use harness_db::*;
pub use leases::{Claim, TAKEOVER_REASON};
pub use permissions::{NewPermission, PermissionRow};
pub use transcripts::TranscriptEntry;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use plugin_contract::{HistoryMessage, ThreadId, ThreadInfo};
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

/// The daemon's handle on its database. Cheap to clone: clones share one pool.
#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
    backends: Backends,
    /// Latency of store calls, shared by every clone; registered in `/metrics`.
    metrics: crate::metrics::StoreMetrics,
    /// This node's leases when several nodes share the database ([`Store::as_node`]): every
    /// write of a thread's turn checks the fence held here. `None`: a single node.
    node: Option<std::sync::Arc<leases::NodeLeases>>,
}

/// Which database the store runs on; operations not yet moved to the query crates match on it.
#[derive(Clone, Debug)]
enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// The same database as [`Db`], as its query crate's [`Backend`]: each operation the facade
/// calls through [`on_db!`] is written once per database there, checked at build time.
#[derive(Clone, Debug)]
enum Backends {
    Sqlite(harness_db_sqlite::Sqlite),
    Postgres(harness_db_postgres::Postgres),
}

impl Db {
    fn backends(&self) -> Backends {
        match self {
            Db::Sqlite(pool) => Backends::Sqlite(harness_db_sqlite::Sqlite::new(pool.clone())),
            Db::Postgres(pool) => {
                Backends::Postgres(harness_db_postgres::Postgres::new(pool.clone()))
            }
        }
    }
}

/// `on_db!(self, db => db.op(args).await)`: the call on whichever database the store runs, the
/// same expression for both (each crate implements [`Backend`] with the same signatures).
macro_rules! on_db {
    ($store:expr, $db:ident => $call:expr) => {
        match &$store.backends {
            Backends::Sqlite($db) => $call,
            Backends::Postgres($db) => $call,
        }
    };
}
use on_db;

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
            backends: Db::Sqlite(pool.clone()).backends(),
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
            backends: Db::Postgres(pool.clone()).backends(),
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

#[cfg(test)]
mod tests;
