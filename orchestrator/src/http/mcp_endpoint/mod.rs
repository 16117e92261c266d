//! `/mcp`: Harness as an MCP server for outside clients (Claude Code, Claude Desktop, IDEs, other
//! agents), over rmcp's Streamable HTTP transport mounted on the daemon's own listener, so it sits
//! behind the same guard (Host, Origin, JSON bodies within limits) and the same bearer token as
//! `/api`.
//!
//! - Both protocol generations: `initialize` (2025-11-25 and older) and `server/discover` with
//!   per-request metadata (2026-07-28); rmcp negotiates, [`Handler`] serves. `initialize`
//!   negotiates on its body alone, as the lifecycle says: a version we do not know is answered
//!   with ours, and an `MCP-Protocol-Version` header on it is not held against the body (the
//!   header names the version of the requests after it, where an unknown one is `400`).
//! - **Stateless**: rmcp runs without sessions (`NeverSessionManager`), so every request is served
//!   on its own. The `Mcp-Session-Id` each `initialize` answer carries is a label that tells two
//!   clients of one credential apart ([`session`]), not a session: nothing is kept, and an id we
//!   never issued is taken as given. What a client needs again travels in tool arguments and
//!   results (the `threadId`).
//! - Tools: the plugin tools that need no calling thread (delegation is left out) and the
//!   threads themselves ([`threads`]: adapters over the thread service, each call bound to its
//!   caller), listed from one [`ToolRegistry`]: the same validation, defaults, output checks,
//!   records and metrics as a turn's calls ([`McpAdapter::call_tool_in`]).
//! - Scopes: `/mcp` needs `threads:read` (`access::NEEDS`); a call of a tool that changes
//!   something (a thread tool's [`threads::Policy`] says so; a plugin tool may) needs
//!   `threads:write` too, and a caller without it gets `403` with
//!   `WWW-Authenticate: Bearer error="insufficient_scope"` before the call runs, as on `/api`,
//!   so that an MCP client can step up (an OAuth caller is pointed at the resource metadata).
//! - `notifications/cancelled` arrives on a POST of its own: [`screen`] reads it before rmcp
//!   (which drops notifications when stateless) and stops the call through [`in_flight`], among
//!   the calls of its caller and its session id; for `threads__send` that interrupts the
//!   thread's running turn ([`Pipeline::interrupt`]), which is the call's own unless it still
//!   waits in the thread's queue behind another. Progress is the thread's events while the call
//!   runs (a queued call also sees the turn before it).
//! - A client that drops its response stream does not cancel anything (MCP: a disconnect is not
//!   a cancel): the call runs to its end, bounded by its tool's timeout (`threads__send`: the
//!   turn's), and is recorded; the turn's reply is stored, so `threads__get`, or `threads__send`
//!   again with the same `clientMessageId`, fetches it.
//! - [`events`]: the Events extension (`events/*`), to clients that declare it.

pub mod events;
pub mod in_flight;
pub mod schemas;
pub mod session;
pub mod threads;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientJsonRpcMessage, ClientNotification,
    ClientRequest, CustomRequest, CustomResult, DiscoverResult, ErrorCode, ErrorData,
    Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ResultType, ServerCapabilities,
    ToolsCapability,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::Value;
use tracing::{debug, info, warn};

use plugin_contract::{Plugin, ThreadId};

use crate::caller::{Caller, Scope};
use crate::mcp::schema::SchemaError;
use crate::mcp::{CallOutcome, McpAdapter, ToolRegistry};
use crate::pipeline::{Pipeline, Stopped};

/// How often a cancelled `threads__send` whose message was not in its thread's line yet asks
/// again, until it is (withdrawn then) or the call ends.
const STOP_AGAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(50);
use crate::store::{EventRow, Store};
use in_flight::{Cancelled, InFlight};

/// The name we give ourselves in `initialize` and `server/discover`.
const SERVER_NAME: &str = "harness";

