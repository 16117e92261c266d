//! The built-in authorization server (`[oauth] builtin = true`), for operators without an
//! identity provider: OAuth 2.1's authorization code grant with PKCE (S256 only), clients that
//! register themselves (RFC 7591), a consent the operator gives with an admin credential, and
//! short-lived access tokens with rotating refresh tokens.
//!
//! - **Registration** ([`AuthorizationServer::register`]): bounded in size, rate and time, with
//!   the rules of a client's metadata, in [`super::registration`]. Or no registration at all:
//!   a client whose `client_id` is an `https` URL is described by
//!   the metadata document there (Client ID Metadata Documents), fetched when it asks for a
//!   code: it must name that URL as its `client_id` and valid redirect URIs. The fetch takes
//!   public addresses only (`oauth.allow_private_client_urls`), follows no redirect, and reads
//!   at most [`DOCUMENT_MAX`] bytes within [`DOCUMENT_TIMEOUT`].
//! - **Authorization** ([`AuthorizationServer::check`], [`AuthorizationServer::grant`]): the
//!   redirect URI must be one the client registered, exactly; the consent names the tenant the
//!   client acts for and the scopes it gets (what it asked for, never `admin`); the code is good
//!   once, for [`CODE_TTL`], and the redirect names this issuer (RFC 9207).
//! - **Tokens** ([`AuthorizationServer::token`]): a code gives an access token
//!   ([`ACCESS_TTL`]) and a refresh token ([`REFRESH_TTL`]); a refresh token is good once and
//!   gives a new pair; a spent one coming back revokes every token of its grant (its family).
//!   All are random, stored as their SHA-256 only.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::registration::{ClientMetadata, Registrations};
use crate::caller::{Caller, Scope};
use crate::secret::{hex, random, sha256_hex as hash, token as secret};
use crate::store::{NewCode, NewToken, OAuthClientRow, Store, StoreError};

/// How long an access token is good for.
pub const ACCESS_TTL: Duration = Duration::from_secs(15 * 60);

/// How long a refresh token is good for (each use gives a new one).
pub const REFRESH_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long an authorization code is good for.
pub const CODE_TTL: Duration = Duration::from_secs(60);

/// How every access token of this server starts.
pub const ACCESS_PREFIX: &str = "hat_";

const REFRESH_PREFIX: &str = "hrt_";

/// The largest client metadata document read.
pub const DOCUMENT_MAX: usize = 64 * 1024;

/// How long fetching a client metadata document may take.
pub const DOCUMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The scopes a client gets when it asks for none.
const DEFAULT_SCOPES: [Scope; 2] = [Scope::ThreadsRead, Scope::ThreadsWrite];

/// An OAuth error, as RFC 6749 §5.2 and RFC 7591 §3.2.2 name them.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    InvalidClient(String),
    #[error("{0}")]
    InvalidGrant(String),
    #[error("{0}")]
    UnsupportedGrantType(String),
    #[error("{0}")]
    InvalidScope(String),
    #[error("{0}")]
    InvalidRedirectUri(String),
    #[error("{0}")]
    InvalidClientMetadata(String),
    /// `429`: more than the server takes now; `retry_after` says when it may again.
    #[error("{message}")]
    TooMany {
        message: String,
        retry_after: Duration,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OAuthError {
    /// The `error` value of its JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            OAuthError::InvalidRequest(_) => "invalid_request",
            OAuthError::InvalidClient(_) => "invalid_client",
            OAuthError::InvalidGrant(_) => "invalid_grant",
            OAuthError::UnsupportedGrantType(_) => "unsupported_grant_type",
            OAuthError::InvalidScope(_) => "invalid_scope",
            OAuthError::InvalidRedirectUri(_) => "invalid_redirect_uri",
            OAuthError::InvalidClientMetadata(_) => "invalid_client_metadata",
            OAuthError::TooMany { .. } => "temporarily_unavailable",
            OAuthError::Store(_) => "server_error",
        }
    }
}

