//! The webhook outbox, deliveries and attempts (`crate::webhooks` works them); the facade of
//! `harness_db::WebhookQueries`.

use plugin_contract::ThreadId;

use super::{
    on_db, AttemptRow, Attempted, Db, DeliveryRow, DeliveryStatus, NewDelivery, Store, StoreError,
    ThreadCallback, WebhookEventRow, WebhookQueries,
};

impl Store {
    /// Gives `thread` its own webhook endpoint, replacing the one it had.
    pub async fn set_thread_callback(
        &self,
        thread: &ThreadId,
        url: &str,
        secret: &str,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("set_thread_callback");
        on_db!(self, db => db.set_thread_callback(thread, url, secret).await)
    }

    /// The thread's own webhook endpoint, if it has one.
    pub async fn thread_callback(
        &self,
        thread: &ThreadId,
    ) -> Result<Option<ThreadCallback>, StoreError> {
        let _timer = self.metrics.time("thread_callback");
        on_db!(self, db => db.thread_callback(thread).await)
    }

    /// Webhook events no node fanned out yet, oldest first.
    pub async fn waiting_webhook_events(
        &self,
        limit: u32,
    ) -> Result<Vec<WebhookEventRow>, StoreError> {
        let _timer = self.metrics.time("waiting_webhook_events");
        on_db!(self, db => db.waiting_webhook_events(limit).await)
    }

