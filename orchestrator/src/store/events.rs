//! The per-thread event log. Turn events are appended as they happen; SSE sends them live and
//! replays them from a client's `Last-Event-ID` with [`Store::events_after`]. Event ids come from
//! one AUTOINCREMENT sequence (a BIGSERIAL on PostgreSQL), so they only grow, across threads and
//! restarts.
//!
//! On PostgreSQL several daemons may append to one log, so two more things hold there
//! (`harness-db-postgres`, `events.rs`, says how):
//! - **Per-thread commit order.** A thread's events commit in id order: a reader that has seen a
//!   thread's event N never later finds a smaller id of that thread committed.
//!   ([`Store::events_after`] is exact without a look-back window.)
//! - **Wake-ups.** Each append `NOTIFY`s [`EVENTS_CHANNEL`] (payload `<thread id> <event id>`),
//!   delivered only once the row is visible. [`SharedEvents::listener`] hears them for
//!   `events::EventBus`.

use plugin_contract::ThreadId;

pub use harness_db_postgres::{EventListener, SharedEvents, Wakeup, EVENTS_CHANNEL};

use super::{on_db, Db, EventQueries, EventRow, MessageId, Store, StoreError, WebhookDraft};

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
        self.append_announced(thread, message, kind, data, &[])
            .await
    }

    /// [`Store::append_event`], with `webhooks` written in the webhook outbox in the same
    /// transaction.
    pub async fn append_announced(
        &self,
        thread: &ThreadId,
        message: Option<&MessageId>,
        kind: &str,
        data: &serde_json::Value,
        webhooks: &[WebhookDraft],
    ) -> Result<EventRow, StoreError> {
        let _timer = self.metrics.time("append_event");
        let fence = self.fence(thread, None)?;
        on_db!(self, db => db.append_event(fence.as_ref(), thread, message, kind, data, webhooks).await)
    }

    /// The thread's events with an id greater than `after`, oldest first, at most `limit` of them.
    /// Pass 0 for the whole log; page by passing the last id seen.
    pub async fn events_after(
        &self,
        thread: &ThreadId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError> {
        on_db!(self, db => db.events_after(thread, after, limit).await)
    }

    /// The id of the newest event of the thread that retention removed (0: none): a replay that
    /// starts before it has lost events, and says so.
    pub async fn compacted_through(&self, thread: &ThreadId) -> Result<i64, StoreError> {
        on_db!(self, db => db.compacted_through(thread).await)
    }

    /// The id of the thread's newest stored event (0: none yet): where a follow of what comes
    /// next starts (`crate::events::EventBus::follow_from_now`).
    pub async fn last_event_id(&self, thread: &ThreadId) -> Result<i64, StoreError> {
        on_db!(self, db => db.last_event_id(thread).await)
    }

    /// The thread's newest event of one of `kinds`, if any (retention may have removed it).
    pub async fn last_event_of(
        &self,
        thread: &ThreadId,
        kinds: &[&str],
    ) -> Result<Option<EventRow>, StoreError> {
        let kinds: Vec<String> = kinds.iter().map(|kind| (*kind).to_owned()).collect();
        on_db!(self, db => db.last_event_of(thread, &kinds).await)
    }

    /// Compacts the event logs: every thread loses the events of its turns that ended before
    /// `older_than`, a whole turn at a time, `batch` threads per transaction. How many events
    /// went.
    pub async fn compact_events(&self, older_than: &str, batch: usize) -> Result<u64, StoreError> {
        let _timer = self.metrics.time("compact_events");
        let cuts = on_db!(self, db => db.compactable(older_than).await)?;
        let mut removed = 0;
        for chunk in cuts.chunks(batch.max(1)) {
            removed += on_db!(self, db => db.compact_events(chunk).await)?;
        }
        Ok(removed)
    }

    /// Gives the space of removed rows back: see `Sqlite::vacuum` and `Postgres::vacuum`.
    pub async fn vacuum(&self) -> Result<(), StoreError> {
        let _timer = self.metrics.time("vacuum");
        on_db!(self, db => db.vacuum().await)
    }

    /// The bytes the database holds: its pages in use on SQLite, its size on PostgreSQL.
    pub async fn bytes_used(&self) -> Result<u64, StoreError> {
        on_db!(self, db => db.bytes_used().await)
    }

    /// The log other daemons append to as well: `Some` on PostgreSQL, `None` on SQLite (one
    /// daemon per file, so its own bus sees every event).
    pub fn shared_events(&self) -> Option<SharedEvents> {
        match &self.db {
            Db::Sqlite(_) => None,
            Db::Postgres(db) => Some(db.shared_events()),
        }
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

    store_tests! {
        async fn the_last_event_of_some_kinds_is_found(store: sqlite_memory) {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let other = store.create_thread(NewThread::default()).await.unwrap().id;
            assert!(store.last_event_of(&t, &["a", "b"]).await.unwrap().is_none());
            let append = async |thread: &ThreadId, kind: &str| {
                store.append_event(thread, None, kind, &json!({})).await.unwrap().id
            };
            let a = append(&t, "a").await;
            append(&t, "c").await;
            let b = append(&t, "b").await;
            append(&t, "c").await;
            append(&other, "a").await;
            let last = |kinds: &'static [&'static str]| {
                let (store, t) = (store.clone(), t.clone());
                async move { store.last_event_of(&t, kinds).await.unwrap().map(|e| (e.id, e.kind)) }
            };
            assert_eq!(last(&["a", "b"]).await, Some((b, "b".to_owned())));
            assert_eq!(last(&["a"]).await, Some((a, "a".to_owned())));
            assert_eq!(last(&["d"]).await, None);
            assert_eq!(last(&[]).await, None);
        }
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
