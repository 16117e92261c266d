//! The HTTP API. Handlers are thin: extract, call the pipeline or the store, map the result into
//! a typed response. `router(state)` is a function, so tests can call it without a socket.
//!
//! Files: `serve.rs` (the accept loop), `guard.rs` (Host, Origin, bodies), this one (the router;
//! the operator token, an API key or a JWT made a [`Caller`]), `access.rs` (scopes, tenants),
//! `routing.rs` (here or the thread's owner), `operations.rs` (one row per operation: method,
//! path, scope, where it runs, body; routing, access and the guard read it), a file per
//! resource, `page.rs` (the web page), `openapi.rs` (`openapi/`: the config's rules, the security
//! schemes; `crate::api::doc`: the patterns the handlers check), `error.rs`, `mcp_endpoint/`
//! (`/mcp`), `a2a/` (`/a2a` and the Agent Card: the A2A door).

pub mod a2a;
pub mod access;
mod acp;
mod archive;
pub(crate) mod audit;
mod authorize;
mod diff;
mod error;
mod files;
mod guard;
mod keys;
pub mod mcp_endpoint;
mod metrics;
mod oauth;
mod openapi;
pub mod operations;
mod page;
mod permissions;
mod profiles;
mod routing;
mod schedules;
pub mod serve;
mod threads;
mod tools;
mod webhooks;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use subtle::ConstantTimeEq;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::caller::Caller;
use crate::config::Config;
use crate::mcp::McpAdapter;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;
use crate::pool::Pool;
use crate::store::Store;
pub use error::ApiError;

/// The parts the handlers use. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    pub pipeline: Pipeline,
    pub store: Store,
    pub pool: Pool,
    pub mcp: Arc<McpAdapter>,
    /// `/mcp`: the tools and threads for outside MCP clients.
    pub mcp_endpoint: Arc<mcp_endpoint::McpEndpoint>,
    /// Every thread operation: the thread handlers are adapters over it.
    pub threads: crate::service::ThreadService,
    /// Each goal's loop (the Managed Agents API's outcomes).
    pub goals: crate::goals::Goals,
    pub metrics: Arc<Metrics>,
    pub config: Arc<Config>,
    /// This node among several (`cluster.advertise`); `None`: a single node.
    pub cluster: Option<crate::cluster::Cluster>,
    /// Permits for long-lived streams (`http.max_streams`, see [`serve::Door`]).
    pub streams: crate::sync::Streams,
    /// Woken when a delivery is due again.
    pub webhooks: crate::webhooks::Webhooks,
    /// Manual runs of schedules.
    pub schedules: crate::schedules::Schedules,
    /// Access tokens of the OAuth issuer; `None`: no OAuth.
    pub oauth: Option<Arc<crate::oauth::ResourceServer>>,
    /// The whole router, once built: a door inside the daemon (`/acp`) calls the API through it
    /// as its caller ([`crate::remote::Daemon::in_process`]).
    pub router: Arc<std::sync::OnceLock<Router>>,
}

/// The Managed Agents door's part of the state.
impl axum::extract::FromRef<ApiState> for crate::managed::ManagedState {
    fn from_ref(state: &ApiState) -> Self {
        crate::managed::ManagedState {
            threads: state.threads.clone(),
            goals: state.goals.clone(),
            pipeline: state.pipeline.clone(),
            store: state.store.clone(),
            pool: state.pool.clone(),
            config: state.config.clone(),
            streams: state.streams.clone(),
        }
    }
}

/// A JSON object body, whose rejections are our JSON errors: 415 not `application/json`, 400 bad
/// JSON (with its position), 422 a body that is not an object or a missing or mistyped field
/// (named by serde), 413 too large.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let json = request
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(guard::is_json);
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Expected request with `Content-Type: application/json`",
            ));
        }
        let bytes = axum::body::Bytes::from_request(request, state).await?;
        error::parse_json(&bytes).map(ApiJson)
    }
}

impl<T: serde::Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        Json(self.0).into_response()
    }
}

