//! `leases`: which node owns a thread. Only written when clustering is on (PostgreSQL, see
//! `harness-db-postgres`); on SQLite they exist so both schemas and both test suites stay the
//! same. A claim runs under the database's one write lock (`BEGIN IMMEDIATE`), so of two racing
//! claims one wins, and no fenced write ([`ThreadTx`]) comes between a takeover's steps.

use std::time::Duration;

use chrono::{DateTime, Utc};
use harness_db::{
    expiry_text, is_foreign_key_violation, now_text, Acquired, Acquisition, EndCause, Ending,
    Fence, StoreError, TakeoverEnd, ThreadLease, TurnKey, TAKEOVER_REASON,
};
use plugin_contract::ThreadId;
use sqlx::SqlitePool;

use crate::Sqlite;

harness_db::lease_queries!(Sqlite);

/// The conditional upsert of [`LeaseQueries::acquire_lease`] and, on a takeover, the end of the
/// old owner's pending turns (each announced as `takeover` says), in one transaction. Not a
/// [`ThreadTx`]: taking the lease is what moves the fence.
async fn acquire(
    pool: &SqlitePool,
    thread: &ThreadId,
    owner: &str,
    owner_url: &str,
    ttl: Duration,
    takeover: &[TakeoverEnd],
) -> Result<Acquisition, StoreError> {
    let now = now_text();
    let expires = expiry_text(ttl);
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let previous = sqlx::query_scalar!("SELECT owner FROM leases WHERE thread_id = ?1", thread)
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
        thread,
        owner,
        owner_url,
        expires,
        now,
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(|err| lease_error(err, thread))?;
    let Some(epoch) = epoch else {
        return Ok(Acquisition::Elsewhere);
    };
    let mut ended = Vec::new();
    if previous.is_some_and(|previous| previous != owner) {
        let (mut ends, mut unannounced) = (Vec::new(), Vec::new());
        for pending in crate::outcomes::pending(&mut *tx, Some(thread)).await? {
            match takeover
                .iter()
                .find(|end| end.message == pending.message_id)
            {
                Some(end) => ends.push(end),
                None => unannounced.push(pending.message_id),
            }
        }
        if !unannounced.is_empty() {
            // Dropping the transaction rolls the lease back.
            return Ok(Acquisition::Unannounced(unannounced));
        }
        for takeover in ends {
            let turn = TurnKey {
                thread,
                message: &takeover.message,
            };
            let ending = Ending::failed(EndCause::Takeover, TAKEOVER_REASON);
            let announcement = &takeover.announcement;
            ended.extend(crate::outcomes::end_in(&mut tx, turn, ending, announcement).await?);
        }
    }
    tx.commit().await?;
    let fence = Fence {
        owner: owner.to_owned(),
        epoch,
    };
    Ok(Acquisition::Held(Acquired { fence, ended }))
}

async fn renew(pool: &SqlitePool, owner: &str, ttl: Duration) -> Result<Vec<ThreadId>, StoreError> {
    let expires = expiry_text(ttl);
    Ok(sqlx::query_scalar!(
        r#"UPDATE leases SET expires_at = ?1 WHERE owner = ?2
           RETURNING thread_id AS "thread_id!: ThreadId""#,
        expires,
        owner,
    )
    .fetch_all(pool)
    .await?)
}

async fn release(pool: &SqlitePool, owner: &str) -> Result<u64, StoreError> {
    let now = now_text();
    let done = sqlx::query!(
        "UPDATE leases SET expires_at = ?1 WHERE owner = ?2",
        now,
        owner
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

async fn of_thread(
    pool: &SqlitePool,
    thread: &ThreadId,
) -> Result<Option<ThreadLease>, StoreError> {
    Ok(sqlx::query_as!(
        ThreadLease,
        r#"SELECT thread_id AS "thread_id!: ThreadId", owner, owner_url, epoch,
                  expires_at AS "expires_at: DateTime<Utc>"
           FROM leases WHERE thread_id = ?1"#,
        thread,
    )
    .fetch_optional(pool)
    .await?)
}

/// An unknown thread trips the lease row's foreign key.
fn lease_error(err: sqlx::Error, thread: &ThreadId) -> StoreError {
    if is_foreign_key_violation(&err) {
        StoreError::ThreadNotFound(thread.clone())
    } else {
        err.into()
    }
}

async fn join_cluster(pool: &SqlitePool, hash: &str) -> Result<bool, StoreError> {
    let now = harness_db::now_text();
    sqlx::query!(
        "INSERT INTO cluster_credential (id, hash, created_at) VALUES (1, ?1, ?2)
         ON CONFLICT (id) DO NOTHING",
        hash,
        now,
    )
    .execute(pool)
    .await?;
    let held = sqlx::query_scalar!("SELECT hash FROM cluster_credential WHERE id = 1")
        .fetch_one(pool)
        .await?;
    Ok(held == hash)
}
