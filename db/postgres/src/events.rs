//! `events`: the per-thread event log, which several daemons may append to at once, and the
//! notifications that tell every daemon an event was stored.
//!
//! - **Per-thread commit order.** An append takes a transaction-scoped advisory lock on its
//!   thread before it draws an id (after its [`ThreadTx`] passed the fence), so a thread's events
//!   commit in id order: a reader that has seen a thread's event N never later finds a smaller id
//!   of that thread committed. (`events_after` is exact without a look-back window.) Appends to
//!   other threads are not held up.
//! - **Wake-ups.** The append also `NOTIFY`s [`EVENTS_CHANNEL`] (payload `<thread id> <event
//!   id>`), in the same statement, so the notification is queued in the transaction and
//!   delivered at COMMIT, only after the row is visible. [`SharedEvents::listener`] hears them.

use harness_db::{now_text, EventRow, Fence, MessageId, StoreError};
use plugin_contract::ThreadId;
use sqlx::postgres::PgListener;
use sqlx::{PgConnection, PgPool};

use crate::webhooks::outbox;
use crate::{Postgres, ThreadTx};

/// The PostgreSQL channel appends notify: one notification per stored event.
pub const EVENTS_CHANNEL: &str = "harness_events";

/// The first key of the per-thread append locks (`pg_advisory_xact_lock(space, hash)`), so they
/// cannot meet other advisory locks on the database. "HEVT".
const EVENT_LOCK_SPACE: i32 = 0x4845_5654;

harness_db::event_queries!(Postgres);

impl Postgres {
    /// The event log as the daemons sharing this database see it.
    pub fn shared_events(&self) -> SharedEvents {
        SharedEvents {
            pool: self.pool().clone(),
        }
    }
}

pub(crate) async fn append(
    conn: &mut PgConnection,
    thread: &ThreadId,
    message: Option<&MessageId>,
    kind: &str,
    data: &serde_json::Value,
) -> Result<EventRow, StoreError> {
    // Appends to one thread queue here, so they draw ids and commit in the same order (the lock
    // is held until COMMIT, after the row is visible).
    sqlx::query!(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        EVENT_LOCK_SPACE,
        thread as &ThreadId,
    )
    .execute(&mut *conn)
    .await?;
    // Selecting FROM threads turns an unknown thread into "no row" rather than a foreign key
    // error. The notification is queued in the transaction and delivered at COMMIT, never
    // before the row can be read.
    let row = sqlx::query!(
        r#"WITH e AS (
               INSERT INTO events (thread_id, message_id, kind, data, created_at)
               SELECT t.id, $1, $2, $3, $4 FROM threads t WHERE t.id = $5
               RETURNING id, thread_id, message_id, kind, data, created_at)
           SELECT e.id AS "id!", e.thread_id AS "thread_id!: ThreadId",
                  e.message_id AS "message_id: MessageId", e.kind AS "kind!",
                  e.data AS "data!: serde_json::Value",
                  e.created_at::timestamptz AS "created_at!",
                  pg_notify($6, e.thread_id || ' ' || e.id) AS "notified: ()"
           FROM e"#,
        message as Option<&MessageId>,
        kind,
        data.to_string(),
        now_text(),
        thread as &ThreadId,
        EVENTS_CHANNEL,
    )
    .fetch_optional(conn)
    .await?;
    let row = row.ok_or_else(|| StoreError::ThreadNotFound(thread.clone()))?;
    Ok(EventRow {
        id: row.id,
        thread_id: row.thread_id,
        message_id: row.message_id,
        kind: row.kind,
        data: row.data,
        created_at: row.created_at,
    })
}

async fn after_id(
    pool: &PgPool,
    thread: &ThreadId,
    after: i64,
    limit: u32,
) -> Result<Vec<EventRow>, StoreError> {
    Ok(sqlx::query_as!(
        EventRow,
        r#"SELECT id, thread_id AS "thread_id: ThreadId", message_id AS "message_id: MessageId",
                  kind, data AS "data: serde_json::Value",
                  created_at::timestamptz AS "created_at!"
           FROM events WHERE thread_id = $1 AND id > $2
           ORDER BY id LIMIT $3"#,
        thread as &ThreadId,
        after,
        i64::from(limit),
    )
    .fetch_all(pool)
    .await?)
}

async fn last_of(
    pool: &PgPool,
    thread: &ThreadId,
    kinds: &[String],
) -> Result<Option<EventRow>, StoreError> {
    Ok(sqlx::query_as!(
        EventRow,
        r#"SELECT id, thread_id AS "thread_id: ThreadId", message_id AS "message_id: MessageId",
                  kind, data AS "data: serde_json::Value",
                  created_at::timestamptz AS "created_at!"
           FROM events WHERE thread_id = $1 AND kind = ANY($2)
           ORDER BY id DESC LIMIT 1"#,
        thread as &ThreadId,
        kinds,
    )
    .fetch_optional(pool)
    .await?)
}

/// The event log as several daemons share it: where a reader stands, and the notifications that
/// say a new event was stored.
#[derive(Clone, Debug)]
pub struct SharedEvents {
    pool: PgPool,
}

