//! Dynamic client registration (RFC 7591) at the built-in authorization server. Anyone who
//! reaches the daemon may register, so what one registration and all of them together may take
//! is bounded three ways:
//!
//! - **Size** ([`Registrations::read`], [`check`]): a request is at most [`BODY_MAX`] bytes and
//!   lists 1 to [`MAX_REDIRECT_URIS`] redirect URIs of at most [`REDIRECT_URI_MAX`] bytes each;
//!   every one must be `https`, `http` on a loopback host, or an app's own scheme, and one that
//!   is not refuses the whole registration (`invalid_redirect_uri`), so a client never holds
//!   half of what it asked for. A `client_name` is kept to [`CLIENT_NAME_MAX`] characters.
//!   Public clients only (`token_endpoint_auth_method: none`): PKCE binds the code.
//! - **Rate** ([`Registrations::admit`]): `oauth.registrations_per_minute` on this node,
//!   whoever asks (a GCRA from `governor`: a burst of as many, then one every `60 / n` s); every
//!   request counts, taken or refused. Past it `429` with `Retry-After`.
//! - **Time** ([`Registrations::expired`]): a client no token was ever issued to is *unused*;
//!   past `oauth.unused_client_ttl` it is unknown, and the retention pass deletes it
//!   (`crate::retention`). At most `oauth.max_unused_clients` wait at once (`429` past them).
//!
//! So unused clients hold at most `max_unused_clients × BODY_MAX` bytes of the database, and a
//! client is kept for good only once it got a token, which takes the operator's consent.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Deserialize;

use super::authorize::{redirect_uri_problem, OAuthError};
use crate::config::OAuthConfig;
use crate::secret::{hex, random};
use crate::store::{time_text, OAuthClientRow, Store, StoreError};

/// The largest registration request, in bytes: ten URIs of a generous length, and a name.
pub const BODY_MAX: usize = 16 * 1024;

/// Most redirect URIs one client may register.
pub const MAX_REDIRECT_URIS: usize = 10;

/// The longest redirect URI, in bytes (what browsers and servers commonly take of a URL).
pub const REDIRECT_URI_MAX: usize = 2048;

/// Characters of a `client_name` kept; the rest is cut.
pub const CLIENT_NAME_MAX: usize = 200;

const CLIENT_PREFIX: &str = "hc_";

/// A registration request (RFC 7591 §2); what is not read here is ignored.
#[derive(Clone, Debug, Deserialize)]
pub struct ClientMetadata {
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    pub client_name: Option<String>,
    pub token_endpoint_auth_method: Option<String>,
    pub grant_types: Option<Vec<String>>,
    pub response_types: Option<Vec<String>>,
}

/// Registration's rules and bounds. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Registrations {
    store: Store,
    /// `oauth.registrations_per_minute`, shared by every caller.
    rate: Arc<DefaultDirectRateLimiter>,
    /// `oauth.unused_client_ttl`.
    unused_ttl: Duration,
    /// `oauth.max_unused_clients`.
    max_unused: u32,
}

impl Registrations {
    pub fn new(store: Store, config: &OAuthConfig) -> Registrations {
        // The config's check refused 0; 1 if it was not run.
        let per_minute =
            NonZeroU32::new(config.registrations_per_minute).unwrap_or(NonZeroU32::MIN);
        Registrations {
            store,
            rate: Arc::new(RateLimiter::direct(Quota::per_minute(per_minute))),
            unused_ttl: config.unused_client_ttl,
            max_unused: config.max_unused_clients,
        }
    }

    /// Counts one registration request against the rate, before anything else is read of it.
    pub fn admit(&self) -> Result<(), OAuthError> {
        self.rate.check().map_err(|not_until| OAuthError::TooMany {
            message: "too many registrations; try again later".into(),
            retry_after: not_until.wait_time_from(DefaultClock::default().now()),
        })
    }

    /// The client metadata `body` holds, when it is no larger than [`BODY_MAX`].
    pub fn read(body: &[u8]) -> Result<ClientMetadata, OAuthError> {
        if body.len() > BODY_MAX {
            return Err(OAuthError::InvalidClientMetadata(format!(
                "the registration is {} bytes; at most {BODY_MAX} are taken",
                body.len()
            )));
        }
        serde_json::from_slice(body)
            .map_err(|err| OAuthError::InvalidClientMetadata(err.to_string()))
    }

