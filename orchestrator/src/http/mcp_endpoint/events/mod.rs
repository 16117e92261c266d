//! The MCP Events extension (`io.modelcontextprotocol/events`, SEP-3415) on `/mcp`: a client
//! lists Harness's event types (`events/list`), then reads their occurrences by polling
//! (`events/poll`), over a long-lived request (`events/stream`), or as signed webhooks
//! (`events/subscribe`, `events/unsubscribe`). `docs/mcp.md` has the wire shapes.
//!
//! - [`model`]: the event types, the mapping of stored thread events to occurrences, the
//!   cursor and the params; no IO. [`source`]: reads for one caller, scoped as `/api` is.
//!   [`webhook`]: the subscriptions and their dispatcher.
//! - **Negotiated per request.** The extension is defined for 2026-07-28, whose requests carry
//!   the client's capabilities in `_meta`: a request that declares
//!   `extensions["io.modelcontextprotocol/events"]` is served; one that does not gets
//!   `-32021` (missing required client capability) naming it; a request of the `initialize`
//!   generation (no per-request metadata) gets `-32601`, as before the extension. Only a
//!   `server/discover` that declares it sees it advertised.
//! - rmcp has no types for these methods: they arrive as custom requests
//!   (`ServerHandler::on_custom_request`), and a stream's notifications go out as custom
//!   notifications on the request's own response stream (rmcp turns a stateless JSON answer
//!   into SSE once a notification precedes it).

pub mod model;
pub mod source;
pub mod webhook;

use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, CustomNotification, CustomRequest, CustomResult, ErrorCode, ErrorData,
    ServerCapabilities, ServerNotification,
};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::caller::Caller;
use crate::metrics::ToolMetrics;
use crate::store::Store;
use crate::webhooks::Webhooks;
use model::{Cursor, EventName, ReadParams, EXTENSION, SUBSCRIPTION_META};
use source::ReadError;
use webhook::Subscriptions;

/// How often a stream reads what is new.
const STREAM_TICK: Duration = Duration::from_millis(250);
/// How often a stream with nothing new says it is alive.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// The methods of the extension, as counted (`harness_mcp_http_requests_total`).
const METHODS: [&str; 5] = [
    "events/list",
    "events/poll",
    "events/stream",
    "events/subscribe",
    "events/unsubscribe",
];

/// The extension's state: the store it reads, the webhook subscriptions, and the token that
/// ends open streams when the daemon stops (so a stream does not hold up the shutdown).
pub struct Events {
    store: Store,
    subscriptions: Subscriptions,
    stopping: CancellationToken,
    /// `http.max_streams`: an `events/stream` holds a permit while it runs.
    streams: crate::sync::Streams,
}

impl Events {
    pub fn new(
        store: Store,
        webhooks: Webhooks,
        metrics: ToolMetrics,
        streams: crate::sync::Streams,
    ) -> Events {
        Events {
            subscriptions: Subscriptions::new(store.clone(), webhooks, metrics),
            store,
            stopping: CancellationToken::new(),
            streams,
        }
    }

    /// Runs the webhook dispatcher on `tasks` until `stop`, which also ends open streams.
    pub fn start(&self, tasks: &TaskTracker, stop: CancellationToken) {
        self.subscriptions.start(tasks, stop.clone());
        let stopping = self.stopping.clone();
        tasks.spawn(async move {
            stop.cancelled().await;
            stopping.cancel();
        });
    }

    /// Adds the extension to `capabilities` when `client` declared it.
    pub fn advertise(capabilities: &mut ServerCapabilities, client: Option<&ClientCapabilities>) {
        if client.is_some_and(declares) {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(EXTENSION.to_owned(), Default::default());
        }
    }

