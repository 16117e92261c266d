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
//! - [`tasks`]: the Tasks extension: a `threads__send` that answers with a task (its turn), to
//!   clients that declare it; [`screen`]'s checks before rmcp are `screen.rs`.

pub mod events;
pub mod in_flight;
pub mod schemas;
mod screen;
pub mod session;
pub mod tasks;
pub mod threads;

use std::sync::Arc;

use axum::http::StatusCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CustomRequest, CustomResult,
    DiscoverResult, ErrorCode, ErrorData, GetTaskParams, GetTaskResult, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ResultType, ServerCapabilities, ToolsCapability, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::Value;
use tracing::debug;

use plugin_contract::{Plugin, ThreadId};

use crate::caller::{Caller, Scope};
use crate::mcp::schema::SchemaError;
use crate::mcp::{CallOutcome, McpAdapter, ToolRegistry};
use crate::pipeline::{Pipeline, Stopped};

/// How often a cancelled `threads__send` whose message was not in its thread's line yet asks
/// again, until it is (withdrawn then) or the call ends.
const STOP_AGAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(50);
use crate::store::{EventRow, Store};
use in_flight::InFlight;
pub use screen::screen;

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
    /// `http.max_streams`: a task listen holds a permit while it runs.
    streams: crate::sync::Streams,
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
        streams: crate::sync::Streams,
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
            streams,
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

    /// Why a call of `name` by `caller` does not run: an unknown tool (an invalid request), or
    /// a scope the caller lacks (an error result; `screen` has answered `403` already, this
    /// holds wherever else a call comes from).
    fn refused(&self, name: &str, caller: &Caller) -> Option<Result<CallToolResponse, ErrorData>> {
        if self.get_tool(name).is_none() {
            return Some(Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`; tools/list shows the tools there are"),
                None,
            )));
        }
        let scope = self.0.scope_for(name).filter(|s| !caller.has(*s))?;
        let refused = crate::http::access::missing_scope(scope);
        let result = crate::mcp::CallOutcome::error_result(refused);
        Some(Ok(CallToolResponse::Complete(result)))
    }

    /// A `threads__send` as a task ([`tasks::start`]), recorded in the audit log as the call
    /// would be.
    async fn start_task(
        &self,
        caller: &Caller,
        name: &str,
        arguments: Value,
        remote: Option<&str>,
    ) -> CallToolResponse {
        let thread = self.send_thread(name, &arguments, caller).await;
        let response = tasks::start(&self.0, caller, arguments).await;
        let recorded = match &response {
            CallToolResponse::Complete(result) => result.clone(),
            _ => rmcp::model::CallToolResult::success(Vec::new()),
        };
        self.audit(caller, name, thread.as_ref(), remote, &recorded)
            .await;
        response
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
        capabilities.extensions = Some([tasks::capability()].into());
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
        let mut info = self.negotiate_initialize(&request)?;
        if !request.capabilities.supports_tasks() {
            info.capabilities.extensions = None;
        }
        Ok(info)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        self.metrics().http_request("server/discover");
        let mut info = self.get_info();
        // Each extension is advertised only to a client that declares it.
        if !declares_tasks(&context) {
            if let Some(extensions) = &mut info.capabilities.extensions {
                extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
            }
        }
        if self.0.events.is_some() {
            let client = context.client_capabilities();
            events::Events::advertise(&mut info.capabilities, client.as_ref());
        }
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.metrics().http_request("tasks/get");
        let task = tasks::get(&self.0, &caller_of(&context), &request.task_id).await?;
        Ok(GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.metrics().http_request("tasks/update");
        let caller = caller_of(&context);
        tasks::update(&self.0, &caller, &request.task_id, &request.input_responses).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.metrics().http_request("tasks/cancel");
        tasks::cancel(&self.0, &caller_of(&context), &request.task_id).await
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
        let caller = caller_of(&context);
        if let Some(refused) = self.refused(&name, &caller) {
            return refused;
        }
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let mut arguments = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        let remote = parts.and_then(|p| crate::http::audit::remote_of(&p.extensions));
        if tasks::becomes_task(&name, declares_tasks(&context)) {
            return Ok(self
                .start_task(&caller, &name, arguments, remote.as_deref())
                .await);
        }
        // A send names its message, so a cancel stops that message and no other.
        let client = runs_on_owner(&name)
            .then(|| send_client_id(&mut arguments))
            .flatten();
        let session = parts.and_then(|parts| session::of(&parts.headers));
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

/// Whether the request declared the tasks extension in its per-request capabilities.
fn declares_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

/// The caller of a request (set by the token check every `/mcp` request passes).
fn caller_of(context: &RequestContext<RoleServer>) -> Caller {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .map_or_else(Caller::operator, |p| crate::http::caller_in(&p.extensions))
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
