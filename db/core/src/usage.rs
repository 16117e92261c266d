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
        }
    };
}
