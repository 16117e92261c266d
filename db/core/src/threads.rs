//! The operations on `threads`: creating, forking, looking up and listing them, the CLI session
//! each one resumes, and how deep a delegated child sits.

use plugin_contract::{CliSessionId, ThreadId};

use crate::{Fence, NewThread, StoreError, ThreadRow};

/// How far [`ThreadQueries::thread_depth`] walks up `parent_id`: it guards the walk against a
/// parent cycle. Creation makes cycles impossible (a parent must exist before its child gets a
/// fresh id), but a hand-edited database should not hang the daemon.
pub const MAX_DEPTH_WALK: i64 = 10_000;

#[allow(async_fn_in_trait)]
pub trait ThreadQueries {
    /// Inserts the thread `id` with what `new` chooses (no CLI session yet). Does not check
    /// `new.parent_id`: the caller does.
    async fn create_thread(&self, id: &ThreadId, new: &NewThread) -> Result<ThreadRow, StoreError>;

    /// In one transaction: inserts the thread `id` forking `parent` (its model, `outputSchema`,
    /// budget limit, and its CLI session as the one to fork), titled `title`, and copies the
    /// parent's `done` messages into it with fresh ids, in order, each reply still answering
    /// its question (usage is not copied).
    async fn fork_thread(
        &self,
        id: &ThreadId,
        parent: &ThreadRow,
        title: &str,
    ) -> Result<ThreadRow, StoreError>;

    /// The thread, or `None` when it does not exist.
    async fn get_thread(&self, id: &ThreadId) -> Result<Option<ThreadRow>, StoreError>;

    /// Every thread, newest first (creation time, ties broken by insertion order).
    async fn list_threads(&self) -> Result<Vec<ThreadRow>, StoreError>;

    /// Sets (or clears) the CLI session the thread resumes next. [`StoreError::ThreadNotFound`]
    /// for an unknown thread, [`StoreError::LeaseLost`] when `fence` no longer holds it.
    async fn set_cli_session(
        &self,
        fence: Option<&Fence>,
        id: &ThreadId,
        session: Option<&CliSessionId>,
    ) -> Result<(), StoreError>;

    /// How many ancestors the thread has through `parent_id` (walking at most
    /// [`MAX_DEPTH_WALK`]); `None` for an unknown thread.
    async fn thread_depth(&self, id: &ThreadId) -> Result<Option<i64>, StoreError>;

    /// Marks the thread archived, once (a second call changes nothing); the thread as it is
    /// then. [`StoreError::ThreadNotFound`] for an unknown thread.
    async fn archive_thread(
        &self,
        fence: Option<&Fence>,
        id: &ThreadId,
    ) -> Result<ThreadRow, StoreError>;
}

/// `thread_queries!(Backend)`: the [`ThreadQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module, which hold that database's SQL. The
/// wiring (which writes open a fenced `ThreadTx`, and commit it) is written once, here.
#[macro_export]
macro_rules! thread_queries {
    ($backend:ty) => {
        impl $crate::ThreadQueries for $backend {
            async fn create_thread(
                &self,
                id: &ThreadId,
                new: &NewThread,
            ) -> Result<ThreadRow, StoreError> {
                create(self.pool(), id, new).await
            }

            async fn fork_thread(
                &self,
                id: &ThreadId,
                parent: &ThreadRow,
                title: &str,
            ) -> Result<ThreadRow, StoreError> {
                let mut tx = ThreadTx::begin(self.pool(), id, None).await?;
                let row = insert_fork(&mut tx, id, parent, title).await?;
                copy_done_messages(&mut tx, &parent.id, id).await?;
                tx.commit().await?;
                Ok(row)
            }

            async fn get_thread(&self, id: &ThreadId) -> Result<Option<ThreadRow>, StoreError> {
                one(self.pool(), id).await
            }

            async fn list_threads(&self) -> Result<Vec<ThreadRow>, StoreError> {
                all(self.pool()).await
            }

            async fn set_cli_session(
                &self,
                fence: Option<&Fence>,
                id: &ThreadId,
                session: Option<&CliSessionId>,
            ) -> Result<(), StoreError> {
                let mut tx = ThreadTx::single(self.pool(), id, fence).await?;
                set_cli_session(&mut tx, id, session).await?;
                tx.commit().await
            }

            async fn archive_thread(
                &self,
                fence: Option<&Fence>,
                id: &ThreadId,
            ) -> Result<ThreadRow, StoreError> {
                let mut tx = ThreadTx::single(self.pool(), id, fence).await?;
                let row = archive(&mut tx, id).await?;
                tx.commit().await?;
                row.ok_or_else(|| StoreError::ThreadNotFound(id.clone()))
            }

            async fn thread_depth(&self, id: &ThreadId) -> Result<Option<i64>, StoreError> {
                depth(self.pool(), id).await
            }
        }
    };
}