/// The header that names the protocol version of a request after `initialize`.
const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

const INSTRUCTIONS: &str = "Harness runs conversations with Claude (threads) and serves its \
    plugin tools. Create a thread with threads__create, talk in it with threads__send (pass the \
    threadId you got back; a clientMessageId makes a retry safe), read it with threads__get.";

/// What the endpoint serves, shared by every request.
pub struct McpEndpoint {
    /// The plugin tools that need no thread, and the thread tools.
    registry: Arc<ToolRegistry>,
    /// Runs and records each call, as for the CLI's processes.
    adapter: Arc<McpAdapter>,
    /// Interrupts a cancelled `threads__send`; its thread's events become progress.
    pipeline: Pipeline,
    in_flight: Arc<InFlight>,
    /// Where `threads__create` and `threads__send` calls are audited.
    store: Store,
    /// The thread tools, which each call binds to its caller ([`ThreadsPlugin::for_caller`]).
    threads: threads::ThreadsPlugin,
    /// The tools' default timeout, for the registry of a thread tool's call.
    tool_timeout: std::time::Duration,
    /// The Events extension; without it, `events/*` are not served.
    events: Option<events::Events>,
}

impl McpEndpoint {
    /// Loads the endpoint's tools: `plugins` less those that need a calling thread, plus
    /// `threads`.
    pub fn new(
        plugins: &[Arc<dyn Plugin>],
        threads: threads::ThreadsPlugin,
        adapter: Arc<McpAdapter>,
        pipeline: Pipeline,
        tool_timeout: std::time::Duration,
        store: Store,
    ) -> Result<McpEndpoint, SchemaError> {
        let mut all = plugins.to_vec();
        all.push(Arc::new(threads.clone()));
        let registry = ToolRegistry::load_where(&all, tool_timeout, |tool| !tool.needs_thread())?;
        Ok(McpEndpoint {
            registry: Arc::new(registry),
            adapter,
            pipeline,
            in_flight: Arc::default(),
            store,
            threads,
            tool_timeout,
            events: None,
        })
    }

    /// The endpoint, serving the Events extension too.
    pub fn with_events(self, events: events::Events) -> McpEndpoint {
        McpEndpoint {
            events: Some(events),
            ..self
        }
    }

    /// The Events extension, when served.
    pub fn events(&self) -> Option<&events::Events> {
        self.events.as_ref()
    }

    /// Stops the `threads__send` of `client` (its `clientMessageId`) on `thread`, where the
    /// thread runs: withdrawn while it waits in line, interrupted once it runs. False when it
    /// neither waits nor runs (not in line yet, or over already).
    async fn stop_send(&self, thread: &ThreadId, client: &str, caller: &Caller) -> bool {
        match self
            .threads
            .service()
            .stop_message(caller, thread, client)
            .await
        {
            Ok(stopped) => {
                debug!(thread_id = %thread, ?stopped, "A cancelled call's message stopped.");
                stopped != Stopped::Neither
            }
            Err(err) => {
                debug!(thread_id = %thread, error = %err, "Could not stop a cancelled call's message.");
                true
            }
        }
    }

    /// The scope a call of the tool `name` needs beyond `/mcp`'s own (`threads:read`, checked
    /// with the route): a thread tool's as its [`threads::Policy`] declares, `threads:write` for
    /// a plugin tool (it may change anything); `None` for one that reads, or that is not there
    /// (its call is answered "unknown tool").
    pub fn scope_for(&self, name: &str) -> Option<Scope> {
        match threads::policy_of(name) {
            Some(policy) => policy.changes().then_some(policy.scope),
            None => self
                .registry
                .get(name)
                .is_some()
                .then_some(Scope::ThreadsWrite),
        }
    }

