//! OAuth 2.1 resource server: with `[oauth] issuer` set, `/mcp` and `/api` also accept JWT
//! access tokens from that issuer (MCP authorization, 2025-11-25 and 2026-07-28); with
//! `[oauth] builtin`, the access tokens of the daemon's own authorization server
//! ([`authorize`], its clients' registration in [`registration`]), looked up by their hash.
//!
//! - **Discovery** (RFC 9728): [`ResourceServer::metadata`] is the protected resource metadata
//!   `http::oauth` serves at `/.well-known/oauth-protected-resource` (the API) and
//!   `…/mcp` (`/mcp`), naming the issuer; a request without credentials gets a `401` whose
//!   challenge points there ([`ResourceServer::challenge`]).
//! - **Validation** ([`ResourceServer::caller`]): the token's signature against the issuer's
//!   JWKS (fetched from `jwks_url`, else from the issuer's metadata; fetched again, at most every
//!   [`REFETCH_AFTER`], when a token names a key it does not have), `exp` and `nbf`, `iss`, and an
//!   audience that is this server (RFC 8707: `oauth.audience`, else one of its resource URLs).
//!   Only asymmetric algorithms: a JWKS holds public keys.
//! - **Who**: the token's `sub` is the caller's subject (`oauth:<sub>`), the `tenant_claim`
//!   claim its tenant; its `scope` (or `scp`) names the Harness scopes it has, by name.
//!
//! Tokens come from the `Authorization` header only, never the query string, and go no further:
//! a forwarded request carries the caller, never the token, and no child sees it.

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::caller::{Caller, Scope};
use crate::config::OAuthConfig;
use crate::store::Store;

pub mod authorize;
pub mod registration;

/// The least time between two fetches of the issuer's keys for a key it does not know.
pub const REFETCH_AFTER: Duration = Duration::from_secs(30);

/// How long a fetch of metadata or keys may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Clock skew allowed on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 30;

/// The prefix of an OAuth caller's subject.
pub const SUBJECT_PREFIX: &str = "oauth:";

/// Why a token was not taken.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// `401 invalid_token`: malformed, expired, not for this server, or signed by another key.
    #[error("{0}")]
    Invalid(String),
    /// `503`: the issuer's keys could not be fetched.
    #[error("the issuer's keys cannot be fetched: {0}")]
    Unavailable(String),
}

/// The claims read from a token (the signature, `exp`, `iss` and `aud` are checked by
/// `jsonwebtoken` before these are).
#[derive(Debug, Deserialize)]
struct Claims {
    sub: Option<String>,
    scope: Option<String>,
    scp: Option<Vec<String>>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// The issuer's keys, as last fetched.
#[derive(Default)]
struct Keys {
    set: Option<JwkSet>,
    fetched: Option<Instant>,
}

/// Whose access tokens the daemon takes.
enum Authority {
    /// An outside issuer's JWTs (`oauth.issuer`).
    Issuer(String),
    /// The daemon's own opaque tokens (`oauth.builtin`).
    Builtin(authorize::AuthorizationServer),
}

/// Validates access tokens. Cheap to share.
pub struct ResourceServer {
    config: OAuthConfig,
    authority: Authority,
    http: reqwest::Client,
    keys: Mutex<Keys>,
}

impl ResourceServer {
    /// `None` when `[oauth]` names no issuer and the built-in server is off.
    pub fn new(config: &OAuthConfig, store: &Store) -> Option<ResourceServer> {
        let authority = match (&config.issuer, config.builtin) {
            (Some(issuer), _) => Authority::Issuer(issuer.clone()),
            (None, true) => {
                Authority::Builtin(authorize::AuthorizationServer::new(store.clone(), config))
            }
            (None, false) => return None,
        };
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .unwrap_or_default();
        Some(ResourceServer {
            config: config.clone(),
            authority,
            http,
            keys: Mutex::default(),
        })
    }

    /// The configured public URL, else `http://<host>`: what names this server's resources.
    pub fn public_url(&self, host: Option<&str>) -> String {
        match &self.config.public_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("http://{}", host.unwrap_or("localhost")),
        }
    }

    /// The built-in authorization server, when it is the authority.
    pub fn builtin(&self) -> Option<&authorize::AuthorizationServer> {
        match &self.authority {
            Authority::Builtin(server) => Some(server),
            Authority::Issuer(_) => None,
        }
    }

