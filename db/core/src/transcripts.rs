//! The operations on `transcript_entries`, the CLI's transcripts as mirrored.

use plugin_contract::{CliSessionId, ThreadId};
use serde_json::Value;

use crate::{Fence, StoreError};

/// One stored transcript entry.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct TranscriptEntry {
    /// The CLI session the entry's file belongs to.
    pub session_id: CliSessionId,
    /// The file inside the CLI's project folder (`<session>.jsonl`, or a sub-agent's under
    /// `<session>/`).
    pub file: String,
    /// The entry's own id, when it has one; what duplicates are recognised by.
    pub uuid: Option<String>,
    /// The entry as one compact JSON line (no newline), as it is written back (the column
    /// `entry`).
    pub line: String,
}

#[allow(async_fn_in_trait)]
pub trait TranscriptQueries {
    /// Appends `entries`, in order, of `file` in `session`, written by `thread`'s process, in
    /// one transaction; an entry whose `uuid` the session already has is skipped. How many were
    /// new. [`StoreError::LeaseLost`] when `fence` no longer holds the thread.
    async fn append_transcript(
        &self,
        fence: Option<&Fence>,
        thread: &ThreadId,
        session: &CliSessionId,
        file: &str,
        entries: &[Value],
    ) -> Result<u64, StoreError>;

    /// Every entry of `session`, in arrival order.
    async fn session_transcript(
        &self,
        session: &CliSessionId,
    ) -> Result<Vec<TranscriptEntry>, StoreError>;

    /// Every entry `thread`'s processes wrote, in arrival order.
    async fn thread_transcript(
        &self,
        thread: &ThreadId,
    ) -> Result<Vec<TranscriptEntry>, StoreError>;
}

/// `transcript_queries!(Backend)`: the [`TranscriptQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module, which hold that database's SQL (`append`
/// is one statement, whatever the number of entries: a frame's store is one round trip, and a
/// turn's end waits for it). The wiring (which writes open a fenced `ThreadTx`, and commit it) is
/// written once, here.
#[macro_export]
macro_rules! transcript_queries {
    ($backend:ty) => {
        impl $crate::TranscriptQueries for $backend {
            async fn append_transcript(
                &self,
                fence: Option<&Fence>,
                thread: &ThreadId,
                session: &CliSessionId,
                file: &str,
                entries: &[Value],
            ) -> Result<u64, StoreError> {
                // One statement: a transaction of its own only when the fence needs checking.
                let mut tx = ThreadTx::single(self.pool(), thread, fence).await?;
                let added = append(&mut tx, thread, session, file, entries).await?;
                tx.commit().await?;
                Ok(added)
            }

            async fn session_transcript(
                &self,
                session: &CliSessionId,
            ) -> Result<Vec<TranscriptEntry>, StoreError> {
                of_session(self.pool(), session).await
            }

            async fn thread_transcript(
                &self,
                thread: &ThreadId,
            ) -> Result<Vec<TranscriptEntry>, StoreError> {
                of_thread(self.pool(), thread).await
            }
        }
    };
}
