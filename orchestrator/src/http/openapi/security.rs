//! Who may call each operation, as the document says it: the scope every operation behind the
//! token needs (the one `http::access::NEEDS` gives its route, so the two cannot differ), named
//! on the bearer scheme (an API key's scopes) and, when OAuth is on, on the `oauth2` scheme.
//!
//! **The `oauth2` scheme is declared only when `[oauth]` is configured**: a document that named
//! an authorization server the daemon does not trust would send clients after tokens it then
//! refuses. With `[oauth] builtin`, it is the authorization code flow with PKCE (`S256`, the
//! only method the server takes) at the daemon's own `/oauth/authorize` and `/oauth/token`,
//! written as paths: OpenAPI 3.1 resolves them against the URL the document was read from, so
//! they hold under any name the daemon is reached by. With `[oauth] issuer`, it is that issuer
//! (`openIdConnect`: its metadata names its endpoints). A route needing `admin` names no OAuth
//! scope with the built-in server, which never grants it.

use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{
    AuthorizationCode, Flow, OAuth2, OpenIdConnect, Scopes, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::OpenApi;

use super::BEARER;
use crate::caller::Scope;
use crate::http::access::{need_of, Need};
use crate::oauth::ResourceServer;

/// The name of the OAuth scheme in `components.securitySchemes`.
pub const OAUTH: &str = "oauth2";

/// What holding `scope` lets a caller do.
pub fn describe(scope: Scope) -> &'static str {
    match scope {
        Scope::ThreadsRead => {
            "Read threads, their messages, events, files, tool calls, permissions and \
             schedules; list profiles and tools; `/mcp`'s reading tools."
        }
        Scope::ThreadsWrite => {
            "Create, change, message, fork, archive and delete threads; prewarm; call tools; \
             upload files; make, change and run schedules; `/mcp`'s tools that change something."
        }
        Scope::Approvals => "Answer a thread's permission requests.",
        Scope::Admin => "API keys, the audit log and webhook deliveries.",
        Scope::Metrics => "`/metrics` and `/api/pool`: every thread's processes, the counters.",
    }
}

/// The scopes an OAuth client can hold: with the built-in server, those it grants (never
/// `admin`); with an issuer, any of them.
fn grantable(oauth: &ResourceServer) -> Vec<Scope> {
    if oauth.builtin().is_none() {
        return Scope::ALL.to_vec();
    }
    let every: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
    crate::oauth::authorize::granted_scopes(Some(&every.join(" "))).unwrap_or_default()
}

/// Declares the `oauth2` scheme when `oauth` is on (see the module's doc), and names on every
/// operation behind the token the scope its route needs.
pub fn declare(doc: &mut OpenApi, oauth: Option<&ResourceServer>) {
    let grantable = oauth.map(grantable).unwrap_or_default();
    if let Some(oauth) = oauth {
        let scheme = scheme(oauth, &grantable);
        let components = doc.components.get_or_insert_with(Default::default);
        components
            .security_schemes
            .insert(OAUTH.into(), scheme.into());
    }
    for (path, item) in doc.paths.paths.iter_mut() {
        for (method, operation) in operations(item) {
            // Only the operations `require_bearer` marked are behind the token.
            if operation.security.is_none() {
                continue;
            }
            let scope = match need_of(&method, path) {
                Need::Scope(scope) => Some(scope),
                Need::Caller => None,
            };
            name_scope(operation, scope, oauth.is_some(), &grantable);
        }
    }
}

/// `operation`'s requirements: the bearer scheme with `scope` (an API key must hold it; the
/// operator's token holds every scope), or an OAuth token with it, when one can have it.
fn name_scope(operation: &mut Operation, scope: Option<Scope>, oauth: bool, grantable: &[Scope]) {
    let names: Vec<&str> = scope.iter().map(|s| s.as_str()).collect();
    let mut requirements = vec![SecurityRequirement::new(BEARER, names.clone())];
    if oauth && scope.is_none_or(|s| grantable.contains(&s)) {
        requirements.push(SecurityRequirement::new(OAUTH, names));
    }
    operation.security = Some(requirements);
    if let Some(scope) = scope {
        let why = format!(
            "A `Host` or `Origin` the daemon does not serve, or a caller without the scope \
             `{scope}` (`forbidden`)."
        );
        let responses = &mut operation.responses.responses;
        if let Some(utoipa::openapi::RefOr::T(response)) = responses.get_mut("403") {
            if response.description.starts_with("A `Host` or `Origin`") {
                response.description = why;
            }
        }
    }
}

/// The scheme of `oauth`'s tokens, offering `grantable`.
fn scheme(oauth: &ResourceServer, grantable: &[Scope]) -> SecurityScheme {
    let scopes = Scopes::from_iter(grantable.iter().map(|s| (s.as_str(), describe(*s))));
    if oauth.builtin().is_some() {
        let flow = AuthorizationCode::with_refresh_url(
            "/oauth/authorize",
            "/oauth/token",
            scopes,
            "/oauth/token",
        );
        return SecurityScheme::OAuth2(OAuth2::with_description(
            [Flow::AuthorizationCode(flow)],
            "The daemon's own authorization server (`[oauth] builtin`): the authorization \
             code flow with PKCE (`code_challenge_method=S256`, required) for public clients \
             (`token_endpoint_auth_method: none`), registered at `/oauth/register` (RFC 7591) or \
             named by a client ID metadata document; the operator consents with an admin \
             credential. Metadata: `/.well-known/oauth-authorization-server`. Its access tokens \
             go in `Authorization: Bearer`; it never grants `admin`.",
        ));
    }
    let issuer = oauth.issuer("");
    let issuer = issuer.trim_end_matches('/');
    let names: Vec<&str> = grantable.iter().map(|s| s.as_str()).collect();
    SecurityScheme::OpenIdConnect(OpenIdConnect::with_description(
        format!("{issuer}/.well-known/openid-configuration"),
        format!(
            "JWT access tokens of the authorization server `{issuer}` (`[oauth] issuer`; an \
             issuer without OpenID discovery has its RFC 8414 metadata at \
             `{issuer}/.well-known/oauth-authorization-server`), for this server as audience, in \
             `Authorization: Bearer`. Its `scope` (or `scp`) claim names the scopes: {}.",
            names.join(", ")
        ),
    ))
}

/// `item`'s operations with their methods.
fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = (axum::http::Method, &mut Operation)> {
    use axum::http::Method;
    [
        (Method::GET, &mut item.get),
        (Method::PUT, &mut item.put),
        (Method::POST, &mut item.post),
        (Method::DELETE, &mut item.delete),
        (Method::PATCH, &mut item.patch),
    ]
    .into_iter()
    .filter_map(|(method, operation)| operation.as_mut().map(|o| (method, o)))
}