    /// The issuer: the configured one, or this server itself (`public_url`).
    pub fn issuer(&self, public_url: &str) -> String {
        match &self.authority {
            Authority::Issuer(issuer) => issuer.clone(),
            Authority::Builtin(_) => public_url.to_owned(),
        }
    }

    /// This server's resource URLs (RFC 8707): `/mcp`'s and the API's.
    pub fn resources(&self, public_url: &str) -> Vec<String> {
        vec![format!("{public_url}/mcp"), public_url.to_owned()]
    }

    /// The protected resource metadata (RFC 9728) of `resource` on the server at `public_url`.
    pub fn metadata(&self, resource: &str, public_url: &str) -> Value {
        let scopes: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
        json!({
            "resource": resource,
            "authorization_servers": [self.issuer(public_url)],
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "Harness",
        })
    }

    /// The `WWW-Authenticate` value of a refusal: where the metadata is, the scope wanted, and
    /// the error when there is one (`invalid_token`, `insufficient_scope`).
    pub fn challenge(&self, metadata_url: &str, scope: &str, error: Option<&str>) -> String {
        let error = error.map_or_else(String::new, |e| format!(", error=\"{e}\""));
        format!(
            "Bearer realm=\"harness\", resource_metadata=\"{metadata_url}\", scope=\"{scope}\"{error}"
        )
    }

    /// The caller `token` names, when it is a valid token of the issuer for this server
    /// (`public_url`: [`ResourceServer::public_url`]).
    pub async fn caller(&self, token: &str, public_url: &str) -> Result<Caller, TokenError> {
        let issuer = match &self.authority {
            Authority::Issuer(issuer) => issuer,
            Authority::Builtin(server) => {
                let unknown =
                    || TokenError::Invalid("not a live access token of this server".into());
                if !token.starts_with(authorize::ACCESS_PREFIX) {
                    return Err(unknown());
                }
                return server
                    .caller(token)
                    .await
                    .map_err(|err| TokenError::Unavailable(err.to_string()))?
                    .ok_or_else(unknown);
            }
        };
        let header = jsonwebtoken::decode_header(token)
            .map_err(|err| TokenError::Invalid(format!("not a JWT: {err}")))?;
        if matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        ) {
            return Err(TokenError::Invalid(
                "a token signed with a shared secret is not taken".into(),
            ));
        }
        let key = self.key(header.kid.as_deref()).await?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_issuer(&[issuer]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        match &self.config.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.set_audience(&[format!("{public_url}/mcp"), public_url.to_owned()]),
        }
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|err| TokenError::Invalid(format!("the token is not valid here: {err}")))?;
        let claims = data.claims;
        let sub = claims
            .sub
            .filter(|s| !s.is_empty())
            .ok_or_else(|| TokenError::Invalid("the token has no subject".into()))?;
        let tenant = match self.config.tenant_claim.as_str() {
            "sub" => Some(sub.clone()),
            claim => claims
                .rest
                .get(claim)
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            TokenError::Invalid(format!(
                "the token has no `{}` claim to name its tenant",
                self.config.tenant_claim
            ))
        })?;
        let names: Vec<String> = match (claims.scope, claims.scp) {
            (Some(scope), _) => scope.split_whitespace().map(str::to_owned).collect(),
            (None, Some(scp)) => scp,
            (None, None) => Vec::new(),
        };
        let mut scopes: Vec<Scope> = names.iter().filter_map(|n| Scope::parse(n)).collect();
        scopes.dedup();
        Ok(Caller {
            subject: format!("{SUBJECT_PREFIX}{sub}"),
            tenant: Some(tenant),
            scopes,
        })
    }

    /// The issuer's key `kid`, fetching the keys when they are not known yet, or
    /// again when `kid` is not among them and the last fetch is old enough.
    async fn key(&self, kid: Option<&str>) -> Result<DecodingKey, TokenError> {
        let mut keys = self.keys.lock().await;
        if let Some(key) = keys.set.as_ref().and_then(|set| find(set, kid)) {
            return key;
        }
        let stale = keys.fetched.is_none_or(|at| at.elapsed() >= REFETCH_AFTER);
        if stale {
            keys.set = Some(self.fetch_keys().await?);
            keys.fetched = Some(Instant::now());
        }
        keys.set
            .as_ref()
            .and_then(|set| find(set, kid))
            .unwrap_or_else(|| {
                Err(TokenError::Invalid(
                    "the token is signed with a key the issuer does not publish".into(),
                ))
            })
    }

    async fn fetch_keys(&self) -> Result<JwkSet, TokenError> {
        let url = match &self.config.jwks_url {
            Some(url) => url.clone(),
            None => self.jwks_uri().await?,
        };
        self.fetch_json(&url).await
    }

    /// `jwks_uri` from the issuer's metadata (OpenID Connect discovery, then RFC 8414).
    async fn jwks_uri(&self) -> Result<String, TokenError> {
        let base = match &self.authority {
            Authority::Issuer(issuer) => issuer.trim_end_matches('/'),
            Authority::Builtin(_) => return Err(TokenError::Unavailable("no issuer".into())),
        };
        let mut last = String::new();
        for path in [
            "/.well-known/openid-configuration",
            "/.well-known/oauth-authorization-server",
        ] {
            match self.fetch_json::<Value>(&format!("{base}{path}")).await {
                Ok(metadata) => {
                    if let Some(uri) = metadata["jwks_uri"].as_str() {
                        return Ok(uri.to_owned());
                    }
                    last = format!("{base}{path} names no jwks_uri");
                }
                Err(err) => last = err.to_string(),
            }
        }
        Err(TokenError::Unavailable(last))
    }

    async fn fetch_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, TokenError> {
        let unavailable = |err: reqwest::Error| TokenError::Unavailable(format!("{url}: {err}"));
        self.http
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(unavailable)?
            .json()
            .await
            .map_err(unavailable)
    }
}