    /// Answers a custom request: one of the extension's, for the request's caller (set by the
    /// token check every `/mcp` request passes), counted in `metrics`; `-32601` for another.
    pub async fn answer(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
        metrics: &ToolMetrics,
    ) -> Result<CustomResult, ErrorData> {
        let Some(method) = METHODS.into_iter().find(|m| *m == request.method) else {
            let method = request.method;
            return Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, method, None));
        };
        metrics.http_request(method);
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let caller = parts.map_or_else(Caller::operator, |p| crate::http::caller_in(&p.extensions));
        let caller = &caller;
        let params = request.params.clone().unwrap_or_else(|| json!({}));
        negotiated(&request.method, &params, &context)?;
        let invalid = |problem: String| ErrorData::invalid_params(problem, None);
        let result = match request.method.as_str() {
            "events/list" => Ok(list()),
            "events/poll" => {
                let read = model::read_params(&params).map_err(invalid)?;
                self.poll(caller, read).await
            }
            "events/stream" => {
                let read = model::read_params(&params).map_err(invalid)?;
                let full = |full: crate::sync::StreamsFull| {
                    ErrorData::internal_error(full.to_string(), None)
                };
                let _held = self.streams.take().map_err(full)?;
                self.stream(caller, read, &context).await
            }
            "events/subscribe" => {
                let subscribe = model::subscribe_params(&params).map_err(invalid)?;
                self.subscriptions.subscribe(caller, subscribe).await
            }
            "events/unsubscribe" => {
                let gone = model::unsubscribe_params(&params).map_err(invalid)?;
                Ok(self.subscriptions.unsubscribe(caller, gone))
            }
            other => {
                return Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    other.to_owned(),
                    None,
                ))
            }
        };
        result.map(CustomResult::new).map_err(|err| match err {
            ReadError::Invalid(problem) => ErrorData::invalid_params(problem, None),
            ReadError::Store(err) => {
                warn!(error = %err, method = %request.method, "An MCP events request failed.");
                ErrorData::internal_error("internal error", None)
            }
        })
    }

    /// `events/poll`: what happened after the cursor; from now on without one.
    async fn poll(&self, caller: &Caller, read: ReadParams) -> Result<Value, ReadError> {
        let filter = &read.subscription.filter;
        let Some(from) = read.cursor else {
            let now = source::now(&self.store, caller, filter).await?;
            return Ok(json!({
                "events": [], "cursor": now.to_string(), "truncated": false, "hasMore": false
            }));
        };
        let batch = source::read(&self.store, caller, &read, from).await?;
        let events: Vec<Value> = batch.occurrences.iter().map(|o| o.to_json()).collect();
        Ok(json!({
            "events": events,
            "cursor": batch.cursor.unwrap_or(from).to_string(),
            "truncated": batch.truncated,
            "hasMore": batch.has_more,
        }))
    }

    /// `events/stream`: `notifications/events/active` with the starting cursor, then each
    /// occurrence as a `notifications/events/event` as it is stored (and a
    /// `notifications/events/heartbeat` when nothing happened for a while), until the client
    /// goes or the daemon stops; then the empty result.
    async fn stream(
        &self,
        caller: &Caller,
        read: ReadParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ReadError> {
        let id = format!("str_{}", uuid::Uuid::new_v4().simple());
        let meta = json!({ SUBSCRIPTION_META: id });
        let mut cursor = match read.cursor {
            Some(cursor) => cursor,
            None => source::now(&self.store, caller, &read.subscription.filter).await?,
        };
        let frame = |cursor: Cursor| json!({"_meta": meta, "cursor": cursor.to_string()});
        if !notify(context, "active", frame(cursor)).await {
            return Ok(json!({}));
        }
        debug!(stream = %id, name = read.subscription.name.as_str(), "MCP event stream open.");
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.reset();
        loop {
            let batch = source::read(&self.store, caller, &read, cursor).await?;
            if batch.truncated {
                let mut gap = frame(batch.cursor.unwrap_or(cursor));
                gap["truncated"] = json!(true);
                if !notify(context, "heartbeat", gap).await {
                    break;
                }
            }
            for occurrence in &batch.occurrences {
                let mut event = occurrence.to_json();
                event["_meta"] = meta.clone();
                if !notify(context, "event", event).await {
                    return Ok(json!({}));
                }
                heartbeat.reset();
            }
            cursor = batch.cursor.unwrap_or(cursor);
            if batch.has_more {
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(STREAM_TICK) => {}
                _ = heartbeat.tick() => {
                    if !notify(context, "heartbeat", frame(cursor)).await {
                        break;
                    }
                }
                () = context.ct.cancelled() => break,
                () = self.stopping.cancelled() => break,
            }
        }
        debug!(stream = %id, "MCP event stream closed.");
        Ok(json!({}))
    }
}

/// `events/list`: every event type (one page).
fn list() -> Value {
    let events: Vec<Value> = EventName::ALL.into_iter().map(EventName::listed).collect();
    json!({ "events": events })
}

/// Sends `notifications/events/<kind>` on the request's stream; false once the client is gone.
async fn notify(context: &RequestContext<RoleServer>, kind: &str, params: Value) -> bool {
    let note = CustomNotification::new(format!("notifications/events/{kind}"), Some(params));
    context
        .peer
        .send_notification(ServerNotification::CustomNotification(note))
        .await
        .is_ok()
}

/// Whether the client capabilities declare the extension.
fn declares(capabilities: &ClientCapabilities) -> bool {
    capabilities
        .extensions
        .as_ref()
        .is_some_and(|e| e.contains_key(EXTENSION))
}

/// Refuses a request whose client did not negotiate the extension: `-32601` for one without
/// per-request metadata (the `initialize` generation), `-32021` for one that does not declare
/// it.
fn negotiated(
    method: &str,
    params: &Value,
    context: &RequestContext<RoleServer>,
) -> Result<(), ErrorData> {
    let raw = params.get("_meta");
    let modern = context.meta.protocol_version().is_some()
        || raw.is_some_and(|m| m.get("io.modelcontextprotocol/protocolVersion").is_some());
    if !modern {
        return Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!(
                "{method}: the Events extension ({EXTENSION}) is served to 2026-07-28 requests \
                 that declare it in their client capabilities"
            ),
            None,
        ));
    }
    let declared = context
        .meta
        .client_capabilities()
        .is_some_and(|c| declares(&c))
        || raw
            .and_then(|m| m.pointer("/io.modelcontextprotocol~1clientCapabilities/extensions"))
            .is_some_and(|e| e.get(EXTENSION).is_some());
    if declared {
        return Ok(());
    }
    Err(ErrorData::new(
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!("{method} needs the client capability extensions[\"{EXTENSION}\"]"),
        Some(json!({"requiredCapabilities": {"extensions": {EXTENSION: {}}}})),
    ))
}
