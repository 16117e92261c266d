//! The per-thread event log. Turn events are appended as they happen; SSE sends them live and
//! replays them from a client's `Last-Event-ID` with [`Store::events_after`]. Event ids come from
//! one AUTOINCREMENT sequence, so they only grow, across threads and restarts.

use plugin_contract::ThreadId;

use super::{now_text, parse_json, parse_time, EventRow, MessageId, Store, StoreError};

/// An `events` row as SQLite returns it.
#[derive(sqlx::FromRow)]
struct EventRaw {
    id: i64,
    thread_id: String,
    message_id: Option<String>,
    kind: String,
    data: String,
    created_at: String,
}

impl TryFrom<EventRaw> for EventRow {
    type Error = StoreError;

    fn try_from(raw: EventRaw) -> Result<Self, StoreError> {
        Ok(EventRow {
            data: parse_json("events.data", &raw.data)?,
            created_at: parse_time("events.created_at", &raw.created_at)?,
            id: raw.id,
            thread_id: ThreadId::from_string(raw.thread_id),
            message_id: raw.message_id.map(MessageId::from_string),
            kind: raw.kind,
        })
    }
}

const EVENT_COLUMNS: &str = "id, thread_id, message_id, kind, data, created_at";

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
        // Selecting FROM threads turns an unknown thread into "no row" rather than a foreign key
        // error we would have to recognise.
        let raw: Option<EventRaw> = sqlx::query_as(&format!(
            "INSERT INTO events (thread_id, message_id, kind, data, created_at) \
             SELECT t.id, ?1, ?2, ?3, ?4 FROM threads t WHERE t.id = ?5 \
             RETURNING {EVENT_COLUMNS}"
        ))
        .bind(message.map(MessageId::as_str))
        .bind(kind)
        .bind(data.to_string())
        .bind(now_text())
        .bind(thread.as_str())
        .fetch_optional(&self.pool)
        .await?;
        raw.ok_or_else(|| StoreError::ThreadNotFound(thread.clone()))?
            .try_into()
    }

    /// The thread's events with an id greater than `after`, oldest first, at most `limit` of them.
    /// Pass 0 for the whole log; page by passing the last id seen.
    pub async fn events_after(
        &self,
        thread: &ThreadId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError> {
        let raws: Vec<EventRaw> = sqlx::query_as(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE thread_id = ?1 AND id > ?2 \
             ORDER BY id LIMIT ?3"
        ))
        .bind(thread.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        raws.into_iter().map(EventRow::try_from).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::memory_store;
    use super::super::NewThread;
    use super::*;

    #[tokio::test]
    async fn events_round_trip_with_ascending_ids() {
        let store = memory_store().await;
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

    #[tokio::test]
    async fn events_after_filters_by_thread_and_id_and_limits() {
        let store = memory_store().await;
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

    #[tokio::test]
    async fn event_for_unknown_thread_is_thread_not_found() {
        let store = memory_store().await;
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

    #[tokio::test]
    async fn bad_event_json_is_corrupt() {
        let store = memory_store().await;
        let t = store.create_thread(NewThread::default()).await.unwrap().id;
        let e = store.append_event(&t, None, "x", &json!({})).await.unwrap();
        sqlx::query("UPDATE events SET data = '{not json' WHERE id = ?1")
            .bind(e.id)
            .execute(store.pool())
            .await
            .unwrap();
        assert!(matches!(
            store.events_after(&t, 0, 10).await,
            Err(StoreError::Corrupt(_))
        ));
    }
}
