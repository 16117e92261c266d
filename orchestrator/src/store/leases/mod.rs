//! Leases: which node owns a thread when several nodes share the database (`docs/scale-out.md`).
//! One row per thread that a node has served: owner node, its URL, an epoch that grows at every
//! change of owner, and an expiry the owner's heartbeat keeps pushing forward.
//!
//! - [`Store::claim_lease`] takes a free or expired lease (epoch + 1), or keeps one this node
//!   holds, in one conditional upsert: of two nodes racing for a lease, one wins.
//! - [`Store::renew_leases`] pushes every lease of a node forward in one UPDATE (the heartbeat)
//!   and names the threads it still holds, so the node learns which ones it lost.
//! - [`Store::release_leases`] expires them now (graceful shutdown): peers take over at once.
//!
//! A store made a node's ([`Store::as_node`]) keeps the node's book: the [`Fence`] (owner and
//! epoch) it holds per thread, set by [`Store::claim_lease`] and dropped when the heartbeat
//! ([`Store::renew_node_leases`]) finds the lease gone. **Every write of a thread's turn** (its
//! messages, events, tool calls, transcript entries, permissions, CLI session) checks that fence
//! inside its own transaction (the query crates' `ThreadTx`, given the fence [`Store::fence`]
//! picks): once a peer took the thread over, or for a thread this node never took, it is refused
//! with [`StoreError::LeaseLost`] and nothing is written. So an old owner that wakes up after
//! losing its lease cannot write, and neither can a node that never held it.
//!
//! Only written when clustering is on (PostgreSQL); the SQLite side exists so both schemas and
//! both test suites stay the same. The queries, and how a claim and the fenced writes lock each
//! other out, live in the query crates (`harness-db-sqlite`, `harness-db-postgres`, `leases.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plugin_contract::ThreadId;

use super::{
    on_db, Acquired, Acquisition, Db, Fence, LeaseQueries, MessageId, Store, StoreError,
    TakeoverEnd, ThreadLease,
};

/// This node's side of the leases ([`Store::as_node`]): who it is, and the fence it holds per
/// thread.
#[derive(Debug)]
pub(super) struct NodeLeases {
    /// `node_<uuid>`, new at every start: a restarted node owns nothing from its last life.
    node: String,
    /// Where peers forward this node's threads.
    url: String,
    ttl: Duration,
    /// What this node's writes of each thread must still match; a thread missing here is not
    /// this node's to write.
    held: Mutex<HashMap<ThreadId, Fence>>,
}

/// What [`Store::claim_lease`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// The claim is decided.
    Done(Claim),
    /// A takeover found turns pending that its announcements do not cover; nothing was
    /// written. Announce these too and claim again (`crate::events::claim_lease`).
    Unannounced(Vec<MessageId>),
}

/// What a decided claim found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A single node: there are no leases.
    Unclustered,
    /// This node holds the lease; its writes carry `fence`. `interrupted`: the user messages a
    /// takeover from a peer just ended (their turns died with the old owner); their outcomes
    /// and `turn_failed` events were written with the lease.
    Held {
        fence: Fence,
        interrupted: Vec<MessageId>,
        /// The lease went to a peer and came back since this node last held it: what this node
        /// keeps of the thread (its process) missed the peer's turns.
        moved: bool,
    },
    /// A live peer holds it. `lost`: this node held it until now (its process must go).
    Elsewhere { lost: bool },
}

impl Store {
    /// This store as a node's among several on one database: a new node id (`node_<uuid>`),
    /// `url` where peers reach it, leases of `ttl`. From now on every write of a thread's turn
    /// needs the thread's lease (see the module's documentation). Call before handing out clones:
    /// they share the book only when made after.
    pub fn as_node(mut self, url: String, ttl: Duration) -> Store {
        self.node = Some(Arc::new(NodeLeases {
            node: format!("node_{}", uuid::Uuid::new_v4().simple()),
            url,
            ttl,
            held: Mutex::new(HashMap::new()),
        }));
        self
    }

    /// This node's id when the store is a node's ([`Store::as_node`]).
    pub fn node_id(&self) -> Option<&str> {
        self.node.as_deref().map(|n| n.node.as_str())
    }

    /// The node's URL and lease TTL when the store is a node's.
    pub fn node_settings(&self) -> Option<(&str, Duration)> {
        self.node.as_deref().map(|n| (n.url.as_str(), n.ttl))
    }

