//! The per-thread event log. Turn events are appended as they happen; SSE sends them live and
//! replays them from a client's `Last-Event-ID` with [`Store::events_after`]. Event ids come from
//! one AUTOINCREMENT sequence (a BIGSERIAL on PostgreSQL), so they only grow, across threads and
//! restarts.
//!
//! On PostgreSQL several daemons may append to one log, so two more things live here:
//! - **Per-thread commit order.** An append takes a transaction-scoped advisory lock on its
//!   thread before it draws an id, so a thread's events commit in id order: a reader that has
//!   seen a thread's event N never later finds a smaller id of that thread committed.
//!   ([`Store::events_after`] is exact without a look-back window.)
//! - **Wake-ups.** The append also `NOTIFY`s [`EVENTS_CHANNEL`] (payload `<thread id> <event
//!   id>`), in the same transaction, so the notification is delivered only after the row is
//!   visible. [`SharedEvents::listener`] hears them for `events::EventBus`.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;
use sqlx::postgres::PgListener;
use sqlx::PgPool;

use super::{now_text, Db, EventRow, MessageId, Store, StoreError};

/// The PostgreSQL channel appends notify: one notification per stored event.
pub const EVENTS_CHANNEL: &str = "harness_events";

/// An `events` row as sqlx decodes it. The thread id is still text: `plugin-contract` has no sqlx,
/// so it is wrapped here.
struct EventRecord {
    id: i64,
    thread_id: String,
    message_id: Option<MessageId>,
    kind: String,
    data: serde_json::Value,
    created_at: DateTime<Utc>,
}

impl From<EventRecord> for EventRow {
    fn from(row: EventRecord) -> Self {
        EventRow {
            id: row.id,
            thread_id: ThreadId::from_string(row.thread_id),
            message_id: row.message_id,
            kind: row.kind,
            data: row.data,
            created_at: row.created_at,
        }
    }
}

impl Store {
    /// Appends an event to the thread's log and returns it with its id.
    /// [`StoreError::ThreadNotFound`] for an unknown thread; [`StoreError::LeaseLost`] on a node
    /// that does not hold the thread's lease (`leases.rs`).
    pub async fn append_event(
        &self,
        thread: &ThreadId,
        message: Option<&MessageId>,
        kind: &str,
        data: &serde_json::Value,
    ) -> Result<EventRow, StoreError> {
        let _timer = self.metrics.time("append_event");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::append_event(
                    pool,
                    thread,
                    message,
                    kind,
                    data,
                    self.fencing(None),
                )
                .await
            }
        };
        let now = now_text();
        let thread_id = thread.as_str();
        super::leases::check_fence_sqlite_pool(pool, thread_id, self.fencing(None)).await?;
        // Selecting FROM threads turns an unknown thread into "no row" rather than a foreign key
        // error we would have to recognise.
        let row = sqlx::query_as!(
            EventRecord,
            r#"INSERT INTO events (thread_id, message_id, kind, data, created_at)
               SELECT t.id, ?1, ?2, ?3, ?4 FROM threads t WHERE t.id = ?5
               RETURNING id AS "id!", thread_id, message_id AS "message_id: MessageId", kind,
                         data AS "data: serde_json::Value",
                         created_at AS "created_at: DateTime<Utc>""#,
            message,
            kind,
            data,
            now,
            thread_id,
        )
        .fetch_optional(pool)
        .await?;
        row.map(EventRow::from)
            .ok_or_else(|| StoreError::ThreadNotFound(thread.clone()))
    }

    /// The thread's events with an id greater than `after`, oldest first, at most `limit` of them.
    /// Pass 0 for the whole log; page by passing the last id seen.
    pub async fn events_after(
        &self,
        thread: &ThreadId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError> {
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => return postgres::events_after(pool, thread, after, limit).await,
        };
        let thread = thread.as_str();
        let rows = sqlx::query_as!(
            EventRecord,
            r#"SELECT id AS "id!", thread_id, message_id AS "message_id: MessageId", kind,
                      data AS "data: serde_json::Value",
                      created_at AS "created_at: DateTime<Utc>"
               FROM events WHERE thread_id = ?1 AND id > ?2
               ORDER BY id LIMIT ?3"#,
            thread,
            after,
            limit,
        )
        .fetch_all(pool)
        .await?;
        Ok(rows.into_iter().map(EventRow::from).collect())
    }

    /// The log other daemons append to as well: `Some` on PostgreSQL, `None` on SQLite (one
    /// daemon per file, so its own bus sees every event).
    pub fn shared_events(&self) -> Option<SharedEvents> {
        match &self.db {
            Db::Sqlite(_) => None,
            Db::Postgres(pool) => Some(SharedEvents { pool: pool.clone() }),
        }
    }
}

