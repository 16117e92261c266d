//! Several nodes on one PostgreSQL database (issue #14, `docs/scale-out.md`): one owner per
//! thread, recorded in its lease row. Owns the node's identity, the routing decision for a
//! thread ([`Cluster::route`]: serve here, or forward to the owner), the forwarding itself, and
//! the heartbeat that renews this node's leases (and evicts the processes of threads it lost).
//!
//! Placement is "created": a free or expired lease goes to the node the request reached; a held
//! lease never moves while its owner renews it. A forwarded request carries
//! [`FORWARDED_HEADER`] and is never forwarded again: its receiver serves it (owning or taking the
//! lease) or refuses it ([`RouteError::NotOwner`]).
//!
//! A node's id (`node_<uuid>`) is new at each start. The heartbeat runs every TTL / 3. A
//! takeover ([`Cluster::take`]) stores the `turn_failed` of the turns it ended. A forward ends
//! when the owner's lease does (`owner_gone`). Graceful shutdown releases the node's leases, so
//! peers take over at once.
//!
//! Off unless `cluster.advertise` is set; then the server builds one [`Cluster`] and the HTTP
//! layer consults it. Only `server`, `http`, `service`, `schedules` and `redrive` (a thread's
//! lease before its turn) import this module: a turn sees only the [`Fence`] it was handed.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use plugin_contract::ThreadId;

use crate::caller::{Caller, CALLER_HEADER};
use crate::pool::Pool;
use crate::store::{Claim, Fence, Store, StoreError};
use crate::webhooks::Webhooks;

/// Marks a request one node passed to another; its value is the sending node's id.
pub const FORWARDED_HEADER: &str = "x-harness-forwarded";

/// The request headers a forward carries over (besides [`FORWARDED_HEADER`] and the node's own
/// bearer token).
const FORWARDED_HEADERS: [&str; 5] = [
    "content-type",
    "last-event-id",
    "x-request-id",
    "accept",
    "traceparent",
];

/// Where a thread's request is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Here: this node holds the lease; the turn's writes carry the fence.
    Local(Fence),
    /// At the live owner, this URL.
    Forward(String),
}

/// Why a request cannot be routed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A forwarded request reached a node that does not own the thread (the lease moved in
    /// between). The API answers 503 `not_owner`; the client retries.
    #[error("thread {thread} is served by another node; retry")]
    NotOwner { thread: ThreadId },
}

/// Why a forward produced no answer from the owner.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The owner could not be reached at all (the request never left): it is likely dead, and
    /// its lease will expire within a TTL.
    #[error("the owner at {url} cannot be reached: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The owner was reached but the exchange failed half-way: the request may have run there.
    #[error("the owner at {url} failed to answer: {source}")]
    Failed {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The owner stopped renewing its lease while the request was with it (frozen, cut off):
    /// its answer will not come, and the thread is free for another node.
    #[error("the owner at {url} lost the thread's lease before it answered")]
    OwnerLost { url: String },
}

/// A request to pass on to a thread's owner ([`Cluster::forward`]).
pub struct Outgoing<'a> {
    pub method: Method,
    /// The original one (`/api/threads/…`).
    pub path_and_query: &'a str,
    /// Those of [`FORWARDED_HEADERS`] are carried over.
    pub headers: &'a HeaderMap,
    pub body: Bytes,
    /// Who asked: the owner records them, not this node.
    pub caller: &'a Caller,
}

/// An answer from the owner, passed back as it came.
pub struct Forwarded {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
}

/// The node's place in the cluster. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    /// A node's store ([`Store::as_node`]): it holds the node's identity and its leases.
    store: Store,
    node: String,
    url: String,
    ttl: Duration,
    /// Where a lost thread's process is evicted.
    pool: Pool,
    /// Told of the turns a takeover ends.
    webhooks: Webhooks,
    http: reqwest::Client,
    /// Sent to peers as the bearer token (the nodes of a cluster share one).
    token: Option<String>,
}

