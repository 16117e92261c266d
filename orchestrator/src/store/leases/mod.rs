//! Leases: which node owns a thread when several nodes share the database (`docs/scale-out.md`).
//! One row per thread that a node has served: owner node, its URL, an epoch that grows at every
//! change of owner, and an expiry the owner's heartbeat keeps pushing forward.
//!
//! - [`Store::acquire_lease`] takes a free or expired lease (epoch + 1), or keeps one this node
//!   holds, in one conditional upsert: of two nodes racing for a lease, one wins.
//! - [`Store::renew_leases`] pushes every lease of a node forward in one UPDATE (the heartbeat)
//!   and names the threads it still holds, so the node learns which ones it lost.
//! - [`Store::release_leases`] expires them now (graceful shutdown): peers take over at once.
//!
//! A store made a node's ([`Store::as_node`]) keeps the node's book: the [`Fence`] (owner and
//! epoch) it holds per thread, set by [`Store::claim_lease`] and dropped when the heartbeat
//! ([`Store::renew_node_leases`]) finds the lease gone. **Every write of a thread's turn** (its
//! messages, events, tool calls, transcript entries, permissions, CLI session) checks that fence
//! inside its own transaction (`check_fence_*` below, through `Store::fencing`): once a peer took the
//! thread over, or for a thread this node never took, it is refused with
//! [`StoreError::LeaseLost`] and nothing is written. So an old owner that wakes up after losing
//! its lease cannot write, and neither can a node that never held it.
//!
//! Only written when clustering is on (PostgreSQL); the SQLite side exists so both schemas and
//! both test suites stay the same.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use plugin_contract::ThreadId;
use sqlx::Row;

use super::{now_text, pg, Db, Fence, MessageId, Store, StoreError, ThreadLease};

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

/// What [`Store::claim_lease`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A single node: there are no leases.
    Unclustered,
    /// This node holds the lease; its writes carry `fence`. `interrupted`: the user messages a
    /// takeover from a peer just ended (their turns died with the old owner).
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

/// Why a turn ended when its thread's lease moved to another node.
pub const TAKEOVER_REASON: &str =
    "the node running this turn stopped; another node took the thread over";

