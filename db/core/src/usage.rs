//! The operations on what turns cost: `messages`' usage columns, `usage_days`, a thread's budget.

use chrono::NaiveDate;
use plugin_contract::ThreadId;

use crate::{StoreError, Usage};

#[allow(async_fn_in_trait)]
pub trait UsageQueries {
    /// The sums over every message of the thread; zero for none.
    async fn thread_usage(&self, thread: &ThreadId) -> Result<Usage, StoreError>;

    /// The totals of turns that ended on `day` (UTC); `api_ms` is not kept per day and is zero.
    async fn day_usage(&self, day: NaiveDate) -> Result<Usage, StoreError>;

    /// Sets (or with `None` removes) the thread's own budget.
    async fn set_thread_budget(
        &self,
        thread: &ThreadId,
        max_budget_usd: Option<f64>,
    ) -> Result<(), StoreError>;

    /// Records that `parent` delegated to `child`: the child's turns count against the
    /// parent's budgets.
    async fn record_delegation(
        &self,
        child: &ThreadId,
        parent: &ThreadId,
    ) -> Result<(), StoreError>;

    /// The threads `thread`'s turns also count against: the one that delegated to it, the one
    /// that delegated to that, and so on, nearest first.
    async fn delegators(&self, thread: &ThreadId) -> Result<Vec<ThreadId>, StoreError>;

    /// What the turns of `thread` and of every thread it delegated to (and they to, and so on)
    /// cost, in USD.
    async fn tree_cost_usd(&self, thread: &ThreadId) -> Result<f64, StoreError>;
}

/// `usage_queries!(Backend)`: the [`UsageQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module, which hold that database's SQL. The
/// wiring (which writes open a fenced `ThreadTx`, and commit it) is written once, here.
#[macro_export]
macro_rules! usage_queries {
    ($backend:ty) => {
        impl $crate::UsageQueries for $backend {
            async fn thread_usage(&self, thread: &ThreadId) -> Result<Usage, StoreError> {
                of_thread(self.pool(), thread).await
            }

            async fn day_usage(&self, day: NaiveDate) -> Result<Usage, StoreError> {
                of_day(self.pool(), day).await
            }

            async fn set_thread_budget(
                &self,
                thread: &ThreadId,
                max_budget_usd: Option<f64>,
            ) -> Result<(), StoreError> {
                set_thread_budget(self.pool(), thread, max_budget_usd).await
            }

            async fn record_delegation(
                &self,
                child: &ThreadId,
                parent: &ThreadId,
            ) -> Result<(), StoreError> {
                record_delegation(self.pool(), child, parent).await
            }

            async fn delegators(&self, thread: &ThreadId) -> Result<Vec<ThreadId>, StoreError> {
                delegators(self.pool(), thread).await
            }

            async fn tree_cost_usd(&self, thread: &ThreadId) -> Result<f64, StoreError> {
                tree_cost_usd(self.pool(), thread).await
            }
        }
    };
}