impl Cluster {
    /// The node over `store`, a node's store ([`Store::as_node`]); `None` for a single node's.
    /// `token`: the API token, which peers require of forwarded requests too.
    pub fn of(
        store: Store,
        pool: Pool,
        webhooks: Webhooks,
        token: Option<String>,
    ) -> Option<Cluster> {
        let node = store.node_id()?.to_owned();
        let (url, ttl) = store.node_settings()?;
        let (url, ttl) = (url.to_owned(), ttl);
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .unwrap_or_default();
        info!(node = %node, advertise = %url, lease_ttl = ?ttl, "Clustering on.");
        Some(Cluster {
            inner: Arc::new(Inner {
                store,
                node,
                url,
                ttl,
                pool,
                webhooks,
                http,
                token: token.filter(|t| !t.is_empty()),
            }),
        })
    }

    /// This node's id (`node_…`), as lease rows name it.
    pub fn node_id(&self) -> &str {
        &self.inner.node
    }

    /// This node's advertised URL.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The lease TTL.
    pub fn lease_ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// Takes (or keeps) the thread's lease when it is free, expired or ours: the fence its
    /// writes carry. `None` while a live peer holds it. A lease this node held and finds gone
    /// has its process evicted.
    pub async fn take(&self, thread: &ThreadId) -> Result<Option<Fence>, StoreError> {
        let webhooks = &self.inner.webhooks;
        match crate::events::claim_lease(&self.inner.store, Some(webhooks), thread).await? {
            Claim::Held {
                fence,
                interrupted,
                moved,
            } => {
                if moved {
                    // Held, lost and taken back before the heartbeat noticed: the process here
                    // has not seen what the peer did.
                    self.lost(thread).await;
                }
                // The turns that died with the old owner ended with the lease, each with its
                // outcome and `turn_failed`, which every node's bus publishes from the store.
                if !interrupted.is_empty() {
                    webhooks.poke();
                    debug!(thread_id = %thread, turns = interrupted.len(), "Ended the turns the old owner left.");
                }
                Ok(Some(fence))
            }
            Claim::Elsewhere { lost } => {
                if lost {
                    self.lost(thread).await;
                }
                Ok(None)
            }
            // `Cluster::of` takes only a node's store.
            Claim::Unclustered => Err(StoreError::LeaseLost(thread.clone())),
        }
    }

    /// Where a request for `thread` is served. `forwarded`: it came from a peer, so it is never
    /// passed on again.
    pub async fn route(&self, thread: &ThreadId, forwarded: bool) -> Result<Route, RouteError> {
        // Twice: a lease that expires between the attempt and the look-up is taken the second time.
        for _ in 0..2 {
            if let Some(fence) = self.take(thread).await? {
                return Ok(Route::Local(fence));
            }
            if forwarded {
                return Err(RouteError::NotOwner {
                    thread: thread.clone(),
                });
            }
            let now = chrono::Utc::now();
            if let Some(lease) = self.inner.store.lease(thread).await? {
                if lease.is_live(now) && lease.owner != self.inner.node {
                    return Ok(Route::Forward(lease.owner_url));
                }
            }
        }
        Err(RouteError::NotOwner {
            thread: thread.clone(),
        })
    }