    /// Calls the tool `name` for `caller`: a plugin tool through the endpoint's registry, a
    /// thread tool through one of its own, bound to the caller (the same validation, records
    /// and metrics).
    async fn call(&self, name: &str, arguments: Value, caller: &Caller) -> CallOutcome {
        let ctx = self.pipeline.tool_context(None);
        let Some(short) = threads::policy_of(name).and_then(|_| name.strip_prefix("threads__"))
        else {
            return self
                .adapter
                .call_tool_in(&self.registry, ctx, name, arguments, None)
                .await;
        };
        let plugin: Arc<dyn Plugin> = Arc::new(self.threads.for_caller(caller.clone()));
        match ToolRegistry::load_where(&[plugin], self.tool_timeout, |t| t.spec().name == short) {
            Ok(registry) => {
                self.adapter
                    .call_tool_in(&registry, ctx, name, arguments, None)
                    .await
            }
            // Loaded once already, into `registry`: it does not fail here.
            Err(err) => CallOutcome {
                result: CallOutcome::error_result(format!("tool `{name}` failed: {err}")),
                duration: std::time::Duration::ZERO,
                violations: None,
                output_violations: None,
            },
        }
    }

    /// The endpoint's tools.
    pub fn registry(&self) -> &Arc<ToolRegistry> {
        &self.registry
    }

    /// The calls running now.
    pub fn in_flight(&self) -> &Arc<InFlight> {
        &self.in_flight
    }
}

/// The tower service for `/mcp`: rmcp's Streamable HTTP server, stateless, one [`Handler`] per
/// request. `Host` and `Origin` are left to `http::guard`, which checks every route.
pub fn service(
    endpoint: Arc<McpEndpoint>,
    max_body_bytes: usize,
) -> StreamableHttpService<Handler, NeverSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(max_body_bytes);
    StreamableHttpService::new(
        move || Ok(Handler(endpoint.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// Reads each POST body before rmcp: a body that is not a JSON-RPC message gets a JSON-RPC error
/// naming the problem (rmcp would answer 415 in plain text), a request for a method we serve with
/// params of the wrong shape gets `-32602` (rmcp would say "method not found"), a `tools/call`
/// its caller lacks the scope for gets `403` with a challenge ([`refuse_call`]), a
/// `notifications/cancelled` (which rmcp ignores when stateless) stops the call it names, and an
/// `initialize` is answered with a session id ([`session`]) and negotiated on its body alone
/// (the `MCP-Protocol-Version` header is for the requests after it).
pub async fn screen(
    State(endpoint): State<Arc<McpEndpoint>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return not_served(request.method());
    }
    let (mut parts, body) = request.into_parts();
    let (bytes, message) = match read_message(body).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let params = message.get("params");
    if message.get("method").is_some_and(Value::is_string)
        && params.is_some_and(|p| !p.is_object() && !p.is_null())
    {
        return rpc_error(
            StatusCode::OK,
            id,
            ErrorCode::INVALID_PARAMS,
            "invalid params: `params` must be an object".into(),
        );
    }
    let parsed = match serde_json::from_value::<ClientJsonRpcMessage>(message.clone()) {
        Ok(parsed) => parsed,
        Err(err) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                id,
                ErrorCode::INVALID_REQUEST,
                format!("not a JSON-RPC 2.0 message an MCP client sends: {err}"),
            )
        }
    };
    if let Some(refused) = before_rmcp(&endpoint, &mut parts, &message, &parsed) {
        return refused;
    }
    let initialize = matches!(&parsed, ClientJsonRpcMessage::Request(request)
        if matches!(request.request, ClientRequest::InitializeRequest(_)));
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("(a response)")
        .to_owned();
    let started = std::time::Instant::now();
    let answer = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    // One line per request (rmcp's own are off by default).
    info!(%method, status = answer.status().as_u16(), ms = started.elapsed().as_millis() as u64, "MCP request.");
    let mut answer = as_json_rpc(answer, id).await;
    if initialize && answer.status() == StatusCode::OK {
        answer
            .headers_mut()
            .insert(session::HEADER, session::issue());
    }
    answer
}

