//! The operations on `managed_objects`, `managed_agent_versions` and `managed_sessions`: what
//! the Managed Agents door (`orchestrator::managed`) keeps beside the threads. An agent or an
//! environment is one row of `managed_objects` whose `body` is its configuration as JSON (the
//! door owns its shape); each version of an agent is kept too, so a session runs on the version
//! it pinned. A session is a thread: `managed_sessions` adds what the thread does not hold (the
//! agent version, the environment, the session's own fields as JSON) and goes with its thread.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;

use crate::StoreError;

/// What a row of `managed_objects` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManagedKind {
    Agent,
    Environment,
}

impl ManagedKind {
    /// The value stored in `managed_objects.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            ManagedKind::Agent => "agent",
            ManagedKind::Environment => "environment",
        }
    }
}

/// An agent (at one version) or an environment, as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedRow {
    pub id: String,
    /// `agent` or `environment` ([`ManagedKind::as_str`]).
    pub kind: String,
    /// The tenant it belongs to; `""` for the operator's.
    pub owner: String,
    /// An agent's version (1, 2, …; this row's); an environment's is always 1.
    pub version: i64,
    /// Its configuration, as the door stores it (JSON text).
    pub body: String,
    pub created_at: DateTime<Utc>,
    /// When this version was made (an agent's), or the row last changed (an environment's).
    pub updated_at: DateTime<Utc>,
    pub archived_at: Option<DateTime<Utc>>,
}

/// An agent or environment to store, at version 1.
#[derive(Clone, Copy, Debug)]
pub struct NewManaged<'a> {
    pub id: &'a str,
    pub kind: ManagedKind,
    pub owner: &'a str,
    pub body: &'a str,
}

/// Where a page of a listing starts: after the row at (`created_at`, `id`) in the listing's
/// order.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedAfter {
    pub created_at: DateTime<Utc>,
    pub id: String,
}

/// Which rows of `managed_objects` a listing shows, newest first.
#[derive(Clone, Debug)]
pub struct ManagedFilter<'a> {
    pub kind: ManagedKind,
    /// Only this owner's; `None`: everyone's (the operator's view).
    pub owner: Option<&'a str>,
    pub include_archived: bool,
    /// Only those made at or after / at or before.
    pub created_gte: Option<DateTime<Utc>>,
    pub created_lte: Option<DateTime<Utc>>,
    pub after: Option<ManagedAfter>,
    pub limit: i64,
}

/// How [`ManagedQueries::update_managed`] went.
#[derive(Clone, Debug, PartialEq)]
pub enum ManagedUpdate {
    /// Changed: the row as it is now (an agent's new version).
    Updated(ManagedRow),
    /// Nothing changed: `body` was the stored one (an agent keeps its version).
    Unchanged(ManagedRow),
    /// The caller expected another version: the current one.
    Conflict { current: i64 },
    /// It is archived: no longer changed.
    Archived,
    /// There is no such row.
    NotFound,
}

/// A session, as stored beside its thread.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRow {
    pub thread_id: ThreadId,
    pub agent_id: String,
    pub agent_version: i64,
    pub environment_id: String,
    /// The session's own fields (metadata, resources, outcomes, …) as the door stores them.
    pub body: String,
    /// The thread's tenant; `None`: the operator's.
    pub tenant: Option<String>,
    /// The thread's.
    pub title: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub archived_at: Option<DateTime<Utc>>,
}

/// A session to store for the thread `thread_id` (made already).
#[derive(Clone, Copy, Debug)]
pub struct NewSession<'a> {
    pub thread_id: &'a ThreadId,
    pub agent_id: &'a str,
    pub agent_version: i64,
    pub environment_id: &'a str,
    pub body: &'a str,
}

/// Which sessions a listing shows, in `created_at` order (then thread id).
#[derive(Clone, Debug)]
pub struct SessionFilter<'a> {
    /// Only this tenant's (the thread's); `None`: everyone's.
    pub tenant: Option<&'a str>,
    pub agent_id: Option<&'a str>,
    pub agent_version: Option<i64>,
    pub include_archived: bool,
    /// Newest first when true.
    pub descending: bool,
    /// After this (`created_at`, thread id) in the listing's order.
    pub after: Option<(DateTime<Utc>, ThreadId)>,
    pub limit: i64,
}

