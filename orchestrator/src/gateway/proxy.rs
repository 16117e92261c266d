//! One request through the gateway: the token, the budgets, the upstream call with the real
//! credentials, the response streamed back and metered on the way, the record.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use opentelemetry::KeyValue;
use plugin_contract::ThreadId;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::usage::{Asked, Scanner, Used};
use super::{Auth, Gateway, MeterSlot, Served, Upstream, TOKEN_HEADER};
use crate::api::events::{ModelRequestFinished, ModelRequestStarted, ThreadEvent};
use crate::store::{MessageId, NewModelRequest};

/// The largest request body taken (the Messages API's own limit is 32 MB).
const REQUEST_LIMIT: usize = 64 << 20;

/// Headers that belong to one connection, not to the request (RFC 9110, 7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

struct Server {
    gateway: Gateway,
    served: Served,
    client: reqwest::Client,
}

pub(super) async fn serve(
    gateway: Gateway,
    listener: TcpListener,
    served: Served,
    stop: CancellationToken,
) {
    let client = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
    {
        Ok(client) => client,
        Err(err) => {
            warn!(error = %err, "The model gateway has no HTTP client; children cannot reach the model.");
            return;
        }
    };
    let server = Arc::new(Server {
        gateway,
        served,
        client,
    });
    let app = axum::Router::new().fallback(forward).with_state(server);
    // Without it, a response's small first chunk can wait for the CLI's delayed ACK (~40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            warn!(error = %err, "Could not set TCP_NODELAY on a gateway connection.");
        }
    });
    let served = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned());
    if let Err(err) = served.await {
        warn!(error = %err, "The model gateway stopped serving.");
    }
}

/// An error in the Messages API's own shape, which the CLI reports as it would the API's.
fn api_error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// The token a request carries: `x-harness-token`, else its API key (`x-api-key`, or a bearer
/// token).
fn token_of(headers: &HeaderMap) -> Option<&str> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    get(TOKEN_HEADER)
        .or_else(|| get("x-api-key"))
        .or_else(|| get(header::AUTHORIZATION.as_str())?.strip_prefix("Bearer "))
}

/// The only requests that go upstream, by method and exact path (a query such as `beta=true`
/// rides along): what `claude` asks of the Messages API, measured with the real CLI
/// (`tests/tests/e2e/gateway.rs`). Anything else is 404 here and never carries the key: not a
/// trailing or doubled slash, another case, batches, or the old completions.
pub const UPSTREAM_ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
];

async fn forward(State(server): State<Arc<Server>>, request: Request) -> Response {
    let arrived = Instant::now();
    let (parts, body) = request.into_parts();
    let routed = UPSTREAM_ROUTES
        .iter()
        .any(|(method, path)| parts.method.as_str() == *method && parts.uri.path() == *path);
    if !routed {
        return api_error(
            StatusCode::NOT_FOUND,
            "not_found_error",
            "the model gateway serves POST /v1/messages and POST /v1/messages/count_tokens only",
        );
    }
    let Some(holder) = token_of(&parts.headers).and_then(|t| server.gateway.holder(t)) else {
        return api_error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "the model gateway takes only the tokens of the daemon's own processes",
        );
    };
    let served = &server.served;
    let model_request = parts.method == Method::POST && parts.uri.path() == "/v1/messages";
    let turn = holder.meter.get().and_then(|meter| meter.turn_ref());
    let mut record = Record {
        server: server.clone(),
        thread: holder.thread.clone(),
        meter: holder.meter.clone(),
        message: turn.as_ref().map(|t| t.message.clone()),
        traceparent: turn.and_then(|t| t.traceparent),
        id: format!("mreq_{}", uuid::Uuid::new_v4().simple()),
        model: None,
        hold: None,
        estimate: 0.0,
        arrived,
        at: SystemTime::now(),
        status: StatusCode::OK,
        first_byte: Duration::ZERO,
    };
    let Ok(body) = axum::body::to_bytes(body, REQUEST_LIMIT).await else {
        return api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            "the request is larger than the model gateway takes",
        );
    };
    if model_request {
        let asked = Asked::of(&body);
        record.model = asked.model.clone();
        record.started();
        record = match admit(&server, record, &asked).await {
            Ok(record) => record,
            Err(refused) => return refused,
        };
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path}", holder.upstream.base);
    let sent = server
        .client
        .request(parts.method.clone(), url)
        .headers(forwarded(&parts.headers, &holder.upstream))
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(err) => {
            // The error names the upstream's address: logged, never answered.
            warn!(thread_id = %holder.thread, error = %err, "The model gateway could not reach the Messages API.");
            let failed = StatusCode::BAD_GATEWAY;
            served.metrics.request(failed.as_u16(), arrived.elapsed());
            if model_request {
                record
                    .at(failed, arrived.elapsed())
                    .end(Used::default(), true);
            }
            return api_error(
                failed,
                "api_error",
                "the model gateway could not reach the Messages API",
            );
        }
    };
    let record = model_request.then_some(record);
    relay(&server, response, record, arrived.elapsed())
}

