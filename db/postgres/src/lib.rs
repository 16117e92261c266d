//! Every query of the Harness store on PostgreSQL, each in a `sqlx::query!`-family macro checked
//! at build time against the schema `migrations/postgres/` makes: online when `DATABASE_URL` (or
//! this crate's `.env`) names a migrated database, otherwise from this crate's `.sqlx/`, which
//! `tests/sqlx-prepare.sh` regenerates against a scratch server it starts.
//!
//! The schema keeps SQLite's shapes (timestamps as RFC 3339 text, JSON as text, enums as their
//! names), so queries read timestamps as `col::timestamptz`, and JSON and enum columns through
//! a type override (`"input: serde_json::Value"`), which parses the stored text.
//!
//! [`Postgres`] implements [`harness_db::Backend`]; a module per table holds its queries.
//! PostgreSQL has no database-wide write lock: a thread's writes go through a [`ThreadTx`], which
//! share-locks the thread's lease row for the fence check, so a takeover waits for the write.

mod tool_calls;
mod tx;
mod usage;

pub use tx::ThreadTx;

use chrono::NaiveDate;
use harness_db::{Backend, Fence, NewToolCall, StoreError, ToolCallRow, Usage};
use plugin_contract::ThreadId;
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
}

impl Backend for Postgres {
    async fn record_tool_call(
        &self,
        fence: Option<&Fence>,
        call: &NewToolCall,
    ) -> Result<i64, StoreError> {
        tool_calls::record(&self.pool, fence, call).await
    }

    async fn tool_calls(&self, thread: &ThreadId) -> Result<Vec<ToolCallRow>, StoreError> {
        tool_calls::of_thread(&self.pool, thread).await
    }

    async fn thread_usage(&self, thread: &ThreadId) -> Result<Usage, StoreError> {
        usage::of_thread(&self.pool, thread).await
    }

    async fn day_usage(&self, day: NaiveDate) -> Result<Usage, StoreError> {
        usage::of_day(&self.pool, day).await
    }

    async fn set_thread_budget(
        &self,
        thread: &ThreadId,
        max_budget_usd: Option<f64>,
    ) -> Result<(), StoreError> {
        usage::set_thread_budget(&self.pool, thread, max_budget_usd).await
    }
}