    /// For a request whose owner cannot be reached: waits (polling a tenth of the TTL at a time,
    /// at most one TTL and a bit) until the owner's lease expires and this node takes it.
    pub async fn take_when_expired(&self, thread: &ThreadId) -> Result<Route, RouteError> {
        let deadline = tokio::time::Instant::now() + self.inner.ttl + self.inner.ttl / 2;
        let step = (self.inner.ttl / 10).max(Duration::from_millis(50));
        loop {
            if let Some(fence) = self.take(thread).await? {
                return Ok(Route::Local(fence));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RouteError::NotOwner {
                    thread: thread.clone(),
                });
            }
            tokio::time::sleep(step).await;
        }
    }

    /// Sends `thread`'s request to the owner at `base` (its advertised URL), marked as
    /// forwarded and carrying `caller` (signed, see `crate::caller`), and returns its answer.
    /// `path_and_query` is the original one (`/api/threads/…`). No timeout of its own bounds the wait (the owner's turn has its own),
    /// but the owner's lease does: should it expire while the request is out, the wait ends
    /// ([`ForwardError::OwnerLost`]).
    pub async fn forward(
        &self,
        thread: &ThreadId,
        base: &str,
        outgoing: Outgoing<'_>,
    ) -> Result<Forwarded, ForwardError> {
        let Outgoing {
            method,
            path_and_query,
            headers,
            body,
            caller,
        } = outgoing;
        let url = format!("{}{}", base.trim_end_matches('/'), path_and_query);
        // Who asked, signed with the credential the nodes share: the owner records them, not us.
        let key = self.inner.token.as_deref().unwrap_or_default().as_bytes();
        let signed = caller.forwarded(key, method.as_str(), path_and_query);
        let mut request = self
            .inner
            .http
            .request(method, &url)
            .header(FORWARDED_HEADER, self.inner.node.as_str())
            .body(body);
        for name in FORWARDED_HEADERS {
            for value in headers.get_all(name) {
                request = request.header(name, value);
            }
        }
        request = request.header(CALLER_HEADER, signed);
        if let Some(token) = &self.inner.token {
            request = request.bearer_auth(token);
        }
        tokio::select! {
            answer = self.exchange(request, base) => answer,
            () = self.owner_gone(thread, base) => Err(ForwardError::OwnerLost {
                url: base.to_owned(),
            }),
        }
    }

    /// Sends `request` to the owner at `base` and reads its whole answer.
    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        base: &str,
    ) -> Result<Forwarded, ForwardError> {
        let response = request.send().await.map_err(|source| {
            if source.is_connect() {
                ForwardError::Unreachable {
                    url: base.to_owned(),
                    source,
                }
            } else {
                ForwardError::Failed {
                    url: base.to_owned(),
                    source,
                }
            }
        })?;
        let status = response.status();
        let content_type = response.headers().get("content-type").cloned();
        let body = response
            .bytes()
            .await
            .map_err(|source| ForwardError::Failed {
                url: base.to_owned(),
                source,
            })?;
        Ok(Forwarded {
            status,
            content_type,
            body,
        })
    }

    /// Returns once `thread`'s lease is no longer a live one of the owner at `url`: it expired
    /// (the owner stopped renewing it) or another node holds it. Checked every half TTL; a
    /// failed read counts as no news.
    pub async fn owner_gone(&self, thread: &ThreadId, url: &str) {
        let every = (self.inner.ttl / 2).max(Duration::from_millis(100));
        loop {
            tokio::time::sleep(every).await;
            match self.inner.store.lease(thread).await {
                Ok(Some(lease)) if lease.is_live(chrono::Utc::now()) && lease.owner_url == url => {}
                Ok(_) => return,
                Err(err) => {
                    warn!(thread_id = %thread, error = %err, "Could not read the thread's lease.")
                }
            }
        }
    }

    /// One heartbeat: renews every lease of this node; a thread it took and no longer holds
    /// was taken over, so its process is evicted.
    pub async fn heartbeat(&self) {
        match self.inner.store.renew_node_leases().await {
            Ok(lost) => {
                for thread in lost {
                    self.lost(&thread).await;
                }
            }
            Err(err) => {
                warn!(error = %err, "Could not renew this node's leases; they expire unless the next heartbeat succeeds.");
            }
        }
    }

    /// Renews the leases every third of the TTL until `stop`.
    pub fn spawn_heartbeat(&self, tasks: &TaskTracker, stop: CancellationToken) {
        let cluster = self.clone();
        let every = (self.inner.ttl / 3).max(Duration::from_millis(100));
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => cluster.heartbeat().await,
                    _ = stop.cancelled() => break,
                }
            }
        });
    }

    /// Graceful shutdown: expires every lease of this node, so peers take its threads at once.
    pub async fn release(&self) {
        match self.inner.store.release_node_leases().await {
            Ok(n) => info!(leases = n, "Released this node's leases."),
            Err(err) => {
                warn!(error = %err, "Could not release this node's leases; they expire on their own.")
            }
        }
    }

    /// A peer took `thread` over: its process here must not serve it again.
    async fn lost(&self, thread: &ThreadId) {
        warn!(thread_id = %thread, "Lost the thread's lease to another node; evicting its process.");
        self.inner.pool.evict_thread(thread).await;
    }
}
