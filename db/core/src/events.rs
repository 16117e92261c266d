//! The operations on `events`, the per-thread event log.

use plugin_contract::ThreadId;

use crate::{EventRow, Fence, MessageId, StoreError};

#[allow(async_fn_in_trait)]
pub trait EventQueries {
    /// Appends an event to the thread's log; the row with its id, which is greater than every
    /// id stored before. [`StoreError::ThreadNotFound`] for an unknown thread,
    /// [`StoreError::LeaseLost`] when `fence` no longer holds the thread. `webhooks` go in the
    /// webhook outbox in the same transaction.
    async fn append_event(
        &self,
        fence: Option<&Fence>,
        thread: &ThreadId,
        message: Option<&MessageId>,
        kind: &str,
        data: &serde_json::Value,
        webhooks: &[crate::WebhookDraft],
    ) -> Result<EventRow, StoreError>;

    /// The thread's events with an id greater than `after`, oldest first, at most `limit`.
    async fn events_after(
        &self,
        thread: &ThreadId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError>;

    /// The id of the newest event of the thread that compaction removed; 0 when none was.
    async fn compacted_through(&self, thread: &ThreadId) -> Result<i64, StoreError>;

    /// The id of the thread's newest stored event; 0 when it has none.
    async fn last_event_id(&self, thread: &ThreadId) -> Result<i64, StoreError>;

    /// The thread's newest event of one of `kinds`, if any.
    async fn last_event_of(
        &self,
        thread: &ThreadId,
        kinds: &[String],
    ) -> Result<Option<EventRow>, StoreError>;

    /// The threads whose log can be compacted up to a turn that ended before `older_than` (a
    /// [`crate::now_text`]-style time): each with the id its last such turn's end was announced
    /// under, when that is past the thread's [`EventQueries::compacted_through`].
    async fn compactable(&self, older_than: &str) -> Result<Vec<(ThreadId, i64)>, StoreError>;

    /// Removes each thread's events up to and including its cut (from [`compactable`]) and
    /// records the cut, in one transaction; how many events went.
    ///
    /// [`compactable`]: EventQueries::compactable
    async fn compact_events(&self, cuts: &[(ThreadId, i64)]) -> Result<u64, StoreError>;
}

/// `event_queries!(Backend)`: the [`EventQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module, which hold that database's SQL. The
/// wiring (which writes open a fenced `ThreadTx`, and commit it) is written once, here.
#[macro_export]
macro_rules! event_queries {
    ($backend:ty) => {
        impl $crate::EventQueries for $backend {
            async fn append_event(
                &self,
                fence: Option<&Fence>,
                thread: &ThreadId,
                message: Option<&MessageId>,
                kind: &str,
                data: &serde_json::Value,
                webhooks: &[$crate::WebhookDraft],
            ) -> Result<EventRow, StoreError> {
                // One statement on SQLite (the advisory lock and NOTIFY on PostgreSQL need the
                // transaction `single` keeps there), unless webhook events go with it.
                let mut tx = if webhooks.is_empty() {
                    ThreadTx::single(self.pool(), thread, fence).await?
                } else {
                    ThreadTx::begin(self.pool(), thread, fence).await?
                };
                let row = append(tx.conn(), thread, message, kind, data).await?;
                for webhook in webhooks {
                    outbox(tx.conn(), thread, webhook).await?;
                }
                tx.commit().await?;
                Ok(row)
            }

            async fn events_after(
                &self,
                thread: &ThreadId,
                after: i64,
                limit: u32,
            ) -> Result<Vec<EventRow>, StoreError> {
                after_id(self.pool(), thread, after, limit).await
            }

            async fn compacted_through(&self, thread: &ThreadId) -> Result<i64, StoreError> {
                compacted_through(self.pool(), thread).await
            }

            async fn last_event_id(&self, thread: &ThreadId) -> Result<i64, StoreError> {
                last_event_id(self.pool(), thread).await
            }

            async fn last_event_of(
                &self,
                thread: &ThreadId,
                kinds: &[String],
            ) -> Result<Option<EventRow>, StoreError> {
                last_of(self.pool(), thread, kinds).await
            }

            async fn compactable(
                &self,
                older_than: &str,
            ) -> Result<Vec<(ThreadId, i64)>, StoreError> {
                compactable(self.pool(), older_than).await
            }

            async fn compact_events(&self, cuts: &[(ThreadId, i64)]) -> Result<u64, StoreError> {
                compact(self.pool(), cuts).await
            }
        }
    };
}