/// `Path` whose rejections (an undecodable segment such as `%FF`) are our JSON 400.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// `Query` whose rejections (`?wait=maybe`) are our JSON 400.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// The whole HTTP surface. Every route is registered through `utoipa_axum::routes!`, which adds
/// its OpenAPI operation in the same call (see [`openapi`] for why they cannot drift).
///
/// To add a route: a handler with `#[utoipa::path(method, path = "…", responses(…))]`, and one
/// `.routes(routes!(module::handler))` line in the sub-router it belongs to (`api` is behind the
/// token and under `/api`; paths of one `routes!` must be the same path, methods may differ).
pub fn router(state: ApiState) -> Router {
    let (router, doc) = documented_routes(&state).split_for_parts();
    let document = openapi::Document::new(doc, &state);
    let guard = Arc::new(guard::Guard::new(&state.config, state.config.bind));
    let own = state.router.clone();
    let built = router
        // A body the guard refused is refused on a route only: elsewhere 404 or 405 comes first.
        .route_layer(middleware::from_fn(guard::refuse_read_body))
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not take that method",
            )
        })
        .layer(axum::Extension(document))
        // `guard` bounds every body (by route: see `guard::Guard::large`); axum's own default
        // limit would refuse the large routes' bodies a second time, lower.
        .layer(DefaultBodyLimit::disable())
        // The guard outside CORS: a preflight from an origin it refuses gets its 403 too.
        .layer(cors(&guard))
        .layer(middleware::from_fn_with_state(guard.clone(), guard::check))
        // Outermost first: every request gets an `x-request-id` (the client's, or a new UUID),
        // carried by its `request` span and echoed on the answer.
        .layer(PropagateRequestIdLayer::x_request_id())
        // A 5xx is the handler's to log, with its reason (a refused stream, a failed turn): not
        // an ERROR line per answer, which a flood of refusals would turn into a flood of lines.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_failure(
                    tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG),
                ),
        )
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .with_state(state);
    // A router is built once per state; a second build keeps the first.
    let _ = own.set(built.clone());
    built
}

