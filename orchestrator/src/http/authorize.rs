//! The built-in authorization server's endpoints, with `[oauth] builtin = true`
//! (`crate::oauth::authorize` has the rules): RFC 8414 metadata, client registration, the
//! consent page and its answer, and the token endpoint. None needs the daemon's token: a client
//! comes here to get one. Their errors are OAuth's own JSON (`{error, error_description}`).

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::error::ErrorBody;
use super::oauth::host;
use super::{ApiError, ApiJson, ApiState};
use crate::caller::Scope;
use crate::oauth::authorize::{AuthorizationServer, AuthorizeRequest, OAuthError, TokenRequest};
use crate::oauth::registration::Registrations;
use crate::oauth::ResourceServer;

/// The server and this request's public URL, when the built-in server is on.
fn builtin<'a>(
    state: &'a ApiState,
    headers: &HeaderMap,
) -> Option<(&'a ResourceServer, &'a AuthorizationServer, String)> {
    let oauth = state.oauth.as_deref()?;
    let server = oauth.builtin()?;
    Some((oauth, server, oauth.public_url(host(headers))))
}

fn off() -> Response {
    ApiError::not_found("the built-in authorization server is off (`[oauth] builtin`)")
        .into_response()
}

/// An OAuth error as RFC 6749 §5.2 writes it.
fn oauth_error(err: &OAuthError) -> Response {
    let status = match err {
        OAuthError::InvalidClient(_) => StatusCode::UNAUTHORIZED,
        OAuthError::TooMany { .. } => StatusCode::TOO_MANY_REQUESTS,
        OAuthError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    };
    if let OAuthError::Store(err) = err {
        tracing::error!(error = %err, "The authorization server's store failed.");
    }
    let mut response = no_store((
        status,
        Json(json!({"error": err.code(), "error_description": err.to_string()})),
    ));
    if let OAuthError::TooMany { retry_after, .. } = err {
        // Whole seconds, rounded up: a client that waits that long is let in.
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    response
}

fn no_store(answer: impl IntoResponse) -> Response {
    let mut response = answer.into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The scopes a client may get from the built-in server.
fn client_scopes() -> Vec<&'static str> {
    Scope::ALL
        .iter()
        .filter(|s| **s != Scope::Admin)
        .map(|s| s.as_str())
        .collect()
}

/// The authorization server's metadata (RFC 8414).
#[utoipa::path(get, path = "/.well-known/oauth-authorization-server", operation_id = "authorizationServerMetadata", tag = "oauth",
    responses(
        (status = 200, description = "RFC 8414 metadata of the built-in authorization server.", body = Object),
        (status = 404, description = "The built-in server is off.", body = ErrorBody),
    ))]
pub async fn metadata(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    let Some((_, _, base)) = builtin(&state, &headers) else {
        return off();
    };
    Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/oauth/authorize"),
        "token_endpoint": format!("{base}/oauth/token"),
        "registration_endpoint": format!("{base}/oauth/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": client_scopes(),
        "authorization_response_iss_parameter_supported": true,
        "client_id_metadata_document_supported": true,
    }))
    .into_response()
}

/// Registers a public client (RFC 7591): all its redirect URIs, or none. Open to anyone, so
/// bounded (`crate::oauth::registration`): in size, in rate, and in how long a client that never
/// gets a token is kept.
#[utoipa::path(post, path = "/oauth/register", operation_id = "registerClient", tag = "oauth",
    request_body(content = Object, description = "RFC 7591 client metadata: `redirect_uris`, `client_name`, …"),
    responses(
        (status = 201, description = "The client, with its `client_id`.", body = Object),
        (status = 400, description = "`invalid_redirect_uri` (one URI refuses them all; at most 10, of at most 2048 bytes) or `invalid_client_metadata` (a body over 16 KiB, too).", body = Object),
        (status = 404, description = "The built-in server is off.", body = ErrorBody),
        (status = 429, description = "`temporarily_unavailable`: past `oauth.registrations_per_minute`, or `oauth.max_unused_clients` wait for their first token; `Retry-After` says when to come back.", body = Object),
    ))]