/// The upstream's `response` on its way back, its headers as they came (but the hop-by-hop
/// ones), its body metered into `record` when it is a model request's; a 429 or 529 told to
/// the throttle.
fn relay(
    server: &Server,
    response: reqwest::Response,
    record: Option<Record>,
    first_byte: Duration,
) -> Response {
    let served = &server.served;
    let status = response.status();
    served.metrics.request(status.as_u16(), first_byte);
    if matches!(status.as_u16(), 429 | 529) {
        served.throttle.upstream(retry_after(response.headers()));
    }
    let mut answer = Response::builder().status(status);
    if let Some(headers) = answer.headers_mut() {
        for (name, value) in response.headers() {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                headers.append(name.clone(), value.clone());
            }
        }
    }
    let stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let chunks = Box::pin(response.bytes_stream());
    let body = match record {
        Some(record) => Body::from_stream(Metered {
            chunks,
            scanner: Some(Scanner::new(stream)),
            record: Some(record.at(status, first_byte)),
        }),
        None => Body::from_stream(chunks),
    };
    answer.body(body).unwrap_or_else(|err| {
        warn!(error = %err, "The model gateway could not build a response.");
        api_error(
            StatusCode::BAD_GATEWAY,
            "api_error",
            "the model gateway could not relay the response",
        )
    })
}

/// Asks the budgets before a model request, with what it is expected to cost: `record` holding
/// that estimate while the request is in flight, or the 402 that refuses it (recorded).
async fn admit(server: &Server, mut record: Record, asked: &Asked) -> Result<Record, Response> {
    let served = &server.served;
    let estimate = asked.estimate(&server.gateway.inner.prices);
    let meter = record.meter.get();
    match served
        .budgets
        .before_request(&served.store, &record.thread, meter.as_ref(), estimate)
        .await
    {
        Ok(Ok(hold)) => {
            record.hold = Some(hold);
            record.estimate = estimate;
        }
        Ok(Err(exceeded)) => {
            served.metrics.refused(exceeded.budget.as_str());
            let refused = StatusCode::PAYMENT_REQUIRED;
            let elapsed = record.arrived.elapsed();
            served.metrics.request(refused.as_u16(), elapsed);
            record.at(refused, elapsed).end(Used::default(), true);
            let message = format!("Harness stopped this turn: {exceeded}");
            return Err(api_error(refused, "billing_error", &message));
        }
        Err(err) => {
            warn!(thread_id = %record.thread, error = %err, "Could not check the budgets before a model request; it goes on.");
        }
    }
    Ok(record)
}

/// A response's `retry-after` in seconds (the Messages API sends whole seconds; an HTTP date is
/// not taken).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (seconds.is_finite() && seconds > 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// The request's headers as they go upstream: without the hop-by-hop ones, the child's token
/// and (unless it keeps the CLI's login) its credentials; with the real credentials. Without
/// `accept-encoding`, so the response comes as it is and its usage can be read.
fn forwarded(headers: &HeaderMap, upstream: &Upstream) -> HeaderMap {
    let login = upstream.is_login();
    let mut out = HeaderMap::with_capacity(headers.len() + 1);
    for (name, value) in headers {
        let dropped = HOP_BY_HOP.contains(&name.as_str())
            || name == header::HOST
            || name == header::CONTENT_LENGTH
            || name == header::ACCEPT_ENCODING
            || name == TOKEN_HEADER
            || (!login && (name == "x-api-key" || name == header::AUTHORIZATION));
        if !dropped {
            out.append(name.clone(), value.clone());
        }
    }
    let credential = match &upstream.auth {
        Auth::ApiKey(key) => Some((HeaderName::from_static("x-api-key"), key.clone())),
        Auth::Bearer(token) => Some((header::AUTHORIZATION, format!("Bearer {token}"))),
        Auth::Login => None,
    };
    if let Some((name, value)) = credential {
        match HeaderValue::from_str(&value) {
            Ok(mut value) => {
                value.set_sensitive(true);
                out.insert(name, value);
            }
            Err(_) => warn!("The upstream credential is not a valid header value."),
        }
    }
    out
}

/// What is recorded of one model request once its response is over.
struct Record {
    server: Arc<Server>,
    thread: ThreadId,
    /// Its process's: read at each step, as the turn that holds the process may change while
    /// the request is in flight.
    meter: MeterSlot,
    message: Option<MessageId>,
    /// The span of the turn it is part of.
    traceparent: Option<String>,
    /// `mreq_…`: what its `model_request_started` and `model_request_finished` are paired by.
    id: String,
    /// The model it asks for.
    model: Option<String>,
    /// Its estimate, held in the budgets while it is in flight.
    hold: Option<crate::budget::RequestHold>,
    /// What it was expected to cost: what it is charged when its response ends before its usage
    /// was read.
    estimate: f64,
    arrived: Instant,
    at: SystemTime,
    status: StatusCode,
    first_byte: Duration,
}

impl Record {
    fn at(self, status: StatusCode, first_byte: Duration) -> Record {
        Record {
            status,
            first_byte,
            ..self
        }
    }

