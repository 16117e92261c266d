//! Webhook delivery (`events/subscribe`): the daemon POSTs each occurrence to the client's URL
//! through the webhooks' own poster (`Webhooks::post_signed`: signed the Standard Webhooks way,
//! here with the client's secret, on the guarded client: no private targets unless
//! `webhooks.allow_private_targets`, no redirects, `webhooks.timeout`), retried with their
//! backoff (`webhooks.retry_min` doubling to `webhooks.retry_max`), until the subscription's TTL
//! runs out unless the client refreshes it first.
//!
//! - **The client owns the subscription.** A subscription lives in this daemon's memory for its
//!   TTL: the client keeps it alive by sending the same `events/subscribe` again (same caller,
//!   name, arguments and URL: the same `id`), and after a restart that refresh makes it again,
//!   from the cursor the client passes (the `cursor` of the last event it took), so nothing
//!   between is lost. No table holds it: a dead subscription is never retried past its TTL.
//! - **Order, at least once.** A subscription's occurrences go out one at a time, oldest
//!   first; its cursor moves past one only once its receiver answered 2xx, so a failure is
//!   retried (the same body and `webhook-id`, which is the occurrence's `eventId`) before
//!   anything after it. Events skipped (retention removed them first) are announced with a
//!   `{"type": "gap", "cursor"}` body.
//! - **Scoped.** Each read is the subscribing caller's ([`source::read`]): another tenant's
//!   threads are never read for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::model::{Cursor, SubscribeParams, Subscription, UnsubscribeParams};
use super::source::{self, ReadError};
use crate::caller::Caller;
use crate::metrics::ToolMetrics;
use crate::store::Store;
use crate::sync::lock;
use crate::webhooks::{target, Signer, Webhooks};

/// The live webhook subscriptions of this daemon, and their dispatcher. Cheap to clone.
#[derive(Clone)]
pub struct Subscriptions {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// The poster and its settings.
    webhooks: Webhooks,
    metrics: ToolMetrics,
    live: Mutex<HashMap<String, Live>>,
    /// Wakes the dispatcher: a subscription was made, or one has more to send.
    poke: Notify,
}

/// One subscription, as the dispatcher works it.
#[derive(Clone)]
struct Live {
    caller: Caller,
    subscription: Subscription,
    /// Occurrences older than this are not sent (a gap is, in their place).
    max_age_ms: Option<u64>,
    url: String,
    signer: Signer,
    expires: DateTime<Utc>,
    /// Everything up to here was delivered (or announced as a gap).
    cursor: Cursor,
    /// Failed attempts in a row, and when the next may be made.
    attempts: i64,
    next_attempt: DateTime<Utc>,
    /// Bumped by each refresh, so a round's result does not undo one made meanwhile.
    generation: u64,
}

impl Subscriptions {
    pub fn new(store: Store, webhooks: Webhooks, metrics: ToolMetrics) -> Subscriptions {
        Subscriptions {
            inner: Arc::new(Inner {
                webhooks,
                store,
                metrics,
                live: Mutex::default(),
                poke: Notify::new(),
            }),
        }
    }

    /// Makes the subscription, or refreshes it (a new TTL and secret; its cursor stays, so a
    /// refresh loses nothing): `{id, refreshBefore, cursor, truncated}`.
    pub async fn subscribe(
        &self,
        caller: &Caller,
        params: SubscribeParams,
    ) -> Result<Value, ReadError> {
        let inner = &self.inner;
        let allow_private = inner.webhooks.settings().allow_private_targets;
        let url =
            target::check_url_for(&params.url, allow_private, "webhooks.allow_private_targets")
                .map_err(ReadError::Invalid)?;
        if url.scheme() != "https" && !allow_private {
            return Err(ReadError::Invalid(format!(
                "`{}` is not an https URL",
                params.url
            )));
        }
        let signer = Signer::new([params.secret.as_str()])
            .map_err(|err| ReadError::Invalid(format!("`delivery.secret`: {err}")))?;
        let (subscription, max_age_ms) = (params.read.subscription, params.read.max_age_ms);
        // The arguments must name threads the caller may read.
        source::threads(&inner.store, caller, &subscription.filter).await?;
        let id = subscription_id(caller, &subscription, &params.url);
        let expires = Utc::now() + chrono::Duration::milliseconds(ms(params.ttl_ms));
        let existing = lock(&inner.live).get(&id).map(|live| live.cursor);
        let cursor = match (existing, params.read.cursor) {
            (Some(cursor), _) => cursor,
            (None, Some(cursor)) => cursor,
            (None, None) => source::now(&inner.store, caller, &subscription.filter).await?,
        };
        let refreshed = {
            let mut live = lock(&inner.live);
            let generation = live.get(&id).map_or(0, |l| l.generation + 1);
            let cursor = live.get(&id).map_or(cursor, |l| l.cursor);
            live.insert(
                id.clone(),
                Live {
                    caller: caller.clone(),
                    subscription,
                    max_age_ms,
                    url: params.url,
                    signer,
                    expires,
                    cursor,
                    attempts: 0,
                    next_attempt: Utc::now(),
                    generation,
                },
            );
            inner.metrics.event_subscriptions(live.len());
            generation > 0
        };
        info!(subscription = %id, refreshed, "MCP event subscription made.");
        inner.poke.notify_one();
        Ok(json!({
            "id": id,
            "refreshBefore": expires.to_rfc3339_opts(SecondsFormat::Millis, true),
            "cursor": cursor.to_string(),
            "truncated": false,
        }))
    }