pub async fn register(State(state): State<ApiState>, headers: HeaderMap, body: Bytes) -> Response {
    let Some((_, server, _)) = builtin(&state, &headers) else {
        return off();
    };
    let metadata = server
        .registrations()
        .admit()
        .and_then(|()| Registrations::read(&body));
    let metadata = match metadata {
        Ok(metadata) => metadata,
        Err(err) => return oauth_error(&err),
    };
    match server.register(&metadata).await {
        Ok(client) => {
            tracing::info!(client_id = %client.id, "OAuth client registered.");
            no_store((
                StatusCode::CREATED,
                Json(json!({
                    "client_id": client.id,
                    "client_id_issued_at": client.created_at.timestamp(),
                    "client_name": client.name,
                    "redirect_uris": client.redirect_uris.0,
                    "token_endpoint_auth_method": "none",
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"],
                })),
            ))
        }
        Err(err) => oauth_error(&err),
    }
}

/// The consent page of an authorization request: the operator names the tenant and unlocks it
/// with an admin key.
#[utoipa::path(get, path = "/oauth/authorize", operation_id = "authorize", tag = "oauth",
    responses(
        (status = 200, description = "The consent page (HTML).", content_type = "text/html"),
        (status = 400, description = "A request this server does not serve, and why (HTML).", content_type = "text/html"),
        (status = 404, description = "The built-in server is off.", body = ErrorBody),
    ))]
pub async fn authorize(
    State(state): State<ApiState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let Some((oauth, server, base)) = builtin(&state, &headers) else {
        return off();
    };
    let request: AuthorizeRequest =
        serde_urlencoded::from_str(query.as_deref().unwrap_or_default()).unwrap_or_default();
    let page = match server.check(&request, &oauth.resources(&base)).await {
        Ok(client) => {
            let name = client.name.unwrap_or_else(|| client.id.clone());
            // What the client will get, not what it asked for (`admin` and unknown names go).
            let scope = crate::oauth::authorize::granted_scopes(request.scope.as_deref())
                .map(|scopes| {
                    scopes
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            let back = reqwest::Url::parse(&request.redirect_uri)
                .map(|u| u.origin().ascii_serialization())
                .unwrap_or_default();
            (StatusCode::OK, consent_page(&name, &scope, &back))
        }
        Err(err) => (StatusCode::BAD_REQUEST, refusal_page(&err.to_string())),
    };
    let mut response = (page.0, Html(page.1)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(super::page::CONTENT_SECURITY_POLICY),
    );
    // Never framed (a click on Allow is the operator's own), sniffed or kept.
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `POST /oauth/consent`, from the consent page.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Consent {
    /// The authorization request's parameters, as the page got them.
    #[schema(value_type = Object)]
    pub request: AuthorizeRequest,
    /// The tenant the client acts for.
    pub tenant: String,
    /// The operator token, or an API key with `admin`.
    pub admin_key: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Consented {
    /// Where the browser goes next: the client's redirect URI with the code.
    pub redirect_to: String,
}

/// The operator's consent: a code for the client, and where to send the browser.
#[utoipa::path(post, path = "/oauth/consent", operation_id = "consent", tag = "oauth",
    request_body = Consent,
    responses(
        (status = 200, description = "Granted.", body = Consented),
        (status = 400, description = "A request this server does not serve.", body = ErrorBody),
        (status = 403, description = "Not an admin key.", body = ErrorBody),
        (status = 404, description = "The built-in server is off.", body = ErrorBody),
        (status = 422, description = "A bad tenant name.", body = ErrorBody),
    ))]
pub async fn consent(
    State(state): State<ApiState>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    ApiJson(body): ApiJson<Consent>,
) -> Result<Json<Consented>, ApiError> {
    let Some((oauth, server, base)) = builtin(&state, &headers) else {
        return Err(ApiError::not_found(
            "the built-in authorization server is off",
        ));
    };
    let Some(admin) = admin_of(&state, &body.admin_key).await? else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "consent needs the operator token or an API key with `admin`",
        ));
    };
    crate::keys::check_tenant(&body.tenant).map_err(ApiError::unprocessable)?;
    let bad = |err: OAuthError| ApiError::new(StatusCode::BAD_REQUEST, err.code(), err.to_string());
    server
        .check(&body.request, &oauth.resources(&base))
        .await
        .map_err(bad)?;
    let redirect_to = server
        .grant(&body.request, &body.tenant, &base)
        .await
        .map_err(bad)?;
    tracing::info!(client_id = %body.request.client_id, tenant = %body.tenant, "OAuth grant given.");
    // A grant is a change like a key's: the audit log has who gave it, to which client, for
    // which tenant.
    let action = format!(
        "oauth consent {} for {}",
        body.request.client_id, body.tenant
    );
    let remote = super::audit::remote_of(&extensions);
    let entry = super::audit::Entry {
        caller: &admin,
        action: &action,
        path: "/oauth/consent",
        thread: None,
        status: StatusCode::OK,
        remote: remote.as_deref(),
    };
    super::audit::write(&state.store, entry).await;
    Ok(Json(Consented { redirect_to }))
}

