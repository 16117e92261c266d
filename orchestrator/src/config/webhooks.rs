//! `[webhooks]`: where the daemon tells services what happened (see `crate::webhooks`).

use std::time::Duration;

use plugin_contract::settings::secs;
use serde::Deserialize;

/// `[webhooks]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Lets loopback, private and link-local targets through (tests, one-machine set-ups).
    pub allow_private_targets: bool,
    /// `[[webhooks.endpoints]]`.
    pub endpoints: Vec<WebhookEndpoint>,
    /// Attempts per delivery before it is dead (`POST /api/webhooks/deliveries/{id}/redeliver`
    /// sends it again).
    pub max_attempts: u32,
    /// The longest an attempt may take.
    #[serde(with = "secs")]
    pub timeout: Duration,
    /// The wait after the first failed attempt; it doubles with each (with jitter) up to
    /// `retry_max`.
    #[serde(with = "secs")]
    pub retry_min: Duration,
    #[serde(with = "secs")]
    pub retry_max: Duration,
    /// How often a node looks for deliveries that are due (a turn ending on the node wakes it
    /// at once).
    #[serde(with = "secs")]
    pub poll: Duration,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            allow_private_targets: false,
            endpoints: Vec::new(),
            max_attempts: 8,
            timeout: Duration::from_secs(10),
            retry_min: Duration::from_secs(5),
            retry_max: Duration::from_secs(3600),
            poll: Duration::from_secs(1),
        }
    }
}

/// `[[webhooks.endpoints]]`: one receiver.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookEndpoint {
    /// `https://…` (or `http://…`).
    pub url: String,
    /// `whsec_…` (Standard Webhooks): the key deliveries are signed with.
    #[serde(default)]
    pub secret: Option<String>,
    /// Several keys at once, while a key is rotated: every delivery carries a signature by each.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// The event types it gets; every type when empty.
    #[serde(default)]
    pub events: Vec<String>,
}

impl WebhookEndpoint {
    /// Every key it is signed with.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.secret
            .iter()
            .chain(self.secrets.iter())
            .map(String::as_str)
    }
}
