//! Every query of the Harness store on PostgreSQL, each in a `sqlx::query!`-family macro checked
//! at build time against the schema `migrations/postgres/` makes: online when `DATABASE_URL` (or
//! this crate's `.env`) names a migrated database, otherwise from this crate's `.sqlx/`, which
//! `tests/sqlx-prepare.sh` regenerates against a scratch server it starts.
//!
//! The schema keeps SQLite's shapes (timestamps as RFC 3339 text, JSON as text, enums as their
//! names), so queries read timestamps as `col::timestamptz`, and JSON and enum columns through
//! a type override (`"input: serde_json::Value"`), which parses the stored text.
//!
//! [`Postgres`] implements the query traits of `harness_db`; a module per table holds its queries.
//! PostgreSQL has no database-wide write lock: a thread's writes go through a [`ThreadTx`], which
//! share-locks the thread's lease row for the fence check, so a takeover waits for the write.

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

pub use events::{EventListener, SharedEvents, Wakeup, EVENTS_CHANNEL};
pub use tx::ThreadTx;

use sqlx::PgPool;

/// The store's queries on one PostgreSQL database.
#[derive(Clone, Debug)]
pub struct Postgres {
    pool: PgPool,
}

impl Postgres {
    pub fn new(pool: PgPool) -> Postgres {
        Postgres { pool }
    }

    /// The pool, for what is not a query of the store (closing it, notifications, tests).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// True when the server answers a query (PostgreSQL checks its own pages).
    pub async fn integrity_ok(&self) -> Result<bool, harness_db::StoreError> {
        let one = sqlx::query_scalar!(r#"SELECT 1 AS "one!""#)
            .fetch_one(&self.pool)
            .await?;
        Ok(one == 1)
    }

    /// `VACUUM (ANALYZE)` of the tables that rows leave (autovacuum does the same on its own
    /// schedule; this makes the space of a compaction reusable at once). Runs outside any
    /// transaction, as `VACUUM` must.
    pub async fn vacuum(&self) -> Result<(), harness_db::StoreError> {
        sqlx::query!(
            "VACUUM (ANALYZE) events, transcript_entries, messages, turn_outcomes, tool_calls",
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The bytes of the database on disk (`pg_database_size`).
    pub async fn bytes_used(&self) -> Result<u64, harness_db::StoreError> {
        let size =
            sqlx::query_scalar!(r#"SELECT pg_database_size(current_database()) AS "size!: i64""#)
                .fetch_one(&self.pool)
                .await?;
        Ok(u64::try_from(size).unwrap_or(0))
    }
}