/// What [`screen`] does with a well-formed message before rmcp sees it; the answer when it
/// answers itself.
fn before_rmcp(
    endpoint: &McpEndpoint,
    parts: &mut Parts,
    message: &Value,
    parsed: &ClientJsonRpcMessage,
) -> Option<Response> {
    let id = || message.get("id").cloned().unwrap_or(Value::Null);
    match parsed {
        ClientJsonRpcMessage::Request(request) => match &request.request {
            ClientRequest::CustomRequest(custom) => {
                if let Some(problem) = bad_params(&custom.method, &message["params"]) {
                    return Some(rpc_error(
                        StatusCode::OK,
                        id(),
                        ErrorCode::INVALID_PARAMS,
                        problem,
                    ));
                }
            }
            ClientRequest::InitializeRequest(_) => {
                // MCP lifecycle: the version is negotiated in the body (an unknown one is
                // answered with ours); the header names the version of the requests after it,
                // so on `initialize` it is not checked against the body (rmcp would answer 400).
                parts.headers.remove(PROTOCOL_VERSION_HEADER);
            }
            ClientRequest::CallToolRequest(call) => {
                return refuse_call(endpoint, parts, &call.params.name, id());
            }
            _ => {}
        },
        ClientJsonRpcMessage::Notification(notification) => {
            if let ClientNotification::CancelledNotification(cancelled) = &notification.notification
            {
                if let Some(request_id) = &cancelled.params.request_id {
                    let request_id = serde_json::to_string(request_id).unwrap_or_default();
                    let caller = crate::http::caller_in(&parts.extensions);
                    let session = session::of(&parts.headers);
                    cancel(endpoint, &caller.subject, session, request_id);
                }
            }
        }
        _ => {}
    }
    None
}

/// `405` for a method other than POST: there is no stream to open (GET), and no session to end
/// (DELETE: session ids are labels, see [`session`]).
fn not_served(method: &Method) -> Response {
    let mut refused = rpc_error(
        StatusCode::METHOD_NOT_ALLOWED,
        Value::Null,
        ErrorCode::INVALID_REQUEST,
        format!(
            "{method} is not served: this endpoint is stateless, so there is no stream to open \
             (GET) nor session to end (DELETE: its session ids only label a client's calls); \
             POST a JSON-RPC message"
        ),
    );
    refused.headers_mut().insert(
        axum::http::header::ALLOW,
        axum::http::HeaderValue::from_static("POST"),
    );
    refused
}

/// The body, and the JSON it holds; or the JSON-RPC error saying why not.
async fn read_message(body: Body) -> Result<(Bytes, Value), Response> {
    // `http::guard` has already read the body within `max_body_bytes`.
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|err| {
            let status = if crate::http::guard::is_too_slow(&err) {
                StatusCode::REQUEST_TIMEOUT
            } else {
                StatusCode::BAD_REQUEST
            };
            let problem = format!("cannot read the body: {err}");
            rpc_error(status, Value::Null, ErrorCode::PARSE_ERROR, problem)
        })?;
    let message = serde_json::from_slice::<Value>(&bytes).map_err(|err| {
        rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            ErrorCode::PARSE_ERROR,
            format!("the body is not JSON: {err}"),
        )
    })?;
    Ok((bytes, message))
}

