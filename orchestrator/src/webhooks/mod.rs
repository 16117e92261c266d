//! Webhooks: the daemon tells services what happened, so none has to hold a request or a
//! stream open per turn. Standard Webhooks format (`sign.rs`), thin payloads (the type, ids and
//! status: the receiver fetches the object), one type per `crate::api::events::WebhookEvent`
//! variant, documented from it.
//!
//! - **The outbox.** What a webhook announces is written in the transaction that makes it so:
//!   a turn's end (`crate::events`, `harness_db::OutcomeQueries`) writes its `turn.finished` or
//!   `turn.failed` (and a refusal's `budget.reached`) into `webhook_events` with the outcome,
//!   when an endpoint wants that type. Nothing is sent for what did not happen, and nothing
//!   that happened is lost to a crash.
//! - **Fan-out.** A node turns each outbox row, once, into a delivery per endpoint that wants
//!   its type (`webhook_deliveries`; the delivery's id is the `webhook-id` of every attempt).
//! - **Delivery.** At least once: a node claims due deliveries for a while (a claim a dead node
//!   left runs out, and another node takes the delivery), sends each, and stores the attempt.
//!   A failure (no 2xx, a timeout, a refused target) waits `retry_min` doubled per attempt
//!   (with jitter, up to `retry_max`); after `max_attempts` the delivery is dead until
//!   `POST /api/webhooks/deliveries/{id}/redeliver`. On a cluster each delivery is sent by one
//!   node at a time; every node works the outbox, so a restart or a takeover loses nothing.
//! - **Targets** (`target.rs`): no private addresses unless allowed, no redirects, a timeout.
//! - **A2A push notifications** (`a2a.rs`): a thread's own endpoint that an A2A caller
//!   registered gets the task's status updates in A2A's shape, through all of the above.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use rand::Rng;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::api::events::WebhookKind;
use crate::config::WebhooksConfig;
use crate::store::{
    expiry_text, now_text, Attempted, DeliveryRow, DeliveryStatus, NewDelivery, Store, StoreError,
};

mod a2a;
mod sign;
pub mod target;

pub use a2a::callback_secret as a2a_callback_secret;
pub use sign::Signer;

/// Deliveries a node claims at once.
const CLAIM_BATCH: u32 = 32;

/// One configured endpoint, checked.
#[derive(Clone, Debug)]
struct Endpoint {
    url: String,
    signer: Signer,
    /// Empty: every type.
    events: Vec<String>,
    /// An A2A caller's endpoint (a thread's own): its bodies are A2A's.
    a2a: Option<a2a::Push>,
}

impl Endpoint {
    fn wants(&self, kind: &str) -> bool {
        self.events.is_empty() || self.events.iter().any(|e| e == kind)
    }
}

/// The webhook endpoints and their dispatcher. Cheap to clone.
#[derive(Clone)]
pub struct Webhooks {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: BTreeMap<String, Endpoint>,
    settings: WebhooksConfig,
    store: Store,
    /// Who stores an attempt: the cluster node, or `local`.
    node: String,
    http: reqwest::Client,
    /// Wakes the dispatcher: something was written to the outbox here.
    poke: Notify,
}

impl Webhooks {
    /// The endpoints of `config`, checked: a bad URL, a private target while those are refused,
    /// a bad secret or an unknown event type stops start-up with a message naming it.
    pub fn new(config: &WebhooksConfig, store: Store, node: &str) -> Result<Webhooks, String> {
        let mut endpoints = BTreeMap::new();
        for (i, endpoint) in config.endpoints.iter().enumerate() {
            let at = format!("webhooks.endpoints[{i}]");
            target::check_url(&endpoint.url, config.allow_private_targets)
                .map_err(|err| format!("{at}.url: {err}"))?;
            let signer = Signer::new(endpoint.keys()).map_err(|err| format!("{at}: {err}"))?;
            if let Some(unknown) = endpoint
                .events
                .iter()
                .find(|e| WebhookKind::parse(e).is_none())
            {
                let known: Vec<&str> = WebhookKind::ALL.iter().map(|k| k.as_str()).collect();
                return Err(format!(
                    "{at}.events: unknown event type `{unknown}` (known: {})",
                    known.join(", ")
                ));
            }
            let previous = endpoints.insert(
                endpoint.url.clone(),
                Endpoint {
                    url: endpoint.url.clone(),
                    signer,
                    events: endpoint.events.clone(),
                    a2a: None,
                },
            );
            if previous.is_some() {
                return Err(format!("{at}.url: `{}` is listed twice", endpoint.url));
            }
        }
        if config.max_attempts == 0 {
            return Err("webhooks.max_attempts must be at least 1".into());
        }
        Ok(Webhooks {
            inner: Arc::new(Inner {
                endpoints,
                http: target::client(config.allow_private_targets, config.timeout),
                settings: config.clone(),
                store,
                node: node.to_owned(),
                poke: Notify::new(),
            }),
        })
    }

