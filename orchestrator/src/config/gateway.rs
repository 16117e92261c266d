//! `[gateway]`: the model gateway every child talks to instead of the Messages API (see
//! `crate::gateway`). On by default.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::Deserialize;

/// `[gateway]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// On: each child's `ANTHROPIC_BASE_URL` is the gateway and its key a token of its own; the
    /// upstream address and credentials (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`,
    /// `ANTHROPIC_AUTH_TOKEN`, from `claude.pass_env` and `claude.env`) stay in the daemon. Off:
    /// children get them and talk to the API themselves, and budgets are checked per turn only.
    pub enabled: bool,
    /// Where it listens: a loopback address (port 0: one the OS picks).
    pub listen: SocketAddr,
    /// USD per million tokens by model name prefix (the longest matching prefix wins), over the
    /// built-in table ([`crate::gateway::prices`]); what each request is metered at.
    pub prices: BTreeMap<String, Price>,
    /// Whether children run as first-party clients of the API
    /// ([`crate::gateway::FIRST_PARTY_ENV`]): the CLI withholds features (the 1M-token context
    /// window, tool search, prompt caching's betas) from a base URL that is not Anthropic's,
    /// and the gateway's loopback address is not. `auto` (the default): when the upstream is
    /// Anthropic's API (`https://api.anthropic.com`, or another `*.anthropic.com` host);
    /// `always`: whatever the upstream (one that speaks the API as Anthropic does); `never`.
    pub first_party: FirstParty,
}

/// `gateway.first_party`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FirstParty {
    #[default]
    Auto,
    Always,
    Never,
}

/// What a model's tokens cost, in USD per million.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Tokens written to the prompt cache.
    pub cache_write: f64,
    /// Tokens read from the prompt cache.
    pub cache_read: f64,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            prices: BTreeMap::new(),
            first_party: FirstParty::Auto,
        }
    }
}

impl GatewayConfig {
    pub(super) fn check(&self) -> Result<(), String> {
        if !self.listen.ip().is_loopback() {
            return Err(format!(
                "gateway.listen must be a loopback address (got {}): only the daemon's children talk to it",
                self.listen
            ));
        }
        for (model, price) in &self.prices {
            for (name, usd) in [
                ("input", price.input),
                ("output", price.output),
                ("cache_write", price.cache_write),
                ("cache_read", price.cache_read),
            ] {
                crate::budget::validate_usd(usd, &format!("gateway.prices.\"{model}\".{name}"))?;
            }
        }
        Ok(())
    }
}
