//! `leases`: which node owns a thread when several nodes share the database.
//!
//! A claim locks the thread's lease row (`FOR UPDATE`) until it commits: a peer's claim waits,
//! and so does a write fenced by the old owner, which share-locks the same row in its
//! [`ThreadTx`]. So a takeover never interleaves with the old owner's writes: they commit
//! before it (and the takeover then ends what they left pending), or fail after it.

use std::time::Duration;

use harness_db::{
    expiry_text, is_foreign_key_violation, now_text, Acquired, Acquisition, EndCause, Ending,
    Fence, StoreError, TakeoverEnd, ThreadLease, TurnKey, TAKEOVER_REASON,
};
use plugin_contract::ThreadId;
use sqlx::PgPool;

use crate::Postgres;

harness_db::lease_queries!(Postgres);

/// The conditional upsert of [`LeaseQueries::acquire_lease`] and, on a takeover, the end of the
/// old owner's pending turns (each announced as `takeover` says), in one transaction. Not a
/// [`ThreadTx`]: taking the lease is what moves the fence.
async fn acquire(
    pool: &PgPool,
    thread: &ThreadId,
    owner: &str,
    owner_url: &str,
    ttl: Duration,
    takeover: &[TakeoverEnd],
) -> Result<Acquisition, StoreError> {
    let now = now_text();
    let mut tx = pool.begin().await?;
    // Locked until COMMIT: a peer's claim, or a write fenced by the old owner, waits.
    let previous = sqlx::query_scalar!(
        "SELECT owner FROM leases WHERE thread_id = $1 FOR UPDATE",
        thread as &ThreadId,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let epoch = sqlx::query_scalar!(
        r#"INSERT INTO leases (thread_id, owner, owner_url, epoch, expires_at)
           VALUES ($1, $2, $3, 1, $4)
           ON CONFLICT (thread_id) DO UPDATE SET
               epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch
                            ELSE leases.epoch + 1 END,
               owner = excluded.owner, owner_url = excluded.owner_url,
               expires_at = excluded.expires_at
           WHERE leases.owner = excluded.owner OR leases.expires_at < $5
           RETURNING epoch AS "epoch!""#,
        thread as &ThreadId,
        owner,
        owner_url,
        expiry_text(ttl),
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

async fn renew(pool: &PgPool, owner: &str, ttl: Duration) -> Result<Vec<ThreadId>, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"UPDATE leases SET expires_at = $1 WHERE owner = $2
           RETURNING thread_id AS "thread_id!: ThreadId""#,
        expiry_text(ttl),
        owner,
    )
    .fetch_all(pool)
    .await?)
}

async fn release(pool: &PgPool, owner: &str) -> Result<u64, StoreError> {
    let done = sqlx::query!(
        "UPDATE leases SET expires_at = $1 WHERE owner = $2",
        now_text(),
        owner,
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

async fn of_thread(pool: &PgPool, thread: &ThreadId) -> Result<Option<ThreadLease>, StoreError> {
    Ok(sqlx::query_as!(
        ThreadLease,
        r#"SELECT thread_id AS "thread_id: ThreadId", owner, owner_url, epoch,
                  expires_at::timestamptz AS "expires_at!"
           FROM leases WHERE thread_id = $1"#,
        thread as &ThreadId,
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

async fn join_cluster(pool: &PgPool, hash: &str) -> Result<bool, StoreError> {
    let now = harness_db::now_text();
    sqlx::query!(
        "INSERT INTO cluster_credential (id, hash, created_at) VALUES (1, $1, $2)
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