impl SharedEvents {
    /// The id of the thread's latest stored event, 0 when it has none: a live reader that starts
    /// now starts after it.
    pub async fn last_event_id(&self, thread: &ThreadId) -> Result<i64, StoreError> {
        last_event_id(&self.pool, thread).await
    }

    /// A listener on [`EVENTS_CHANNEL`]; it connects on its first [`EventListener::next`].
    pub fn listener(&self) -> EventListener {
        EventListener {
            pool: self.pool.clone(),
            listener: None,
        }
    }
}

/// What an [`EventListener`] heard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// Some daemon (this one included) stored event `id` of `thread`.
    Event { thread: ThreadId, id: i64 },
    /// The listener (re)connected: notifications sent while it was not listening are lost, so
    /// anything may have happened to any thread.
    Connected,
}

/// Notifications of stored events, from one dedicated PostgreSQL connection.
pub struct EventListener {
    pool: PgPool,
    /// `None` before the first connection and after one was lost.
    listener: Option<PgListener>,
}

impl EventListener {
    /// The next wake-up; `Ok(None)` once the pool is closed (the daemon is stopping). After an
    /// error the caller backs off and calls again, which reconnects.
    pub async fn next(&mut self) -> Result<Option<Wakeup>, StoreError> {
        let listener = match &mut self.listener {
            Some(listener) => listener,
            None => {
                if self.pool.is_closed() {
                    return Ok(None);
                }
                let mut listener = PgListener::connect_with(&self.pool).await?;
                listener.listen(EVENTS_CHANNEL).await?;
                self.listener = Some(listener);
                return Ok(Some(Wakeup::Connected));
            }
        };
        match listener.try_recv().await {
            Ok(Some(notification)) => match parse_payload(notification.payload()) {
                Some((thread, id)) => Ok(Some(Wakeup::Event { thread, id })),
                // Not ours to read; treat it as "something happened".
                None => Ok(Some(Wakeup::Connected)),
            },
            // The connection was lost; the next call connects again and says so.
            Ok(None) => {
                self.listener = None;
                self.next_after_loss().await
            }
            // The listener holds a pool connection and the pool's close waits for it: let go.
            Err(sqlx::Error::PoolClosed) => {
                self.listener = None;
                Ok(None)
            }
            Err(err) => {
                self.listener = None;
                Err(err.into())
            }
        }
    }

    async fn next_after_loss(&mut self) -> Result<Option<Wakeup>, StoreError> {
        Box::pin(self.next()).await
    }
}

/// `<thread id> <event id>`, as [`append`] writes it.
fn parse_payload(payload: &str) -> Option<(ThreadId, i64)> {
    let (thread, id) = payload.rsplit_once(' ')?;
    Some((ThreadId::from_string(thread.to_owned()), id.parse().ok()?))
}

async fn compacted_through(pool: &PgPool, thread: &ThreadId) -> Result<i64, StoreError> {
    let through = sqlx::query_scalar!(
        "SELECT events_compacted_through FROM threads WHERE id = $1",
        thread as &ThreadId
    )
    .fetch_optional(pool)
    .await?;
    Ok(through.unwrap_or(0))
}

async fn last_event_id(pool: &PgPool, thread: &ThreadId) -> Result<i64, StoreError> {
    let id = sqlx::query_scalar!(
        "SELECT max(id) FROM events WHERE thread_id = $1",
        thread as &ThreadId,
    )
    .fetch_one(pool)
    .await?;
    Ok(id.unwrap_or(0))
}

async fn compactable(pool: &PgPool, older_than: &str) -> Result<Vec<(ThreadId, i64)>, StoreError> {
    let rows = sqlx::query!(
        r#"SELECT o.thread_id AS "thread_id: ThreadId", MAX(o.event_id) AS "cut!"
           FROM turn_outcomes o JOIN threads t ON t.id = o.thread_id
           WHERE o.created_at < $1
           GROUP BY o.thread_id, t.events_compacted_through
           HAVING MAX(o.event_id) > t.events_compacted_through"#,
        older_than,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.thread_id, r.cut)).collect())
}

async fn compact(pool: &PgPool, cuts: &[(ThreadId, i64)]) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    let mut removed = 0;
    for (thread, cut) in cuts {
        removed += compact_one(&mut tx, thread, *cut).await?;
    }
    tx.commit().await?;
    Ok(removed)
}

async fn compact_one(
    conn: &mut PgConnection,
    thread: &ThreadId,
    cut: i64,
) -> Result<u64, StoreError> {
    sqlx::query!(
        "UPDATE threads SET events_compacted_through = $2
         WHERE id = $1 AND events_compacted_through < $2",
        thread as &ThreadId,
        cut,
    )
    .execute(&mut *conn)
    .await?;
    let done = sqlx::query!(
        "DELETE FROM events WHERE thread_id = $1 AND id <= $2",
        thread as &ThreadId,
        cut
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_back() {
        assert_eq!(
            parse_payload("thr_a b 42"),
            Some((ThreadId::from_string("thr_a b".to_owned()), 42))
        );
        assert_eq!(parse_payload("thr_a"), None);
        assert_eq!(parse_payload("thr_a x"), None);
    }
}
