//! What every request passes before it reaches a handler, so that a web page cannot drive a
//! daemon it happens to reach (a token-less one on loopback is the default):
//!
//! - `Host` must name the bound address, `localhost` (on a loopback or wildcard bind) or one of
//!   `http.allowed_hosts`: a DNS-rebinding page reaches us under a name of its own (403).
//! - `Origin`, when a browser sends one, must be our own origin or one of
//!   `http.allowed_origins` (403).
//! - A request body must be `application/json` (415): an HTML form can send only other types
//!   without a CORS preflight. Two exceptions: OAuth's token endpoint (`/oauth/token`), which
//!   RFC 6749 has take a form: it holds no ambient credential (a code is worthless without its
//!   PKCE verifier), so a page posting there gains nothing a direct client lacks; and uploads
//!   (`POST /api/files`), whose body is the file under its own type: any type but the three a
//!   form can send (`files` then refuses what it does not take).
//! - The body is read here, bounded by `max_body_bytes` (413) and by `http.read_timeout`; a
//!   refused body is read and thrown away (up to a bound) before the answer, so the client reads
//!   its 413 or 415 instead of a connection reset. That answer waits until the request is routed
//!   ([`refuse_read_body`]): a method the route does not take is 405 (with `Allow`), a path
//!   nobody serves 404, body or not. The routes that carry files ([`Guard::large`]:
//!   an upload, a message, `/mcp`) may be larger (`[files]`): their bodies are not read before
//!   the caller is known, but passed on bounded (past the bound the read fails: 413) and timed
//!   (each chunk within `http.read_timeout`), for the handler to read once it is authorized.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::operations::Body as Carries;
use super::ApiError;
use crate::config::Config;

/// A refused body larger than this (or `4 × max_body_bytes`, if more) is not read to its end;
/// the connection is closed instead.
const DRAIN_MIN: usize = 8 * 1024 * 1024;

/// The settings the checks use, prepared once.
#[derive(Debug)]
pub struct Guard {
    bound: IpAddr,
    hosts: Vec<String>,
    any_host: bool,
    origins: Vec<String>,
    any_origin: bool,
    max_body: usize,
    /// The bound of an upload's body.
    max_upload: usize,
    /// The bound of a message's body (`/api/threads/{id}/messages`, `/mcp`).
    max_message: usize,
    drain_limit: usize,
    read_timeout: Duration,
}

/// A route whose body may carry files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Large {
    Upload,
    /// A file in a `multipart/form-data` form (the Managed Agents API's `/v1/files`): bounded
    /// as an upload. A form needs no preflight, so only the Origin check stands before it, as
    /// before every other route.
    Form,
    Message,
}

impl Guard {
    pub fn new(config: &Config, bound: SocketAddr) -> Guard {
        let lower = |values: &[String]| -> Vec<String> {
            values
                .iter()
                .map(|v| v.trim().trim_end_matches('/').to_ascii_lowercase())
                .collect()
        };
        let hosts = lower(&config.http.allowed_hosts);
        let origins = lower(&config.http.allowed_origins);
        Guard {
            bound: bound.ip(),
            any_host: hosts.iter().any(|h| h == "*"),
            hosts,
            any_origin: origins.iter().any(|o| o == "*"),
            origins,
            max_body: config.max_body_bytes,
            max_upload: config.files.max_file_bytes,
            max_message: config.files.message_body_limit(config.max_body_bytes),
            drain_limit: config.max_body_bytes.saturating_mul(4).max(DRAIN_MIN),
            read_timeout: config.http.read_timeout,
        }
    }

    /// The origins allowed across origins, for the CORS layer (`*` is handled by the caller).
    pub fn cors_origins(&self) -> Vec<HeaderValue> {
        self.origins
            .iter()
            .filter(|o| *o != "*")
            .filter_map(|o| HeaderValue::from_str(o).ok())
            .collect()
    }

    pub fn any_origin(&self) -> bool {
        self.any_origin
    }

