//! [`ThreadTx`]: a write transaction on one thread that has passed the thread's fence.

use harness_db::{Fence, StoreError};
use plugin_contract::ThreadId;
use sqlx::{Sqlite, SqliteConnection, SqlitePool, Transaction};

/// A write transaction on one thread, under SQLite's one write lock (`BEGIN IMMEDIATE`, so no
/// takeover can come between the check and the write). [`ThreadTx::begin`] checks the fence
/// first, and it is the only way to get one: every write that belongs to a thread takes a
/// `ThreadTx`, so none skips the check. Dropped without [`ThreadTx::commit`], it rolls back.
pub struct ThreadTx {
    tx: Transaction<'static, Sqlite>,
}

impl ThreadTx {
    /// Begins the transaction, then [`StoreError::LeaseLost`] unless `fence` (when there is one)
    /// still holds `thread`'s lease.
    pub async fn begin(
        pool: &SqlitePool,
        thread: &ThreadId,
        fence: Option<&Fence>,
    ) -> Result<ThreadTx, StoreError> {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        if let Some(fence) = fence {
            let held = sqlx::query_scalar!(
                r#"SELECT COUNT(*) AS "n!: i64" FROM leases
                   WHERE thread_id = ?1 AND owner = ?2 AND epoch = ?3"#,
                thread,
                fence.owner,
                fence.epoch,
            )
            .fetch_one(&mut *tx)
            .await?;
            if held == 0 {
                return Err(StoreError::LeaseLost(thread.clone()));
            }
        }
        Ok(ThreadTx { tx })
    }

    /// The connection the transaction runs on.
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }
}