    /// Ends the subscription, if it lives: `{}` either way.
    pub fn unsubscribe(&self, caller: &Caller, params: UnsubscribeParams) -> Value {
        let id = subscription_id(caller, &params.subscription, &params.url);
        let mut live = lock(&self.inner.live);
        if live.remove(&id).is_some() {
            info!(subscription = %id, "MCP event subscription ended by its client.");
        }
        self.inner.metrics.event_subscriptions(live.len());
        json!({})
    }

    /// Runs the dispatcher on `tasks` until `stop`.
    pub fn start(&self, tasks: &TaskTracker, stop: CancellationToken) {
        let subscriptions = self.clone();
        tasks.spawn(async move { subscriptions.dispatch(stop).await });
    }

    async fn dispatch(self, stop: CancellationToken) {
        let inner = &self.inner;
        loop {
            let more = self.round().await;
            if more {
                continue;
            }
            tokio::select! {
                () = inner.poke.notified() => {}
                () = tokio::time::sleep(inner.webhooks.settings().poll) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Ends the expired subscriptions, then works each due one concurrently; whether one has
    /// more to send already.
    async fn round(&self) -> bool {
        let inner = &self.inner;
        let now = Utc::now();
        let due: Vec<(String, Live)> = {
            let mut live = lock(&inner.live);
            let before = live.len();
            live.retain(|id, sub| {
                let alive = sub.expires > now;
                if !alive {
                    info!(subscription = %id, "MCP event subscription expired; not refreshed in time.");
                }
                alive
            });
            for _ in live.len()..before {
                inner.metrics.event_subscription_expired();
            }
            inner.metrics.event_subscriptions(live.len());
            live.iter()
                .filter(|(_, sub)| sub.next_attempt <= now)
                .map(|(id, sub)| (id.clone(), sub.clone()))
                .collect()
        };
        let mut working = tokio::task::JoinSet::new();
        for (id, sub) in due {
            let this = self.clone();
            working.spawn(async move { this.work(id, sub).await });
        }
        let mut more = false;
        while let Some(done) = working.join_next().await {
            more |= done.unwrap_or(false);
        }
        more
    }

    /// Sends what is new for one subscription, in order, until one attempt fails; stores how
    /// far it got. Whether it has more to send already.
    async fn work(&self, id: String, mut sub: Live) -> bool {
        let inner = &self.inner;
        let read = super::model::ReadParams {
            subscription: sub.subscription.clone(),
            cursor: Some(sub.cursor),
            max_events: super::model::DEFAULT_MAX_EVENTS,
            max_age_ms: sub.max_age_ms,
        };
        let batch = match source::read(&inner.store, &sub.caller, &read, sub.cursor).await {
            Ok(batch) => batch,
            // Its thread went (deleted): nothing to send until it expires.
            Err(ReadError::Invalid(problem)) => {
                debug!(subscription = %id, %problem, "An MCP event subscription reads nothing.");
                return false;
            }
            Err(err) => {
                warn!(subscription = %id, error = %err, "Could not read events for an MCP event subscription.");
                return false;
            }
        };
        let end = batch.cursor.unwrap_or(sub.cursor);
        let mut failed = false;
        if batch.truncated {
            let gap = json!({"type": "gap", "cursor": end.to_string()});
            failed = !self.post(&id, &sub, &format!("gap:{end}"), &gap).await;
        }
        for occurrence in &batch.occurrences {
            if failed {
                break;
            }
            let sent = self
                .post(&id, &sub, &occurrence.event_id(), &occurrence.to_json())
                .await;
            match sent {
                true => sub.cursor = Cursor(occurrence.row),
                false => failed = true,
            }
        }
        if failed {
            sub.attempts += 1;
            let wait = crate::webhooks::backoff(inner.webhooks.settings(), sub.attempts);
            sub.next_attempt =
                Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::zero());
        } else {
            sub.cursor = end;
            sub.attempts = 0;
        }
        let mut live = lock(&inner.live);
        match live.get_mut(&id) {
            Some(now) if now.generation == sub.generation => {
                now.cursor = sub.cursor;
                now.attempts = sub.attempts;
                now.next_attempt = sub.next_attempt;
            }
            Some(now) => now.cursor = now.cursor.max(sub.cursor),
            None => {}
        }
        !failed && batch.has_more
    }

    /// One signed POST of `body`; whether its receiver took it (2xx).
    async fn post(&self, id: &str, sub: &Live, message: &str, body: &Value) -> bool {
        let sent = self
            .inner
            .webhooks
            .post_signed(&sub.url, &sub.signer, message, body.to_string(), &[])
            .await;
        debug!(subscription = %id, message, ?sent, "MCP event delivery attempt.");
        matches!(sent, Ok(code) if (200..300).contains(&code))
    }
}

/// The subscription's id: one per caller, event type, arguments and URL, so a refresh (the same
/// request again) names the same subscription, after a restart too.
fn subscription_id(caller: &Caller, subscription: &Subscription, url: &str) -> String {
    let mut hash = Sha256::new();
    for part in [
        caller.subject.as_str(),
        caller.tenant.as_deref().unwrap_or(""),
        subscription.name.as_str(),
        &subscription.arguments.to_string(),
        url,
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest = crate::secret::hex(&hash.finalize());
    format!("sub_{}", &digest[..32])
}

fn ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}
