//! Every query of the Harness store on SQLite, each in a `sqlx::query!`-family macro checked at
//! build time against the schema `migrations/` makes: online when `DATABASE_URL` (or this
//! crate's `.env`) names a migrated database, otherwise from this crate's `.sqlx/`, which
//! `tests/sqlx-prepare.sh` regenerates from a scratch database (no server needed).
//!
//! [`Sqlite`] implements the query traits of `harness_db`; a module per table holds its queries. Writes
//! run under the database's one write lock; a thread's writes go through a [`ThreadTx`]
//! (`BEGIN IMMEDIATE`, then the fence check), the only way to reach them.

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
mod tx;
mod usage;
mod webhooks;

pub use tx::ThreadTx;

use sqlx::SqlitePool;

/// The store's queries on one SQLite database.
#[derive(Clone, Debug)]
pub struct Sqlite {
    pool: SqlitePool,
    rewrites: Rewrites,
}

/// When the file was last rewritten whole (the `VACUUM` that converts an older file, see
/// [`Sqlite::vacuum`]). A connection opened before may keep a view of the old file and answer
/// "no such table" for good (seen under load: some of the pool's connections, every time), so
/// the pool lets such connections go before handing them out ([`Rewrites::fresh`], its
/// `before_acquire`). Cheap to clone: clones share one.
#[derive(Clone, Debug, Default)]
pub struct Rewrites(std::sync::Arc<std::sync::Mutex<Option<std::time::Instant>>>);

impl Rewrites {
    /// Whether a connection opened `age` ago came after the last rewrite.
    pub fn fresh(&self, age: std::time::Duration) -> bool {
        match *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some(at) => age < at.elapsed(),
            None => true,
        }
    }

    fn mark(&self) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(std::time::Instant::now());
    }
}

impl Sqlite {
    /// The store on `pool`, whose `before_acquire` asks `rewrites` (see [`Rewrites`]).
    pub fn new(pool: SqlitePool, rewrites: Rewrites) -> Sqlite {
        Sqlite { pool, rewrites }
    }

    /// The pool, for what is not a query of the store (closing it, tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// True when `PRAGMA integrity_check` reports `ok`.
    pub async fn integrity_ok(&self) -> Result<bool, harness_db::StoreError> {
        let rows = sqlx::query_scalar!("PRAGMA integrity_check")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.len() == 1 && rows[0].as_deref() == Some("ok"))
    }

    /// Gives the pages of removed rows back to the file system, then checkpoints the write-ahead
    /// log passively (waiting for no reader or writer). A database made with
    /// `auto_vacuum = INCREMENTAL` (every file the daemon creates) is
    /// vacuumed incrementally, which takes no longer than freeing its free pages; an older file is
    /// rewritten once with `VACUUM`, which converts it (the pool's connections ask for
    /// incremental), and from then on is vacuumed incrementally too.
    pub async fn vacuum(&self) -> Result<(), harness_db::StoreError> {
        // Three PRAGMAs here are the store's only unchecked SQL outside tests: sqlx's macros
        // refuse `wal_checkpoint` and `optimize` (result columns of type NULL, which no Rust type
        // maps) and `auto_vacuum` has no table-valued column to select with a type override.
        let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
            .fetch_one(&self.pool)
            .await?;
        if mode == 2 {
            sqlx::query!("PRAGMA incremental_vacuum")
                .execute(&self.pool)
                .await?;
        } else {
            sqlx::query!("VACUUM").execute(&self.pool).await?;
            self.rewrites.mark();
        }
        sqlx::raw_sql("PRAGMA wal_checkpoint(PASSIVE); PRAGMA optimize")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The bytes of the database's pages in use (free pages not counted).
    pub async fn bytes_used(&self) -> Result<u64, harness_db::StoreError> {
        let used = sqlx::query_scalar!(
            r#"SELECT (p.page_count - f.freelist_count) * s.page_size AS "used!: i64"
               FROM pragma_page_count() p, pragma_freelist_count() f, pragma_page_size() s"#,
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(used).unwrap_or(0))
    }
}
