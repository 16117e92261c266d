//! The per-thread event log. Turn events are appended as they happen; SSE sends them live and
//! replays them from a client's `Last-Event-ID` with [`Store::events_after`]. Event ids come from
//! one AUTOINCREMENT sequence (a BIGSERIAL on PostgreSQL), so they only grow, across threads and
//! restarts.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;

use super::{now_text, Db, EventRow, MessageId, Store, StoreError};

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
    /// [`StoreError::ThreadNotFound`] for an unknown thread.
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
                return postgres::append_event(pool, thread, message, kind, data).await
            }
        };
        let now = now_text();
        let thread_id = thread.as_str();
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
}

/// The same operations on PostgreSQL, in the order of `impl Store` above.
mod postgres {
    use sqlx::postgres::PgRow;
    use sqlx::{PgPool, Row};

    use super::super::pg;
    use super::*;

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
    ) -> Result<EventRow, StoreError> {
        let row = sqlx::query(
            "INSERT INTO events (thread_id, message_id, kind, data, created_at)
             SELECT t.id, $1, $2, $3, $4 FROM threads t WHERE t.id = $5
             RETURNING id, thread_id, message_id, kind, data, created_at",
        )
        .bind(message.map(MessageId::as_str))
        .bind(kind)
        .bind(data.to_string())
        .bind(now_text())
        .bind(thread.as_str())
        .fetch_optional(pool)
        .await?;
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

            let json = serde_json::to_value(&first).unwrap();
            assert_eq!(json["threadId"], t.as_str());
            assert_eq!(json["messageId"], "msg_1");
            assert_eq!(json["data"]["text"], "he");
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