    fn check_host(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let forbidden = |message: String| {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "host_not_allowed",
                message,
            ))
        };
        let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_host",
                "the request has no Host header",
            ));
        };
        if self.any_host {
            return Ok(());
        }
        let name = host_name(host);
        if let Ok(ip) = name.parse::<IpAddr>() {
            let ok = ip == self.bound
                || self.bound.is_unspecified()
                || (ip.is_loopback() && self.bound.is_loopback());
            if ok {
                return Ok(());
            }
        } else if name == "localhost" && (self.bound.is_loopback() || self.bound.is_unspecified()) {
            return Ok(());
        }
        if self.hosts.iter().any(|h| host_name(h) == name) {
            return Ok(());
        }
        forbidden(format!(
            "Host {host:?} is not this daemon's address; add it to http.allowed_hosts to serve it"
        ))
    }

    fn check_origin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin.to_str().unwrap_or("").trim().to_ascii_lowercase();
        if self.any_origin || self.origins.contains(&origin) {
            return Ok(());
        }
        // Our own origin: the page the daemon may serve itself.
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if authority.is_some() && authority == host.as_deref() {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            format!("cross-origin requests from {origin:?} are refused; list the origin in http.allowed_origins to allow it"),
        ))
    }

    /// Reads the body of a request that has one: JSON within the limit is handed on, anything
    /// else is drained and refused.
    async fn read_body(&self, request: Request) -> Result<Request, Response> {
        let headers = request.headers();
        let length = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let has_body = axum::body::HttpBody::size_hint(request.body()).exact() != Some(0);
        if !has_body || matches!(*request.method(), Method::GET | Method::HEAD) {
            return Ok(request);
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let large = Self::large(request.method(), request.uri().path());
        let form_allowed = request.uri().path() == TOKEN_ENDPOINT && is_form(&content_type);
        let (type_ok, limit) = match large {
            Some(Large::Upload) => (!is_form_type(&content_type), self.max_upload),
            Some(Large::Form) => (is_multipart(&content_type), self.max_upload),
            Some(Large::Message) => (is_json(&content_type), self.max_message),
            None => (is_json(&content_type) || form_allowed, self.max_body),
        };
        let refusal = if !type_ok {
            Some(wrong_type(large, &content_type))
        } else if length.is_some_and(|n| n > limit as u64) {
            Some(too_large(limit))
        } else {
            None
        };
        if length.is_some_and(|n| n > self.drain_limit as u64) {
            // Too much to read only to throw away: answer and close.
            let refusal = refusal.unwrap_or_else(|| too_large(limit));
            return Err(closing(refusal.into_response()));
        }
        if refusal.is_none() && large.is_some() {
            // Read by the handler, once the caller is known: each chunk within `read_timeout`,
            // and the whole at `MIN_RATE` on average once `read_timeout` has passed.
            let (parts, body) = request.into_parts();
            let timed = tower_http::timeout::TimeoutBody::new(self.read_timeout, body);
            let bounded = http_body_util::Limited::new(timed, limit);
            let paced = MinRate::new(bounded, self.read_timeout);
            return Ok(Request::from_parts(parts, Body::new(paced)));
        }
        let (parts, body) = request.into_parts();
        let keep = if refusal.is_some() { 0 } else { self.max_body };
        let read = tokio::time::timeout(self.read_timeout, self.collect(body, keep)).await;
        let collected = match read {
            Ok(Ok(collected)) => collected,
            Ok(Err(message)) => {
                let error = ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", message);
                return Err(closing(error.into_response()));
            }
            Err(_) => {
                let error = ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    format!("the body did not arrive within {:?}", self.read_timeout),
                );
                return Err(closing(error.into_response()));
            }
        };
        let complete = collected.complete;
        let outcome = match (refusal, collected.bytes) {
            // Read to its end: the refusal waits until the request is routed
            // ([`refuse_read_body`]), so a method or path the daemon does not serve answers
            // 405 or 404 first, as it does without a body.
            (Some(refusal), _) if complete => {
                let mut request = Request::from_parts(parts, Body::empty());
                request.extensions_mut().insert(RefusedBody::from(refusal));
                Ok(request)
            }
            (Some(refusal), _) => Err(refusal.into_response()),
            (None, None) => Err(too_large(self.max_body).into_response()),
            (None, Some(bytes)) => Ok(Request::from_parts(parts, Body::from(bytes))),
        };
        // A body not read to its end would reset the connection under the answer.
        outcome.map_err(|response| {
            if complete {
                response
            } else {
                closing(response)
            }
        })
    }

    /// The route's kind when its body may carry files (its row in `operations::OPERATIONS`).
    fn large(method: &Method, path: &str) -> Option<Large> {
        match super::operations::matching(method, path)?.body {
            Carries::Json => None,
            Carries::Message => Some(Large::Message),
            Carries::Upload => Some(Large::Upload),
            Carries::Form => Some(Large::Form),
        }
    }

    /// Reads the body; keeps it when it fits in `keep` bytes, and reads on (discarding) up to
    /// the drain limit.
    async fn collect(&self, body: Body, keep: usize) -> Result<Collected, String> {
        let mut stream = body.into_data_stream();
        let mut kept = Some(Vec::new());
        let mut seen = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|err| format!("could not read the body: {err}"))?;
            seen = seen.saturating_add(chunk.len());
            if seen > keep {
                kept = None;
            }
            if let Some(bytes) = kept.as_mut() {
                bytes.extend_from_slice(&chunk);
            }
            if seen > self.drain_limit {
                return Ok(Collected {
                    bytes: None,
                    complete: false,
                });
            }
        }
        Ok(Collected {
            bytes: kept,
            complete: true,
        })
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the body is larger than {limit} bytes"),
    )
}

