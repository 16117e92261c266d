//! Every query of the Harness store on SQLite, each in a `sqlx::query!`-family macro checked at
//! build time against the schema `migrations/` makes: online when `DATABASE_URL` (or this
//! crate's `.env`) names a migrated database, otherwise from this crate's `.sqlx/`, which
//! `tests/sqlx-prepare.sh` regenerates from a scratch database (no server needed).
//!
//! [`Sqlite`] implements [`harness_db::Backend`]; a module per table holds its queries. Writes
//! run under the database's one write lock; a thread's writes go through a [`ThreadTx`]
//! (`BEGIN IMMEDIATE`, then the fence check), the only way to reach them.

mod tool_calls;
mod tx;
mod usage;

pub use tx::ThreadTx;

use chrono::NaiveDate;
use harness_db::{Backend, Fence, NewToolCall, StoreError, ToolCallRow, Usage};
use plugin_contract::ThreadId;
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
}

impl Backend for Sqlite {
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