#[allow(async_fn_in_trait)]
pub trait ManagedQueries {
    /// Stores `new` at version 1 (an agent's first version too); the stored row.
    async fn insert_managed(&self, new: NewManaged<'_>) -> Result<ManagedRow, StoreError>;

    /// The `kind` row `id`: its latest version, or (an agent's) `version`; `None` when there is
    /// none.
    async fn managed(
        &self,
        kind: ManagedKind,
        id: &str,
        version: Option<i64>,
    ) -> Result<Option<ManagedRow>, StoreError>;

    /// A page of `filter`'s rows, newest first (`created_at`, then `id`).
    async fn list_managed(&self, filter: ManagedFilter<'_>) -> Result<Vec<ManagedRow>, StoreError>;

    /// Replaces the body of the `kind` row `id` with `body`, when its version is `expected`
    /// (any when `None`). An agent gets a new version (kept beside the old ones); an
    /// environment stays at its version. A body equal to the stored one changes nothing.
    async fn update_managed(
        &self,
        kind: ManagedKind,
        id: &str,
        expected: Option<i64>,
        body: &str,
    ) -> Result<ManagedUpdate, StoreError>;

    /// Archives the `kind` row `id` (once: a second archive keeps the first time); the row, or
    /// `None` when there is none.
    async fn archive_managed(
        &self,
        kind: ManagedKind,
        id: &str,
    ) -> Result<Option<ManagedRow>, StoreError>;

    /// Deletes the `kind` row `id` and its versions; false when there was none.
    async fn delete_managed(&self, kind: ManagedKind, id: &str) -> Result<bool, StoreError>;

    /// The versions of the agent `id`, newest first, below `before` when given.
    async fn agent_versions(
        &self,
        id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<ManagedRow>, StoreError>;

    /// Stores the session of a thread. [`StoreError::ThreadNotFound`] when the thread is not
    /// there.
    async fn insert_session(&self, new: NewSession<'_>) -> Result<SessionRow, StoreError>;

    /// The session of the thread `thread`, or `None` (no such thread, or not a session).
    async fn session(&self, thread: &ThreadId) -> Result<Option<SessionRow>, StoreError>;

    /// Replaces the session's `body`; `None` when there is no such session.
    async fn update_session(
        &self,
        thread: &ThreadId,
        body: &str,
    ) -> Result<Option<SessionRow>, StoreError>;

    /// A page of `filter`'s sessions.
    async fn list_sessions(&self, filter: SessionFilter<'_>)
        -> Result<Vec<SessionRow>, StoreError>;
}

/// `managed_queries!(Backend)`: the [`ManagedQueries`] of a database crate's `Backend`, calling
/// the functions of the same names in the invoking module.
#[macro_export]
macro_rules! managed_queries {
    ($backend:ty) => {
        impl $crate::ManagedQueries for $backend {
            async fn insert_managed(
                &self,
                new: $crate::NewManaged<'_>,
            ) -> Result<$crate::ManagedRow, StoreError> {
                insert_managed(self.pool(), new).await
            }

            async fn managed(
                &self,
                kind: $crate::ManagedKind,
                id: &str,
                version: Option<i64>,
            ) -> Result<Option<$crate::ManagedRow>, StoreError> {
                managed(self.pool(), kind, id, version).await
            }

            async fn list_managed(
                &self,
                filter: $crate::ManagedFilter<'_>,
            ) -> Result<Vec<$crate::ManagedRow>, StoreError> {
                list_managed(self.pool(), filter).await
            }

            async fn update_managed(
                &self,
                kind: $crate::ManagedKind,
                id: &str,
                expected: Option<i64>,
                body: &str,
            ) -> Result<$crate::ManagedUpdate, StoreError> {
                update_managed(self.pool(), kind, id, expected, body).await
            }

            async fn archive_managed(
                &self,
                kind: $crate::ManagedKind,
                id: &str,
            ) -> Result<Option<$crate::ManagedRow>, StoreError> {
                archive_managed(self.pool(), kind, id).await
            }

            async fn delete_managed(
                &self,
                kind: $crate::ManagedKind,
                id: &str,
            ) -> Result<bool, StoreError> {
                delete_managed(self.pool(), kind, id).await
            }

            async fn agent_versions(
                &self,
                id: &str,
                before: Option<i64>,
                limit: i64,
            ) -> Result<Vec<$crate::ManagedRow>, StoreError> {
                agent_versions(self.pool(), id, before, limit).await
            }

            async fn insert_session(
                &self,
                new: $crate::NewSession<'_>,
            ) -> Result<$crate::SessionRow, StoreError> {
                insert_session(self.pool(), new).await
            }

            async fn session(
                &self,
                thread: &ThreadId,
            ) -> Result<Option<$crate::SessionRow>, StoreError> {
                session(self.pool(), thread).await
            }

            async fn update_session(
                &self,
                thread: &ThreadId,
                body: &str,
            ) -> Result<Option<$crate::SessionRow>, StoreError> {
                update_session(self.pool(), thread, body).await
            }

            async fn list_sessions(
                &self,
                filter: $crate::SessionFilter<'_>,
            ) -> Result<Vec<$crate::SessionRow>, StoreError> {
                list_sessions(self.pool(), filter).await
            }
        }
    };
}
