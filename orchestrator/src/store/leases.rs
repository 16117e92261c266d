//! Leases: which node owns a thread when several nodes share the database (`docs/scale-out.md`).
//! One row per thread that a node has served: owner node, its URL, an epoch that grows at every
//! change of owner, and an expiry the owner's heartbeat keeps pushing forward.
//!
//! - [`Store::acquire_lease`] takes a free or expired lease (epoch + 1), or keeps one this node
//!   holds, in one conditional upsert: of two nodes racing for a lease, one wins.
//! - [`Store::renew_leases`] pushes every lease of a node forward in one UPDATE (the heartbeat)
//!   and names the threads it still holds, so the node learns which ones it lost.
//! - [`Store::release_leases`] expires them now (graceful shutdown): peers take over at once.
//! - A turn's writes carry a [`Fence`] (the owner and the epoch it took): `messages.rs` refuses
//!   them with [`StoreError::LeaseLost`] once the lease has moved on (`check_fence_*` below).
//!
//! Only written when clustering is on (PostgreSQL); the SQLite side exists so both schemas and
//! both test suites stay the same.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use plugin_contract::ThreadId;
use sqlx::Row;

use super::{now_text, pg, Db, Store, StoreError};

/// Now, as [`Store::interrupt_pending_before`] takes it (stored timestamps' format).
pub fn lease_clock() -> String {
    now_text()
}

/// What a turn's writes must still hold to succeed: this node's lease on the thread, at the epoch
/// it took. `None` where a fence is optional means clustering is off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The owning node's id.
    pub owner: String,
    /// The epoch the node took the lease at; a takeover increments it.
    pub epoch: i64,
}

/// A thread's lease as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub thread_id: ThreadId,
    pub owner: String,
    /// Where peers forward the thread's requests.
    pub owner_url: String,
    pub epoch: i64,
    pub expires_at: DateTime<Utc>,
}

impl Lease {
    /// True while the owner's last heartbeat still covers `now`.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        self.expires_at > now
    }
}

/// `ttl` from now, as stored.
fn expiry_text(ttl: Duration) -> String {
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::days(365));
    (Utc::now() + ttl).to_rfc3339_opts(SecondsFormat::Micros, true)
}