/// `403` for a `tools/call` of `name` whose caller lacks the scope it needs
/// ([`McpEndpoint::scope_for`]), before it runs: a JSON-RPC error naming the scope, with the
/// challenge `/api` gives (`access::ScopeChallenge`), so that a client can ask for a token with
/// more (MCP's step-up) where an error result would only tell the model.
fn refuse_call(endpoint: &McpEndpoint, parts: &Parts, name: &str, id: Value) -> Option<Response> {
    let scope = endpoint.scope_for(name)?;
    let caller = crate::http::caller_in(&parts.extensions);
    if caller.has(scope) {
        return None;
    }
    debug!(tool = %name, %scope, subject = %caller.subject, "A tool call lacks a scope; refused.");
    let error = ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        crate::http::access::missing_scope(scope),
        Some(serde_json::json!({"scope": scope.as_str()})),
    );
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error});
    let refused = (StatusCode::FORBIDDEN, axum::Json(body));
    let challenge = parts
        .extensions
        .get::<crate::http::access::ScopeChallenge>()
        .cloned()
        .unwrap_or_default()
        .of(&caller, &parts.headers, parts.uri.path(), scope);
    Some(crate::http::oauth::with_challenge(refused, &challenge))
}

/// rmcp's own refusals (406 for an `Accept` that takes neither JSON nor SSE, 400 for an unknown
/// protocol version, …) are plain text: the same, as a JSON-RPC error.
async fn as_json_rpc(answer: Response, id: Value) -> Response {
    let plain = answer
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|t| !t.starts_with("application/json") && !t.starts_with("text/event-stream"));
    if !answer.status().is_client_error() || !plain {
        return answer;
    }
    let status = answer.status();
    let text = axum::body::to_bytes(answer.into_body(), 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("refused").to_owned()
    } else {
        text
    };
    rpc_error(status, id, ErrorCode::INVALID_REQUEST, message)
}

/// Why the params of a request for a method we serve did not parse (rmcp then sees a custom
/// request), or `None` for a method we do not serve.
fn bad_params(method: &str, params: &Value) -> Option<String> {
    fn problem<T: serde::de::DeserializeOwned>(method: &str, params: &Value) -> String {
        match serde_json::from_value::<T>(params.clone()) {
            Err(err) => format!("invalid params for {method}: {err}"),
            Ok(_) => format!("invalid params for {method}"),
        }
    }
    match method {
        "tools/call" => Some(problem::<CallToolRequestParams>(method, params)),
        "initialize" => Some(problem::<InitializeRequestParams>(method, params)),
        "tools/list" | "server/discover" | "ping" => Some(format!("invalid params for {method}")),
        _ => None,
    }
}

fn cancel(endpoint: &McpEndpoint, caller: &str, session: Option<String>, request_id: String) {
    match endpoint
        .in_flight
        .cancel(caller, session, request_id.clone())
    {
        Cancelled::One => info!(request_id, "MCP call cancelled by its client."),
        Cancelled::None => debug!(request_id, "A cancel named no running MCP call."),
        Cancelled::Ambiguous => warn!(
            request_id,
            "A cancel matched MCP calls of several clients; none was stopped."
        ),
    }
}

/// A JSON-RPC error response.
fn rpc_error(status: StatusCode, id: Value, code: ErrorCode, message: String) -> Response {
    let error = ErrorData::new(code, message, None);
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error});
    (status, axum::Json(body)).into_response()
}

/// rmcp's server handler for one request.
#[derive(Clone)]
pub struct Handler(Arc<McpEndpoint>);

impl Handler {
    fn metrics(&self) -> &crate::metrics::ToolMetrics {
        self.0.adapter.metrics()
    }

    /// The thread a `threads__send` runs on: its events become progress, a cancel interrupts it.
    /// Only a thread the caller sees: the tool refuses another tenant's, and neither its events
    /// nor its messages are this call's.
    async fn send_thread(
        &self,
        name: &str,
        arguments: &Value,
        caller: &Caller,
    ) -> Option<ThreadId> {
        let id = runs_on_owner(name)
            .then(|| arguments.get("threadId").and_then(Value::as_str))
            .flatten()
            .map(|id| ThreadId::from_string(id.to_owned()))?;
        crate::http::access::visible_thread(&self.0.store, caller, &id)
            .await
            .ok()
            .map(|_| id)
    }