    /// Whether some endpoint wants events of `kind`: only then does a turn's end write one.
    pub fn wants(&self, kind: &str) -> bool {
        self.inner.endpoints.values().any(|e| e.wants(kind))
    }

    /// Something was written to the outbox: the dispatcher looks now rather than at its next
    /// poll.
    pub fn poke(&self) {
        self.inner.poke.notify_one();
    }

    /// Checks a thread's own endpoint (`callbackUrl`) as a configured one is checked.
    pub fn check_callback(&self, url: &str) -> Result<(), String> {
        target::check_url(url, self.inner.settings.allow_private_targets).map(|_| ())
    }

    /// Runs the dispatcher on `tasks` until `stop` (threads may have endpoints of their own,
    /// so it runs even when none is configured).
    pub fn start(&self, tasks: &TaskTracker, stop: CancellationToken) {
        let webhooks = self.clone();
        tasks.spawn(async move { webhooks.dispatch(stop).await });
    }

    async fn dispatch(self, stop: CancellationToken) {
        let inner = &self.inner;
        loop {
            if let Err(err) = self.work().await {
                warn!(error = %err, "Webhook dispatch failed; trying again.");
            }
            tokio::select! {
                () = inner.poke.notified() => {}
                () = tokio::time::sleep(inner.settings.poll) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Fans out what waits in the outbox, then sends every delivery that is due.
    async fn work(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        loop {
            let waiting = inner.store.waiting_webhook_events(CLAIM_BATCH).await?;
            for event in &waiting {
                let mut targets: Vec<NewDelivery<'_>> = inner
                    .endpoints
                    .values()
                    .filter(|e| e.wants(&event.kind))
                    .map(|e| NewDelivery {
                        endpoint: &e.url,
                        url: &e.url,
                    })
                    .collect();
                let callback = inner.store.thread_callback(&event.thread_id).await?;
                let own = callback_endpoint(&event.thread_id);
                // An A2A caller's endpoint hears only what changes a task's state.
                let heard = callback.as_ref().is_some_and(|callback| {
                    a2a::parse(&callback.secret).is_none()
                        || a2a::KINDS.contains(&event.kind.as_str())
                });
                if let (Some(callback), true) = (&callback, heard) {
                    targets.push(NewDelivery {
                        endpoint: &own,
                        url: &callback.url,
                    });
                }
                inner.store.fan_out(event.id, &targets).await?;
            }
            if waiting.len() < CLAIM_BATCH as usize {
                break;
            }
        }
        loop {
            // A claim outlives the attempts it covers; one a dead node left runs out.
            let until = expiry_text(inner.settings.timeout * 3);
            let due = inner
                .store
                .claim_deliveries(&inner.node, &now_text(), &until, CLAIM_BATCH)
                .await?;
            let full = due.len() == CLAIM_BATCH as usize;
            let mut sending = tokio::task::JoinSet::new();
            for delivery in due {
                let webhooks = self.clone();
                sending.spawn(async move { webhooks.send(delivery).await });
            }
            while let Some(sent) = sending.join_next().await {
                if let Ok(Err(err)) = sent {
                    warn!(error = %err, "Could not record a webhook attempt.");
                }
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// One attempt at `delivery`, stored with what becomes of it.
    async fn send(&self, delivery: DeliveryRow) -> Result<(), StoreError> {
        let inner = &self.inner;
        let started = Instant::now();
        let result = match self.endpoint_of(&delivery).await? {
            Some(endpoint) => self.post(&endpoint, &delivery).await,
            None => Err("the endpoint is no longer configured".to_owned()),
        };
        let ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let attempts = delivery.attempts + 1;
        let (status_code, error) = match &result {
            Ok(code) if (200..300).contains(code) => (Some(i64::from(*code)), None),
            Ok(code) => (Some(i64::from(*code)), Some(format!("HTTP {code}"))),
            Err(err) => (None, Some(err.clone())),
        };
        let then = match (&error, attempts >= i64::from(inner.settings.max_attempts)) {
            (None, _) => DeliveryStatus::Delivered,
            (Some(_), true) => DeliveryStatus::Dead,
            (Some(_), false) => DeliveryStatus::Pending,
        };
        let retry_at = expiry_text(backoff(&inner.settings, attempts));
        debug!(delivery = %delivery.id, kind = %delivery.kind, attempts, ?then, error = error.as_deref().unwrap_or(""), "Webhook attempt.");
        if then == DeliveryStatus::Dead {
            warn!(delivery = %delivery.id, url = %delivery.url, attempts, "A webhook delivery failed every attempt; it is dead until redelivered.");
        }
        inner
            .store
            .record_attempt(
                &delivery.id,
                &inner.node,
                Attempted {
                    status_code,
                    error: error.as_deref(),
                    ms,
                    then,
                    retry_at: &retry_at,
                },
            )
            .await
    }

    /// Where `delivery` goes and how it is signed: a configured endpoint, or its thread's own.
    async fn endpoint_of(&self, delivery: &DeliveryRow) -> Result<Option<Endpoint>, StoreError> {
        if let Some(endpoint) = self.inner.endpoints.get(&delivery.endpoint) {
            return Ok(Some(endpoint.clone()));
        }
        if delivery.endpoint != callback_endpoint(&delivery.thread_id) {
            return Ok(None);
        }
        let callback = self
            .inner
            .store
            .thread_callback(&delivery.thread_id)
            .await?;
        Ok(callback.and_then(|callback| {
            let (push, secret) = match a2a::parse(&callback.secret) {
                Some((push, key)) => (Some(push), key),
                None => (None, callback.secret.as_str()),
            };
            let signer = Signer::new([secret]).ok()?;
            Some(Endpoint {
                url: callback.url,
                signer,
                events: Vec::new(),
                a2a: push,
            })
        }))
    }

    /// POSTs the delivery's body, signed; the status code, or why there is none.
    async fn post(&self, endpoint: &Endpoint, delivery: &DeliveryRow) -> Result<u16, String> {
        let body = match &endpoint.a2a {
            None => serde_json::json!({
                "type": delivery.kind,
                "timestamp": delivery.created_at,
                "data": delivery.data,
            }),
            Some(push) => {
                let body = self.a2a_body(delivery).await?;
                match push.v03 {
                    true => crate::api::a2a::v03::push(&body),
                    false => body,
                }
            }
        }
        .to_string();
        // An A2A push endpoint reads its token in a header of its own.
        let token = endpoint.a2a.as_ref().and_then(|push| push.token.as_deref());
        let headers: Vec<(&str, &str)> = token
            .map(|token| ("x-a2a-notification-token", token))
            .into_iter()
            .collect();
        let (url, signer) = (&endpoint.url, &endpoint.signer);
        self.post_signed(url, signer, &delivery.id, body, &headers)
            .await
    }

    /// POSTs `body` to `url` as message `id`, signed with `signer`, with `headers` besides, on
    /// the guarded client: the status code, or why there is none. Every webhook goes out here
    /// (the MCP Events extension's and A2A's push notifications too).
    pub async fn post_signed(
        &self,
        url: &str,
        signer: &Signer,
        id: &str,
        body: String,
        headers: &[(&str, &str)],
    ) -> Result<u16, String> {
        let timestamp = Utc::now().timestamp();
        let signature = signer.sign(id, timestamp, &body);
        let mut request = self.inner.http.post(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await
            .map_err(|err| describe(&err))?;
        Ok(response.status().as_u16())
    }

    /// The `[webhooks]` settings: targets, timeouts, retries.
    pub fn settings(&self) -> &WebhooksConfig {
        &self.inner.settings
    }

    /// The A2A status update `delivery` stands for: its task is the user message it names, or
    /// for a permission the message it was asked in.
    async fn a2a_body(&self, delivery: &DeliveryRow) -> Result<serde_json::Value, String> {
        let data = &delivery.data;
        let task = match (data["messageId"].as_str(), data["requestId"].as_str()) {
            (Some(message), _) => Some(message.to_owned()),
            (None, Some(request)) => self
                .inner
                .store
                .permission(&delivery.thread_id, request)
                .await
                .map_err(|err| err.to_string())?
                .and_then(|permission| permission.message_id)
                .map(|message| message.to_string()),
            (None, None) => None,
        };
        let timestamp = delivery
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        a2a::body(&delivery.kind, data, task.as_deref(), &timestamp)
            .ok_or_else(|| format!("{} names no task to report", delivery.kind))
    }
}

/// The endpoint name of a thread's own endpoint, as deliveries record it.
fn callback_endpoint(thread: &plugin_contract::ThreadId) -> String {
    format!("thread:{thread}")
}

/// The wait before attempt `attempts + 1`: `retry_min` × 2^(attempts − 1), at most `retry_max`,
/// then between half and all of it (jitter, so endpoints that come back are not hit at once).
pub(crate) fn backoff(settings: &WebhooksConfig, attempts: i64) -> Duration {
    let exponent = u32::try_from(attempts.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
    let full = settings
        .retry_min
        .saturating_mul(2u32.saturating_pow(exponent))
        .min(settings.retry_max);
    full.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
}

/// An error of a request, with its causes (reqwest's own text omits them).
fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WebhookEndpoint;

    fn endpoint(url: &str, secret: &str, events: &[&str]) -> WebhookEndpoint {
        WebhookEndpoint {
            url: url.into(),
            secret: Some(secret.into()),
            secrets: Vec::new(),
            events: events.iter().map(|e| e.to_string()).collect(),
        }
    }

    /// Start-up refuses an endpoint it could never use, naming which and why (never the secret).
    #[tokio::test]
    async fn bad_endpoints_stop_start_up_and_good_ones_say_what_they_want() {
        let store = Store::open(":memory:").await.unwrap();
        let secret = Signer::generate_secret();
        let with = |endpoints: Vec<WebhookEndpoint>| WebhooksConfig {
            endpoints,
            ..WebhooksConfig::default()
        };
        for (endpoints, why) in [
            (
                vec![endpoint("http://127.0.0.1:9/h", &secret, &[])],
                "endpoints[0].url",
            ),
            (
                vec![endpoint("http://169.254.169.254/", &secret, &[])],
                "private",
            ),
            (
                vec![endpoint("https://example.com/h", "nope", &[])],
                "whsec_",
            ),
            (
                vec![endpoint("https://example.com/h", &secret, &["turn.done"])],
                "turn.done",
            ),
            (
                vec![
                    endpoint("https://example.com/h", &secret, &[]),
                    endpoint("https://example.com/h", &secret, &[]),
                ],
                "twice",
            ),
        ] {
            let err = Webhooks::new(&with(endpoints), store.clone(), "local")
                .err()
                .unwrap();
            assert!(err.contains(why), "{err}");
            assert!(!err.contains(&secret), "{err}");
        }
        let only_failures = endpoint("https://example.com/h", &secret, &["turn.failed"]);
        let hooks = Webhooks::new(&with(vec![only_failures]), store.clone(), "local").unwrap();
        assert!(hooks.wants("turn.failed"));
        assert!(!hooks.wants("turn.finished"));
        let none = Webhooks::new(&WebhooksConfig::default(), store, "local").unwrap();
        assert!(!none.wants("turn.finished"), "no endpoint, no outbox rows");
    }

    #[test]
    fn the_backoff_doubles_with_jitter_up_to_its_cap() {
        let settings = WebhooksConfig {
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(10),
            ..WebhooksConfig::default()
        };
        for (attempts, full) in [
            (1, 1_000),
            (2, 2_000),
            (3, 4_000),
            (4, 8_000),
            (5, 10_000),
            (60, 10_000),
        ] {
            for _ in 0..20 {
                let ms = backoff(&settings, attempts).as_millis();
                assert!(
                    (full / 2..=full).contains(&ms),
                    "attempt {attempts}: {ms} ms"
                );
            }
        }
    }
}
