//! The operations on `permissions`, the tool permissions the CLI asked for.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;

use crate::{Fence, MessageId, StoreError};

/// A permission as stored. What clients see is `api::Permission`, built from it.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct PermissionRow {
    /// The CLI's request id (the column `id`); the id a person answers.
    pub request_id: String,
    pub thread_id: ThreadId,
    pub message_id: Option<MessageId>,
    pub tool_use_id: Option<String>,
    pub tool_name: String,
    pub input: serde_json::Value,
    /// `pending`, `allowed` or `denied`.
    pub status: String,
    /// `rule`, `person`, `timeout`, `policy` or `interrupt`; `None` while pending.
    pub decided_by: Option<String>,
    /// The caller's subject, when a person answered.
    pub answered_by: Option<String>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

/// How a pending permission was decided ([`PermissionQueries::decide_permission`]).
#[derive(Clone, Copy, Debug)]
pub struct Decided<'a> {
    /// `allowed` or `denied`.
    pub status: &'a str,
    /// `rule`, `person`, `timeout`, `policy` or `interrupt`.
    pub decided_by: &'a str,
    /// The caller's subject, when a person answered.
    pub answered_by: Option<&'a str>,
    pub reason: Option<&'a str>,
    /// Allow rules the answer adds to the thread ("allow always"), stored with the decision.
    pub rules: &'a [String],
}

/// An allow rule a person added to one thread by allowing a request "always".
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ThreadRuleRow {
    pub id: String,
    pub thread_id: ThreadId,
    /// In the CLI's rule syntax (`Bash(npm test)`).
    pub rule: String,
    /// The request whose answer added it.
    pub request_id: String,
    /// The answering caller's subject.
    pub added_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A new thread rule's id: `rul_` and 32 hex digits.
pub fn new_rule_id() -> String {
    format!("rul_{}", uuid::Uuid::new_v4().simple())
}

/// A permission to record.
#[derive(Clone, Debug)]
pub struct NewPermission<'a> {
    pub request_id: &'a str,
    pub thread_id: &'a ThreadId,
    pub message_id: Option<&'a MessageId>,
    pub tool_use_id: Option<&'a str>,
    pub tool_name: &'a str,
    pub input: &'a serde_json::Value,
}

#[allow(async_fn_in_trait)]
pub trait PermissionQueries {
    /// Records a request with its `status`; `decided_at` is set when `decided_by` is.
    /// [`StoreError::LeaseLost`] when `fence` no longer holds the request's thread.
    async fn record_permission(
        &self,
        fence: Option<&Fence>,
        new: &NewPermission<'_>,
        status: &str,
        decided_by: Option<&str>,
        reason: Option<&str>,
    ) -> Result<(), StoreError>;

    /// Decides the request `request_id` if it is still pending, adding `decided.rules` to the
    /// thread (one already there is kept); false when it was not pending. `thread` is the
    /// thread whose `fence` the write passes.
    async fn decide_permission(
        &self,
        fence: Option<&Fence>,
        thread: &ThreadId,
        request_id: &str,
        decided: Decided<'_>,
    ) -> Result<bool, StoreError>;

    /// Denies every pending request (`decided_by` = `interrupt`); how many.
    async fn deny_pending_permissions(&self, reason: &str) -> Result<u64, StoreError>;

    /// The thread's requests, oldest first: only pending ones when `pending_only`, only
    /// `request_id` when given, only those after `after` (`(created_at as stored, id)`), at
    /// most `limit`.
    async fn select_permissions(
        &self,
        thread: &ThreadId,
        pending_only: bool,
        request_id: Option<&str>,
        after: Option<(&str, &str)>,
        limit: Option<i64>,
    ) -> Result<Vec<PermissionRow>, StoreError>;

    /// The thread's rules, oldest first.
    async fn thread_rules(&self, thread: &ThreadId) -> Result<Vec<ThreadRuleRow>, StoreError>;

    /// Deletes the thread's rule `id`; false when it has none of that id.
    async fn delete_thread_rule(&self, thread: &ThreadId, id: &str) -> Result<bool, StoreError>;
}

/// `permission_queries!(Backend)`: the [`PermissionQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module, which hold that database's SQL. The
/// wiring (which writes open a fenced `ThreadTx`, and commit it) is written once, here.
#[macro_export]
macro_rules! permission_queries {
    ($backend:ty) => {
        impl $crate::PermissionQueries for $backend {
            async fn record_permission(
                &self,
                fence: Option<&Fence>,
                new: &NewPermission<'_>,
                status: &str,
                decided_by: Option<&str>,
                reason: Option<&str>,
            ) -> Result<(), StoreError> {
                let mut tx = ThreadTx::single(self.pool(), new.thread_id, fence).await?;
                insert(&mut tx, new, status, decided_by, reason).await?;
                tx.commit().await
            }

            async fn decide_permission(
                &self,
                fence: Option<&Fence>,
                thread: &ThreadId,
                request_id: &str,
                decided: $crate::Decided<'_>,
            ) -> Result<bool, StoreError> {
                let mut tx = ThreadTx::begin(self.pool(), thread, fence).await?;
                let done = decide(&mut tx, request_id, decided).await?;
                if done {
                    for rule in decided.rules {
                        add_rule(&mut tx, thread, rule, request_id, decided.answered_by).await?;
                    }
                }
                tx.commit().await?;
                Ok(done)
            }

            async fn deny_pending_permissions(&self, reason: &str) -> Result<u64, StoreError> {
                deny_pending(self.pool(), reason).await
            }

            async fn select_permissions(
                &self,
                thread: &ThreadId,
                pending_only: bool,
                request_id: Option<&str>,
                after: Option<(&str, &str)>,
                limit: Option<i64>,
            ) -> Result<Vec<PermissionRow>, StoreError> {
                select(self.pool(), thread, pending_only, request_id, after, limit).await
            }

            async fn thread_rules(
                &self,
                thread: &ThreadId,
            ) -> Result<Vec<$crate::ThreadRuleRow>, StoreError> {
                rules_of(self.pool(), thread).await
            }

            async fn delete_thread_rule(
                &self,
                thread: &ThreadId,
                id: &str,
            ) -> Result<bool, StoreError> {
                delete_rule(self.pool(), thread, id).await
            }
        }
    };
}
