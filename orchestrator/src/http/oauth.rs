//! The OAuth side of the HTTP edge (`crate::oauth` validates the tokens): the protected resource
//! metadata (RFC 9728) of the API and of `/mcp`, and the challenges of refusals (`401`, and `403`
//! for a missing scope), which point OAuth clients at it.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::error::ErrorBody;
use super::{ApiError, ApiState};
use crate::oauth::ResourceServer;

/// Where the metadata of the API is, under the server's public URL.
const API_METADATA: &str = "/.well-known/oauth-protected-resource";

/// Where the metadata of `/mcp` is.
const MCP_METADATA: &str = "/.well-known/oauth-protected-resource/mcp";

/// The scopes a challenge asks for: what a client needs to use threads.
const WANTED: &str = "threads:read threads:write";

/// The API as a protected resource: its URL and the issuer whose tokens it takes.
#[utoipa::path(get, path = "/.well-known/oauth-protected-resource", operation_id = "apiResourceMetadata", tag = "service",
    responses(
        (status = 200, description = "RFC 9728 protected resource metadata of the API.", body = Object),
        (status = 404, description = "OAuth is off (`[oauth] issuer` is not set).", body = ErrorBody),
    ))]
pub async fn api_metadata(
    State(state): State<ApiState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    metadata(&state, &headers, "")
}

/// `/mcp` as a protected resource: what an MCP client reads after its first `401`.
#[utoipa::path(get, path = "/.well-known/oauth-protected-resource/mcp", operation_id = "mcpResourceMetadata", tag = "mcp",
    responses(
        (status = 200, description = "RFC 9728 protected resource metadata of `/mcp`.", body = Object),
        (status = 404, description = "OAuth is off (`[oauth] issuer` is not set).", body = ErrorBody),
    ))]
pub async fn mcp_metadata(
    State(state): State<ApiState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    metadata(&state, &headers, "/mcp")
}

fn metadata(state: &ApiState, headers: &HeaderMap, path: &str) -> Result<Json<Value>, ApiError> {
    let oauth = state
        .oauth
        .as_ref()
        .ok_or_else(|| ApiError::not_found("OAuth is off: `[oauth]` names no issuer"))?;
    let base = oauth.public_url(host(headers));
    Ok(Json(oauth.metadata(&format!("{base}{path}"), &base)))
}

/// The request's `Host` (the guard has checked it is one the daemon serves).
pub fn host(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::HOST).and_then(|v| v.to_str().ok())
}

/// The metadata URL for a request to `path` (`/mcp…`: `/mcp`'s; else the API's).
fn metadata_url(oauth: &ResourceServer, headers: &HeaderMap, path: &str) -> String {
    let which = if path.starts_with("/mcp") {
        MCP_METADATA
    } else {
        API_METADATA
    };
    format!("{}{which}", oauth.public_url(host(headers)))
}

/// `401` for a request to `path` without credentials the daemon takes, pointing at the metadata
/// (`error`: `invalid_token` when a token came and was refused, with why).
pub fn unauthorized(
    oauth: &ResourceServer,
    headers: &HeaderMap,
    path: &str,
    refused: Option<&str>,
) -> Response {
    let url = metadata_url(oauth, headers, path);
    let challenge = oauth.challenge(&url, WANTED, refused.map(|_| "invalid_token"));
    let message = refused.map_or_else(
        || "missing bearer token: see the resource metadata for where to get one".to_owned(),
        |why| format!("the bearer token was refused: {why}"),
    );
    with_challenge(
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message),
        &challenge,
    )
}

/// The `WWW-Authenticate` value of a `403` for a caller without `scope` on a request to `path`
/// (RFC 6750 §3.1): for an OAuth caller (`oauth`: the server whose token it holds), where the
/// resource metadata is too, so that a client can ask the issuer for a token with more (MCP's
/// step-up); for a key, whose scopes are fixed when it is made, the scope alone.
pub fn insufficient_scope(
    oauth: Option<&ResourceServer>,
    headers: &HeaderMap,
    path: &str,
    scope: &str,
) -> String {
    match oauth {
        Some(oauth) => {
            let url = metadata_url(oauth, headers, path);
            oauth.challenge(&url, scope, Some("insufficient_scope"))
        }
        None => format!(r#"Bearer realm="harness", scope="{scope}", error="insufficient_scope""#),
    }
}

/// `refusal` with `challenge` as its `WWW-Authenticate`.
pub fn with_challenge(refusal: impl IntoResponse, challenge: &str) -> Response {
    let mut response = refusal.into_response();
    if let Ok(value) = HeaderValue::from_str(challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}