/// Every route with its documentation, and the layers that belong to some routes only.
fn documented_routes(state: &ApiState) -> OpenApiRouter<ApiState> {
    // Each operation's scope, placement and body are its row in `operations::OPERATIONS`: what
    // needs the thread's process runs on the node that owns the thread (`routing::to_owner`).
    let api = OpenApiRouter::new()
        .routes(routes!(threads::create, threads::lifecycle::list))
        .routes(routes!(
            threads::get_one,
            threads::lifecycle::patch,
            threads::lifecycle::delete
        ))
        .routes(routes!(threads::lifecycle::messages, threads::post_message))
        .routes(routes!(threads::interrupt))
        .routes(routes!(permissions::answer))
        .routes(routes!(diff::diff))
        .routes(routes!(archive::archive))
        .routes(routes!(files::list_thread_files))
        .routes(routes!(files::get_thread_file))
        .routes(routes!(threads::fork))
        .routes(routes!(threads::outcomes))
        .routes(routes!(threads::model_requests))
        .routes(routes!(tools::thread_calls))
        .routes(routes!(permissions::list))
        .routes(routes!(permissions::rules))
        .routes(routes!(permissions::delete_rule))
        .routes(routes!(threads::events))
        .routes(routes!(threads::prewarm))
        .routes(routes!(tools::pool))
        .routes(routes!(profiles::list))
        .routes(routes!(tools::list))
        .routes(routes!(tools::call))
        .routes(routes!(webhooks::list))
        .routes(routes!(webhooks::get_one))
        .routes(routes!(webhooks::redeliver))
        .routes(routes!(schedules::create, schedules::list))
        .routes(routes!(
            schedules::get_one,
            schedules::patch,
            schedules::delete
        ))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::run))
        .routes(routes!(schedules::runs))
        .routes(routes!(audit::list))
        .routes(routes!(keys::create, keys::list))
        .routes(routes!(keys::revoke))
        .routes(routes!(keys::me))
        .routes(routes!(files::upload))
        .routes(routes!(files::download))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            routing::to_owner,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), access::check))
        // Inside the token check, which sets the caller it records; outside the access check,
        // so refusals are recorded too.
        .route_layer(middleware::from_fn_with_state(state.clone(), audit::record));
    // Behind the token too: Prometheus sends it with `authorization: {credentials: …}`.
    let metrics = OpenApiRouter::new()
        .routes(routes!(metrics::render))
        .route_layer(middleware::from_fn_with_state(state.clone(), access::check));
    let mcp = mcp_routes(state);
    // The ACP agent for editors on other machines (a WebSocket).
    let acp = OpenApiRouter::new()
        .routes(routes!(acp::connect))
        .route_layer(middleware::from_fn_with_state(state.clone(), access::check));
    // The A2A door: the JSON-RPC endpoint behind the token and the scope check, as `/mcp` is.
    let a2a = OpenApiRouter::new()
        .routes(routes!(a2a::rpc))
        .route_layer(middleware::from_fn_with_state(state.clone(), access::check));
    let mut routes = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(healthz))
        // The web page and this API's document: no token (they hold no data; the page asks for
        // one when the API needs it).
        .routes(routes!(page::index))
        .routes(routes!(page::asset))
        .routes(routes!(openapi::document))
        // What an OAuth client reads after its first 401 (no token: it has none yet).
        .routes(routes!(oauth::api_metadata))
        .routes(routes!(oauth::mcp_metadata))
        // The built-in authorization server (`[oauth] builtin`): where a client gets a token.
        .routes(routes!(authorize::metadata))
        .routes(routes!(authorize::register))
        .routes(routes!(authorize::authorize))
        .routes(routes!(authorize::consent))
        .routes(routes!(authorize::token))
        .merge(behind_token(metrics, state))
        .merge(behind_token(mcp, state))
        .merge(behind_token(acp, state))
        // The Agent Card: no token (discovery); a credential presented shows more.
        .routes(routes!(a2a::card))
        .merge(behind_token(a2a, state))
        .nest("/api", behind_token(api, state))
        .nest("/v1", managed_routes(state));
    openapi::add_common_errors(routes.get_openapi_mut());
    routes
}

/// `/mcp`: rmcp's Streamable HTTP server behind the endpoint's screen and the scope check; its
/// GET and DELETE answer 405 (no sessions, no streams). Not a handler, so not `routes!`: its
/// operations come from `openapi::McpDoc`, right here.
fn mcp_routes(state: &ApiState) -> OpenApiRouter<ApiState> {
    #[allow(clippy::disallowed_methods)]
    OpenApiRouter::with_openapi(openapi::McpDoc::openapi())
        .route_service(
            "/mcp",
            mcp_endpoint::service(
                state.mcp_endpoint.clone(),
                state
                    .config
                    .files
                    .message_body_limit(state.config.max_body_bytes),
            ),
        )
        .route_layer(middleware::from_fn_with_state(
            state.mcp_endpoint.clone(),
            mcp_endpoint::screen,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), access::check))
}

/// The Managed Agents API, for Anthropic's SDKs: behind the token (their key comes as
/// `x-api-key` too), the audit log and the scope check, what needs a session's process on its
/// thread's owner, every refusal in the API's error shape.
fn managed_routes(state: &ApiState) -> OpenApiRouter<ApiState> {
    let managed = crate::managed::routes()
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            routing::to_owner,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), access::check))
        // Each change written as `/api`'s are, refusals included.
        .route_layer(middleware::from_fn_with_state(state.clone(), audit::record));
    behind_token(managed, state)
        .route_layer(middleware::from_fn(api_key_header))
        .route_layer(middleware::from_fn(crate::managed::error::reshape))
}