/// The key of `set` for a token naming `kid` (or, with no `kid`, the set's only key).
fn find(set: &JwkSet, kid: Option<&str>) -> Option<Result<DecodingKey, TokenError>> {
    let jwk = match kid {
        Some(kid) => set.find(kid)?,
        None => match set.keys.as_slice() {
            [only] => only,
            _ => return None,
        },
    };
    Some(DecodingKey::from_jwk(jwk).map_err(|err| {
        TokenError::Invalid(format!("the issuer's key {kid:?} is not usable: {err}"))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn server(tenant_claim: &str) -> ResourceServer {
        let (store, _kept) = crate::store::tests::sqlite_memory().await;
        ResourceServer::new(
            &OAuthConfig {
                issuer: Some("https://issuer.example".into()),
                tenant_claim: tenant_claim.into(),
                ..OAuthConfig::default()
            },
            &store,
        )
        .expect("an issuer")
    }

    #[tokio::test]
    async fn no_issuer_no_resource_server() {
        let (store, _kept) = crate::store::tests::sqlite_memory().await;
        assert!(ResourceServer::new(&OAuthConfig::default(), &store).is_none());
    }

    #[tokio::test]
    async fn the_metadata_names_the_issuer_and_the_challenge_points_at_it() {
        let rs = server("sub").await;
        let metadata = rs.metadata("http://127.0.0.1:7878/mcp", "http://127.0.0.1:7878");
        assert_eq!(metadata["resource"], "http://127.0.0.1:7878/mcp");
        assert_eq!(
            metadata["authorization_servers"],
            json!(["https://issuer.example"])
        );
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
        assert_eq!(
            rs.challenge("http://h/.well-known/oauth-protected-resource/mcp", "threads:read", Some("invalid_token")),
            "Bearer realm=\"harness\", resource_metadata=\"http://h/.well-known/oauth-protected-resource/mcp\", scope=\"threads:read\", error=\"invalid_token\""
        );
        assert_eq!(rs.public_url(Some("127.0.0.1:9")), "http://127.0.0.1:9");
    }

    #[tokio::test]
    async fn what_is_not_a_signed_jwt_is_refused_before_any_fetch() {
        let rs = server("sub").await;
        let refused = rs.caller("hk_not_a_jwt", "http://h").await;
        assert!(
            matches!(refused, Err(TokenError::Invalid(_))),
            "{refused:?}"
        );
        // HS256 with any secret: a JWKS holds public keys, so a shared secret is never taken.
        let hs = jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &json!({"sub": "x", "iss": "https://issuer.example", "aud": "http://h/mcp", "exp": 4_000_000_000u64}),
            &jsonwebtoken::EncodingKey::from_secret(b"guessable"),
        )
        .expect("encodes");
        let refused = rs.caller(&hs, "http://h").await;
        assert_eq!(
            refused,
            Err(TokenError::Invalid(
                "a token signed with a shared secret is not taken".into()
            ))
        );
    }
}
