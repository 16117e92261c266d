//! The store: threads, their messages, turn events and tool calls, in SQLite (the embedded
//! default, one machine) or PostgreSQL (`--db postgres://…`). The schema lives in `migrations/`
//! (SQLite, [`MIGRATOR`]) and `migrations/postgres/` ([`PG_MIGRATOR`]), applied when the store
//! opens; migration N is the same change on both databases.
//!
//! This is the facade. The SQL lives in two crates, one per database (`db/sqlite`,
//! `db/postgres`), every statement in a `query!`-family macro checked at build time against that
//! database's schema (their own `.sqlx/`, which `just sqlx-prepare` regenerates). Both implement
//! the query traits of `harness-db` (`db/core`: the rows, the stored values, [`Fence`],
//! [`StoreError`]), one trait per module; [`Store`] holds whichever database it opened and calls
//! it once for both through `on_db!(self, db => db.op(..).await)`. What the facade adds:
//! - a latency timer per call (`harness_sqlite_query_duration_seconds`, by method);
//! - ids (`ThreadId`, `MessageId`) and the checks that need no SQL;
//! - the fence a thread's write must pass (`Store::fence`: the caller's, else this node's from
//!   its lease book, `leases/`); the query crates check it inside the write's own transaction
//!   (`ThreadTx`), so no write of a thread skips it;
//! - on PostgreSQL, the listener that hears other daemons' events (from `harness-db-postgres`,
//!   where the `NOTIFY` it parses is sent).
//!
//! Modules, each the facade of the same module in both query crates: `threads.rs` (create, fork,
//! look up, list; the CLI session to resume; depth of a child), `messages/` (user messages, replies,
//! history, a retry), `outcomes.rs` (the one write that ends a turn: status, reply, usage, the
//! terminal event and the outcome row in one transaction),
//! `events.rs` (the per-thread log SSE replays), `tool_calls.rs`, `transcripts.rs` (the CLI's
//! transcript entries, to restore a session), `leases/` (which node owns a thread when several
//! share the database), `usage.rs`, `permissions.rs`, `files.rs` (images and documents),
//! `model_requests.rs` (the model gateway's record) and `lifecycle.rs` (pages of threads and
//! messages, search, tags, delete). Each has its tests,
//! run on both databases (`store_tests!`).
//!
//! A stored value that does not decode becomes [`StoreError::Corrupt`] instead of a panic.
//! Timestamps are written as RFC 3339 UTC text of fixed width ([`now_text`]) on both databases,
//! so text order is time order.
//!
//! **Invariant:** rows are deleted only with their thread (`Store::delete_thread`, in one
//! transaction past the thread's fence, after the pipeline stopped its turn; a thread's tags are
//! also replaced as a set) and by `crate::retention`: audit entries past their keep
//! (`Store::purge_audit`), the events of old turns (`Store::compact_events`) and OAuth clients
//! never used (`Store::delete_unused_oauth_clients`). A write racing a delete of its thread fails
//! (`ThreadNotFound`, a foreign key) instead of leaving a row behind.
//!
//! **Adding a column to `threads`:** migration N in `migrations/` and `migrations/postgres/`;
//! the field in `harness_db::ThreadRow` (and `NewThread`); `db/{sqlite,postgres}/src/threads.rs`
//! (the build names each statement that misses it); `just sqlx-prepare`; for clients,
//! `api::Thread`, `CreateThread`, `threads__create`.

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
mod webhooks;

pub use events::{EventListener, SharedEvents, Wakeup, EVENTS_CHANNEL};
// The store's vocabulary and the query traits, from the crate both databases share.
pub use harness_db::*;
pub use leases::{Claim, Claimed};

use std::fmt;
use std::path::Path;
use std::time::Duration;

use plugin_contract::{HistoryMessage, ThreadId, ThreadInfo};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
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
    /// Latency of store calls, shared by every clone; registered in `/metrics`.
    metrics: crate::metrics::StoreMetrics,
    /// This node's leases when several nodes share the database ([`Store::as_node`]): every
    /// write of a thread's turn checks the fence held here. `None`: a single node.
    node: Option<std::sync::Arc<leases::NodeLeases>>,
}

/// Which database the store runs on, as its query crate: each operation is written once per
/// database there (checked at build time) and called through [`on_db!`].
#[derive(Clone, Debug)]
enum Db {
    Sqlite(harness_db_sqlite::Sqlite),
    Postgres(harness_db_postgres::Postgres),
}

/// `on_db!(self, db => db.op(args).await)`: the call on whichever database the store runs, the
/// same expression for both (each crate implements [`Backend`] with the same signatures).
macro_rules! on_db {
    ($store:expr, $db:ident => $call:expr) => {
        match &$store.db {
            Db::Sqlite($db) => $call,
            Db::Postgres($db) => $call,
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
    /// incremental auto-vacuum (set when the file is created), a 5 s busy timeout and `synchronous = NORMAL` (durable at checkpoints, safe against
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

        let rewrites = harness_db_sqlite::Rewrites::default();
        let pool = if in_memory {
            // Journal mode WAL is meaningless for a memory database (SQLite keeps "memory").
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .test_before_acquire(false)
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
            let recent = rewrites.clone();
            SqlitePoolOptions::new()
                .max_connections(FILE_POOL_SIZE)
                // No ping before each call: a connection to a local file does not go stale the way
                // a network one does, and the ping is one more round trip to the connection's
                // thread per call, the dearer when that thread has gone to sleep between turns.
                .test_before_acquire(false)
                // A connection from before the file was rewritten whole goes (`Rewrites`).
                .before_acquire(move |_, meta| {
                    let fresh = recent.fresh(meta.age);
                    Box::pin(async move { Ok(fresh) })
                })
                .connect_with(
                    base.create_if_missing(true)
                        // Set before the first table, so a new file can give pages back
                        // without a rewrite (`Sqlite::vacuum`).
                        .auto_vacuum(SqliteAutoVacuum::Incremental)
                        .journal_mode(SqliteJournalMode::Wal),
                )
                .await?
        };

        MIGRATOR.run(&pool).await?;
        tracing::info!(path, "Opened the store.");
        Ok(Store {
            db: Db::Sqlite(harness_db_sqlite::Sqlite::new(pool, rewrites)),
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
            db: Db::Postgres(harness_db_postgres::Postgres::new(pool)),
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
        on_db!(self, db => db.integrity_ok().await)
    }

    /// Closes every connection, waiting for checked-out ones to come back. Call at shutdown so the
    /// WAL is checkpointed; later calls on any clone fail with [`StoreError::Db`].
    pub async fn close(&self) {
        match &self.db {
            Db::Sqlite(db) => db.pool().close().await,
            Db::Postgres(db) => db.pool().close().await,
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
pub(crate) mod tests;