    /// Takes (or keeps) the thread's lease for this node when it is free, expired or ours, and
    /// records its fence in the node's book. A takeover from a peer ends the turns the old owner
    /// left pending, each with its announcement in `takeover` ([`Store::acquire`]).
    /// [`Claim::Unclustered`] on a single node.
    pub async fn claim_lease(
        &self,
        thread: &ThreadId,
        takeover: &[TakeoverEnd],
    ) -> Result<Claimed, StoreError> {
        let Some(node) = self.node.as_deref() else {
            return Ok(Claimed::Done(Claim::Unclustered));
        };
        let acquired = self
            .acquire(thread, &node.node, &node.url, node.ttl, takeover)
            .await?;
        let Acquired { fence, ended } = match acquired {
            Acquisition::Held(acquired) => acquired,
            Acquisition::Elsewhere => {
                let lost = crate::sync::lock(&node.held).remove(thread).is_some();
                return Ok(Claimed::Done(Claim::Elsewhere { lost }));
            }
            Acquisition::Unannounced(messages) => return Ok(Claimed::Unannounced(messages)),
        };
        let before = crate::sync::lock(&node.held).insert(thread.clone(), fence.clone());
        let moved = before.is_some_and(|before| before.epoch != fence.epoch);
        let interrupted: Vec<MessageId> = ended.into_iter().map(|e| e.outcome.message_id).collect();
        if !interrupted.is_empty() || fence.epoch > 1 {
            tracing::info!(thread_id = %thread, epoch = fence.epoch, interrupted = interrupted.len(), "Holding the thread's lease.");
        }
        Ok(Claimed::Done(Claim::Held {
            fence,
            interrupted,
            moved,
        }))
    }

    /// The heartbeat: renews every lease of this node and drops from its book those it no longer
    /// holds (a peer took them over); returns those. Nothing on a single node.
    pub async fn renew_node_leases(&self) -> Result<Vec<ThreadId>, StoreError> {
        let Some(node) = self.node.as_deref() else {
            return Ok(Vec::new());
        };
        // What the book held before the renewal: a lease claimed while it runs is not judged by it.
        let before = crate::sync::lock(&node.held).clone();
        let renewed = self.renew_leases(&node.node, node.ttl).await?;
        let renewed: std::collections::HashSet<&ThreadId> = renewed.iter().collect();
        let mut held = crate::sync::lock(&node.held);
        let lost: Vec<ThreadId> = before
            .into_iter()
            .filter(|(thread, fence)| !renewed.contains(thread) && held.get(thread) == Some(fence))
            .map(|(thread, _)| thread)
            .collect();
        for thread in &lost {
            held.remove(thread);
        }
        Ok(lost)
    }

    /// Graceful shutdown: expires every lease of this node now, so peers take its threads at once.
    /// The book keeps its fences: a late write still passes until a peer takes the thread.
    pub async fn release_node_leases(&self) -> Result<u64, StoreError> {
        match self.node.as_deref() {
            Some(node) => self.release_leases(&node.node).await,
            None => Ok(0),
        }
    }

    /// The threads this node holds, with their fences (at shutdown, whose pending turns are
    /// this node's to end); `None` on a single node.
    pub fn held_leases(&self) -> Option<Vec<(ThreadId, Fence)>> {
        let node = self.node.as_deref()?;
        let held = crate::sync::lock(&node.held);
        Some(held.iter().map(|(t, f)| (t.clone(), f.clone())).collect())
    }

    /// The fence a write of `thread` must pass, for the query crates' `ThreadTx`: `explicit`
    /// when the caller carries one (a turn's messages carry the one their request was routed
    /// with), else this node's for the thread ([`StoreError::LeaseLost`] when it holds none),
    /// else none (a single node).
    pub(super) fn fence(
        &self,
        thread: &ThreadId,
        explicit: Option<&Fence>,
    ) -> Result<Option<Fence>, StoreError> {
        if let Some(fence) = explicit {
            return Ok(Some(fence.clone()));
        }
        let Some(node) = self.node.as_deref() else {
            return Ok(None);
        };
        match crate::sync::lock(&node.held).get(thread) {
            Some(fence) => Ok(Some(fence.clone())),
            None => Err(StoreError::LeaseLost(thread.clone())),
        }
    }
}

