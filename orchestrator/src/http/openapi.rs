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
//! **Invariant: every request the document allows is taken** (but for what it says depends on
//! more than the request: a thread that exists, a file of the caller's). Each check a handler
//! makes of a request's shape is stated: on the request types' fields (`#[schema]`,
//! `#[param]`, with the patterns of `api::doc`), and in [`rules`] for what depends on the
//! config or spans fields. The e2e test `openapi::every_request_the_document_allows_is_accepted`
//! sends what Schemathesis draws from the served document and fails on a refusal.
//!
//! Who may call what: [`security`] names each operation's scope (from `http::access::NEEDS`)
//! and, when OAuth is on, the `oauth2` scheme.
//!
//! Event kinds: the SSE response is `ThreadEvent`, a `oneOf` of one schema per kind,
//! discriminated by `kind`, each derived from its variant of `api::events::ThreadEvent`: the
//! type the bus takes, so what is sent and what is documented are one definition.

use std::sync::Arc;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::schema::{AllOfBuilder, Discriminator, OneOfBuilder, Schema};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

use super::error::ErrorBody;
use super::ApiState;
use crate::api::events::{EventKind, StreamEvent, ThreadEvent, WebhookSchemas};

mod rules;
mod security;

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
    modifiers(&BearerScheme, &EventSchemas, &WebhookSchemas),
    tags(
        (name = "threads", description = "Threads, their messages, turns and event stream."),
        (name = "tools", description = "Plugin tools, recorded tool calls, tool permissions."),
        (name = "pool", description = "The process pool."),
        (name = "webhooks", description = "What was sent to the webhook endpoints."),
        (name = "files", description = "Images and PDFs to send with messages."),
        (name = "keys", description = "API keys, their tenants and limits; who the caller is."),
        (name = "oauth", description = "The built-in OAuth authorization server (`[oauth] builtin`)."),
        (name = "service", description = "Health, metrics, the audit log, the web page, this document."),
        (name = "mcp", description = "Harness as an MCP server."),
        (name = "a2a", description = "Harness as an A2A (Agent2Agent v1.0) server: the Agent Card and the JSON-RPC endpoint."),
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

/// axum's catch-all segment (`{*path}`) as OpenAPI names a parameter (`{path}`).
fn plain_wildcards(doc: &mut utoipa::openapi::OpenApi) {
    let paths = std::mem::take(&mut doc.paths.paths);
    doc.paths.paths = paths
        .into_iter()
        .map(|(path, item)| (path.replace("{*", "{"), item))
        .collect();
}

/// The served document, serialized once when the router is built.
#[derive(Clone)]
pub struct Document(pub Arc<str>);

impl Document {
    /// `doc` (every route's operation) with what depends on the daemon: the scopes and the
    /// OAuth scheme ([`security`]), and the rules the config sets ([`rules`]).
    pub fn new(mut doc: utoipa::openapi::OpenApi, state: &ApiState) -> Document {
        security::declare(&mut doc, state.oauth.as_deref());
        plain_wildcards(&mut doc);
        let mut value = serde_json::to_value(&doc)
            .expect("an OpenAPI document has string keys only, so it serializes");
        for pointer in rules::apply(&mut value, &state.config, &state.pool) {
            tracing::warn!(%pointer, "An OpenAPI rule names a schema the document lacks.");
        }
        Document(value.to_string().into())
    }
}

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
/// the `oneOf` of them that the SSE endpoint answers. Each kind's `kind` and `data` come from
/// its variant of [`ThreadEvent`] (what the bus stores and sends), so a kind cannot be sent
/// without being documented, nor documented with another payload.
struct EventSchemas;

impl Modify for EventSchemas {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let mut referred = Vec::new();
        ThreadEvent::schemas(&mut referred);
        components.schemas.extend(referred);
        let mut one_of = OneOfBuilder::new().description(Some(
            "One Server-Sent Event of a thread: the `data:` line's JSON. The SSE `event:` name is \
             its `kind`.",
        ));
        let mut discriminator = Discriminator::new("kind");
        for variant in event_variants() {
            let Some(kind) = variant_kind(&variant) else {
                continue;
            };
            let description = match &variant {
                RefOr::T(Schema::Object(object)) => object.description.clone(),
                _ => None,
            };
            let name = event_schema_name(kind);
            let schema = AllOfBuilder::new()
                .item(Ref::from_schema_name(StreamEvent::name()))
                .item(variant)
                .description(description);
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
    }
}

/// The schema of each [`ThreadEvent`] variant: an object whose `kind` is one name and whose
/// `data` is that kind's payload.
fn event_variants() -> Vec<RefOr<Schema>> {
    match ThreadEvent::schema() {
        RefOr::T(Schema::OneOf(one_of)) => one_of.items,
        other => vec![other],
    }
}

/// The one `kind` a variant's schema allows.
fn variant_kind(variant: &RefOr<Schema>) -> Option<EventKind> {
    let value = serde_json::to_value(variant).ok()?;
    EventKind::parse(value.pointer("/properties/kind/enum/0")?.as_str()?)
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
    add_managed_errors(doc);
    for item in doc.paths.paths.values_mut() {
        for operation in operations_mut(item) {
            let takes_body = operation.request_body.is_some();
            let responses = &mut operation.responses.responses;
            responses.entry("400".into()).or_insert_with(|| {
                error_response("Malformed JSON, query or path (`invalid_json`, `invalid_query`, `invalid_path`).")
            });
            if takes_body {
                responses
                    .entry("415".into())
                    .or_insert_with(|| error_response("A body that is not `application/json`."));
                responses.entry("422".into()).or_insert_with(|| {
                    error_response(
                        "A body that is not a JSON object, or a missing or mistyped field.",
                    )
                });
            }
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

/// The Managed Agents API's errors (`/v1/…`), in its own shape: what its operations answer
/// besides success, each status with the API's error type (`crate::managed::error`).
fn add_managed_errors(doc: &mut utoipa::openapi::OpenApi) {
    use crate::managed::error::ManagedErrorBody;
    let answers = [
        (
            "400",
            "`invalid_request_error`: a field the daemon refuses, or what it does not serve.",
        ),
        ("402", "`billing_error`: a budget is spent."),
        (
            "404",
            "`not_found_error`: no such object, or another tenant's.",
        ),
        (
            "409",
            "`invalid_request_error`: a state a retry does not change (`x-should-retry: false`).",
        ),
        (
            "429",
            "`rate_limit_error`: too many messages waiting, or the key's limit.",
        ),
        (
            "503",
            "`overloaded_error`: the daemon is shutting down, or every stream is open.",
        ),
    ];
    let envelope = |why: &str| -> RefOr<utoipa::openapi::Response> {
        ResponseBuilder::new()
            .description(why)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name(ManagedErrorBody::name())))
                    .build(),
            )
            .build()
            .into()
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        if !path.starts_with("/v1/") {
            continue;
        }
        for operation in operations_mut(item) {
            for (status, why) in answers {
                (operation.responses.responses)
                    .entry(status.into())
                    .or_insert_with(|| envelope(why));
            }
        }
    }
    let components = doc.components.get_or_insert_with(Default::default);
    let mut schemas = Vec::new();
    <ManagedErrorBody as utoipa::ToSchema>::schemas(&mut schemas);
    schemas.push((
        ManagedErrorBody::name().into(),
        <ManagedErrorBody as utoipa::PartialSchema>::schema(),
    ));
    components.schemas.extend(schemas);
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

/// A JSON-RPC message: MCP over Streamable HTTP, stateless (`initialize` answers with an
/// `Mcp-Session-Id` that only labels the client: its calls and cancels are scoped by it).
/// Answers in JSON, or as `text/event-stream` when progress notifications come first. Protocol
/// errors are JSON-RPC errors: 400 with `-32700` (not JSON) or `-32600` (not JSON-RPC).
/// Listing and reading need `threads:read`; a tool call that changes something
/// (`threads__create`, `threads__send`, …) needs `threads:write` too: without it, 403 with
/// `WWW-Authenticate` naming the scope (a JSON-RPC error body).
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
