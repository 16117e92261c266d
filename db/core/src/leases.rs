//! The operations on `leases`: which node owns a thread when several share the database, and
//! the epoch a takeover increments (the [`Fence`] a turn's writes carry).

use std::time::Duration;

use chrono::Utc;
use plugin_contract::ThreadId;

use crate::{Announcement, Fence, MessageId, Outcome, StoreError, ThreadLease};

/// Why a turn ended when its thread's lease moved to another node: the `error` of the user
/// messages a takeover interrupts ([`LeaseQueries::acquire_lease`]).
pub const TAKEOVER_REASON: &str =
    "the node running this turn stopped; another node took the thread over";

/// A lease taken or kept ([`LeaseQueries::acquire_lease`]).
#[derive(Clone, Debug)]
pub struct Acquired {
    /// What the node's writes of the thread carry from now on.
    pub fence: Fence,
    /// The turns a takeover from a peer ended (they died with the old owner), with their
    /// outcomes and events; empty when the lease was free or already the node's.
    pub ended: Vec<Outcome>,
}

/// A turn a takeover may end, with the event that announces its end ([`Announcement`], built
/// before the lease's transaction: cause [`crate::EndCause::Takeover`], error
/// [`TAKEOVER_REASON`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TakeoverEnd {
    pub message: MessageId,
    pub announcement: Announcement,
}

/// What [`LeaseQueries::acquire_lease`] did.
#[derive(Clone, Debug)]
pub enum Acquisition {
    /// The owner holds the lease now.
    Held(Acquired),
    /// A live peer holds it.
    Elsewhere,
    /// A takeover found turns pending that no [`TakeoverEnd`] announces (the old owner sent
    /// them after the caller looked): nothing was written. Announce these too and try again.
    Unannounced(Vec<MessageId>),
}

/// `ttl` from now, as stored ([`crate::time_text`]). A TTL too long for chrono counts as a year.
pub fn expiry_text(ttl: Duration) -> String {
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::days(365));
    crate::time_text(Utc::now() + ttl)
}

#[allow(async_fn_in_trait)]
pub trait LeaseQueries {
    /// Takes the thread's lease for `owner` when it is free (no row), expired, or already
    /// `owner`'s (then only its expiry moves), expiring `ttl` from now. A change of owner
    /// increments the epoch; a new row starts at 1. In the same transaction, a takeover from a
    /// peer ends the turns the old owner left `pending` ([`crate::EndCause::Takeover`],
    /// [`TAKEOVER_REASON`], each with its announcement in `takeover`, as
    /// [`crate::OutcomeQueries::end_turn`] ends a turn); [`Acquisition::Unannounced`], with
    /// nothing written, when `takeover` lacks one. [`Acquisition::Elsewhere`] when a live peer
    /// holds the lease; [`StoreError::ThreadNotFound`] for an unknown thread.
    async fn acquire_lease(
        &self,
        thread: &ThreadId,
        owner: &str,
        owner_url: &str,
        ttl: Duration,
        takeover: &[TakeoverEnd],
    ) -> Result<Acquisition, StoreError>;

    /// The heartbeat: every lease `owner` holds expires `ttl` from now, in one UPDATE. Returns
    /// the threads it still holds.
    async fn renew_leases(&self, owner: &str, ttl: Duration) -> Result<Vec<ThreadId>, StoreError>;

    /// Expires every lease `owner` holds now; how many. The epochs stay.
    async fn release_leases(&self, owner: &str) -> Result<u64, StoreError>;

    /// The thread's lease, or `None` when no node ever took it.
    async fn lease(&self, thread: &ThreadId) -> Result<Option<ThreadLease>, StoreError>;

    /// Records `hash` as the cluster's credential when none is yet; whether the cluster's is
    /// `hash`.
    async fn join_cluster(&self, hash: &str) -> Result<bool, StoreError>;
}

/// `lease_queries!(Backend)`: the [`LeaseQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module, which hold that database's SQL. The
/// wiring (which writes open a fenced `ThreadTx`, and commit it) is written once, here.
#[macro_export]
macro_rules! lease_queries {
    ($backend:ty) => {
        impl $crate::LeaseQueries for $backend {
            async fn acquire_lease(
                &self,
                thread: &ThreadId,
                owner: &str,
                owner_url: &str,
                ttl: Duration,
                takeover: &[$crate::TakeoverEnd],
            ) -> Result<$crate::Acquisition, StoreError> {
                acquire(self.pool(), thread, owner, owner_url, ttl, takeover).await
            }

            async fn renew_leases(
                &self,
                owner: &str,
                ttl: Duration,
            ) -> Result<Vec<ThreadId>, StoreError> {
                renew(self.pool(), owner, ttl).await
            }

            async fn release_leases(&self, owner: &str) -> Result<u64, StoreError> {
                release(self.pool(), owner).await
            }

            async fn lease(&self, thread: &ThreadId) -> Result<Option<ThreadLease>, StoreError> {
                of_thread(self.pool(), thread).await
            }

            async fn join_cluster(&self, hash: &str) -> Result<bool, StoreError> {
                join_cluster(self.pool(), hash).await
            }
        }
    };
}
