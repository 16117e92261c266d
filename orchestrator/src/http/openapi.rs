//! `GET /api/openapi.json`: the OpenAPI 3.1 document of every route, built from the handlers'
//! own request and response types with `utoipa`, served without the token (it holds no data,
//! like `/` and `/healthz`).
//!
//! **Invariant: the router and the document cannot disagree.** Three walls:
//! 1. `http::router` registers every route through `utoipa_axum::routes!`, which takes the path
//!    and methods from the handler's `#[utoipa::path]` and adds the route and its operation in one
//!    call. A route without documentation does not compile.
//! 2. `clippy.toml` forbids the plain ways in (`Router::route`, `route_service`, `nest_service`
//!    and `OpenApiRouter`'s pass-throughs). The one exception, rmcp's service at `/mcp` (a tower
//!    service, not a handler), carries an `#[allow]` and brings its documentation ([`McpDoc`]) in
//!    the same statement.
//! 3. This module's test reads the served document, sends every documented operation to the
//!    router and fails on our 404 fallback (a documented route that is not served); sends every
//!    other method to every documented path and fails on anything but 405 (a method served without
//!    documentation); and scans `src/` for plain registrations (what clippy forbids, for
//!    `cargo test` alone) and for `route_service` paths missing from the document.
//!
//! The e2e test `http_api::a_real_turn_matches_the_openapi_document` checks what a real turn sends
//! (reply, thread, tool calls, pool, every event) against the schemas here.
//!
//! Event kinds: [`event_data`] matches on every [`EventKind`], so a new kind does not compile
//! until its `data` is documented here; the SSE response is `ThreadEvent`, a `oneOf` of one
//! schema per kind, discriminated by `kind`.

use std::sync::Arc;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::schema::{
    AllOfBuilder, Discriminator, ObjectBuilder, OneOfBuilder, Schema, Type,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

use super::error::ErrorBody;
use crate::events::EventKind;
use crate::store::{EventRow, MessageId};

/// The document's frame: title, the shared components, and the modifiers that add what every
/// operation has in common. The paths come from `http::router`.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Harness",
        description = "Conversations (threads) with the `claude` CLI, kept warm in a pool, \
                       stored in SQLite. Errors are `ErrorBody` JSON; `/mcp` speaks MCP \
                       (JSON-RPC over Streamable HTTP)."
    ),
    components(schemas(ErrorBody, EventKind, StreamEvent)),
    modifiers(&BearerScheme, &EventSchemas),
    tags(
        (name = "threads", description = "Threads, their messages, turns and event stream."),
        (name = "tools", description = "Plugin tools, recorded tool calls, tool permissions."),
        (name = "pool", description = "The process pool."),
        (name = "service", description = "Health, metrics, the web page, this document."),
        (name = "mcp", description = "Harness as an MCP server."),
    )
)]
pub struct ApiDoc;

/// The name of the bearer security scheme in `components.securitySchemes`.
pub const BEARER: &str = "bearer";

/// Marks every operation of `doc` as needing the bearer token, and adds the 401 it answers
/// without one. `http::router` calls it on exactly the sub-routers it puts behind the token, so
/// the document says what the layer does.
pub fn require_bearer(doc: &mut utoipa::openapi::OpenApi) {
    for item in doc.paths.paths.values_mut() {
        for operation in operations_mut(item) {
            operation
                .security
                .get_or_insert_with(Vec::new)
                .push(SecurityRequirement::new(BEARER, Vec::<String>::new()));
            operation
                .responses
                .responses
                .entry("401".into())
                .or_insert_with(|| error_response("A missing or wrong bearer token."));
        }
    }
}

/// The served document, serialized once when the router is built.
#[derive(Clone)]
pub struct Document(pub Arc<str>);

/// `GET /api/openapi.json`.
#[utoipa::path(
    get,
    path = "/api/openapi.json", operation_id = "openapi",
    tag = "service",
    responses((status = 200, description = "This document (OpenAPI 3.1). No token needed.",
               content_type = "application/json", body = Object))
)]
pub async fn document(Extension(doc): Extension<Document>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        doc.0.to_string(),
    )
        .into_response()
}

