//! The model gateway: every child's `ANTHROPIC_BASE_URL`, on a loopback listener of its own.
//!
//! A child talks to the Messages API only through it. The launcher takes the upstream address
//! and credentials out of each profile's environment ([`Upstream::take_from`]); a process gets
//! the gateway's address and a token of its own instead ([`Gateway::issue`]), which maps to its
//! thread and its [`MeterSlot`] while the process lives ([`Pass`]): the turn that holds the
//! process puts its [`Meter`] there, and the gateway counts the process's requests through it.
//! What the gateway does with each request (`proxy.rs`):
//! - refuses one without a live token (401, the API's error shape), and any but
//!   [`UPSTREAM_ROUTES`] (404);
//! - before a `POST /v1/messages`, asks the budgets ([`crate::budget::Budgets::before_request`])
//!   and refuses when one is spent: a 402 `billing_error` naming the budget, which the CLI
//!   neither retries nor sends again without its betas (as it does a 400), so the turn ends at
//!   once and says why;
//! - holds an estimate of its cost in those budgets while it is in flight (`usage.rs`), so
//!   requests sent together cannot pass a budget together;
//! - forwards it with the real credentials, the response streamed back chunk by chunk as it
//!   arrives, and meters the response's `usage` on the way (`usage.rs`, reading each chunk in
//!   place), charging it at once to the turn whose meter the process holds, or on its own when
//!   no turn counts it (between turns): the gateway is the meter of record. A response cut
//!   before its usage was read is charged its estimate;
//! - reports a 429 or 529 from upstream to the throttle, the one place that decides how many
//!   turns run at once;
//! - records each request (`model_requests`, `/metrics`, and a `POST /v1/messages` span under
//!   its turn's when traces are on), and tells its thread's stream through the event bus: a
//!   `model_request_started` once the request's body is in, a `model_request_finished` with
//!   what it used when its response ends (streamed to its end, cut, or refused), both under the
//!   turn that holds the process, if any; the bus stores them as any event, the only writes a
//!   request adds besides its row.
//!
//! First-party: a child told its base URL serves the API as Anthropic's does
//! ([`FIRST_PARTY_ENV`], `gateway.first_party`: by default when the upstream is Anthropic's)
//! asks through the gateway for what it would ask directly (the CLI withholds features from
//! other hosts).
//!
//! Credentials: with a key (`ANTHROPIC_API_KEY` or `ANTHROPIC_AUTH_TOKEN`) no child sees it,
//! in its environment, argv or files. Without one the CLI uses its own login (a subscription's
//! OAuth token in the config dir): the gateway forwards the child's `Authorization` as it is and
//! takes the token in `x-harness-token` (`ANTHROPIC_CUSTOM_HEADERS`); that login is readable
//! by the children, and only the metering, the budgets and the address are the gateway's.

mod proxy;
mod usage;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use plugin_contract::ThreadId;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::budget::Meter;
use crate::config::{FirstParty, GatewayConfig, Price};
use crate::sync::lock;

pub use proxy::UPSTREAM_ROUTES;
pub use usage::{prices, Prices};

/// The Messages API's address when the environment names none.
pub const DEFAULT_UPSTREAM: &str = "https://api.anthropic.com";

/// What tells the CLI its base URL serves the API as Anthropic's does, so that it keeps the
/// first-party features it withholds from other hosts (`gateway.first_party`).
pub const FIRST_PARTY_ENV: &str = "_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL";

/// The header that carries a child's token when it keeps its own login.
pub const TOKEN_HEADER: &str = "x-harness-token";

/// Where a profile's requests go, and with which credentials.
#[derive(Clone)]
pub struct Upstream {
    base: String,
    auth: Auth,
}

#[derive(Clone)]
enum Auth {
    /// `x-api-key` (`ANTHROPIC_API_KEY`).
    ApiKey(String),
    /// `Authorization: Bearer` (`ANTHROPIC_AUTH_TOKEN`).
    Bearer(String),
    /// The CLI's own login: its `Authorization` goes upstream as it is.
    Login,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match self.auth {
            Auth::ApiKey(_) => "api key",
            Auth::Bearer(_) => "auth token",
            Auth::Login => "the CLI's login",
        };
        f.debug_struct("Upstream").field("auth", &auth).finish()
    }
}

impl Upstream {
    /// Takes `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY` and `ANTHROPIC_AUTH_TOKEN` out of a
    /// child's environment: where its requests go and with what, which the gateway keeps.
    pub fn take_from(env: &mut Vec<(String, String)>) -> Upstream {
        let mut take = |name: &str| {
            let value = env
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone());
            env.retain(|(k, _)| k != name);
            value.filter(|v| !v.is_empty())
        };
        let base = take("ANTHROPIC_BASE_URL").unwrap_or_else(|| DEFAULT_UPSTREAM.to_owned());
        let key = take("ANTHROPIC_API_KEY");
        let token = take("ANTHROPIC_AUTH_TOKEN");
        let auth = match (key, token) {
            (Some(key), _) => Auth::ApiKey(key),
            (None, Some(token)) => Auth::Bearer(token),
            (None, None) => Auth::Login,
        };
        Upstream {
            base: base.trim_end_matches('/').to_owned(),
            auth,
        }
    }

    /// True when the children keep the CLI's own login.
    pub fn is_login(&self) -> bool {
        matches!(self.auth, Auth::Login)
    }

    /// True when it is Anthropic's API: an `https` address on `anthropic.com` or below.
    pub fn is_anthropic(&self) -> bool {
        let Ok(url) = reqwest::Url::parse(&self.base) else {
            return false;
        };
        let host = url.host_str().unwrap_or_default();
        url.scheme() == "https" && (host == "anthropic.com" || host.ends_with(".anthropic.com"))
    }
}