/// A key sent as `x-api-key` (the Anthropic SDKs' header) is taken as the bearer token, unless
/// the request has an `Authorization` of its own.
async fn api_key_header(mut request: Request, next: Next) -> Response {
    use axum::http::header::AUTHORIZATION;
    if !request.headers().contains_key(AUTHORIZATION) {
        let bearer = request
            .headers()
            .get("x-api-key")
            .and_then(|key| key.to_str().ok())
            .and_then(|key| axum::http::HeaderValue::from_str(&format!("Bearer {key}")).ok());
        if let Some(bearer) = bearer {
            request.headers_mut().insert(AUTHORIZATION, bearer);
        }
    }
    next.run(request).await
}

/// `router` behind [`require_token`], its operations marked as needing the bearer token.
fn behind_token(router: OpenApiRouter<ApiState>, state: &ApiState) -> OpenApiRouter<ApiState> {
    let mut router =
        router.route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    openapi::require_bearer(router.get_openapi_mut());
    router
}

fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::debug_span!("request", method = %request.method(), path = %request.uri().path(), request_id = %id)
}

/// CORS headers for the origins `http.allowed_origins` lists (the guard refuses the others).
fn cors(guard: &guard::Guard) -> tower_http::cors::CorsLayer {
    use axum::http::{header, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins = if guard.any_origin() {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(guard.cors_origins())
    };
    CorsLayer::new()
        .allow_origin(origins)
        .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::HeaderName::from_static("last-event-id"),
            header::HeaderName::from_static("mcp-protocol-version"),
            header::HeaderName::from_static("mcp-session-id"),
            // What a2a-sdk clients send with every request.
            header::HeaderName::from_static("a2a-version"),
        ])
        // A browser's MCP client reads its session id and the scope a refusal names.
        .expose_headers([
            header::WWW_AUTHENTICATE,
            header::HeaderName::from_static("mcp-session-id"),
        ])
}

/// `GET /healthz`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    #[schema(example = "ok")]
    pub status: &'static str,
}

/// The daemon answers. No token needed.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "service",
    responses((status = 200, description = "The daemon is up.", body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Who is calling, for every `/api`, `/mcp` and `/metrics` request, set as the request's
/// [`Caller`]:
/// - `Authorization: Bearer <auth_token>`: the operator; or, for a request a peer forwarded
///   (with that token), the caller it came from, verified with the same token (it was counted
///   against its key's `rpm` where it arrived);
/// - `Authorization: Bearer hk_…`: the live API key it is (`crate::keys`), whose requests per
///   minute it counts (`429` with `Retry-After` past them);
/// - anything else, when no token is configured: the operator (anyone who can reach the
///   daemon).
///
/// Anything else is `401` with a `WWW-Authenticate` challenge (RFC 6750 §3).
async fn require_token(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let caller = match authenticate(&state, &parts).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    parts.extensions.insert(caller);
    next.run(Request::from_parts(parts, body)).await
}

async fn authenticate(
    state: &ApiState,
    request: &axum::http::request::Parts,
) -> Result<Caller, Response> {
    let presented = request
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_credentials);
    let token = state.config.auth_token.as_deref().filter(|t| !t.is_empty());
    let oauth = state.oauth.as_deref();
    let operator = match (token, presented) {
        (Some(_), Some(presented)) => is_operator_token(state, presented),
        (Some(_), None) => false,
        // No token configured: whoever reaches the daemon is its operator, unless they name a
        // key, or OAuth is on (then a caller needs credentials).
        (None, presented) => {
            oauth.is_none() && presented.is_none_or(|p| !p.starts_with(crate::keys::KEY_PREFIX))
        }
    };
    if operator {
        // A peer forwards with the token the nodes share, and the caller it serves.
        return match forwarded_caller(state, request) {
            Ok(caller) => Ok(caller.unwrap_or_else(Caller::operator)),
            Err(err) => {
                tracing::warn!(error = %err, "Refused a forwarded request whose caller does not verify.");
                Err(
                    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", err.to_string())
                        .into_response(),
                )
            }
        };
    }
    if let Some(presented) = presented {
        let keys = state.pipeline.keys();
        match keys.authenticate(presented).await {
            Ok(Some(key)) => {
                return match keys.admit(&key) {
                    Ok(()) => Ok(crate::keys::caller_of(&key)),
                    Err(wait) => Err(too_many_requests(&key.id, wait)),
                }
            }
            Ok(None) => {}
            Err(err) => return Err(ApiError::from(err).into_response()),
        }
    }
    let Some(oauth) = oauth else {
        return Err(unauthorized(presented.is_some()));
    };
    let path = request
        .extensions
        .get::<axum::extract::OriginalUri>()
        .map_or_else(|| request.uri.path(), |uri| uri.0.path());
    let Some(presented) = presented else {
        return Err(oauth::unauthorized(oauth, &request.headers, path, None));
    };
    let public_url = oauth.public_url(oauth::host(&request.headers));
    match oauth.caller(presented, &public_url).await {
        Ok(caller) => Ok(caller),
        Err(crate::oauth::TokenError::Invalid(why)) => Err(oauth::unauthorized(
            oauth,
            &request.headers,
            path,
            Some(&why),
        )),
        Err(err @ crate::oauth::TokenError::Unavailable(_)) => {
            tracing::warn!(error = %err, "Could not check an OAuth token.");
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "issuer_unavailable",
                err.to_string(),
            )
            .into_response())
        }
    }
}