/// One frame of `GET /api/threads/{id}/events`: the `data:` line's JSON. The frame's `event:` is
/// `kind` and its `id:` is `id` (send it back as `Last-Event-ID` to resume).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamEvent {
    /// Monotonic across the daemon: the SSE id.
    pub id: i64,
    /// The SSE event name.
    #[schema(value_type = EventKind)]
    pub kind: String,
    /// The user message whose turn produced the event, if any.
    pub message_id: Option<MessageId>,
    /// The kind's payload (see each `…Event` schema).
    pub data: serde_json::Value,
    pub at: DateTime<Utc>,
}

/// `ThreadEvent` (built by [`EventSchemas`]) as a response body: `body = inline(ThreadEventRef)`.
pub struct ThreadEventRef;

impl PartialSchema for ThreadEventRef {
    fn schema() -> RefOr<Schema> {
        RefOr::Ref(Ref::from_schema_name(THREAD_EVENT))
    }
}

impl ToSchema for ThreadEventRef {}

/// The `oneOf` of every event kind's schema.
const THREAD_EVENT: &str = "ThreadEvent";

impl From<EventRow> for StreamEvent {
    fn from(row: EventRow) -> Self {
        StreamEvent {
            id: row.id,
            kind: row.kind,
            message_id: row.message_id,
            data: row.data,
            at: row.created_at,
        }
    }
}

/// What `data` holds for each kind, with a sentence about when it comes. Adding an
/// [`EventKind`] means adding its arm here (the match has no wildcard), and a payload type in
/// [`payload`] unless `claude_cli::TurnEvent` already describes it.
fn event_data(kind: EventKind, schemas: &mut Schemas) -> (&'static str, RefOr<Schema>) {
    use payload::*;
    match kind {
        EventKind::MessageReceived => (
            "A message was stored and queued.",
            payload::<MessageReceived>(schemas),
        ),
        EventKind::TurnStarted => (
            "The message's turn began (before a process is found or started).",
            payload::<TurnStarted>(schemas),
        ),
        EventKind::ProcessReady => ("A process took the turn.", payload::<ProcessReady>(schemas)),
        EventKind::TextDelta => (
            "A piece of the reply as the API streams it (not under `claude.profile = \"lean\"`).",
            turn_event(kind),
        ),
        EventKind::AssistantText => ("A complete text block of the reply.", turn_event(kind)),
        EventKind::ToolCallStarted => ("The model called a tool.", turn_event(kind)),
        EventKind::ToolCallFinished => ("A tool result went back to the model.", turn_event(kind)),
        EventKind::ApiRetry => (
            "The CLI is retrying a failed Messages API request.",
            turn_event(kind),
        ),
        EventKind::RateLimit => (
            "The API's rate-limit state changed (OAuth logins only; with an API key the CLI \
             reports pressure as `api_retry`).",
            turn_event(kind),
        ),
        EventKind::TurnThrottled => (
            "The turn waits for the concurrency limit, lowered while the API pushes back \
             (`rate_limit.*`); sent once, before the wait.",
            payload::<TurnThrottled>(schemas),
        ),
        EventKind::PermissionRequested => (
            "The CLI asks whether a tool may run and a person is to answer \
             (`approvals.mode = \"ask\"`).",
            payload::<PermissionRequested>(schemas),
        ),
        EventKind::PermissionDecided => (
            "A tool permission was decided.",
            payload::<PermissionDecided>(schemas),
        ),
        EventKind::TurnFinished => (
            "The turn ended with a reply. Exactly one of this and `turn_failed` ends every turn.",
            payload::<TurnFinished>(schemas),
        ),
        EventKind::TurnFailed => (
            "The turn ended without a reply.",
            payload::<TurnFailed>(schemas),
        ),
    }
}

/// Component schemas a payload refers to, to add beside it.
type Schemas = Vec<(String, RefOr<Schema>)>;

/// `T`'s schema, the components it refers to added to `schemas`.
fn payload<T: ToSchema>(schemas: &mut Schemas) -> RefOr<Schema> {
    T::schemas(schemas);
    T::schema()
}

/// The payloads the daemon builds itself (the CLI's come from `claude_cli::TurnEvent`).
///
/// FIXME: the emitting code (`pipeline`, `approvals`) still builds these with `json!`, so only the
/// e2e check above holds the two together; emitting these types would make a drift a compile
/// error.
#[allow(dead_code)] // Read by the schema derive only, until the emitters use them.
mod payload {
    use serde_json::Value;
    use utoipa::ToSchema;

    use crate::budget::BudgetExceeded;
    use crate::store::{Message, MessageId, MessageStatus, Origin};

