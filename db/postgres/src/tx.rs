//! [`ThreadTx`]: a write transaction on one thread that has passed the thread's fence.

use harness_db::{Fence, StoreError};
use plugin_contract::ThreadId;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

/// A write transaction on one thread. [`ThreadTx::begin`] checks the fence first, and it is the
/// only way to get one: every write that belongs to a thread takes a `ThreadTx`, so none skips
/// the check. The lease row stays share-locked until the transaction ends, so a takeover waits
/// for this write to commit (and the write never lands after one). Dropped without
/// [`ThreadTx::commit`], it rolls back.
pub struct ThreadTx {
    tx: Transaction<'static, Postgres>,
}

impl ThreadTx {
    /// Begins the transaction, then [`StoreError::LeaseLost`] unless `fence` (when there is one)
    /// still holds `thread`'s lease.
    pub async fn begin(
        pool: &PgPool,
        thread: &ThreadId,
        fence: Option<&Fence>,
    ) -> Result<ThreadTx, StoreError> {
        let mut tx = pool.begin().await?;
        if let Some(fence) = fence {
            let held = sqlx::query_scalar!(
                "SELECT 1 FROM leases WHERE thread_id = $1 AND owner = $2 AND epoch = $3
                 FOR SHARE",
                thread as &ThreadId,
                fence.owner,
                fence.epoch,
            )
            .fetch_optional(&mut *tx)
            .await?;
            if held.is_none() {
                return Err(StoreError::LeaseLost(thread.clone()));
            }
        }
        Ok(ThreadTx { tx })
    }

    /// For a write of exactly one statement: the same as [`ThreadTx::begin`] here (the fence's
    /// lock, and the event log's advisory lock, need a transaction); SQLite's skips the
    /// transaction when there is no fence.
    pub async fn single(
        pool: &PgPool,
        thread: &ThreadId,
        fence: Option<&Fence>,
    ) -> Result<ThreadTx, StoreError> {
        Self::begin(pool, thread, fence).await
    }

    /// The connection the transaction runs on.
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }
}