    /// Records a call that changes something (`threads__send` on `thread`, `threads__create`)
    /// in the audit log, beside `/api`'s.
    async fn audit(
        &self,
        caller: &Caller,
        name: &str,
        thread: Option<&ThreadId>,
        remote: Option<&str>,
        result: &rmcp::model::CallToolResult,
    ) {
        let status = match result.is_error {
            Some(true) => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::OK,
        };
        let created = result
            .structured_content
            .as_ref()
            .and_then(|c| c.get("threadId"))
            .and_then(Value::as_str)
            .map(|id| ThreadId::from_string(id.to_owned()));
        let entry = crate::http::audit::Entry {
            caller,
            action: &format!("mcp {name}"),
            path: "/mcp",
            thread: thread.or(created.as_ref()),
            status,
            remote,
        };
        crate::http::audit::write(&self.0.store, entry).await;
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> InitializeResult {
        let mut tools = ToolsCapability::default();
        tools.list_changed = Some(false);
        let mut capabilities = ServerCapabilities::default();
        capabilities.tools = Some(tools);
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.metrics().http_request("initialize");
        self.negotiate_initialize(&request)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        self.metrics().http_request("server/discover");
        let mut info = self.get_info();
        if self.0.events.is_some() {
            let client = context.client_capabilities();
            events::Events::advertise(&mut info.capabilities, client.as_ref());
        }
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let Some(events) = &self.0.events else {
            let method = request.method;
            return Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, method, None));
        };
        events.answer(request, context, self.metrics()).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.metrics().http_request("tools/list");
        Ok(ListToolsResult::with_all_items(self.0.registry.list()))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.0.registry.list().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.metrics().http_request("tools/call");
        let name = request.name.into_owned();
        if self.get_tool(&name).is_none() {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`; tools/list shows the tools there are"),
                None,
            ));
        }
        let parts = context.extensions.get::<axum::http::request::Parts>();
        // Set by the token check every `/mcp` request passes.
        let caller = parts.map_or_else(Caller::operator, |p| crate::http::caller_in(&p.extensions));
        // `screen` has answered `403` already; this holds wherever else a call comes from.
        if let Some(scope) = self.0.scope_for(&name).filter(|s| !caller.has(*s)) {
            let refused = crate::http::access::missing_scope(scope);
            let result = crate::mcp::CallOutcome::error_result(refused);
            return Ok(CallToolResponse::Complete(result));
        }
        let mut arguments = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        // A send names its message, so a cancel stops that message and no other.
        let client = runs_on_owner(&name)
            .then(|| send_client_id(&mut arguments))
            .flatten();
        let session = parts.and_then(|parts| session::of(&parts.headers));
        let remote = parts.and_then(|p| crate::http::audit::remote_of(&p.extensions));
        let request_id = serde_json::to_string(&context.id).unwrap_or_default();
        let registration = self
            .0
            .in_flight
            .register(&caller.subject, session, request_id);
        let thread = self.send_thread(&name, &arguments, &caller).await;
        let mut events = match thread
            .as_ref()
            .filter(|_| context.meta.get_progress_token().is_some())
        {
            Some(thread) => self.0.pipeline.follow_from_now(thread).await.ok(),
            None => None,
        };
        let call = self.0.call(&name, arguments, &caller);
        let traceparent = parts.and_then(|p| crate::traces::traceparent_of(&p.headers));
        let call = crate::traces::under(traceparent, call);
        tokio::pin!(call);
        let mut progress = 0u32;
        let mut cancelled = false;
        // A cancel that came before its message joined the line: asked again until it did.
        let mut stop_again = false;
        let mut again = tokio::time::interval(STOP_AGAIN_EVERY);
        let result = loop {
            tokio::select! {
                outcome = &mut call => break outcome.result,
                _ = registration.cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    let (Some(thread), Some(client)) = (&thread, &client) else {
                        // Dropping the call aborts the tool's task.
                        break crate::mcp::CallOutcome::error_result(format!("tool `{name}` was cancelled"));
                    };
                    // Its message ends `interrupted` (withdrawn, or its turn interrupted), and
                    // the call answers with that.
                    stop_again = !self.0.stop_send(thread, client, &caller).await;
                    again.reset();
                }
                _ = again.tick(), if stop_again => {
                    if let (Some(thread), Some(client)) = (&thread, &client) {
                        stop_again = !self.0.stop_send(thread, client, &caller).await;
                    }
                }
                event = next_event(&mut events) => {
                    let Some(event) = event else {
                        events = None;
                        continue;
                    };
                    if let Some(token) = context.meta.get_progress_token() {
                        progress += 1;
                        let note = ProgressNotificationParam::new(token, f64::from(progress))
                            .with_message(progress_message(&event));
                        if context.peer.notify_progress(note).await.is_err() {
                            // The client is gone: the call goes on, but tells no one.
                            events = None;
                        }
                    }
                }
            }
        };
        if threads::policy_of(&name).is_some_and(|p| p.changes()) {
            self.audit(&caller, &name, thread.as_ref(), remote.as_deref(), &result)
                .await;
        }
        // The registry leaves `resultType` out for the CLI (a pre-2026 peer); 2026-07-28 wants
        // it, and rmcp strips it again for older peers.
        let mut result = result;
        result.result_type = Some(ResultType::COMPLETE);
        Ok(CallToolResponse::Complete(result))
    }
}

/// Whether the tool `name` runs on the thread's owner (`threads__send`): its thread's events
/// are the call's progress, and a cancel stops its message.
fn runs_on_owner(name: &str) -> bool {
    threads::policy_of(name).is_some_and(|p| p.runs == threads::Runs::Owner)
}

/// The `clientMessageId` of a `threads__send`: the caller's, or one given to it here.
fn send_client_id(arguments: &mut Value) -> Option<String> {
    let given = arguments
        .get("clientMessageId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if given.is_some() {
        return given;
    }
    let made = format!("mcp-{}", uuid::Uuid::new_v4());
    arguments
        .as_object_mut()?
        .insert("clientMessageId".into(), Value::String(made.clone()));
    Some(made)
}

/// The next event of the thread, or `None` once there will be none; pending forever without a
/// subscription.
async fn next_event(events: &mut Option<crate::events::Follow>) -> Option<EventRow> {
    let Some(follow) = events else {
        return std::future::pending().await;
    };
    follow.next().await.ok().flatten()
}

/// A progress line for an event: its kind, and its text when it carries some.
fn progress_message(event: &EventRow) -> String {
    const MAX: usize = 200;
    match event.data.get("text").and_then(Value::as_str) {
        Some(text) => {
            let text: String = text.chars().take(MAX).collect();
            format!("{}: {text}", event.kind)
        }
        None => event.kind.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn bad_params_name_the_method_and_the_field() {
        let problem = bad_params("tools/call", &json!({"name": 5})).expect("a method we serve");
        assert!(
            problem.starts_with("invalid params for tools/call: "),
            "{problem}"
        );
        assert!(problem.contains("invalid type"), "{problem}");
        assert_eq!(
            bad_params("tools/list", &json!({"cursor": 1})).as_deref(),
            Some("invalid params for tools/list")
        );
        assert_eq!(bad_params("prompts/nonsense", &json!({})), None);
    }

    #[test]
    fn progress_says_the_event_and_a_bounded_text() {
        let event = |kind: &str, data: Value| EventRow {
            id: 1,
            thread_id: ThreadId::from_string("t".to_owned()),
            message_id: None,
            kind: kind.into(),
            data,
            created_at: chrono::Utc::now(),
        };
        assert_eq!(
            progress_message(&event("turn_started", json!({}))),
            "turn_started"
        );
        let long = "x".repeat(500);
        let message = progress_message(&event("text_delta", json!({"text": long})));
        assert_eq!(message, format!("text_delta: {}", "x".repeat(200)));
    }
}
