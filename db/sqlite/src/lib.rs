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
mod keys;
mod leases;
mod lifecycle;
mod messages;
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
}

impl Sqlite {
    pub fn new(pool: SqlitePool) -> Sqlite {
        Sqlite { pool }
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
}