    /// `message_received`.
    #[derive(ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct MessageReceived {
        pub message_id: MessageId,
        pub content: String,
        pub client_message_id: Option<String>,
        /// `cli` for a turn the CLI started by itself (`claude.scheduling_tools`); its content
        /// says what started it.
        pub origin: Origin,
    }

    /// `turn_started`.
    #[derive(ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct TurnStarted {
        pub message_id: MessageId,
        pub origin: Origin,
        /// For origin `cli`: why the CLI started the turn (`schedule_wakeup`: a cron,
        /// `loop_wakeup`: a `ScheduleWakeup`, `task_notification`: a background task finished).
        pub source: Option<String>,
    }

    /// How the process came to be (`SessionStart`).
    #[derive(ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct ProcessStart {
        /// `warm`: it served this thread before; `resumed`: started with `--resume`; `fresh`: an
        /// empty CLI session (the history is put into the prompt).
        #[schema(value_type = String, pattern = "^(warm|resumed|fresh)$")]
        pub kind: String,
        /// For `fresh`: the thread had a session the CLI could no longer load.
        #[serde(rename = "resume_failed")]
        pub resume_failed: Option<bool>,
    }

    /// `process_ready`.
    #[derive(ToSchema)]
    pub struct ProcessReady {
        /// Always `process_ready`.
        #[serde(rename = "type")]
        pub kind: String,
        pub start: ProcessStart,
        pub pid: Option<u32>,
    }

    /// `permission_requested`.
    #[derive(ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct PermissionRequested {
        /// The id to answer at `POST /api/threads/{id}/permissions/{requestId}`.
        pub request_id: String,
        pub tool_name: String,
        pub input: Value,
        pub tool_use_id: Option<String>,
    }

    /// `permission_decided`.
    #[derive(ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct PermissionDecided {
        pub request_id: String,
        pub tool_name: String,
        /// `allow` or `deny`.
        pub decision: String,
        /// `rule`, `person`, `timeout`, `policy` or `interrupt`.
        pub decided_by: String,
        pub reason: Option<String>,
    }

    /// `turn_finished`.
    #[derive(ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct TurnFinished {
        /// The user message the turn answered.
        pub message_id: MessageId,
        /// The stored reply.
        pub reply: Message,
    }

    /// `turn_failed`.
    #[derive(ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct TurnFailed {
        pub message_id: MessageId,
        /// `error`, `interrupted`, or `refused` (a budget is spent; nothing reached the model).
        pub status: MessageStatus,
        pub error: String,
        /// With `refused`: which budget, its limit and what was spent.
        pub budget: Option<BudgetExceeded>,
    }

    /// `turn_throttled`.
    #[derive(ToSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct TurnThrottled {
        pub message_id: MessageId,
        /// The concurrency limit now.
        pub limit: u64,
        /// Turns running now.
        pub running: u64,
        /// Place in the line, from 1.
        pub position: u64,
    }
}

/// The variant of `claude_cli::TurnEvent` whose `type` is `kind` (the daemon stores the CLI's
/// events as they serialize); the whole `TurnEvent` when none matches.
fn turn_event(kind: EventKind) -> RefOr<Schema> {
    let all = claude_cli::TurnEvent::schema();
    if let RefOr::T(Schema::OneOf(one_of)) = &all {
        for item in &one_of.items {
            let tag = serde_json::to_value(item).ok().and_then(|value| {
                value
                    .pointer("/properties/type/enum/0")
                    .and_then(|v| v.as_str().map(str::to_owned))
            });
            if tag.as_deref() == Some(kind.as_str()) {
                return item.clone();
            }
        }
    }
    all
}

/// `MessageReceivedEvent`, … from `message_received`, ….
fn event_schema_name(kind: EventKind) -> String {
    let pascal: String = kind
        .as_str()
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    format!("{pascal}Event")
}

/// One schema per event kind (`StreamEvent` with its `kind` and `data` pinned), and `ThreadEvent`,
/// the `oneOf` of them that the SSE endpoint answers.
struct EventSchemas;