/// The gateway: its address and the tokens of the live processes. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// `http://127.0.0.1:PORT`.
    url: String,
    passes: Mutex<HashMap<String, Holder>>,
    prices: Prices,
    first_party: FirstParty,
}

/// Whose a token is.
#[derive(Clone)]
struct Holder {
    thread: ThreadId,
    upstream: Arc<Upstream>,
    /// Which turn the process's requests count in.
    meter: MeterSlot,
}

/// Which turn a process's model requests count in: the [`Meter`] the turn that holds the
/// process put there ([`crate::pool::Lease::meter_with`]), shared by the process's [`Pass`] and
/// the gateway's token table. It keeps the last turn's meter after that turn ends: an ended
/// meter counts nothing, so there is nothing to clear.
#[derive(Clone, Debug, Default)]
pub struct MeterSlot(Arc<Mutex<Option<Meter>>>);

impl MeterSlot {
    /// From now on the process's requests count in `meter`'s turn.
    pub fn set(&self, meter: Meter) {
        *lock(&self.0) = Some(meter);
    }

    /// The meter the process's requests count in now, when a turn ever handed it one.
    pub fn get(&self) -> Option<Meter> {
        lock(&self.0).clone()
    }
}

/// A live process's token: valid until dropped (the pool drops it when the process is gone).
pub struct Pass {
    gateway: Gateway,
    token: String,
    meter: MeterSlot,
}

impl Pass {
    /// Where the turn that holds the process puts its meter (the pool keeps it with the
    /// process).
    pub fn meter_slot(&self) -> MeterSlot {
        self.meter.clone()
    }
}

impl std::fmt::Debug for Pass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pass").finish_non_exhaustive()
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        lock(&self.gateway.inner.passes).remove(&self.token);
    }
}

/// What serving needs besides the tokens.
pub struct Served {
    pub store: crate::store::Store,
    /// Where each model request's start and end go, on its thread's stream.
    pub events: crate::events::EventBus,
    pub budgets: crate::budget::Budgets,
    pub throttle: crate::throttle::Throttle,
    pub traces: crate::traces::Traces,
    pub metrics: crate::metrics::GatewayMetrics,
}

impl Gateway {
    /// Binds `gateway.listen`; serve it with [`Gateway::serve`].
    pub async fn bind(config: &GatewayConfig) -> std::io::Result<(Gateway, TcpListener)> {
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let gateway = Gateway {
            inner: Arc::new(Inner {
                url: format!("http://{addr}"),
                passes: Mutex::default(),
                prices: prices(&config.prices),
                first_party: config.first_party,
            }),
        };
        Ok((gateway, listener))
    }

    /// `http://127.0.0.1:PORT`: the children's `ANTHROPIC_BASE_URL`.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// A token for a process of `thread` whose requests go to `upstream`, and what its
    /// environment gets: the gateway's address, and the token as its API key (or, when it
    /// keeps the CLI's login, as a header, after `custom_headers`, its other headers if any).
    pub fn issue(
        &self,
        thread: &ThreadId,
        upstream: &Arc<Upstream>,
        custom_headers: Option<&str>,
    ) -> (Vec<(String, String)>, Pass) {
        let token = crate::secret::token("hgw_");
        let meter = MeterSlot::default();
        lock(&self.inner.passes).insert(
            token.clone(),
            Holder {
                thread: thread.clone(),
                upstream: upstream.clone(),
                meter: meter.clone(),
            },
        );
        let mut env = vec![("ANTHROPIC_BASE_URL".to_owned(), self.inner.url.clone())];
        let first_party = match self.inner.first_party {
            FirstParty::Auto => upstream.is_anthropic(),
            FirstParty::Always => true,
            FirstParty::Never => false,
        };
        if first_party {
            env.push((FIRST_PARTY_ENV.to_owned(), "1".to_owned()));
        }
        if upstream.is_login() {
            let header = format!("{TOKEN_HEADER}: {token}");
            let headers = match custom_headers.filter(|h| !h.trim().is_empty()) {
                Some(others) => format!("{others}\n{header}"),
                None => header,
            };
            env.push(("ANTHROPIC_CUSTOM_HEADERS".to_owned(), headers));
        } else {
            env.push(("ANTHROPIC_API_KEY".to_owned(), token.clone()));
        }
        let pass = Pass {
            gateway: self.clone(),
            token,
            meter,
        };
        (env, pass)
    }

    /// Whose `token` is, while its process lives.
    fn holder(&self, token: &str) -> Option<Holder> {
        lock(&self.inner.passes).get(token).cloned()
    }

    /// What `model`'s tokens cost.
    fn price(&self, model: Option<&str>) -> Price {
        self.inner.prices.of(model)
    }

    /// Serves `listener` until `stop`; the throttle hears the upstream's push-back from here
    /// on.
    pub async fn serve(self, listener: TcpListener, served: Served, stop: CancellationToken) {
        served.throttle.watched_by_gateway();
        proxy::serve(self, listener, served, stop).await;
    }
}

#[cfg(test)]
mod tests;