    /// Registers a public client, all its redirect URIs or none, when fewer than
    /// `max_unused_clients` wait for their first token.
    pub async fn register(&self, metadata: &ClientMetadata) -> Result<OAuthClientRow, OAuthError> {
        check(metadata)?;
        let unused = self
            .store
            .unused_oauth_clients(&time_text(self.unused_since()))
            .await?;
        if unused.count >= i64::from(self.max_unused) {
            let frees = unused.oldest.map_or(Duration::ZERO, |oldest| {
                let at = oldest + chrono::Duration::from_std(self.unused_ttl).unwrap_or_default();
                (at - Utc::now()).to_std().unwrap_or_default()
            });
            return Err(OAuthError::TooMany {
                message: format!(
                    "{} registered clients wait for their first token already \
                     (oauth.max_unused_clients); try again later",
                    unused.count
                ),
                retry_after: frees,
            });
        }
        let name = metadata
            .client_name
            .as_deref()
            .map(|n| n.chars().take(CLIENT_NAME_MAX).collect::<String>());
        let id = format!("{CLIENT_PREFIX}{}", hex(&random::<12>()));
        Ok(self
            .store
            .create_oauth_client(&id, name.as_deref(), &metadata.redirect_uris)
            .await?)
    }

    /// Whether `client` was registered longer than `unused_client_ttl` ago and never got a
    /// token: then it is unknown, even before the retention pass deletes it.
    pub async fn expired(&self, client: &OAuthClientRow) -> Result<bool, StoreError> {
        if client.created_at >= self.unused_since() {
            return Ok(false);
        }
        Ok(!self.store.oauth_client_used(&client.id).await?)
    }

    /// `unused_client_ttl` ago: an unused client registered before it has expired.
    fn unused_since(&self) -> DateTime<Utc> {
        let ttl = chrono::Duration::from_std(self.unused_ttl).unwrap_or(chrono::Duration::MAX);
        Utc::now()
            .checked_sub_signed(ttl)
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }
}