struct Collected {
    /// The whole body, or `None` when it was larger than asked.
    bytes: Option<Vec<u8>>,
    /// Read to its end.
    complete: bool,
}

/// The middleware: host, origin, then the body.
pub async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if let Err(error) = guard
        .check_host(request.headers())
        .and_then(|()| guard.check_origin(request.headers()))
    {
        return error.into_response();
    }
    match guard.read_body(request).await {
        Ok(request) => next.run(request).await,
        Err(response) => response,
    }
}

/// A body [`Guard::read_body`] refused (its type, its size), read and thrown away: answered by
/// [`refuse_read_body`] once the request reached a route.
#[derive(Clone, Debug)]
struct RefusedBody {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl From<ApiError> for RefusedBody {
    fn from(error: ApiError) -> Self {
        RefusedBody {
            status: error.status,
            code: error.code,
            message: error.message,
        }
    }
}

/// On every route (a `route_layer`, so after the method and path matched): answers the refusal
/// of a body the guard read and threw away.
pub async fn refuse_read_body(request: Request, next: Next) -> Response {
    match request.extensions().get::<RefusedBody>() {
        Some(refused) => {
            ApiError::new(refused.status, refused.code, refused.message.clone()).into_response()
        }
        None => next.run(request).await,
    }
}

/// `host[:port]` → `host`, without the brackets of an IPv6 literal, lower case.
fn host_name(host: &str) -> String {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else if host.matches(':').count() == 1 {
        host.split(':').next().unwrap_or("")
    } else {
        host
    };
    name.to_ascii_lowercase()
}

/// The one route that takes a form body.
const TOKEN_ENDPOINT: &str = "/oauth/token";

/// The least a large body must average once `http.read_timeout` has passed, in bytes a second
/// (as Apache's `mod_reqtimeout` `MinRate`): a real upload on a slow link goes on, a trickle
/// (a byte a second) is cut, and its request answered 408.
pub const MIN_RATE: u64 = 1024;

/// A body that arrived slower than [`MIN_RATE`].
#[derive(Debug, thiserror::Error)]
#[error("the body arrived at under {MIN_RATE} bytes a second after {grace:?}")]
pub struct TooSlow {
    pub grace: Duration,
}

/// A body that fails with [`TooSlow`] at the first chunk after `grace` that leaves its average
/// under [`MIN_RATE`] (a body that sends nothing at all is `read_timeout`'s to cut). Its errors
/// are its inner body's kind, so a length limit behind it is still told apart (413).
struct MinRate<B> {
    inner: std::pin::Pin<Box<B>>,
    started: std::time::Instant,
    grace: Duration,
    received: u64,
}

impl<B> MinRate<B> {
    fn new(inner: B, grace: Duration) -> MinRate<B> {
        MinRate {
            inner: Box::pin(inner),
            started: std::time::Instant::now(),
            grace,
            received: 0,
        }
    }
}

impl<B> hyper::body::Body for MinRate<B>
where
    B: hyper::body::Body<Data = axum::body::Bytes, Error = axum::BoxError>,
{
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = this.inner.as_mut().poll_frame(cx);
        if let std::task::Poll::Ready(Some(Ok(frame))) = &polled {
            this.received += frame.data_ref().map_or(0, |data| data.len() as u64);
            let elapsed = this.started.elapsed();
            if elapsed > this.grace && this.received < MIN_RATE * elapsed.as_secs() {
                let slow = TooSlow { grace: this.grace };
                return std::task::Poll::Ready(Some(Err(slow.into())));
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// True when `err`, or an error behind it, is a body that came too slowly.
pub fn is_too_slow(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(err);
    while let Some(err) = at {
        if err.is::<TooSlow>() || err.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        at = err.source();
    }
    false
}

/// `application/x-www-form-urlencoded`, with or without parameters.
fn is_form(content_type: &str) -> bool {
    content_type.split(';').next().is_some_and(|media| {
        media
            .trim()
            .eq_ignore_ascii_case("application/x-www-form-urlencoded")
    })
}

/// The `415` of a body of `content_type` on a route of `large`'s kind.
fn wrong_type(large: Option<Large>, content_type: &str) -> ApiError {
    let got = if content_type.is_empty() {
        "no Content-Type".to_owned()
    } else {
        format!("Content-Type {content_type:?}")
    };
    let message = match large {
        Some(Large::Upload) => {
            format!("an upload's body is the file under its own Content-Type, not {got}")
        }
        Some(Large::Form) => format!("the body must be multipart/form-data, not {got}"),
        _ => format!("the body must be application/json, not {got}"),
    };
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        message,
    )
}

fn is_multipart(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("multipart/form-data"))
}

/// One of the types an HTML form can send without a preflight.
fn is_form_type(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or("").trim();
    [
        "application/x-www-form-urlencoded",
        "multipart/form-data",
        "text/plain",
        "",
    ]
    .iter()
    .any(|form| media.eq_ignore_ascii_case(form))
}

/// `application/json`, with or without parameters (`; charset=utf-8`).
pub(super) fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(bind: &str, hosts: &[&str], origins: &[&str]) -> Guard {
        let mut config = Config::default();
        config.http.allowed_hosts = hosts.iter().map(|h| h.to_string()).collect();
        config.http.allowed_origins = origins.iter().map(|h| h.to_string()).collect();
        Guard::new(&config, bind.parse().unwrap())
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn only_the_routes_that_carry_files_take_large_bodies() {
        for (method, path, large) in [
            (Method::POST, "/api/files", Some(Large::Upload)),
            (
                Method::POST,
                "/api/threads/thr_1/messages",
                Some(Large::Message),
            ),
            (Method::POST, "/mcp", Some(Large::Message)),
            (Method::GET, "/api/files", None),
            (Method::POST, "/api/threads/thr_1/fork", None),
            (Method::POST, "/api/threads//messages", None),
            (Method::POST, "/api/threads/a/b/messages", None),
            (Method::POST, "/api/keys", None),
        ] {
            assert_eq!(Guard::large(&method, path), large, "{method} {path}");
        }
        assert!(is_form_type("multipart/form-data; boundary=x"));
        assert!(is_form_type("Text/Plain"));
        assert!(is_form_type(""), "no type is a form's too");
        assert!(!is_form_type("image/png"));
    }

    fn host_ok(guard: &Guard, host: &str) -> bool {
        guard.check_host(&headers(&[("host", host)])).is_ok()
    }

    #[test]
    fn hosts_name_the_bound_address_or_a_configured_name() {
        let local = guard("127.0.0.1:7878", &["Harness.Internal"], &[]);
        for ok in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST",
            "[::1]:7878",
            "harness.internal:80",
        ] {
            assert!(host_ok(&local, ok), "{ok}");
        }
        for refused in [
            "evil.example.com",
            "evil.example.com:7878",
            "10.0.0.1:7878",
            "",
        ] {
            assert!(!host_ok(&local, refused), "{refused}");
        }
        assert!(local.check_host(&HeaderMap::new()).is_err(), "no Host");

        let wildcard = guard("0.0.0.0:7878", &[], &[]);
        assert!(host_ok(&wildcard, "192.168.1.20:7878"));
        assert!(!host_ok(&wildcard, "rebind.example.com:7878"));
        assert!(host_ok(&guard("127.0.0.1:1", &["*"], &[]), "anything"));
    }

    #[test]
    fn origins_must_be_our_own_or_listed() {
        let g = guard("127.0.0.1:7878", &[], &["https://App.example.com/"]);
        let check = |origin: &str| {
            g.check_origin(&headers(&[("host", "127.0.0.1:7878"), ("origin", origin)]))
                .is_ok()
        };
        assert!(check("http://127.0.0.1:7878"), "same origin");
        assert!(check("https://app.example.com"), "listed");
        assert!(!check("http://evil.example.com"));
        assert!(!check("null"));
        assert!(!check("http://127.0.0.1:9999"));
        assert!(
            g.check_origin(&headers(&[("host", "x")])).is_ok(),
            "no Origin"
        );
    }

    #[test]
    fn json_media_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
        assert!(!is_json(""));
    }
}
