//! `[oauth]`: `/mcp` and `/api` as an OAuth 2.1 resource server (see `crate::oauth`). Off until
//! an `issuer` is set, or `builtin`; the bounds on the built-in server's open registration
//! (`crate::oauth::registration`) are here too.

use std::path::PathBuf;
use std::time::Duration;

use plugin_contract::settings::secs;
use serde::Deserialize;

/// `[oauth]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthConfig {
    /// The authorization server whose JWT access tokens the daemon accepts (`https://…`, exactly
    /// as its tokens' `iss` and its metadata's `issuer` say). `None`: no OAuth.
    pub issuer: Option<String>,
    /// Where its signing keys are; `None`: from its metadata (`jwks_uri`, found at
    /// `/.well-known/openid-configuration` or `/.well-known/oauth-authorization-server`).
    pub jwks_url: Option<String>,
    /// The audience a token must name; `None`: this server's resource URLs (`<public_url>/mcp`,
    /// or `<public_url>` itself), as RFC 8707 has clients ask for them.
    pub audience: Option<String>,
    /// The claim whose value is the caller's tenant.
    pub tenant_claim: String,
    /// The URL clients reach the daemon at (`https://harness.example.com`), which names its
    /// resources and is the audience its tokens must name; `None`: `http://` and the address
    /// the daemon bound (never a request's `Host`), which must then not be a wildcard address.
    pub public_url: Option<String>,
    /// The daemon is its own authorization server (`crate::oauth::authorize`), for operators
    /// without an identity provider; instead of `issuer`.
    pub builtin: bool,
    /// More CA certificates (PEM) the built-in server trusts when it fetches a client's
    /// metadata document (`https://…` as `client_id`), beside the system's.
    pub client_ca_file: Option<PathBuf>,
    /// Lets a client's metadata document be on a loopback or private address (tests,
    /// one-machine set-ups); otherwise only public addresses are fetched.
    pub allow_private_client_urls: bool,
    /// Registrations `/oauth/register` takes per minute on this node, whoever sends them: a
    /// burst of as many, then one every `60 / n` s; past them `429` with `Retry-After`. Anyone
    /// who reaches the daemon may register, so this bounds how fast they can fill the database.
    pub registrations_per_minute: u32,
    /// Seconds a registered client that never got a token may wait for one: past them it is
    /// unknown, and the retention pass deletes it. A client that got a token is kept.
    #[serde(with = "secs")]
    pub unused_client_ttl: Duration,
    /// Most registered clients waiting for their first token at once (registered within
    /// `unused_client_ttl`); past them registration answers `429` until one is used or expires.
    pub max_unused_clients: u32,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            issuer: None,
            jwks_url: None,
            audience: None,
            tenant_claim: "sub".into(),
            public_url: None,
            builtin: false,
            client_ca_file: None,
            allow_private_client_urls: false,
            registrations_per_minute: 10,
            unused_client_ttl: Duration::from_secs(24 * 3600),
            max_unused_clients: 1000,
        }
    }
}

impl OAuthConfig {
    /// Whether `/api` and `/mcp` take OAuth tokens (an issuer's, or the built-in server's).
    pub fn enabled(&self) -> bool {
        self.issuer.is_some() || self.builtin
    }

    /// The certificates of `client_ca_file` (none when it is not set).
    pub fn client_roots(&self) -> Result<Vec<reqwest::Certificate>, String> {
        let Some(path) = &self.client_ca_file else {
            return Ok(Vec::new());
        };
        let pem = std::fs::read(path).map_err(|err| err.to_string())?;
        let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|err| err.to_string())?;
        if roots.is_empty() {
            return Err("holds no PEM certificate".into());
        }
        Ok(roots)
    }

    /// The problem with it, if any.
    pub fn check(&self) -> Result<(), String> {
        for (name, value) in [
            ("oauth.issuer", &self.issuer),
            ("oauth.jwks_url", &self.jwks_url),
            ("oauth.public_url", &self.public_url),
        ] {
            if let Some(url) = value {
                let parsed = reqwest::Url::parse(url).map_err(|err| format!("{name}: {err}"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!("{name} must be an http(s) URL (got {url})"));
                }
            }
        }
        if self.builtin && self.issuer.is_some() {
            return Err("oauth.builtin and oauth.issuer are one or the other".into());
        }
        if self.issuer.is_none() && (self.jwks_url.is_some() || self.audience.is_some()) {
            return Err("oauth.jwks_url and oauth.audience need oauth.issuer".into());
        }
        if let Some(path) = &self.client_ca_file {
            self.client_roots()
                .map_err(|err| format!("oauth.client_ca_file {}: {err}", path.display()))?;
        }
        if self.tenant_claim.is_empty() {
            return Err("oauth.tenant_claim must name a claim".into());
        }
        if self.registrations_per_minute == 0 || self.max_unused_clients == 0 {
            return Err(
                "oauth.registrations_per_minute and oauth.max_unused_clients must be at least 1"
                    .into(),
            );
        }
        if self.unused_client_ttl.is_zero() {
            return Err("oauth.unused_client_ttl must be more than 0 seconds".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_oauth_table_names_its_problem() {
        let issuer = || OAuthConfig {
            issuer: Some("https://login.example".into()),
            ..OAuthConfig::default()
        };
        assert_eq!(OAuthConfig::default().check(), Ok(()));
        assert_eq!(issuer().check(), Ok(()));
        for (bad, words) in [
            (
                OAuthConfig {
                    issuer: Some("ftp://login.example".into()),
                    ..OAuthConfig::default()
                },
                "oauth.issuer must be an http(s) URL",
            ),
            (
                OAuthConfig {
                    public_url: Some("not a url".into()),
                    ..issuer()
                },
                "oauth.public_url",
            ),
            (
                OAuthConfig {
                    jwks_url: Some("https://login.example/keys".into()),
                    ..OAuthConfig::default()
                },
                "need oauth.issuer",
            ),
            (
                OAuthConfig {
                    tenant_claim: String::new(),
                    ..issuer()
                },
                "tenant_claim",
            ),
            (
                OAuthConfig {
                    builtin: true,
                    ..issuer()
                },
                "one or the other",
            ),
            (
                OAuthConfig {
                    builtin: true,
                    client_ca_file: Some("/nonexistent/ca.pem".into()),
                    ..OAuthConfig::default()
                },
                "oauth.client_ca_file /nonexistent/ca.pem",
            ),
            (
                OAuthConfig {
                    registrations_per_minute: 0,
                    ..OAuthConfig::default()
                },
                "oauth.registrations_per_minute",
            ),
            (
                OAuthConfig {
                    unused_client_ttl: Duration::ZERO,
                    ..OAuthConfig::default()
                },
                "oauth.unused_client_ttl",
            ),
        ] {
            let err = bad.check().expect_err("refused");
            assert!(err.contains(words), "{err}");
        }
    }

    #[test]
    fn with_an_issuer_a_wider_bind_needs_no_token() {
        let mut config =
            crate::config::Config::from_toml("bind = \"0.0.0.0:7878\"").expect("parses");
        assert!(config.validate().is_err(), "no token, no issuer");
        config.oauth.issuer = Some("https://login.example".into());
        assert!(config.validate().is_ok());
    }
}