impl Modify for EventSchemas {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let mut referred = Schemas::new();
        let mut one_of = OneOfBuilder::new().description(Some(
            "One Server-Sent Event of a thread: the `data:` line's JSON. The SSE `event:` name is \
             its `kind`.",
        ));
        let mut discriminator = Discriminator::new("kind");
        for kind in EventKind::ALL {
            let (description, data) = event_data(kind, &mut referred);
            let name = event_schema_name(kind);
            let pinned = ObjectBuilder::new()
                .property(
                    "kind",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .enum_values(Some([kind.as_str()])),
                )
                .required("kind")
                .property("data", data)
                .required("data");
            let schema = AllOfBuilder::new()
                .item(Ref::from_schema_name(StreamEvent::name()))
                .item(pinned)
                .description(Some(description));
            components.schemas.insert(name.clone(), schema.into());
            discriminator.mapping.insert(
                kind.as_str().to_owned(),
                format!("#/components/schemas/{name}"),
            );
            one_of = one_of.item(Ref::from_schema_name(name));
        }
        let one_of = one_of.discriminator(Some(discriminator));
        components
            .schemas
            .insert(THREAD_EVENT.into(), one_of.into());
        components.schemas.extend(referred);
    }
}

/// The bearer scheme; [`require_bearer`] names it on the operations behind the token.
struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.security_schemes.insert(
            BEARER.into(),
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The daemon's `auth_token`, when one is configured: required on `/api/*` \
                         (except this document), `/mcp` and `/metrics`.",
                    ))
                    .build(),
            )
            .into(),
        );
    }
}

/// Adds the errors every route can answer to each operation of `doc`: the `Host`/`Origin`
/// guard's 403, the method fallback's 405, the body limits' 408 and 413, and a 500. Each route's
/// own `#[utoipa::path]` lists the errors that are its own (404, 409, 422, …). Called by
/// `http::router` once every route is in.
pub fn add_common_errors(doc: &mut utoipa::openapi::OpenApi) {
    for item in doc.paths.paths.values_mut() {
        for operation in operations_mut(item) {
            let responses = &mut operation.responses.responses;
            for (status, why) in [
                ("403", "A `Host` or `Origin` the daemon does not serve."),
                ("405", "A method the endpoint does not take."),
                ("408", "A body that did not arrive in time."),
                ("413", "A body over `max_body_bytes`."),
                (
                    "500",
                    "An internal error (logged; the message says no more).",
                ),
            ] {
                responses
                    .entry(status.into())
                    .or_insert_with(|| error_response(why));
            }
        }
    }
}

/// An error answer: `ErrorBody` JSON.
pub fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(ErrorBody::name())))
                .build(),
        )
        .build()
        .into()
}

fn operations_mut(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .flatten()
}

/// `/mcp`: rmcp's Streamable HTTP service, routed with `route_service` (it is a tower service,
/// not a handler), so its operations are documented here and added to the router beside it.
#[derive(OpenApi)]
#[openapi(paths(mcp_post, mcp_get, mcp_delete))]
pub struct McpDoc;

/// A JSON-RPC message: MCP over Streamable HTTP, stateless (no `Mcp-Session-Id` is issued).
/// Answers in JSON, or as `text/event-stream` when progress notifications come first. Protocol
/// errors are JSON-RPC errors: 400 with `-32700` (not JSON) or `-32600` (not JSON-RPC).
#[utoipa::path(
    post,
    path = "/mcp", operation_id = "mcpPost",
    tag = "mcp",
    request_body(content = Object, content_type = "application/json",
                 description = "A JSON-RPC request or notification (`initialize`, \
                                `server/discover`, `tools/list`, `tools/call`, \
                                `notifications/cancelled`, …)."),
    responses(
        (status = 200, description = "The JSON-RPC response.", content(
            (Object = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 202, description = "A notification, accepted."),
        (status = 400, description = "Not JSON, or not a JSON-RPC message: a JSON-RPC error.",
         content_type = "application/json", body = Object),
    )
)]
#[allow(dead_code)] // Documentation only: rmcp serves the route.
fn mcp_post() {}

/// No sessions and no server-initiated streams: always 405.
#[utoipa::path(get, path = "/mcp", operation_id = "mcpGet", tag = "mcp",
    responses((status = 405, description = "No server-initiated stream.")))]
#[allow(dead_code)] // Documentation only: rmcp serves the route.
fn mcp_get() {}

/// No sessions to end: always 405.
#[utoipa::path(delete, path = "/mcp", operation_id = "mcpDelete", tag = "mcp",
    responses((status = 405, description = "No session to end.")))]
#[allow(dead_code)] // Documentation only: rmcp serves the route.
fn mcp_delete() {}

#[cfg(test)]
mod tests;