/// An authorization request's parameters (RFC 6749 §4.1.1, RFC 7636, RFC 8707).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct AuthorizeRequest {
    #[serde(default)]
    pub response_type: String,
    #[serde(default)]
    pub client_id: String,
    #[serde(default)]
    pub redirect_uri: String,
    #[serde(default)]
    pub code_challenge: String,
    pub code_challenge_method: Option<String>,
    pub state: Option<String>,
    pub scope: Option<String>,
    pub resource: Option<String>,
}

/// A token request (RFC 6749 §4.1.3, §6).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TokenRequest {
    #[serde(default)]
    pub grant_type: String,
    pub code: Option<String>,
    pub redirect_uri: Option<String>,
    pub client_id: Option<String>,
    pub code_verifier: Option<String>,
    pub refresh_token: Option<String>,
    pub resource: Option<String>,
}

/// A token response (RFC 6749 §5.1).
#[derive(Clone, Debug, Serialize)]
pub struct TokenSet {
    pub access_token: String,
    pub token_type: &'static str,
    pub expires_in: u64,
    pub refresh_token: String,
    pub scope: String,
}

/// A client: registered here, or described by its own metadata document.
#[derive(Clone, Debug, PartialEq)]
pub struct Client {
    pub id: String,
    pub name: Option<String>,
    pub redirect_uris: Vec<String>,
}

impl From<OAuthClientRow> for Client {
    fn from(row: OAuthClientRow) -> Self {
        Client {
            id: row.id,
            name: row.name,
            redirect_uris: row.redirect_uris.0,
        }
    }
}

/// A client metadata document: what is read of it.
#[derive(Debug, Deserialize)]
struct Document {
    client_id: String,
    client_name: Option<String>,
    #[serde(default)]
    redirect_uris: Vec<String>,
}

/// The built-in authorization server. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AuthorizationServer {
    store: Store,
    /// Fetches client metadata documents: public addresses only, no redirects, bounded.
    documents: reqwest::Client,
    /// `oauth.allow_private_client_urls`.
    allow_private: bool,
    /// Registration's bounds, and when a registered client expires.
    registrations: Registrations,
}

impl AuthorizationServer {
    pub fn new(store: Store, config: &crate::config::OAuthConfig) -> AuthorizationServer {
        let allow_private = config.allow_private_client_urls;
        let mut builder = reqwest::Client::builder()
            .dns_resolver(std::sync::Arc::new(
                crate::webhooks::target::GuardedResolver { allow_private },
            ))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(DOCUMENT_TIMEOUT)
            .user_agent(concat!("harness/", env!("CARGO_PKG_VERSION")));
        // The config's check read them already.
        for root in config.client_roots().unwrap_or_default() {
            builder = builder.add_root_certificate(root);
        }
        AuthorizationServer {
            registrations: Registrations::new(store.clone(), config),
            store,
            documents: builder.build().unwrap_or_default(),
            allow_private,
        }
    }

    /// Registration's bounds.
    pub fn registrations(&self) -> &Registrations {
        &self.registrations
    }

    /// The client `id`: a registered one that has not expired, or the one its metadata
    /// document describes.
    pub async fn client(&self, id: &str) -> Result<Client, OAuthError> {
        if id.starts_with("https://") {
            return self.document(id).await;
        }
        let unknown = || OAuthError::InvalidClient(format!("unknown client_id {id:?}"));
        let row = self.store.oauth_client(id).await?.ok_or_else(unknown)?;
        if self.registrations.expired(&row).await? {
            return Err(OAuthError::InvalidClient(format!(
                "client_id {id:?} expired: it was never used within oauth.unused_client_ttl of \
                 registering; register again"
            )));
        }
        Ok(Client::from(row))
    }

