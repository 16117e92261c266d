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
