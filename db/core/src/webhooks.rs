//! The operations on the webhook tables: the outbox (`webhook_events`, written with what it
//! announces; see [`crate::Announcement::webhooks`]), its fan-out into one delivery per endpoint,
//! the claims that let one node at a time send a delivery, and every attempt.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;
use serde::{Deserialize, Serialize};

use crate::StoreError;

/// Where a delivery is.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// To be sent (again) at `next_attempt_at`.
    Pending,
    /// The endpoint answered 2xx.
    Delivered,
    /// Every attempt failed; `POST …/redeliver` sends it again.
    Dead,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Dead => "dead",
        }
    }
}

/// A webhook event waiting to be fanned out.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookEventRow {
    pub id: i64,
    /// `turn.finished`, `turn.failed`, …
    pub kind: String,
    pub thread_id: ThreadId,
    pub data: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

/// A new delivery's id (`msg_` + 32 hex digits): the `webhook-id` its receiver sees.
pub fn new_delivery_id() -> String {
    format!("msg_{}", uuid::Uuid::new_v4().simple())
}

/// One endpoint an event goes to ([`WebhookQueries::fan_out`]).
#[derive(Clone, Copy, Debug)]
pub struct NewDelivery<'a> {
    /// The endpoint's name, unique per event (its URL for a configured one).
    pub endpoint: &'a str,
    pub url: &'a str,
}

/// A delivery as stored (`webhook_deliveries`).
#[derive(Clone, Debug, PartialEq)]
pub struct DeliveryRow {
    /// `msg_…`: the `webhook-id` of every attempt.
    pub id: String,
    pub event_id: i64,
    pub endpoint: String,
    pub url: String,
    pub kind: String,
    pub thread_id: ThreadId,
    pub data: serde_json::Value,
    pub status: DeliveryStatus,
    pub attempts: i64,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One attempt as stored (`webhook_attempts`).
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptRow {
    pub delivery_id: String,
    /// The node that sent it.
    pub node: String,
    /// The endpoint's HTTP status, when it answered.
    pub status_code: Option<i64>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    pub ms: i64,
    pub at: DateTime<Utc>,
}

/// How an attempt went, and what becomes of its delivery ([`WebhookQueries::record_attempt`]).
#[derive(Clone, Copy, Debug)]
pub struct Attempted<'a> {
    pub status_code: Option<i64>,
    pub error: Option<&'a str>,
    pub ms: i64,
    /// `Pending` (with `retry_at`), `Delivered` or `Dead`.
    pub then: DeliveryStatus,
    /// When to try again, for `Pending` (a [`crate::now_text`]-style time).
    pub retry_at: &'a str,
}

#[allow(async_fn_in_trait)]
pub trait WebhookQueries {
    /// Webhook events no node fanned out yet, oldest first, at most `limit`.
    async fn waiting_webhook_events(&self, limit: u32) -> Result<Vec<WebhookEventRow>, StoreError>;