/// `ttl` from now, as stored.
fn expiry_text(ttl: Duration) -> String {
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::days(365));
    (Utc::now() + ttl).to_rfc3339_opts(SecondsFormat::Micros, true)
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
    /// left pending ([`Store::acquire_lease`]). [`Claim::Unclustered`] on a single node.
    pub async fn claim_lease(&self, thread: &ThreadId) -> Result<Claim, StoreError> {
        let Some(node) = self.node.as_deref() else {
            return Ok(Claim::Unclustered);
        };
        let acquired = self
            .acquire(thread, &node.node, &node.url, node.ttl)
            .await?;
        let Some((fence, interrupted)) = acquired else {
            let lost = crate::sync::lock(&node.held).remove(thread).is_some();
            return Ok(Claim::Elsewhere { lost });
        };
        let before = crate::sync::lock(&node.held).insert(thread.clone(), fence.clone());
        let moved = before.is_some_and(|before| before.epoch != fence.epoch);
        if !interrupted.is_empty() || fence.epoch > 1 {
            tracing::info!(thread_id = %thread, epoch = fence.epoch, interrupted = interrupted.len(), "Holding the thread's lease.");
        }
        Ok(Claim::Held {
            fence,
            interrupted,
            moved,
        })
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

    /// Graceful shutdown of a node: the turns still pending on the threads it holds were cut
    /// short here; they end `interrupted` with `reason`, so their retries run again (on this node
    /// after a restart, or on a peer). The peers' threads are left alone. Returns how many.
    pub async fn interrupt_node_pending(&self, reason: &str) -> Result<u64, StoreError> {
        let Some(node) = self.node.as_deref() else {
            return Ok(0);
        };
        let held: Vec<(ThreadId, Fence)> = crate::sync::lock(&node.held)
            .iter()
            .map(|(thread, fence)| (thread.clone(), fence.clone()))
            .collect();
        let now = now_text();
        let mut ended = 0;
        for (thread, fence) in held {
            match self
                .interrupt_pending_before(&thread, &fence, &now, reason)
                .await
            {
                Ok(n) => ended += n,
                // A peer has it now: its turns are the peer's to end.
                Err(StoreError::LeaseLost(_)) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(ended)
    }

    /// What a write must pass ([`Fencing`]): `explicit` when the caller carries a fence (a
    /// turn's messages carry the one their request was routed with), else this node's book.
    pub(super) fn fencing<'a>(&'a self, explicit: Option<&'a Fence>) -> Fencing<'a> {
        Fencing {
            explicit,
            node: self.node.as_deref(),
        }
    }

    /// The fence a write of `thread` must pass, for the query crates' `ThreadTx`: `explicit`
    /// when the caller carries one, else this node's for the thread ([`StoreError::LeaseLost`]
    /// when it holds none), else none (a single node).
    pub(super) fn fence(
        &self,
        thread: &ThreadId,
        explicit: Option<&Fence>,
    ) -> Result<Option<Fence>, StoreError> {
        self.fencing(explicit).fence_for(thread.as_str())
    }
}

impl Store {
    /// Takes the thread's lease for `owner` when it is free (no row), expired, or already
    /// `owner`'s (then only its expiry moves), with `expires_at` = now + `ttl`. A change of owner
    /// increments the epoch; a new row starts at 1. Returns the fence the node's writes carry,
    /// or `None` when a live peer holds the lease.
    ///
    /// A takeover (the lease was a peer's) ends, in the same transaction, the user messages the
    /// old owner left `pending`: they become `interrupted` ([`TAKEOVER_REASON`]), so a retry with
    /// the same `clientMessageId` runs them again. No clock decides which: the old owner can
    /// write no message after the takeover (its fence fails), and the new owner none before it.
    ///
    /// [`StoreError::ThreadNotFound`] for an unknown thread (the row's foreign key).
    pub async fn acquire_lease(
        &self,
        thread: &ThreadId,
        owner: &str,
        owner_url: &str,
        ttl: Duration,
    ) -> Result<Option<Fence>, StoreError> {
        Ok(self
            .acquire(thread, owner, owner_url, ttl)
            .await?
            .map(|(fence, _)| fence))
    }

    /// [`Store::acquire_lease`], with the user messages a takeover interrupted.
    async fn acquire(
        &self,
        thread: &ThreadId,
        owner: &str,
        owner_url: &str,
        ttl: Duration,
    ) -> Result<Option<(Fence, Vec<MessageId>)>, StoreError> {
        let _timer = self.metrics.time("acquire_lease");
        let now = now_text();
        let expires = expiry_text(ttl);
        let thread_id = thread.as_str();
        let (epoch, interrupted) = match &self.db {
            Db::Sqlite(pool) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                let previous =
                    sqlx::query_scalar!("SELECT owner FROM leases WHERE thread_id = ?1", thread_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                let epoch = sqlx::query_scalar!(
                    r#"INSERT INTO leases (thread_id, owner, owner_url, epoch, expires_at)
                   VALUES (?1, ?2, ?3, 1, ?4)
                   ON CONFLICT (thread_id) DO UPDATE SET
                       epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch
                                    ELSE leases.epoch + 1 END,
                       owner = excluded.owner, owner_url = excluded.owner_url,
                       expires_at = excluded.expires_at
                   WHERE leases.owner = excluded.owner OR leases.expires_at < ?5
                   RETURNING epoch"#,
                    thread_id,
                    owner,
                    owner_url,
                    expires,
                    now,
                )
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| lease_error(e, thread))?;
                let mut interrupted = Vec::new();
                if epoch.is_some() && previous.is_some_and(|p| p != owner) {
                    interrupted = sqlx::query_scalar!(
                        r#"UPDATE messages SET status = 'interrupted', error = ?1, updated_at = ?2
                           WHERE thread_id = ?3 AND status = 'pending' AND role = 'user'
                           RETURNING id AS "id!: MessageId""#,
                        TAKEOVER_REASON,
                        now,
                        thread_id,
                    )
                    .fetch_all(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                (epoch, interrupted)
            }
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                // Locked until COMMIT: a peer's claim, or a write fenced by the old owner, waits.
                let previous: Option<String> =
                    sqlx::query_scalar("SELECT owner FROM leases WHERE thread_id = $1 FOR UPDATE")
                        .bind(thread_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                let epoch = sqlx::query_scalar::<_, i64>(
                    "INSERT INTO leases (thread_id, owner, owner_url, epoch, expires_at)
                 VALUES ($1, $2, $3, 1, $4)
                 ON CONFLICT (thread_id) DO UPDATE SET
                     epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch
                                  ELSE leases.epoch + 1 END,
                     owner = excluded.owner, owner_url = excluded.owner_url,
                     expires_at = excluded.expires_at
                 WHERE leases.owner = excluded.owner OR leases.expires_at < $5
                 RETURNING epoch",
                )
                .bind(thread_id)
                .bind(owner)
                .bind(owner_url)
                .bind(&expires)
                .bind(&now)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| lease_error(e, thread))?;
                let mut interrupted = Vec::new();
                if epoch.is_some() && previous.is_some_and(|p| p != owner) {
                    let ids: Vec<String> = sqlx::query_scalar(
                        "UPDATE messages SET status = 'interrupted', error = $1, updated_at = $2
                         WHERE thread_id = $3 AND status = 'pending' AND role = 'user'
                         RETURNING id",
                    )
                    .bind(TAKEOVER_REASON)
                    .bind(&now)
                    .bind(thread_id)
                    .fetch_all(&mut *tx)
                    .await?;
                    interrupted = ids.into_iter().map(MessageId::from_string).collect();
                }
                tx.commit().await?;
                (epoch, interrupted)
            }
        };
        Ok(epoch.map(|epoch| {
            let fence = Fence {
                owner: owner.to_owned(),
                epoch,
            };
            (fence, interrupted)
        }))
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
        let expires = expiry_text(ttl);
        let ids: Vec<String> = match &self.db {
            Db::Sqlite(pool) => {
                sqlx::query_scalar!(
                    r#"UPDATE leases SET expires_at = ?1 WHERE owner = ?2
                   RETURNING thread_id AS "thread_id!""#,
                    expires,
                    owner,
                )
                .fetch_all(pool)
                .await?
            }
            Db::Postgres(pool) => {
                sqlx::query_scalar(
                    "UPDATE leases SET expires_at = $1 WHERE owner = $2 RETURNING thread_id",
                )
                .bind(&expires)
                .bind(owner)
                .fetch_all(pool)
                .await?
            }
        };
        Ok(ids.into_iter().map(ThreadId::from_string).collect())
    }

    /// Expires every lease `owner` holds now (graceful shutdown), so peers take its threads at
    /// once instead of a TTL later. The epochs stay: the next owner increments them.
    pub async fn release_leases(&self, owner: &str) -> Result<u64, StoreError> {
        let _timer = self.metrics.time("release_leases");
        let now = now_text();
        let done = match &self.db {
            Db::Sqlite(pool) => sqlx::query!(
                "UPDATE leases SET expires_at = ?1 WHERE owner = ?2",
                now,
                owner
            )
            .execute(pool)
            .await?
            .rows_affected(),
            Db::Postgres(pool) => sqlx::query("UPDATE leases SET expires_at = $1 WHERE owner = $2")
                .bind(&now)
                .bind(owner)
                .execute(pool)
                .await?
                .rows_affected(),
        };
        Ok(done)
    }

    /// The thread's user messages still `pending` that were stored before `before` (this
    /// node's clock, as it stores them) become `interrupted` with `reason`, so a retry with the
    /// same `clientMessageId` runs them again ([`Store::interrupt_node_pending`]). Fenced: only
    /// while `fence` holds the lease. Returns how many.
    async fn interrupt_pending_before(
        &self,
        thread: &ThreadId,
        fence: &Fence,
        before: &str,
        reason: &str,
    ) -> Result<u64, StoreError> {
        let _timer = self.metrics.time("interrupt_pending_before");
        let now = now_text();
        let thread_id = thread.as_str();
        let count = match &self.db {
            Db::Sqlite(pool) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                check_fence_sqlite(&mut tx, thread_id, self.fencing(Some(fence))).await?;
                let count = sqlx::query!(
                    "UPDATE messages SET status = 'interrupted', error = ?1, updated_at = ?2
                     WHERE thread_id = ?3 AND status = 'pending' AND role = 'user'
                       AND created_at < ?4",
                    reason,
                    now,
                    thread_id,
                    before,
                )
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                count
            }
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                check_fence_pg(&mut tx, thread_id, self.fencing(Some(fence))).await?;
                let count = sqlx::query(
                    "UPDATE messages SET status = 'interrupted', error = $1, updated_at = $2
                     WHERE thread_id = $3 AND status = 'pending' AND role = 'user'
                       AND created_at < $4",
                )
                .bind(reason)
                .bind(&now)
                .bind(thread_id)
                .bind(before)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                count
            }
        };
        Ok(count)
    }

    /// The thread's lease, or `None` when no node ever took it.
    pub async fn lease(&self, thread: &ThreadId) -> Result<Option<ThreadLease>, StoreError> {
        let _timer = self.metrics.time("lease");
        let thread_id = thread.as_str();
        let row = match &self.db {
            Db::Sqlite(pool) => sqlx::query!(
                r#"SELECT owner, owner_url, epoch, expires_at AS "expires_at: DateTime<Utc>"
                   FROM leases WHERE thread_id = ?1"#,
                thread_id
            )
            .fetch_optional(pool)
            .await?
            .map(|r| (r.owner, r.owner_url, r.epoch, r.expires_at)),
            Db::Postgres(pool) => {
                let row = sqlx::query(
                    "SELECT owner, owner_url, epoch, expires_at FROM leases WHERE thread_id = $1",
                )
                .bind(thread_id)
                .fetch_optional(pool)
                .await?;
                match row {
                    Some(row) => Some((
                        row.try_get("owner")?,
                        row.try_get("owner_url")?,
                        row.try_get("epoch")?,
                        pg::time(&row, "expires_at")?,
                    )),
                    None => None,
                }
            }
        };
        Ok(
            row.map(|(owner, owner_url, epoch, expires_at)| ThreadLease {
                thread_id: thread.clone(),
                owner,
                owner_url,
                epoch,
                expires_at,
            }),
        )
    }
}

