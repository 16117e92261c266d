//! What turns cost: the sums of a thread's per-message usage, the totals of a UTC day (kept in
//! `usage_days`, written in the same transaction as each turn's usage), and the thread's own
//! budget.

use chrono::NaiveDate;
use plugin_contract::ThreadId;

use super::{on_db, Db, Store, StoreError, Usage, UsageQueries};

impl Store {
    /// The sums over every message of the thread (replies, and failed turns that reached the
    /// API). Zero for a thread with no turns yet, or an unknown one.
    pub async fn thread_usage(&self, thread: &ThreadId) -> Result<Usage, StoreError> {
        let _timer = self.metrics.time("thread_usage");
        on_db!(self, db => db.thread_usage(thread).await)
    }

    /// The totals of turns that ended on `day` (UTC); zero for a day without turns. `api_ms` is
    /// not kept per day and is zero.
    pub async fn day_usage(&self, day: NaiveDate) -> Result<Usage, StoreError> {
        let _timer = self.metrics.time("day_usage");
        on_db!(self, db => db.day_usage(day).await)
    }

    /// Records that `parent` delegated to `child`: the child's turns count against the parent's
    /// budgets (and against those of whoever delegated to the parent).
    pub async fn record_delegation(
        &self,
        child: &ThreadId,
        parent: &ThreadId,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("record_delegation");
        on_db!(self, db => db.record_delegation(child, parent).await)
    }

    /// The threads whose budgets `thread`'s turns also count against, nearest first: empty for
    /// a thread nobody delegated to.
    pub async fn delegators(&self, thread: &ThreadId) -> Result<Vec<ThreadId>, StoreError> {
        let _timer = self.metrics.time("delegators");
        on_db!(self, db => db.delegators(thread).await)
    }

    /// What the turns of `thread` and of the threads it delegated to (theirs too) cost, in USD.
    pub async fn tree_cost_usd(&self, thread: &ThreadId) -> Result<f64, StoreError> {
        let _timer = self.metrics.time("tree_cost_usd");
        on_db!(self, db => db.tree_cost_usd(thread).await)
    }

    /// Sets (or with `None` removes) the thread's own budget. [`StoreError::ThreadNotFound`] for
    /// an unknown thread.
    pub async fn set_thread_budget(
        &self,
        id: &ThreadId,
        max_budget_usd: Option<f64>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("set_thread_budget");
        on_db!(self, db => db.set_thread_budget(id, max_budget_usd).await)
    }
}
