//! The audit log (`http::audit` writes it); the facade of `harness_db::AuditQueries`.

use super::{on_db, AuditQueries, AuditRow, Db, NewAudit, Store, StoreError};

impl Store {
    pub async fn record_audit(&self, entry: NewAudit<'_>) -> Result<(), StoreError> {
        let _timer = self.metrics.time("record_audit");
        on_db!(self, db => db.record_audit(entry).await)
    }

    /// Entries newest first, older than entry `before` when given.
    pub async fn audit_entries(
        &self,
        limit: u32,
        before: Option<i64>,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let _timer = self.metrics.time("audit_entries");
        on_db!(self, db => db.audit_entries(limit, before).await)
    }

    /// Deletes the entries written before `older_than`; how many.
    pub async fn purge_audit(&self, older_than: &str) -> Result<u64, StoreError> {
        let _timer = self.metrics.time("purge_audit");
        on_db!(self, db => db.purge_audit(older_than).await)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use crate::store::NewAudit;

    fn entry(action: &str) -> NewAudit<'_> {
        NewAudit {
            subject: "operator",
            tenant: None,
            action,
            path: "/api/threads",
            thread_id: None,
            status: 201,
            remote: Some("127.0.0.1:5000"),
        }
    }

    store_tests! {
        /// Entries come back newest first, page by page; a purge removes only older ones.
        async fn audit_entries_page_newest_first_and_old_ones_are_purged(store: sqlite_memory) {
            for action in ["a", "b", "c"] {
                store.record_audit(entry(action)).await.unwrap();
            }
            let all = store.audit_entries(10, None).await.unwrap();
            let actions: Vec<&str> = all.iter().map(|e| e.action.as_str()).collect();
            assert_eq!(actions, ["c", "b", "a"]);
            assert_eq!(all[0].remote.as_deref(), Some("127.0.0.1:5000"));
            let page = store.audit_entries(2, Some(all[0].id)).await.unwrap();
            let actions: Vec<&str> = page.iter().map(|e| e.action.as_str()).collect();
            assert_eq!(actions, ["b", "a"]);
            assert_eq!(store.purge_audit("2000-01-01T00:00:00.000000Z").await.unwrap(), 0);
            assert_eq!(store.purge_audit("9999-01-01T00:00:00.000000Z").await.unwrap(), 3);
            assert!(store.audit_entries(10, None).await.unwrap().is_empty());
        }
    }
}