    /// Fans `event` out into a delivery per target, once across nodes: false when another did.
    pub async fn fan_out(
        &self,
        event: i64,
        targets: &[NewDelivery<'_>],
    ) -> Result<bool, StoreError> {
        let _timer = self.metrics.time("fan_out");
        on_db!(self, db => db.fan_out(event, targets).await)
    }

    /// Claims due deliveries for `node` until `until` (times as stored).
    pub async fn claim_deliveries(
        &self,
        node: &str,
        now: &str,
        until: &str,
        limit: u32,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let _timer = self.metrics.time("claim_deliveries");
        on_db!(self, db => db.claim_deliveries(node, now, until, limit).await)
    }

    /// Stores an attempt and what becomes of its delivery; releases the claim.
    pub async fn record_attempt(
        &self,
        delivery: &str,
        node: &str,
        attempted: Attempted<'_>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("record_attempt");
        on_db!(self, db => db.record_attempt(delivery, node, attempted).await)
    }

    /// Deliveries, newest first, of `status` when set, before `before` (`(created_at as
    /// stored, id)`: a page's last) when set.
    pub async fn list_deliveries(
        &self,
        status: Option<DeliveryStatus>,
        limit: u32,
        before: Option<(&str, &str)>,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let _timer = self.metrics.time("list_deliveries");
        on_db!(self, db => db.list_deliveries(status, limit, before).await)
    }

    /// The delivery, or `None`.
    pub async fn delivery(&self, id: &str) -> Result<Option<DeliveryRow>, StoreError> {
        let _timer = self.metrics.time("delivery");
        on_db!(self, db => db.delivery(id).await)
    }

    /// The delivery's attempts, oldest first.
    pub async fn delivery_attempts(&self, id: &str) -> Result<Vec<AttemptRow>, StoreError> {
        let _timer = self.metrics.time("delivery_attempts");
        on_db!(self, db => db.delivery_attempts(id).await)
    }

    /// Sends the delivery again: `pending`, due now, attempts from zero. `None` when unknown.
    pub async fn redeliver(&self, id: &str) -> Result<Option<DeliveryRow>, StoreError> {
        let _timer = self.metrics.time("redeliver");
        on_db!(self, db => db.redeliver(id).await)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use super::super::*;

    store_tests! {
        /// A turn's end writes its webhook event with it; the event fans out once however many
        /// nodes try; two nodes claiming at once never take the same delivery; an attempt
        /// releases the claim, a failed one makes it due again, a delivered one is done; a
        /// redelivery starts over.
        async fn the_outbox_fans_out_once_and_each_delivery_has_one_sender(store: sqlite_memory) {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let Inserted::New(question) = store
                .insert_user_message(
                    NewUserMessage {
                        thread_id: t.clone(),
                        content: "hi".into(),
                        client_message_id: None,
                        model: None,
                        origin: Origin::User,
                        caller: None,
                    },
                    None,
                )
                .await
                .unwrap()
            else {
                panic!("a new message");
            };
            let ending = Ending::failed(EndCause::Error, "boom");
            let announcement = Announcement {
                kind: "turn_failed",
                data: serde_json::json!({}),
                reply_key: None,
                webhooks: vec![WebhookDraft {
                    kind: "turn.failed",
                    data: serde_json::json!({"messageId": question.id}),
                }],
            };
            store.end_turn(question.turn_key(), ending, None, &announcement).await.unwrap().unwrap();

            let waiting = store.waiting_webhook_events(10).await.unwrap();
            assert_eq!(waiting.len(), 1);
            assert_eq!(waiting[0].kind, "turn.failed");
            assert_eq!(waiting[0].data["messageId"], question.id.as_str());
            let targets = [
                NewDelivery { endpoint: "a", url: "http://a/" },
                NewDelivery { endpoint: "b", url: "http://b/" },
            ];
            assert!(store.fan_out(waiting[0].id, &targets).await.unwrap());
            assert!(!store.fan_out(waiting[0].id, &targets).await.unwrap(), "once");
            assert!(store.waiting_webhook_events(10).await.unwrap().is_empty());

            let now = now_text();
            let until = "9999-01-01T00:00:00.000000Z";
            let (x, y) = tokio::join!(
                store.claim_deliveries("node_x", &now, until, 10),
                store.claim_deliveries("node_y", &now, until, 10),
            );
            let (x, y) = (x.unwrap(), y.unwrap());
            assert_eq!(x.len() + y.len(), 2, "{x:?} {y:?}");
            let mut ids: Vec<&str> = x.iter().chain(&y).map(|d| d.id.as_str()).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), 2, "each delivery claimed by one node");
            assert!(store.claim_deliveries("node_z", &now, until, 10).await.unwrap().is_empty());

            let first = x.first().or(y.first()).unwrap().id.clone();
            let failed = Attempted {
                status_code: Some(500),
                error: Some("HTTP 500"),
                ms: 3,
                then: DeliveryStatus::Pending,
                retry_at: &now,
            };
            store.record_attempt(&first, "node_x", failed).await.unwrap();
            let again = store.claim_deliveries("node_z", &now_text(), until, 10).await.unwrap();
            assert_eq!(again.len(), 1, "due again, and no longer claimed");
            assert_eq!((again[0].id.as_str(), again[0].attempts), (first.as_str(), 1));
            let delivered = Attempted {
                status_code: Some(204),
                error: None,
                then: DeliveryStatus::Delivered,
                ..failed
            };
            store.record_attempt(&first, "node_z", delivered).await.unwrap();
            let row = store.delivery(&first).await.unwrap().unwrap();
            assert_eq!((row.status, row.attempts), (DeliveryStatus::Delivered, 2));
            let attempts = store.delivery_attempts(&first).await.unwrap();
            let seen: Vec<_> = attempts.iter().map(|a| (a.node.as_str(), a.status_code)).collect();
            assert_eq!(seen, [("node_x", Some(500)), ("node_z", Some(204))]);
            let listed = store.list_deliveries(Some(DeliveryStatus::Delivered), 10, None).await.unwrap();
            assert_eq!(listed.len(), 1);

            let redone = store.redeliver(&first).await.unwrap().unwrap();
            assert_eq!((redone.status, redone.attempts), (DeliveryStatus::Pending, 0));
            assert!(store.redeliver("msg_nope").await.unwrap().is_none());
        }
    }
}