/// An unknown thread trips the lease row's foreign key.
fn lease_error(err: sqlx::Error, thread: &ThreadId) -> StoreError {
    if super::is_foreign_key_violation(&err) {
        StoreError::ThreadNotFound(thread.clone())
    } else {
        err.into()
    }
}

/// The fence a write of one thread must pass, resolved for that thread inside the write's
/// transaction ([`Store::fencing`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Fencing<'a> {
    explicit: Option<&'a Fence>,
    node: Option<&'a NodeLeases>,
}

impl Fencing<'_> {
    /// Nothing to check: a single node, and the caller carries no fence.
    pub(super) fn is_off(&self) -> bool {
        self.explicit.is_none() && self.node.is_none()
    }

    /// The fence for a write of `thread`: `Ok(None)` when nothing is to be checked,
    /// [`StoreError::LeaseLost`] on a node that holds no lease on the thread.
    pub(super) fn fence_for(&self, thread: &str) -> Result<Option<Fence>, StoreError> {
        if let Some(fence) = self.explicit {
            return Ok(Some(fence.clone()));
        }
        let Some(node) = self.node else {
            return Ok(None);
        };
        let thread = ThreadId::from_string(thread);
        match crate::sync::lock(&node.held).get(&thread) {
            Some(fence) => Ok(Some(fence.clone())),
            None => Err(StoreError::LeaseLost(thread)),
        }
    }
}