    /// Fans `event` out into a `pending` delivery per target, due now, in one transaction with
    /// marking it done: false (nothing written) when another node did it first.
    async fn fan_out(&self, event: i64, targets: &[NewDelivery<'_>]) -> Result<bool, StoreError>;

    /// Claims for `node`, until `until`, up to `limit` `pending` deliveries due at `now` that no
    /// live claim holds, oldest due first: of two nodes claiming at once, each delivery goes to
    /// one.
    async fn claim_deliveries(
        &self,
        node: &str,
        now: &str,
        until: &str,
        limit: u32,
    ) -> Result<Vec<DeliveryRow>, StoreError>;

    /// Stores an attempt at `delivery` by `node` and the delivery's new state, and releases
    /// `node`'s claim, in one transaction.
    async fn record_attempt(
        &self,
        delivery: &str,
        node: &str,
        attempted: Attempted<'_>,
    ) -> Result<(), StoreError>;

    /// Deliveries, newest first, of `status` when set, before `before` (`(created_at as
    /// stored, id)`) when set, at most `limit`.
    async fn list_deliveries(
        &self,
        status: Option<DeliveryStatus>,
        limit: u32,
        before: Option<(&str, &str)>,
    ) -> Result<Vec<DeliveryRow>, StoreError>;

    /// The delivery, or `None`.
    async fn delivery(&self, id: &str) -> Result<Option<DeliveryRow>, StoreError>;

    /// The delivery's attempts, oldest first.
    async fn delivery_attempts(&self, id: &str) -> Result<Vec<AttemptRow>, StoreError>;

    /// Puts the delivery back to `pending`, due now, its attempts counted from zero again; the
    /// delivery, or `None` when there is none.
    async fn redeliver(&self, id: &str) -> Result<Option<DeliveryRow>, StoreError>;

    /// Gives `thread` its own endpoint: when it is made, or again (an A2A push config), replacing
    /// the one it had.
    async fn set_thread_callback(
        &self,
        thread: &ThreadId,
        url: &str,
        secret: &str,
    ) -> Result<(), StoreError>;

    /// The thread's own endpoint, if it has one.
    async fn thread_callback(
        &self,
        thread: &ThreadId,
    ) -> Result<Option<ThreadCallback>, StoreError>;
}

/// A thread's own webhook endpoint (`thread_callbacks`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadCallback {
    pub url: String,
    /// `whsec_…`: what its deliveries are signed with.
    pub secret: String,
}

/// `webhook_queries!(Backend)`: the [`WebhookQueries`] of a database crate's `Backend`, calling
/// the functions of the same names in the invoking module.
#[macro_export]
macro_rules! webhook_queries {
    ($backend:ty) => {
        impl $crate::WebhookQueries for $backend {
            async fn waiting_webhook_events(
                &self,
                limit: u32,
            ) -> Result<Vec<WebhookEventRow>, StoreError> {
                waiting_webhook_events(self.pool(), limit).await
            }

            async fn fan_out(
                &self,
                event: i64,
                targets: &[NewDelivery<'_>],
            ) -> Result<bool, StoreError> {
                fan_out(self.pool(), event, targets).await
            }

            async fn claim_deliveries(
                &self,
                node: &str,
                now: &str,
                until: &str,
                limit: u32,
            ) -> Result<Vec<DeliveryRow>, StoreError> {
                claim_deliveries(self.pool(), node, now, until, limit).await
            }

            async fn record_attempt(
                &self,
                delivery: &str,
                node: &str,
                attempted: Attempted<'_>,
            ) -> Result<(), StoreError> {
                record_attempt(self.pool(), delivery, node, attempted).await
            }

            async fn list_deliveries(
                &self,
                status: Option<DeliveryStatus>,
                limit: u32,
                before: Option<(&str, &str)>,
            ) -> Result<Vec<DeliveryRow>, StoreError> {
                list_deliveries(self.pool(), status, limit, before).await
            }

            async fn delivery(&self, id: &str) -> Result<Option<DeliveryRow>, StoreError> {
                delivery(self.pool(), id).await
            }

            async fn delivery_attempts(&self, id: &str) -> Result<Vec<AttemptRow>, StoreError> {
                delivery_attempts(self.pool(), id).await
            }

            async fn set_thread_callback(
                &self,
                thread: &ThreadId,
                url: &str,
                secret: &str,
            ) -> Result<(), StoreError> {
                set_thread_callback(self.pool(), thread, url, secret).await
            }

            async fn thread_callback(
                &self,
                thread: &ThreadId,
            ) -> Result<Option<ThreadCallback>, StoreError> {
                thread_callback(self.pool(), thread).await
            }

            async fn redeliver(&self, id: &str) -> Result<Option<DeliveryRow>, StoreError> {
                redeliver(self.pool(), id).await
            }
        }
    };
}
