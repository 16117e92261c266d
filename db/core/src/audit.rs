//! The operations on `audit_log`: an entry per change a caller asked for, the newest first, and
//! the purge of entries past their keep.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;

use crate::StoreError;

/// An entry to write.
#[derive(Clone, Copy, Debug)]
pub struct NewAudit<'a> {
    pub subject: &'a str,
    pub tenant: Option<&'a str>,
    /// The method and route (`POST /api/threads/{id}/messages`).
    pub action: &'a str,
    /// The path as asked (`/api/threads/thr_…/messages`).
    pub path: &'a str,
    pub thread_id: Option<&'a ThreadId>,
    /// The answer's HTTP status.
    pub status: i64,
    /// The client's address.
    pub remote: Option<&'a str>,
}

/// An entry as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub subject: String,
    pub tenant: Option<String>,
    pub action: String,
    pub path: String,
    pub thread_id: Option<ThreadId>,
    pub status: i64,
    pub remote: Option<String>,
}

#[allow(async_fn_in_trait)]
pub trait AuditQueries {
    async fn record_audit(&self, entry: NewAudit<'_>) -> Result<(), StoreError>;

    /// Entries newest first, at most `limit`, older than entry `before` when given.
    async fn audit_entries(
        &self,
        limit: u32,
        before: Option<i64>,
    ) -> Result<Vec<AuditRow>, StoreError>;

    /// Deletes the entries written before `older_than` (a [`crate::now_text`]-style time); how
    /// many.
    async fn purge_audit(&self, older_than: &str) -> Result<u64, StoreError>;
}

/// `audit_queries!(Backend)`: the [`AuditQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module.
#[macro_export]
macro_rules! audit_queries {
    ($backend:ty) => {
        impl $crate::AuditQueries for $backend {
            async fn record_audit(&self, entry: NewAudit<'_>) -> Result<(), StoreError> {
                record_audit(self.pool(), entry).await
            }

            async fn audit_entries(
                &self,
                limit: u32,
                before: Option<i64>,
            ) -> Result<Vec<AuditRow>, StoreError> {
                audit_entries(self.pool(), limit, before).await
            }

            async fn purge_audit(&self, older_than: &str) -> Result<u64, StoreError> {
                purge_audit(self.pool(), older_than).await
            }
        }
    };
}