/// The caller `presented` is, when it is the operator token or a live API key with `admin`.
async fn admin_of(
    state: &ApiState,
    presented: &str,
) -> Result<Option<crate::caller::Caller>, ApiError> {
    if super::is_operator_token(state, presented) {
        return Ok(Some(crate::caller::Caller::operator()));
    }
    let key = state.pipeline.keys().authenticate(presented).await?;
    Ok(key
        .map(|k| crate::keys::caller_of(&k))
        .filter(|caller| caller.has(Scope::Admin)))
}

/// The token endpoint (RFC 6749 §3.2): a form, as the RFC has it.
#[utoipa::path(post, path = "/oauth/token", operation_id = "token", tag = "oauth",
    request_body(content = Object, content_type = "application/x-www-form-urlencoded",
        description = "`grant_type` `authorization_code` (`code`, `code_verifier`, `redirect_uri`, `client_id`) or `refresh_token` (`refresh_token`, `client_id`); `resource` optional."),
    responses(
        (status = 200, description = "`access_token`, `refresh_token`, `expires_in`, `scope`.", body = Object),
        (status = 400, description = "`invalid_grant`, `invalid_request`, `unsupported_grant_type`.", body = Object),
        (status = 404, description = "The built-in server is off.", body = ErrorBody),
    ))]
pub async fn token(State(state): State<ApiState>, headers: HeaderMap, body: Bytes) -> Response {
    let Some((oauth, server, base)) = builtin(&state, &headers) else {
        return off();
    };
    let request: TokenRequest = match serde_urlencoded::from_bytes(&body) {
        Ok(request) => request,
        Err(err) => return oauth_error(&OAuthError::InvalidRequest(err.to_string())),
    };
    match server.token(&request, &oauth.resources(&base)).await {
        Ok(tokens) => no_store(Json(tokens)),
        Err(err) => oauth_error(&err),
    }
}

/// Text for HTML: `&`, `<`, `>`, `"` and `'` escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn consent_page(client: &str, scope: &str, back: &str) -> String {
    let (client, scope, back) = (escape(client), escape(scope), escape(back));
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Authorize {client} · Harness</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/assets/style.css">
<script type="module" src="/assets/consent.js"></script>
</head>
<body class="consent">
<form class="token-form" data-testid="consent-form">
  <h2>Authorize <span data-testid="consent-client">{client}</span></h2>
  <p>It asks for <strong data-testid="consent-scopes">{scope}</strong> on this Harness, and goes back to <code>{back}</code>.</p>
  <label>Tenant it acts for <input type="text" data-testid="consent-tenant" autocomplete="off" required></label>
  <label>Operator token or admin key <input type="password" data-testid="consent-key" autocomplete="off" required></label>
  <p class="token-error" data-testid="consent-error" hidden></p>
  <button type="submit" class="primary" data-testid="consent-allow">Allow</button>
</form>
</body>
</html>
"#
    )
}

fn refusal_page(why: &str) -> String {
    let why = escape(why);
    format!(
        r#"<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Not authorized · Harness</title>
<link rel="stylesheet" href="/assets/style.css"></head>
<body class="consent"><p class="token-error" data-testid="consent-refused">This authorization request is not served: {why}</p></body>
</html>
"#
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_escapes_what_a_client_chose() {
        let page = super::consent_page("<script>x</script>", "a&b", "https://x\"y");
        assert!(!page.contains("<script>x"), "{page}");
        assert!(page.contains("&lt;script&gt;x&lt;/script&gt;") && page.contains("a&amp;b"));
        assert!(page.contains("https://x&quot;y"));
    }

    #[test]
    fn client_scopes_never_include_admin() {
        assert!(!super::client_scopes().contains(&"admin"));
    }
}