/// The event log as several daemons share it (PostgreSQL): where a reader stands, and the
/// notifications that say a new event was stored.
#[derive(Clone, Debug)]
pub struct SharedEvents {
    pool: PgPool,
}

impl SharedEvents {
    /// The id of the thread's latest stored event, 0 when it has none: a live reader that
    /// starts now starts after it.
    pub async fn last_event_id(&self, thread: &ThreadId) -> Result<i64, StoreError> {
        let id: Option<i64> = sqlx::query_scalar("SELECT max(id) FROM events WHERE thread_id = $1")
            .bind(thread.as_str())
            .fetch_one(&self.pool)
            .await?;
        Ok(id.unwrap_or(0))
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
    /// The next wake-up; `Ok(None)` once the store is closed (the daemon is stopping). After an
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

/// `<thread id> <event id>`, as [`postgres::append_event`] writes it.
fn parse_payload(payload: &str) -> Option<(ThreadId, i64)> {
    let (thread, id) = payload.rsplit_once(' ')?;
    Some((ThreadId::from_string(thread.to_owned()), id.parse().ok()?))
}

/// The same operations on PostgreSQL, in the order of `impl Store` above.
mod postgres {
    use sqlx::postgres::PgRow;
    use sqlx::Row;

    use super::super::pg;
    use super::*;

    /// The first key of the per-thread append locks (`pg_advisory_xact_lock(space, hash)`), so
    /// they cannot meet other advisory locks on the database. "HEVT".
    const EVENT_LOCK_SPACE: i32 = 0x4845_5654;

    fn event(row: &PgRow) -> Result<EventRow, StoreError> {
        Ok(EventRecord {
            id: row.try_get("id")?,
            thread_id: row.try_get("thread_id")?,
            message_id: row.try_get("message_id")?,
            kind: row.try_get("kind")?,
            data: pg::json(row, "data")?,
            created_at: pg::time(row, "created_at")?,
        }
        .into())
    }

    pub(super) async fn append_event(
        pool: &PgPool,
        thread: &ThreadId,
        message: Option<&MessageId>,
        kind: &str,
        data: &serde_json::Value,
        fencing: super::super::leases::Fencing<'_>,
    ) -> Result<EventRow, StoreError> {
        let mut tx = pool.begin().await?;
        // Appends to one thread queue here, so they draw ids and commit in the same order (the
        // lock is held until COMMIT, after the row is visible). Other threads are not held up.
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(EVENT_LOCK_SPACE)
            .bind(thread.as_str())
            .execute(&mut *tx)
            .await?;
        super::super::leases::check_fence_pg(&mut tx, thread.as_str(), fencing).await?;
        // The notification is queued in the transaction and delivered at COMMIT, never before
        // the row can be read.
        let row = sqlx::query(
            "WITH e AS (
                 INSERT INTO events (thread_id, message_id, kind, data, created_at)
                 SELECT t.id, $1, $2, $3, $4 FROM threads t WHERE t.id = $5
                 RETURNING id, thread_id, message_id, kind, data, created_at)
             SELECT e.*, pg_notify($6, e.thread_id || ' ' || e.id) FROM e",
        )
        .bind(message.map(MessageId::as_str))
        .bind(kind)
        .bind(data.to_string())
        .bind(now_text())
        .bind(thread.as_str())
        .bind(EVENTS_CHANNEL)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.map(|row| event(&row))
            .transpose()?
            .ok_or_else(|| StoreError::ThreadNotFound(thread.clone()))
    }

    pub(super) async fn events_after(
        pool: &PgPool,
        thread: &ThreadId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError> {
        sqlx::query(
            "SELECT id, thread_id, message_id, kind, data, created_at
             FROM events WHERE thread_id = $1 AND id > $2
             ORDER BY id LIMIT $3",
        )
        .bind(thread.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?
        .iter()
        .map(event)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::store_tests;
    use super::super::NewThread;
    use super::*;

    store_tests! {
        async fn events_round_trip_with_ascending_ids(store: sqlite_memory) {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let msg = MessageId::from_string("msg_1");

            let first = store
                .append_event(&t, Some(&msg), "text_delta", &json!({"text": "he"}))
                .await
                .unwrap();
            let second = store
                .append_event(&t, None, "done", &json!(null))
                .await
                .unwrap();

            assert!(second.id > first.id);
            assert_eq!(first.thread_id, t);
            assert_eq!(first.message_id.as_ref(), Some(&msg));
            assert_eq!(first.kind, "text_delta");
            assert_eq!(first.data, json!({"text": "he"}));
            assert_eq!(second.message_id, None);
            assert_eq!(second.data, json!(null));

            let all = store.events_after(&t, 0, 100).await.unwrap();
            let got: Vec<(i64, String, serde_json::Value)> =
                all.into_iter().map(|e| (e.id, e.kind, e.data)).collect();
            assert_eq!(
                got,
                [
                    (first.id, "text_delta".to_owned(), json!({"text": "he"})),
                    (second.id, "done".to_owned(), json!(null)),
                ]
            );
            assert_eq!(first.thread_id, t);
            assert_eq!(first.message_id, Some(MessageId::from_string("msg_1")));
        }
    }

    store_tests! {
        async fn events_after_filters_by_thread_and_id_and_limits(store: sqlite_memory) {
            let a = store.create_thread(NewThread::default()).await.unwrap().id;
            let b = store.create_thread(NewThread::default()).await.unwrap().id;

            let mut ids = Vec::new();
            for i in 0..5 {
                ids.push(
                    store
                        .append_event(&a, None, "n", &json!(i))
                        .await
                        .unwrap()
                        .id,
                );
                store
                    .append_event(&b, None, "other", &json!(i))
                    .await
                    .unwrap();
            }

            let after_second: Vec<i64> = store
                .events_after(&a, ids[1], 100)
                .await
                .unwrap()
                .iter()
                .map(|e| e.id)
                .collect();
            assert_eq!(after_second, ids[2..]);

            let limited: Vec<serde_json::Value> = store
                .events_after(&a, 0, 2)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.data)
                .collect();
            assert_eq!(limited, [json!(0), json!(1)]);

            assert!(store
                .events_after(&a, ids[4], 100)
                .await
                .unwrap()
                .is_empty());
            assert!(store.events_after(&a, 0, 0).await.unwrap().is_empty());
            assert!(store
                .events_after(&b, 0, 100)
                .await
                .unwrap()
                .iter()
                .all(|e| e.thread_id == b && e.kind == "other"));
        }
    }

    store_tests! {
        async fn incremental_reads_under_concurrent_appends_miss_nothing(store: sqlite_file) {
            // Writers on several connections append to one thread while a reader follows it
            // with `events_after(last)`, as a live stream does. On PostgreSQL ids are drawn
            // before commit, so without the per-thread append lock a reader could pass an id
            // whose row commits later and never see it.
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let writers: Vec<_> = (0..4)
                .map(|w| {
                    let (store, t) = (store.clone(), t.clone());
                    tokio::spawn(async move {
                        for i in 0..25 {
                            store
                                .append_event(&t, None, "n", &json!([w, i]))
                                .await
                                .unwrap();
                        }
                    })
                })
                .collect();
            let mut followed = Vec::new();
            let mut last = 0;
            loop {
                // Checked before the read, so the read after the last append sees everything.
                let done = writers.iter().all(|w| w.is_finished());
                let rows = store.events_after(&t, last, 7).await.unwrap();
                if done && rows.is_empty() {
                    break;
                }
                for row in rows {
                    last = row.id;
                    followed.push(row.id);
                }
                tokio::task::yield_now().await;
            }
            for writer in writers {
                writer.await.unwrap();
            }
            let all: Vec<i64> = store
                .events_after(&t, 0, 1000)
                .await
                .unwrap()
                .iter()
                .map(|e| e.id)
                .collect();
            assert_eq!(all.len(), 100);
            assert_eq!(followed, all, "an incremental reader saw every event");
        }
    }

    store_tests! {
        async fn shared_events_exist_on_postgres_only(store: sqlite_memory) {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let Some(shared) = store.shared_events() else {
                assert_eq!(store.backend(), "sqlite");
                return;
            };
            assert_eq!(shared.last_event_id(&t).await.unwrap(), 0);
            let mut listener = shared.listener();
            assert_eq!(listener.next().await.unwrap(), Some(Wakeup::Connected));
            let e = store.append_event(&t, None, "x", &json!({})).await.unwrap();
            assert_eq!(shared.last_event_id(&t).await.unwrap(), e.id);
            let heard = tokio::time::timeout(std::time::Duration::from_secs(10), listener.next())
                .await
                .expect("a notification")
                .unwrap();
            assert_eq!(heard, Some(Wakeup::Event { thread: t, id: e.id }));
            // As in the daemon: the listener waits while the store closes, then ends.
            let (_, last) = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                async { tokio::join!(store.close(), listener.next()) },
            )
            .await
            .expect("the store closes and the listener ends within 10 s");
            assert_eq!(last.unwrap(), None);
        }
    }

    #[test]
    fn payloads_parse_back() {
        assert_eq!(
            parse_payload("thr_a b 42"),
            Some((ThreadId::from_string("thr_a b".to_owned()), 42))
        );
        assert_eq!(parse_payload("thr_a"), None);
        assert_eq!(parse_payload("thr_a x"), None);
    }

    store_tests! {
        async fn event_for_unknown_thread_is_thread_not_found(store: sqlite_memory) {
            let unknown = ThreadId::from_string("thr_nope");
            let err = store
                .append_event(&unknown, None, "x", &json!({}))
                .await
                .unwrap_err();
            assert!(
                matches!(err, StoreError::ThreadNotFound(ref id) if *id == unknown),
                "{err:?}"
            );
        }
    }

    store_tests! {
        async fn events_are_stored_as_compact_json_and_fixed_width_times(store: sqlite_memory) {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let data = json!({"text": "a b", "n": [1, 2.5, null]});
            let e = store.append_event(&t, None, "x", &data).await.unwrap();
            let stored_data = store
                .test_text(&format!("SELECT data FROM events WHERE id = {}", e.id))
                .await;
            let stored_at = store
                .test_text(&format!("SELECT created_at FROM events WHERE id = {}", e.id))
                .await;
            assert_eq!(stored_data, data.to_string());
            assert_eq!(
                stored_at,
                e.created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            );
            assert!(stored_at.ends_with('Z'));
        }
    }

    store_tests! {
        async fn bad_event_json_is_corrupt(store: sqlite_memory) {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let e = store.append_event(&t, None, "x", &json!({})).await.unwrap();
            store
                .test_execute(&format!(
                    "UPDATE events SET data = '{{not json' WHERE id = {}",
                    e.id
                ))
                .await;
            assert!(matches!(
                store.events_after(&t, 0, 10).await,
                Err(StoreError::Corrupt(_))
            ));
        }
    }
}