    /// Tells its thread's stream that it started (`model_request_started`).
    fn started(&self) {
        let event = ThreadEvent::ModelRequestStarted(ModelRequestStarted {
            request_id: self.id.clone(),
            model: self.model.clone(),
        });
        let events = &self.server.served.events;
        events.emit(&self.thread, self.message.as_ref(), event);
    }

    /// Tells its thread's stream that it ended and what it used (`model_request_finished`).
    fn finished(&self, used: &Used, whole: bool) {
        let event = ThreadEvent::ModelRequestFinished(ModelRequestFinished {
            request_id: self.id.clone(),
            model: used.model.clone().or_else(|| self.model.clone()),
            status: self.status.as_u16(),
            is_error: !whole || !self.status.is_success(),
            input_tokens: used.input,
            output_tokens: used.output,
            cache_read_tokens: used.cache_read,
            cache_write_tokens: used.cache_write,
            duration_ms: u64::try_from(self.arrived.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
        let events = &self.server.served.events;
        events.emit(&self.thread, self.message.as_ref(), event);
    }

    /// Meters what it used (charged at once to the turn that holds its process, or else stored
    /// on its own and counted so), tells its thread's stream, and stores the row; then lets go
    /// of its estimate. A successful response cut (`whole` false: the client went away) before
    /// its usage was read is charged its estimate: the upstream may bill it whole.
    fn end(mut self, used: Used, whole: bool) {
        let served = &self.server.served;
        let mut cost = used.cost(self.server.gateway.price(used.model.as_deref()));
        if !whole && self.status.is_success() && used.id.is_none() && used.model.is_none() {
            cost = cost.max(self.estimate);
        }
        let response = used.id.clone().map(|id| (id, used.api_usage()));
        let meter = self.meter.get();
        let counted = meter.is_some_and(|meter| meter.metered(cost, response));
        served.metrics.usage(&used.by_kind(), cost);
        self.span(&used, cost);
        self.finished(&used, whole);
        let hold = self.hold.take();
        let row = NewModelRequest {
            thread_id: self.thread,
            message_id: self.message,
            model: used.model,
            status: i64::from(self.status.as_u16()),
            input_tokens: count(used.input),
            output_tokens: count(used.output),
            cache_read_tokens: count(used.cache_read),
            cache_write_tokens: count(used.cache_write),
            cost_usd: cost,
            first_byte_ms: millis(self.first_byte),
            ms: millis(self.arrived.elapsed()),
            key_id: hold.as_ref().and_then(|h| h.key()).map(str::to_owned),
            alone: !counted && cost > 0.0,
        };
        let store = served.store.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Counted in its turn, it lets go of its estimate now; stored on its own, once stored,
        // so that no request waiting on it finds neither the estimate nor the cost.
        let hold = if row.alone { hold } else { None };
        runtime.spawn(async move {
            if let Err(err) = store.insert_model_request(&row).await {
                warn!(thread_id = %row.thread_id, error = %err, "Could not record a model request.");
            }
            drop(hold);
        });
    }

    /// Its span under its turn's, when traces are on.
    fn span(&self, used: &Used, cost: f64) {
        let Some(parent) = &self.traceparent else {
            return;
        };
        let mut attributes = vec![
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.response.status_code", i64::from(self.status.as_u16())),
            KeyValue::new("gen_ai.usage.input_tokens", count(used.input)),
            KeyValue::new("gen_ai.usage.output_tokens", count(used.output)),
            KeyValue::new("harness.cost_usd", cost),
            KeyValue::new("harness.first_byte_ms", millis(self.first_byte)),
        ];
        if let Some(model) = &used.model {
            attributes.push(KeyValue::new("gen_ai.response.model", model.clone()));
        }
        let name = "POST /v1/messages";
        self.server
            .served
            .traces
            .past(parent, name, self.at, SystemTime::now(), attributes);
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A token count as the store and the spans keep it.
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

type Chunks = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// A model response on its way back: each chunk passed on as it comes, read in place for its
/// usage; metered and recorded when it ends (or is dropped half-way: what it said so far, or its
/// estimate when it said nothing yet).
struct Metered {
    chunks: Chunks,
    scanner: Option<Scanner>,
    record: Option<Record>,
}

impl Metered {
    fn end(&mut self, whole: bool) {
        if let (Some(scanner), Some(record)) = (self.scanner.take(), self.record.take()) {
            record.end(scanner.finish(), whole);
        }
    }
}

impl Stream for Metered {
    type Item = reqwest::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.chunks.as_mut().poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(scanner) = self.scanner.as_mut() {
                    scanner.feed(chunk);
                }
            }
            Poll::Ready(None) => self.end(true),
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        next
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.end(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_whole_or_fractional_seconds() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::RETRY_AFTER, HeaderValue::from_str(value).unwrap());
            retry_after(&headers)
        };
        assert_eq!(with("30"), Some(Duration::from_secs(30)));
        assert_eq!(with(" 1.5 "), Some(Duration::from_millis(1500)));
        assert_eq!(with("0"), None);
        assert_eq!(with("Wed, 21 Oct 2026 07:28:00 GMT"), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}