impl Store {
    /// Takes the thread's lease for `owner` when it is free (no row), expired, or already
    /// `owner`'s (then only its expiry moves), with `expires_at` = now + `ttl`. A change of owner
    /// increments the epoch; a new row starts at 1. Returns the fence the node's writes carry,
    /// or `None` when a live peer holds the lease.
    ///
    /// A takeover (the lease was a peer's) ends, in the same transaction, the turns the old
    /// owner left `pending` ([`super::EndCause::Takeover`], [`super::TAKEOVER_REASON`]), so a
    /// retry with the same `clientMessageId` runs them again. No clock decides which: the old
    /// owner can write no message after the takeover (its fence fails), and the new owner none
    /// before it.
    ///
    /// [`StoreError::ThreadNotFound`] for an unknown thread (the row's foreign key).
    #[cfg(test)]
    pub async fn acquire_lease(
        &self,
        thread: &ThreadId,
        owner: &str,
        owner_url: &str,
        ttl: Duration,
    ) -> Result<Option<Fence>, StoreError> {
        let mut takeover = Vec::new();
        loop {
            match self
                .acquire(thread, owner, owner_url, ttl, &takeover)
                .await?
            {
                Acquisition::Held(acquired) => return Ok(Some(acquired.fence)),
                Acquisition::Elsewhere => return Ok(None),
                Acquisition::Unannounced(messages) => takeover.extend(bare_takeover(messages)),
            }
        }
    }

    /// [`Store::claim_lease`] with bare announcements, for the tests.
    #[cfg(test)]
    pub async fn claim_bare(&self, thread: &ThreadId) -> Result<Claim, StoreError> {
        let mut takeover = Vec::new();
        loop {
            match self.claim_lease(thread, &takeover).await? {
                Claimed::Done(claim) => return Ok(claim),
                Claimed::Unannounced(messages) => takeover.extend(bare_takeover(messages)),
            }
        }
    }

    /// Takes the thread's lease for `owner` as `acquire_lease` (the tests' door to it) says,
    /// with the turns a takeover ended, each announced as `takeover` says.
    async fn acquire(
        &self,
        thread: &ThreadId,
        owner: &str,
        owner_url: &str,
        ttl: Duration,
        takeover: &[TakeoverEnd],
    ) -> Result<Acquisition, StoreError> {
        let _timer = self.metrics.time("acquire_lease");
        on_db!(self, db => db.acquire_lease(thread, owner, owner_url, ttl, takeover).await)
    }

    /// The heartbeat: every lease `owner` holds expires `ttl` from now, in one UPDATE. Returns
    /// the threads it still holds; one the node thinks it owns and is missing here was taken
    /// over by a peer.
    pub async fn renew_leases(
        &self,
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<ThreadId>, StoreError> {
        let _timer = self.metrics.time("renew_leases");
        on_db!(self, db => db.renew_leases(owner, ttl).await)
    }

    /// Expires every lease `owner` holds now (graceful shutdown), so peers take its threads at
    /// once instead of a TTL later. The epochs stay: the next owner increments them.
    pub async fn release_leases(&self, owner: &str) -> Result<u64, StoreError> {
        let _timer = self.metrics.time("release_leases");
        on_db!(self, db => db.release_leases(owner).await)
    }

    /// The thread's lease, or `None` when no node ever took it.
    pub async fn lease(&self, thread: &ThreadId) -> Result<Option<ThreadLease>, StoreError> {
        let _timer = self.metrics.time("lease");
        on_db!(self, db => db.lease(thread).await)
    }

    /// Whether this node holds the cluster's credential: `token` (or none) hashes as the first
    /// node's did, which it recorded. A node that does not may not join: it would hold leases,
    /// be sent requests, and send them on with its own token.
    pub async fn join_cluster(&self, token: Option<&str>) -> Result<bool, StoreError> {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        hash.update(b"harness cluster credential v1\0");
        match token {
            Some(token) => {
                hash.update(b"token\0");
                hash.update(token.as_bytes());
            }
            None => hash.update(b"none"),
        }
        let hash = crate::secret::hex(&hash.finalize());
        let _timer = self.metrics.time("join_cluster");
        on_db!(self, db => db.join_cluster(&hash).await)
    }
}

/// Bare announcements of a takeover's ends, for the tests.
#[cfg(test)]
fn bare_takeover(messages: Vec<MessageId>) -> impl Iterator<Item = TakeoverEnd> {
    messages.into_iter().map(|message| TakeoverEnd {
        announcement: super::outcomes::bare_event(&message, false),
        message,
    })
}

#[cfg(test)]
mod tests;
