//! Tool permissions the CLI asked for: recorded when asked, updated once when decided. A
//! pending row is what `GET /api/threads/{id}/permissions` lists; the decision and who made it
//! stay beside the tool call (`tool_use_id`).

use plugin_contract::ThreadId;

use super::{
    on_db, Db, Decided, NewPermission, PermissionQueries, PermissionRow, Store, StoreError,
    ThreadRuleRow,
};

impl Store {
    /// Records a request; `status` is `pending` for one a person will answer, else the
    /// decision already made (`decided_by` then says by whom). [`StoreError::LeaseLost`] on a
    /// node without the thread's lease (`leases.rs`).
    pub async fn record_permission(
        &self,
        new: NewPermission<'_>,
        status: &str,
        decided_by: Option<&str>,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("record_permission");
        let fence = self.fence(new.thread_id, None)?;
        on_db!(self, db => {
            db.record_permission(fence.as_ref(), &new, status, decided_by, reason)
                .await
        })
    }

    /// Decides a pending request of `thread`; false when it was not pending (unknown or
    /// decided).
    pub async fn decide_permission(
        &self,
        thread: &ThreadId,
        request_id: &str,
        decided: Decided<'_>,
    ) -> Result<bool, StoreError> {
        let _timer = self.metrics.time("decide_permission");
        let fence = self.fence(thread, None)?;
        on_db!(self, db => {
            db.decide_permission(fence.as_ref(), thread, request_id, decided)
                .await
        })
    }

    /// Denies every pending request (at start-up: their processes are gone); returns how many.
    pub async fn deny_pending_permissions(&self, reason: &str) -> Result<u64, StoreError> {
        on_db!(self, db => db.deny_pending_permissions(reason).await)
    }

    /// One request of the thread, if it exists.
    pub async fn permission(
        &self,
        thread: &ThreadId,
        request_id: &str,
    ) -> Result<Option<PermissionRow>, StoreError> {
        Ok(on_db!(self, db => db.select_permissions(thread, false, Some(request_id), None, None).await)?.pop())
    }

    /// The thread's requests, oldest first; only the pending ones when `pending_only`.
    pub async fn permissions(
        &self,
        thread: &ThreadId,
        pending_only: bool,
    ) -> Result<Vec<PermissionRow>, StoreError> {
        self.permission_page(thread, pending_only, None, None).await
    }

    /// A page of [`Store::permissions`]: those after `after` (`(created_at as stored, id)`: the
    /// last of the page before), at most `limit`.
    pub async fn permission_page(
        &self,
        thread: &ThreadId,
        pending_only: bool,
        after: Option<(&str, &str)>,
        limit: Option<i64>,
    ) -> Result<Vec<PermissionRow>, StoreError> {
        let _timer = self.metrics.time("permissions");
        on_db!(self, db => db.select_permissions(thread, pending_only, None, after, limit).await)
    }

    /// The allow rules people added to the thread ("allow always"), oldest first.
    pub async fn thread_rules(&self, thread: &ThreadId) -> Result<Vec<ThreadRuleRow>, StoreError> {
        let _timer = self.metrics.time("thread_rules");
        on_db!(self, db => db.thread_rules(thread).await)
    }

    /// Deletes the thread's rule `id`; false when the thread has none of that id.
    pub async fn delete_thread_rule(
        &self,
        thread: &ThreadId,
        id: &str,
    ) -> Result<bool, StoreError> {
        on_db!(self, db => db.delete_thread_rule(thread, id).await)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::store_tests;
    use super::super::NewThread;
    use super::*;

    store_tests! {
        async fn a_request_is_decided_once_and_listed_while_pending(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap();
            let input = json!({"command": "touch f"});
            let new = NewPermission {
                request_id: "req-1",
                thread_id: &thread.id,
                message_id: None,
                tool_use_id: Some("toolu_1"),
                tool_name: "Bash",
                input: &input,
            };
            store
                .record_permission(new, "pending", None, None)
                .await
                .unwrap();
            let pending = store.permissions(&thread.id, true).await.unwrap();
            assert_eq!(pending.len(), 1);
            assert_eq!(pending[0].input, input);
            assert!(store
                .decide_permission(
                    &thread.id,
                    "req-1",
                    Decided {
                        status: "allowed",
                        decided_by: "person",
                        answered_by: Some("operator"),
                        reason: Some("ok"),
                        rules: &[],
                    },
                )
                .await
                .unwrap());
            assert!(!store
                .decide_permission(
                    &thread.id,
                    "req-1",
                    Decided {
                        status: "denied",
                        decided_by: "timeout",
                        answered_by: None,
                        reason: None,
                        rules: &[],
                    },
                )
                .await
                .unwrap());
            let row = store
                .permission(&thread.id, "req-1")
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                (row.status.as_str(), row.decided_by.as_deref()),
                ("allowed", Some("person"))
            );
            assert!(row.decided_at.is_some());
            assert!(store
                .permissions(&thread.id, true)
                .await
                .unwrap()
                .is_empty());
            assert_eq!(store.permissions(&thread.id, false).await.unwrap().len(), 1);
            assert!(store
                .permission(&thread.id, "other")
                .await
                .unwrap()
                .is_none());
        }

        async fn allowing_always_adds_the_rules_with_the_decision_only(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap();
            let other = store.create_thread(NewThread::default()).await.unwrap();
            let input = json!({"command": "npm test"});
            for id in ["req-1", "req-2"] {
                let new = NewPermission {
                    request_id: id,
                    thread_id: &thread.id,
                    message_id: None,
                    tool_use_id: None,
                    tool_name: "Bash",
                    input: &input,
                };
                store.record_permission(new, "pending", None, None).await.unwrap();
            }
            let rules = ["Bash(npm test)".to_owned(), "Bash(make)".to_owned()];
            let always = |answered_by| Decided {
                status: "allowed",
                decided_by: "person",
                answered_by,
                reason: None,
                rules: &rules,
            };
            assert!(store
                .decide_permission(&thread.id, "req-1", always(Some("operator")))
                .await
                .unwrap());
            // A second answer decides nothing, so it adds nothing; the same rule again is kept once.
            assert!(!store
                .decide_permission(&thread.id, "req-1", always(Some("late")))
                .await
                .unwrap());
            assert!(store
                .decide_permission(&thread.id, "req-2", always(Some("second")))
                .await
                .unwrap());
            let listed = store.thread_rules(&thread.id).await.unwrap();
            let mut seen: Vec<(&str, &str, Option<&str>)> = listed
                .iter()
                .map(|r| (r.rule.as_str(), r.request_id.as_str(), r.added_by.as_deref()))
                .collect();
            seen.sort();
            assert_eq!(
                seen,
                [
                    ("Bash(make)", "req-1", Some("operator")),
                    ("Bash(npm test)", "req-1", Some("operator")),
                ]
            );
            assert!(listed.iter().all(|r| r.id.starts_with("rul_")));
            assert!(store.thread_rules(&other.id).await.unwrap().is_empty());
            // Deleted by its thread only.
            assert!(!store.delete_thread_rule(&other.id, &listed[0].id).await.unwrap());
            assert!(store.delete_thread_rule(&thread.id, &listed[0].id).await.unwrap());
            assert!(!store.delete_thread_rule(&thread.id, &listed[0].id).await.unwrap());
            assert_eq!(store.thread_rules(&thread.id).await.unwrap().len(), 1);
        }
    }
}