/// What is wrong with `metadata`, if anything: its redirect URIs (how many, how long, which
/// schemes), its authentication method, grant and response types.
pub fn check(metadata: &ClientMetadata) -> Result<(), OAuthError> {
    if metadata.redirect_uris.is_empty() || metadata.redirect_uris.len() > MAX_REDIRECT_URIS {
        return Err(OAuthError::InvalidRedirectUri(format!(
            "redirect_uris must list 1 to {MAX_REDIRECT_URIS} URIs"
        )));
    }
    for uri in &metadata.redirect_uris {
        if uri.len() > REDIRECT_URI_MAX {
            return Err(OAuthError::InvalidRedirectUri(format!(
                "a redirect URI of {} bytes: at most {REDIRECT_URI_MAX} are taken; nothing was \
                 registered",
                uri.len()
            )));
        }
        if let Some(problem) = redirect_uri_problem(uri) {
            return Err(OAuthError::InvalidRedirectUri(format!(
                "{uri:?}: {problem}; nothing was registered"
            )));
        }
    }
    if let Some(method) = metadata.token_endpoint_auth_method.as_deref() {
        if method != "none" {
            return Err(OAuthError::InvalidClientMetadata(format!(
                "token_endpoint_auth_method {method:?}: only public clients (none) register here"
            )));
        }
    }
    let unsupported = |list: &Option<Vec<String>>, allowed: &[&str]| {
        list.iter()
            .flatten()
            .find(|v| !allowed.contains(&v.as_str()))
            .cloned()
    };
    if let Some(grant) = unsupported(
        &metadata.grant_types,
        &["authorization_code", "refresh_token"],
    ) {
        return Err(OAuthError::InvalidClientMetadata(format!(
            "grant type {grant:?} is not served"
        )));
    }
    if let Some(kind) = unsupported(&metadata.response_types, &["code"]) {
        return Err(OAuthError::InvalidClientMetadata(format!(
            "response type {kind:?} is not served"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn registrations(store: &Store, tweak: impl FnOnce(&mut OAuthConfig)) -> Registrations {
        let mut config = OAuthConfig {
            builtin: true,
            ..OAuthConfig::default()
        };
        tweak(&mut config);
        Registrations::new(store.clone(), &config)
    }

    fn metadata(uris: Vec<String>) -> ClientMetadata {
        serde_json::from_value(json!({"client_name": "app", "redirect_uris": uris}))
            .expect("metadata")
    }

    /// #46: forty registrations of ten 90 KB redirect URIs each grew the database by 73.5 MB.
    #[test]
    fn one_registration_holds_little() {
        let huge = format!("https://app.example/{}", "a".repeat(90 * 1024));
        let body = serde_json::to_vec(&json!({"redirect_uris": vec![huge.clone(); 10]})).unwrap();
        let refused = Registrations::read(&body).unwrap_err();
        assert_eq!(refused.code(), "invalid_client_metadata", "{refused}");
        assert!(refused.to_string().contains("at most 16384"), "{refused}");

        let long = format!("https://app.example/{}", "a".repeat(REDIRECT_URI_MAX));
        let refused = check(&metadata(vec![long])).unwrap_err();
        assert_eq!(refused.code(), "invalid_redirect_uri", "{refused}");
        let at_most = format!("https://app.example/{}", "a".repeat(REDIRECT_URI_MAX - 20));
        assert_eq!(at_most.len(), REDIRECT_URI_MAX);
        assert!(check(&metadata(vec![at_most])).is_ok());
        let eleven = (0..11)
            .map(|n| format!("https://app.example/{n}"))
            .collect();
        let refused = check(&metadata(eleven)).unwrap_err();
        assert_eq!(refused.code(), "invalid_redirect_uri", "{refused}");
        assert!(check(&metadata(Vec::new())).is_err(), "none");
    }

    #[tokio::test]
    async fn past_the_rate_a_registration_is_told_when_to_come_back() {
        let (store, _kept) = crate::store::tests::sqlite_memory().await;
        let registrations = registrations(&store, |c| c.registrations_per_minute = 2);
        registrations.admit().expect("the burst");
        registrations.admit().expect("the burst");
        let Err(OAuthError::TooMany { retry_after, .. }) = registrations.admit() else {
            panic!("a third registration within the minute is taken");
        };
        assert!(
            retry_after > Duration::from_secs(20) && retry_after <= Duration::from_secs(30),
            "one every 30 s: {retry_after:?}"
        );
    }

    /// At most `max_unused_clients` wait for a token; one that waits past `unused_client_ttl`
    /// is unknown (and makes room), one that got a token never expires.
    #[tokio::test]
    async fn unused_clients_are_capped_and_expire() {
        let (store, _kept) = crate::store::tests::sqlite_memory().await;
        let registrations = registrations(&store, |c| c.max_unused_clients = 2);
        let uris = || metadata(vec!["http://127.0.0.1:9/cb".into()]);
        let first = registrations.register(&uris()).await.expect("first");
        let second = registrations.register(&uris()).await.expect("second");
        let Err(OAuthError::TooMany { retry_after, .. }) = registrations.register(&uris()).await
        else {
            panic!("a third unused client is taken");
        };
        let day = Duration::from_secs(24 * 3600);
        assert!(
            retry_after > day - Duration::from_secs(60) && retry_after <= day,
            "room when the first expires: {retry_after:?}"
        );
        assert!(!registrations.expired(&first).await.unwrap());

        // Both registered two days ago; the second got a token since.
        store
            .test_execute("UPDATE oauth_clients SET created_at = '2000-01-01T00:00:00.000000Z'")
            .await;
        store
            .create_oauth_token(crate::store::NewToken {
                hash: "a1",
                kind: "access",
                family: "f1",
                client_id: &second.id,
                tenant: "acme",
                scopes: "threads:read",
                resource: None,
                expires_at: "2999-01-01T00:00:00.000000Z",
            })
            .await
            .unwrap();
        let old = |row: &OAuthClientRow| OAuthClientRow {
            created_at: "2000-01-01T00:00:00Z".parse().unwrap(),
            ..row.clone()
        };
        assert!(registrations.expired(&old(&first)).await.unwrap());
        assert!(!registrations.expired(&old(&second)).await.unwrap(), "used");
        registrations.register(&uris()).await.expect("room again");
    }
}