    /// The client whose metadata document is at `url`.
    async fn document(&self, url: &str) -> Result<Client, OAuthError> {
        let refused = |why: String| {
            OAuthError::InvalidClient(format!("client metadata document {url:?}: {why}"))
        };
        // An address literal (`127.1`, `2130706433`, `[::ffff:127.0.0.1]`, which the URL parser
        // writes out as the address it is) never reaches the guarded resolver: checked here,
        // before anything connects.
        let setting = "oauth.allow_private_client_urls";
        let parsed = crate::webhooks::target::check_url_for(url, self.allow_private, setting)
            .map_err(refused)?;
        if parsed.path() == "/" || parsed.fragment().is_some() {
            return Err(refused("it needs a path, and no fragment".into()));
        }
        let mut answer = self
            .documents
            .get(parsed)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|err| refused(format!("cannot be fetched: {err}")))?;
        let mut body = Vec::new();
        while let Some(chunk) = answer
            .chunk()
            .await
            .map_err(|err| refused(format!("cannot be read: {err}")))?
        {
            if body.len() + chunk.len() > DOCUMENT_MAX {
                return Err(refused(format!("larger than {DOCUMENT_MAX} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        let document: Document = serde_json::from_slice(&body)
            .map_err(|err| refused(format!("not the JSON of one: {err}")))?;
        if document.client_id != url {
            return Err(refused(format!(
                "it names another client_id ({:?})",
                document.client_id
            )));
        }
        if document.redirect_uris.is_empty() {
            return Err(refused("it lists no redirect_uris".into()));
        }
        if let Some((uri, problem)) = document
            .redirect_uris
            .iter()
            .find_map(|uri| redirect_uri_problem(uri).map(|p| (uri, p)))
        {
            return Err(refused(format!("redirect URI {uri:?}: {problem}")));
        }
        Ok(Client {
            id: document.client_id,
            name: document.client_name,
            redirect_uris: document.redirect_uris,
        })
    }

    /// Registers a public client, all its redirect URIs or none (see [`Registrations`]).
    pub async fn register(&self, metadata: &ClientMetadata) -> Result<OAuthClientRow, OAuthError> {
        self.registrations.register(metadata).await
    }

    /// The client of an authorization request, when the request is one this server serves: a
    /// code, a registered client and redirect URI, an S256 challenge, and (when named) a
    /// resource of this server (`resources`).
    pub async fn check(
        &self,
        request: &AuthorizeRequest,
        resources: &[String],
    ) -> Result<Client, OAuthError> {
        let client = self.client(&request.client_id).await?;
        if !client.redirect_uris.contains(&request.redirect_uri) {
            return Err(OAuthError::InvalidRequest(format!(
                "redirect_uri {:?} is not one the client registered",
                request.redirect_uri
            )));
        }
        if request.response_type != "code" {
            return Err(OAuthError::InvalidRequest(
                "response_type must be code".into(),
            ));
        }
        if request.code_challenge_method.as_deref() != Some("S256")
            || request.code_challenge.len() < 43
        {
            return Err(OAuthError::InvalidRequest(
                "PKCE is required: code_challenge with code_challenge_method S256".into(),
            ));
        }
        check_resource(request.resource.as_deref(), resources)?;
        granted_scopes(request.scope.as_deref())?;
        Ok(client)
    }

    /// The operator consented to `request` (checked by [`AuthorizationServer::check`]) for
    /// `tenant`: a code, and the URL to send the browser back to with it.
    pub async fn grant(
        &self,
        request: &AuthorizeRequest,
        tenant: &str,
        issuer: &str,
    ) -> Result<String, OAuthError> {
        let scopes = Scope::join(&granted_scopes(request.scope.as_deref())?).replace(',', " ");
        let code = secret("hac_");
        let expires = time_after(CODE_TTL);
        self.store
            .create_oauth_code(NewCode {
                hash: &hash(&code),
                client_id: &request.client_id,
                redirect_uri: &request.redirect_uri,
                challenge: &request.code_challenge,
                tenant,
                scopes: &scopes,
                resource: request.resource.as_deref(),
                expires_at: &expires,
            })
            .await?;
        let mut url = reqwest::Url::parse(&request.redirect_uri)
            .map_err(|err| OAuthError::InvalidRequest(format!("redirect_uri: {err}")))?;
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("code", &code);
            if let Some(state) = &request.state {
                query.append_pair("state", state);
            }
            query.append_pair("iss", issuer);
        }
        Ok(url.to_string())
    }

    /// Answers a token request: a code (with its PKCE verifier) or a refresh token, for this
    /// server's `resources`.
    pub async fn token(
        &self,
        request: &TokenRequest,
        resources: &[String],
    ) -> Result<TokenSet, OAuthError> {
        check_resource(request.resource.as_deref(), resources)?;
        let client_id = request
            .client_id
            .as_deref()
            .ok_or_else(|| OAuthError::InvalidRequest("client_id is required".into()))?;
        match request.grant_type.as_str() {
            "authorization_code" => self.exchange(request, client_id).await,
            "refresh_token" => self.refresh(request, client_id).await,
            other => Err(OAuthError::UnsupportedGrantType(format!(
                "grant_type {other:?}: authorization_code and refresh_token are served"
            ))),
        }
    }

    async fn exchange(
        &self,
        request: &TokenRequest,
        client_id: &str,
    ) -> Result<TokenSet, OAuthError> {
        let (Some(code), Some(verifier)) = (&request.code, &request.code_verifier) else {
            return Err(OAuthError::InvalidRequest(
                "code and code_verifier are required".into(),
            ));
        };
        let taken = self
            .store
            .take_oauth_code(&hash(code))
            .await?
            .ok_or_else(|| OAuthError::InvalidGrant("the code is unknown or was used".into()))?;
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let problem = if taken.expires_at < Utc::now() {
            Some("the code expired")
        } else if taken.client_id != client_id {
            Some("the code was issued to another client")
        } else if request.redirect_uri.as_deref() != Some(taken.redirect_uri.as_str()) {
            Some("redirect_uri differs from the authorization request's")
        } else if challenge != taken.challenge {
            Some("code_verifier does not match the code_challenge")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(OAuthError::InvalidGrant(problem.into()));
        }
        let family = hex(&random::<12>());
        self.issue(
            &family,
            client_id,
            &taken.tenant,
            &taken.scopes,
            taken.resource.as_deref(),
        )
        .await
    }

    async fn refresh(
        &self,
        request: &TokenRequest,
        client_id: &str,
    ) -> Result<TokenSet, OAuthError> {
        let presented = request
            .refresh_token
            .as_deref()
            .ok_or_else(|| OAuthError::InvalidRequest("refresh_token is required".into()))?;
        let digest = hash(presented);
        let token = self
            .store
            .oauth_token(&digest)
            .await?
            .filter(|t| t.kind == "refresh" && t.client_id == client_id)
            .ok_or_else(|| OAuthError::InvalidGrant("unknown refresh token".into()))?;
        if token.revoked_at.is_some() || token.expires_at < Utc::now() {
            return Err(OAuthError::InvalidGrant(
                "the refresh token is revoked or expired".into(),
            ));
        }
        if !self.store.spend_oauth_token(&digest).await? {
            // Used before: someone else holds it too. The whole grant ends.
            self.store.revoke_oauth_family(&token.family).await?;
            tracing::warn!(
                client_id,
                "A spent refresh token came back; its grant is revoked."
            );
            return Err(OAuthError::InvalidGrant(
                "the refresh token was used before; every token of its grant is revoked".into(),
            ));
        }
        self.issue(
            &token.family,
            client_id,
            &token.tenant,
            &token.scopes,
            token.resource.as_deref(),
        )
        .await
    }

    async fn issue(
        &self,
        family: &str,
        client_id: &str,
        tenant: &str,
        scopes: &str,
        resource: Option<&str>,
    ) -> Result<TokenSet, OAuthError> {
        let access = secret(ACCESS_PREFIX);
        let refresh = secret(REFRESH_PREFIX);
        for (token, kind, ttl) in [
            (&access, "access", ACCESS_TTL),
            (&refresh, "refresh", REFRESH_TTL),
        ] {
            self.store
                .create_oauth_token(NewToken {
                    hash: &hash(token),
                    kind,
                    family,
                    client_id,
                    tenant,
                    scopes,
                    resource,
                    expires_at: &time_after(ttl),
                })
                .await?;
        }
        Ok(TokenSet {
            access_token: access,
            token_type: "Bearer",
            expires_in: ACCESS_TTL.as_secs(),
            refresh_token: refresh,
            scope: scopes.to_owned(),
        })
    }

    /// The caller a live access token of this server names (`None`: unknown, expired or
    /// revoked).
    pub async fn caller(&self, token: &str) -> Result<Option<Caller>, StoreError> {
        let row = self.store.oauth_token(&hash(token)).await?;
        Ok(row
            .filter(|t| t.kind == "access" && t.revoked_at.is_none() && t.expires_at > Utc::now())
            .map(|t| Caller {
                subject: format!("{}{}", super::SUBJECT_PREFIX, t.client_id),
                tenant: Some(t.tenant),
                scopes: t
                    .scopes
                    .split_whitespace()
                    .filter_map(Scope::parse)
                    .collect(),
            }))
    }
}

/// What makes `uri` unusable as a redirect URI, if anything (RFC 8252, OAuth 2.1 §2.3.1).
pub fn redirect_uri_problem(uri: &str) -> Option<&'static str> {
    let Ok(parsed) = reqwest::Url::parse(uri) else {
        return Some("not an absolute URI");
    };
    if parsed.fragment().is_some() {
        return Some("a redirect URI has no fragment");
    }
    match parsed.scheme() {
        "https" => None,
        "http" => {
            let host = parsed.host_str().unwrap_or_default();
            let loopback = host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            (!loopback).then_some("plain http is for loopback hosts only")
        }
        "javascript" | "data" | "file" | "vbscript" | "about" | "blob" | "ftp" | "ws" | "wss" => {
            Some("not a scheme a redirect may use")
        }
        // An app's own scheme (`cursor://…`, `com.example.app:/cb`).
        _ => None,
    }
}

/// The scopes a request for `scope` gets: what it names of this server's (never `admin`), or
/// the default; `invalid_scope` when it names only what it cannot have.
pub fn granted_scopes(scope: Option<&str>) -> Result<Vec<Scope>, OAuthError> {
    let Some(scope) = scope.filter(|s| !s.trim().is_empty()) else {
        return Ok(DEFAULT_SCOPES.to_vec());
    };
    let mut scopes: Vec<Scope> = scope
        .split_whitespace()
        .filter_map(Scope::parse)
        .filter(|s| *s != Scope::Admin)
        .collect();
    scopes.sort();
    scopes.dedup();
    if scopes.is_empty() {
        return Err(OAuthError::InvalidScope(format!(
            "{scope:?} names no scope a client can get here"
        )));
    }
    Ok(scopes)
}

/// `Ok` when `resource` is absent or one of this server's.
fn check_resource(resource: Option<&str>, resources: &[String]) -> Result<(), OAuthError> {
    match resource {
        Some(r) if !resources.iter().any(|ours| ours == r.trim_end_matches('/')) => Err(
            OAuthError::InvalidRequest(format!("resource {r:?} is not served here (RFC 8707)")),
        ),
        _ => Ok(()),
    }
}

fn time_after(ttl: Duration) -> String {
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::zero());
    crate::store::time_text(Utc::now() + ttl)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_uris_are_https_loopback_http_or_an_apps_own() {
        for ok in [
            "https://claude.ai/api/mcp/auth_callback",
            "http://localhost:8080/cb",
            "http://127.0.0.1:33418/",
            "http://[::1]:9/cb",
            "cursor://anysphere.cursor-mcp/oauth/callback",
            "com.example.app:/oauth",
        ] {
            assert_eq!(redirect_uri_problem(ok), None, "{ok}");
        }
        for bad in [
            "http://evil.example/cb",
            "https://x.example/cb#frag",
            "javascript:alert(1)",
            "data:text/html,hi",
            "/relative",
        ] {
            assert!(redirect_uri_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn a_client_never_gets_admin_and_asking_for_nothing_gets_the_default() {
        assert_eq!(granted_scopes(None).unwrap(), DEFAULT_SCOPES.to_vec());
        assert_eq!(
            granted_scopes(Some("admin threads:read nope")).unwrap(),
            vec![Scope::ThreadsRead]
        );
        assert!(matches!(
            granted_scopes(Some("admin")),
            Err(OAuthError::InvalidScope(_))
        ));
    }
}