/// Inside a SQLite write transaction (which holds the database's write lock, so no takeover can
/// come in between): [`StoreError::LeaseLost`] unless the thread's fence still holds its lease.
pub(super) async fn check_fence_sqlite(
    conn: &mut sqlx::SqliteConnection,
    thread_id: &str,
    fencing: Fencing<'_>,
) -> Result<(), StoreError> {
    let Some(fence) = fencing.fence_for(thread_id)? else {
        return Ok(());
    };
    let held = sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "n!: i64" FROM leases
           WHERE thread_id = ?1 AND owner = ?2 AND epoch = ?3"#,
        thread_id,
        fence.owner,
        fence.epoch,
    )
    .fetch_one(conn)
    .await?;
    if held == 0 {
        return Err(StoreError::LeaseLost(ThreadId::from_string(thread_id)));
    }
    Ok(())
}

/// For SQLite's one-statement writes: the check of [`check_fence_sqlite`] just before the write,
/// on a connection of its own, and only when there is a fence to check. Not atomic with the
/// write, which is enough: SQLite never runs clustered (the configuration refuses it); the check
/// is there so both databases' store tests hold the same rules.
pub(super) async fn check_fence_sqlite_pool(
    pool: &sqlx::SqlitePool,
    thread_id: &str,
    fencing: Fencing<'_>,
) -> Result<(), StoreError> {
    if fencing.is_off() {
        return Ok(());
    }
    let mut conn = pool.acquire().await?;
    check_fence_sqlite(&mut conn, thread_id, fencing).await
}

/// Inside a PostgreSQL transaction: [`StoreError::LeaseLost`] unless the thread's fence still
/// holds its lease. The lease row stays share-locked until the transaction ends, so a takeover
/// waits for this write to commit (and the write never lands after one).
pub(super) async fn check_fence_pg(
    conn: &mut sqlx::PgConnection,
    thread_id: &str,
    fencing: Fencing<'_>,
) -> Result<(), StoreError> {
    let Some(fence) = fencing.fence_for(thread_id)? else {
        return Ok(());
    };
    let held = sqlx::query(
        "SELECT 1 FROM leases WHERE thread_id = $1 AND owner = $2 AND epoch = $3 FOR SHARE",
    )
    .bind(thread_id)
    .bind(&fence.owner)
    .bind(fence.epoch)
    .fetch_optional(conn)
    .await?;
    if held.is_none() {
        return Err(StoreError::LeaseLost(ThreadId::from_string(thread_id)));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