/// Whether `presented` is the configured operator token (compared in constant time); false
/// when none is configured.
pub(crate) fn is_operator_token(state: &ApiState, presented: &str) -> bool {
    state
        .config
        .auth_token
        .as_deref()
        .filter(|t| !t.is_empty())
        .is_some_and(|token| bool::from(presented.as_bytes().ct_eq(token.as_bytes())))
}

/// `401`: no credentials, or ones that are neither the token nor a live key.
fn unauthorized(presented: bool) -> Response {
    // RFC 6750 §3: the scheme to use; an error code only when credentials came.
    let challenge = if presented {
        r#"Bearer realm="harness", error="invalid_token""#
    } else {
        r#"Bearer realm="harness""#
    };
    let mut refused = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "missing or wrong bearer token",
    )
    .into_response();
    refused.headers_mut().insert(
        axum::http::header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static(challenge),
    );
    refused
}

/// `429` for a key past its requests per minute, with `Retry-After` in whole seconds.
fn too_many_requests(key: &str, wait: std::time::Duration) -> Response {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut refused = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!("key {key} is past its requests per minute; retry in {seconds} s"),
    )
    .into_response();
    refused.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(seconds),
    );
    refused
}

/// The caller a peer forwarded the request for (`crate::caller`), when it came from one.
fn forwarded_caller(
    state: &ApiState,
    request: &axum::http::request::Parts,
) -> Result<Option<Caller>, crate::caller::ForwardError> {
    let headers = &request.headers;
    let (true, Some(value)) = (
        headers.contains_key(crate::cluster::FORWARDED_HEADER),
        headers.get(crate::caller::CALLER_HEADER),
    ) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| crate::caller::ForwardError::Malformed)?;
    let key = state.config.auth_token.as_deref().unwrap_or_default();
    let path = request
        .extensions
        .get::<axum::extract::OriginalUri>()
        .map_or_else(|| request.uri.clone(), |uri| uri.0.clone());
    let path = path.path_and_query().map_or("", |p| p.as_str());
    let method = request.method.as_str();
    Caller::from_forward(value, key.as_bytes(), method, path).map(Some)
}

/// The request's caller, which the token check set; the operator for a route outside it.
pub(crate) fn caller_in(extensions: &axum::http::Extensions) -> Caller {
    extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(Caller::operator)
}

/// The credentials of an `Authorization: Bearer …` value; the scheme is case-insensitive
/// (RFC 9110 §11.1).
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

#[cfg(test)]
mod tests {
    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(super::bearer_credentials("Bearer abc"), Some("abc"));
        assert_eq!(super::bearer_credentials("bearer abc"), Some("abc"));
        assert_eq!(super::bearer_credentials("BEARER  abc "), Some("abc"));
        assert_eq!(super::bearer_credentials("Basic abc"), None);
        assert_eq!(super::bearer_credentials("Bearer"), None);
    }
}