impl Store {
    /// Takes the thread's lease for `owner` when it is free (no row), expired, or already
    /// `owner`'s (then only its expiry moves), with `expires_at` = now + `ttl`. A change of owner
    /// increments the epoch; a new row starts at 1. Returns the fence the node's writes carry,
    /// or `None` when a live peer holds the lease.
    ///
    /// [`StoreError::ThreadNotFound`] for an unknown thread (the row's foreign key).
    pub async fn acquire_lease(
        &self,
        thread: &ThreadId,
        owner: &str,
        owner_url: &str,
        ttl: Duration,
    ) -> Result<Option<Fence>, StoreError> {
        let _timer = self.metrics.time("acquire_lease");
        let now = now_text();
        let expires = expiry_text(ttl);
        let thread_id = thread.as_str();
        let epoch = match &self.db {
            Db::Sqlite(pool) => sqlx::query_scalar!(
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
            .fetch_optional(pool)
            .await
            .map_err(|e| lease_error(e, thread))?,
            Db::Postgres(pool) => sqlx::query_scalar::<_, i64>(
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
            .fetch_optional(pool)
            .await
            .map_err(|e| lease_error(e, thread))?,
        };
        Ok(epoch.map(|epoch| Fence {
            owner: owner.to_owned(),
            epoch,
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

    /// After a takeover: the thread's user messages still `pending` that were stored before
    /// `before` (the moment the lease was taken) belonged to turns the old owner never finished;
    /// they become `interrupted` with `reason`, so a retry with the same `clientMessageId` runs
    /// them again. Fenced: only while `fence` holds the lease. Returns how many.
    pub async fn interrupt_pending_before(
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
                check_fence_sqlite(&mut tx, thread_id, Some(fence)).await?;
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
                check_fence_pg(&mut tx, thread_id, Some(fence)).await?;
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
    pub async fn lease(&self, thread: &ThreadId) -> Result<Option<Lease>, StoreError> {
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
        Ok(row.map(|(owner, owner_url, epoch, expires_at)| Lease {
            thread_id: thread.clone(),
            owner,
            owner_url,
            epoch,
            expires_at,
        }))
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

/// Inside a SQLite write transaction (which holds the database's write lock, so no takeover can
/// come in between): [`StoreError::LeaseLost`] unless `fence` still holds the thread's lease.
pub(super) async fn check_fence_sqlite(
    conn: &mut sqlx::SqliteConnection,
    thread_id: &str,
    fence: Option<&Fence>,
) -> Result<(), StoreError> {
    let Some(fence) = fence else {
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

/// Inside a PostgreSQL transaction: [`StoreError::LeaseLost`] unless `fence` still holds the
/// thread's lease. The lease row stays share-locked until the transaction ends, so a takeover
/// waits for this write to commit (and the write never lands after one).
pub(super) async fn check_fence_pg(
    conn: &mut sqlx::PgConnection,
    thread_id: &str,
    fence: Option<&Fence>,
) -> Result<(), StoreError> {
    let Some(fence) = fence else {
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
mod tests {
    use super::super::tests::store_tests;
    use super::super::*;
    use std::time::Duration;

    const TTL: Duration = Duration::from_secs(60);

    async fn thread(store: &Store) -> ThreadId {
        store.create_thread(NewThread::default()).await.unwrap().id
    }

    store_tests! {
        /// A free lease goes to the first taker at epoch 1; a live one is refused to a peer and
        /// kept (same epoch) by its owner; an expired one goes to the peer at epoch + 1.
        async fn acquire_takes_free_keeps_own_and_takes_expired(store: sqlite_memory) {
            let t = thread(&store).await;
            let a = store.acquire_lease(&t, "node_a", "http://a", TTL).await.unwrap();
            assert_eq!(a, Some(Fence { owner: "node_a".into(), epoch: 1 }));
            assert_eq!(store.acquire_lease(&t, "node_b", "http://b", TTL).await.unwrap(), None);
            let again = store.acquire_lease(&t, "node_a", "http://a", TTL).await.unwrap();
            assert_eq!(again.map(|f| f.epoch), Some(1));
            let lease = store.lease(&t).await.unwrap().unwrap();
            assert_eq!((lease.owner.as_str(), lease.owner_url.as_str()), ("node_a", "http://a"));
            assert!(lease.is_live(chrono::Utc::now()));

            store.test_execute(&format!(
                "UPDATE leases SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE thread_id = '{t}'"
            )).await;
            let b = store.acquire_lease(&t, "node_b", "http://b", TTL).await.unwrap();
            assert_eq!(b, Some(Fence { owner: "node_b".into(), epoch: 2 }));
            assert_eq!(store.acquire_lease(&t, "node_a", "http://a", TTL).await.unwrap(), None);
            assert_eq!(store.lease(&t).await.unwrap().unwrap().owner_url, "http://b");
        }

        /// An unknown thread gets no lease row.
        async fn acquire_of_an_unknown_thread_is_not_found(store: sqlite_memory) {
            let err = store
                .acquire_lease(&ThreadId::from_string("thr_nope"), "node_a", "http://a", TTL)
                .await
                .unwrap_err();
            assert!(matches!(err, StoreError::ThreadNotFound(_)), "{err:?}");
            assert_eq!(store.lease(&ThreadId::from_string("thr_nope")).await.unwrap(), None);
        }

        /// The heartbeat renews only the node's own leases and names them; a release frees them
        /// for a peer at once.
        async fn renew_names_held_leases_and_release_frees_them(store: sqlite_memory) {
            let (t1, t2, t3) = (thread(&store).await, thread(&store).await, thread(&store).await);
            store.acquire_lease(&t1, "node_a", "http://a", TTL).await.unwrap().unwrap();
            store.acquire_lease(&t2, "node_a", "http://a", TTL).await.unwrap().unwrap();
            store.acquire_lease(&t3, "node_b", "http://b", TTL).await.unwrap().unwrap();
            let mut held = store.renew_leases("node_a", TTL).await.unwrap();
            held.sort_by(|x, y| x.as_str().cmp(y.as_str()));
            let mut want = vec![t1.clone(), t2.clone()];
            want.sort_by(|x, y| x.as_str().cmp(y.as_str()));
            assert_eq!(held, want);

            assert_eq!(store.release_leases("node_a").await.unwrap(), 2);
            let b = store.acquire_lease(&t1, "node_b", "http://b", TTL).await.unwrap();
            assert_eq!(b.map(|f| f.epoch), Some(2));
            assert_eq!(store.renew_leases("node_a", TTL).await.unwrap(), vec![t2.clone()]);
        }

        /// Fenced writes succeed while the fence holds and fail with `LeaseLost` once a peer took
        /// the lease over, writing nothing: the old owner that wakes up cannot touch the thread.
        async fn fenced_writes_fail_after_a_takeover(store: sqlite_memory) {
            let t = thread(&store).await;
            let a = store.acquire_lease(&t, "node_a", "http://a", TTL).await.unwrap().unwrap();
            let new = |content: &str| NewUserMessage {
                thread_id: t.clone(),
                content: content.into(),
                client_message_id: None,
                model: None,
            };
            let Inserted::New(first) = store.insert_user_message_fenced(new("one"), Some(&a)).await.unwrap() else {
                panic!("a new message");
            };
            store
                .complete_turn_fenced(Some(&a), &first.id, "reply", None, None, None, None)
                .await
                .unwrap();
            let Inserted::New(second) = store.insert_user_message_fenced(new("two"), Some(&a)).await.unwrap() else {
                panic!("a new message");
            };

            store.test_execute(&format!(
                "UPDATE leases SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE thread_id = '{t}'"
            )).await;
            let b = store.acquire_lease(&t, "node_b", "http://b", TTL).await.unwrap().unwrap();
            assert_eq!(b.epoch, 2);

            let err = store
                .complete_turn_fenced(Some(&a), &second.id, "stale", None, None, None, None)
                .await
                .unwrap_err();
            assert!(matches!(err, StoreError::LeaseLost(_)), "{err:?}");
            let err = store
                .fail_turn_fenced(Some(&a), &second.id, MessageStatus::Error, "stale", None, None)
                .await
                .unwrap_err();
            assert!(matches!(err, StoreError::LeaseLost(_)), "{err:?}");
            let err = store.insert_user_message_fenced(new("three"), Some(&a)).await.unwrap_err();
            assert!(matches!(err, StoreError::LeaseLost(_)), "{err:?}");
            let messages = store.list_messages(&t).await.unwrap();
            let seen: Vec<_> = messages.iter().map(|m| (m.content.as_str(), m.status)).collect();
            assert_eq!(
                seen,
                [("one", MessageStatus::Done), ("reply", MessageStatus::Done), ("two", MessageStatus::Pending)]
            );
            // The new owner ends the old owner's unfinished turn; nothing stored after `before`.
            let before = super::lease_clock();
            let Inserted::New(third) = store.insert_user_message_fenced(new("four"), Some(&b)).await.unwrap() else {
                panic!("a new message");
            };
            assert_eq!(store.interrupt_pending_before(&t, &a, &before, "taken over").await.unwrap_err().to_string(),
                StoreError::LeaseLost(t.clone()).to_string());
            assert_eq!(store.interrupt_pending_before(&t, &b, &before, "taken over").await.unwrap(), 1);
            let status = |id: &MessageId| {
                let id = id.clone();
                let store = store.clone();
                async move { store.get_message(&id).await.unwrap().unwrap().status }
            };
            assert_eq!(status(&second.id).await, MessageStatus::Interrupted);
            assert_eq!(status(&third.id).await, MessageStatus::Pending);
            // The new owner writes.
            store
                .complete_turn_fenced(Some(&b), &second.id, "fresh", None, None, None, None)
                .await
                .unwrap();
        }
    }
}
