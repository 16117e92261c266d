//! The in-process MCP server `harness`, spoken over the CLI's `mcp_message` control requests
//! (§6 of the protocol notes), in `rmcp`'s model types.
//!
//! [`McpAdapter::route`] decides what a message needs without running anything: the handshake,
//! `tools/list`, `ping` and notifications are answered at once; a `tools/call` comes back as a
//! [`ToolCall`] for whoever runs the turn, which calls [`McpAdapter::call`] with the turn's
//! [`ToolContext`]. So this module needs nothing from the pool or the pipeline: data flows down,
//! and the call comes back up as a value.
//!
//! Every call, from the model or the HTTP API, goes through [`McpAdapter::call_tool`]: the same
//! validation, the same record in the store, the same metrics.
//!
//! A process whose profile has tools the client runs ([`super::client`]) has a second server,
//! `custom`, routed here too: its calls are checked the same way, then wait for the client's
//! answer ([`McpAdapter::client_call`]) instead of running.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, EmptyResult, ErrorCode, ErrorData,
    Implementation, InitializeResult, ListToolsResult, ProtocolVersion, RequestId,
    RequestMetaObject, ServerCapabilities, ServerJsonRpcMessage, ServerResult, ToolsCapability,
};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use plugin_contract::{ThreadId, ToolContext};

use super::client::{ClientAnswer, ClientCalls, ClientTools, Waiting, CLIENT_SERVER};
use super::registry::{CallOutcome, ToolRegistry};
use crate::metrics::{ToolMetrics, ToolOutcome};
use crate::store::{NewToolCall, Store};
use crate::sync::lock;

/// The name of our in-process MCP server, as the CLI knows it.
pub const SERVER_NAME: &str = "harness";

/// The version we answer with when the CLI asks for one we do not know.
const FALLBACK_VERSION: ProtocolVersion = ProtocolVersion::V_2025_06_18;
const KNOWN_VERSIONS: [ProtocolVersion; 4] = [
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
];

/// The requests this server answers.
const SERVED: [&str; 4] = ["initialize", "ping", "tools/list", "tools/call"];

/// What a message from the CLI needs.
#[derive(Debug)]
pub enum Route {
    /// The JSON-RPC reply, at once.
    Reply(Value),
    /// The reply to `tools/list`: after it, the CLI's handshake is done and the process is ready
    /// for a fast first turn.
    Listed(Value),
    /// A tool to run for the turn (see [`McpAdapter::call`]).
    Call(ToolCall),
}

/// A `tools/call` from a thread's process, waiting to be run.
#[derive(Debug)]
pub struct ToolCall {
    pub thread: ThreadId,
    pub name: String,
    id: RequestId,
    arguments: Value,
    tool_use_id: Option<String>,
    /// The client's tools when the call is to one of them (server `custom`): the client answers
    /// it ([`McpAdapter::client_call`]).
    client: Option<Arc<ClientTools>>,
}

impl ToolCall {
    /// The model's id of the call (`tool_use_id`), when the CLI passed it.
    pub fn tool_use_id(&self) -> Option<&str> {
        self.tool_use_id.as_deref()
    }

    /// Whether the client runs the tool: the call waits for its answer, it is not run here.
    pub fn is_clients(&self) -> bool {
        self.client.is_some()
    }
}

/// A call to a tool the client runs, as [`McpAdapter::client_call`] leaves it.
#[derive(Debug)]
pub enum ClientCall {
    /// Answered at once (no such tool, an input its schema refuses, no tool use id to answer
    /// by): the JSON-RPC reply, an error the model reads.
    Done(Value),
    /// Waiting for the client's answer.
    Waiting(WaitingCall),
}

/// A call to a tool the client runs, registered as waiting for its answer.
#[derive(Debug)]
pub struct WaitingCall {
    pub thread: ThreadId,
    /// The model's id of the call: what the client's answer names.
    pub tool_use_id: String,
    /// As the model called it: `mcp__custom__NAME`.
    pub name: String,
    id: RequestId,
    waiting: Waiting,
    /// What the store records it as (`custom__NAME`, as a plugin's tool is `PLUGIN__NAME`), with
    /// its input (defaults filled in) and when it began.
    recorded: String,
    input: Value,
    started: std::time::Instant,
}

pub struct McpAdapter {
    registry: Arc<ToolRegistry>,
    store: Store,
    /// Running `tools/call`s by (thread, JSON-RPC id), so `notifications/cancelled` can stop them.
    running: Mutex<HashMap<(ThreadId, String), CancellationToken>>,
    /// The calls to tools the client runs that wait for its answer.
    client_calls: ClientCalls,
    metrics: ToolMetrics,
}

impl McpAdapter {
    pub fn new(registry: Arc<ToolRegistry>, store: Store) -> McpAdapter {
        McpAdapter {
            registry,
            store,
            running: Mutex::default(),
            client_calls: ClientCalls::default(),
            metrics: ToolMetrics::default(),
        }
    }

    pub fn registry(&self) -> &Arc<ToolRegistry> {
        &self.registry
    }

    /// The calls to tools the client runs that wait for its answer: the door that takes the
    /// answer resolves them.
    pub fn client_calls(&self) -> &ClientCalls {
        &self.client_calls
    }

    /// Tool call counters and latency, registered in `/metrics`.
    pub fn metrics(&self) -> &ToolMetrics {
        &self.metrics
    }

    /// Our handshake as the CLI would get it, for `initialize`'s `sdkMcpServerManifests`: with
    /// it the CLI answers its own MCP `initialize` and first `tools/list`, so no round trip over
    /// the control channel stands before a first turn. Its protocol version is the one the CLI
    /// asks for (2025-11-25); another one would make the CLI ignore the manifest.
    pub fn manifest(&self) -> Value {
        json!({
            "initializeResult": initialize_result(ProtocolVersion::V_2025_11_25, SERVER_NAME),
            "toolsListResult": {"tools": self.registry.list()},
        })
    }

    /// What one JSON-RPC message for `server` from `thread`'s process needs.
    pub fn route(&self, thread: &ThreadId, server: &str, message: Value) -> Route {
        self.route_with(thread, server, None, message)
    }

    /// [`McpAdapter::route`] for a process whose profile has tools the client runs (`client`),
    /// served as the server `custom`.
    pub fn route_with(
        &self,
        thread: &ThreadId,
        server: &str,
        client: Option<&Arc<ClientTools>>,
        message: Value,
    ) -> Route {
        let raw_id = message.get("id").cloned();
        let client = match (server, client) {
            (SERVER_NAME, _) => None,
            (CLIENT_SERVER, Some(client)) => Some(client.clone()),
            _ => {
                return Route::Reply(rpc_error(
                    raw_id,
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("Server '{server}' not found"),
                ))
            }
        };
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        debug!(thread_id = %thread, method, "MCP message.");
        let parsed: ClientJsonRpcMessage = match serde_json::from_value(message) {
            Ok(parsed) => parsed,
            Err(err) => {
                return Route::Reply(rpc_error(
                    raw_id,
                    ErrorCode::INVALID_REQUEST,
                    format!("invalid {method} request: {err}"),
                ))
            }
        };
        match parsed {
            ClientJsonRpcMessage::Request(request) => {
                let id = request.id;
                match request.request {
                    ClientRequest::InitializeRequest(init) => {
                        self.metrics.request("initialize");
                        let asked = init.params.protocol_version;
                        let version = if KNOWN_VERSIONS.contains(&asked) {
                            asked
                        } else {
                            FALLBACK_VERSION
                        };
                        let result = initialize_result(version, server);
                        Route::Reply(rpc_result(ServerResult::InitializeResult(result), id))
                    }
                    ClientRequest::PingRequest(_) => {
                        self.metrics.request("ping");
                        Route::Reply(rpc_result(ServerResult::EmptyResult(EmptyResult {}), id))
                    }
                    ClientRequest::ListToolsRequest(_) => {
                        self.metrics.request("tools/list");
                        let tools = match &client {
                            Some(client) => client.list(),
                            None => self.registry.list(),
                        };
                        let result = ListToolsResult::with_all_items(tools);
                        Route::Listed(rpc_result(ServerResult::ListToolsResult(result), id))
                    }
                    ClientRequest::CallToolRequest(call) => {
                        self.metrics.request("tools/call");
                        Route::Call(tool_call(thread, id, call, client))
                    }
                    // A method we serve whose params did not parse lands here as a custom one.
                    _ if SERVED.contains(&method.as_str()) => Route::Reply(rpc_error(
                        Some(id_value(&id)),
                        ErrorCode::INVALID_PARAMS,
                        format!("invalid params for {method}"),
                    )),
                    _ => Route::Reply(rpc_error(
                        Some(id_value(&id)),
                        ErrorCode::METHOD_NOT_FOUND,
                        format!("method not found: {method}"),
                    )),
                }
            }
            ClientJsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    notification.notification
                {
                    self.cancel(thread, cancelled.params.request_id);
                }
                Route::Reply(json!({"jsonrpc": "2.0", "result": {}}))
            }
            // Responses and errors from the CLI answer nothing we asked.
            ClientJsonRpcMessage::Response(_) | ClientJsonRpcMessage::Error(_) => {
                Route::Reply(json!({"jsonrpc": "2.0", "result": {}}))
            }
        }
    }

    /// The CLI gave up on the call `request` (interrupt, its own timeout): it stops.
    fn cancel(&self, thread: &ThreadId, request: Option<RequestId>) {
        let Some(request) = request else {
            return;
        };
        let key = (thread.clone(), id_value(&request).to_string());
        if let Some(cancel) = lock(&self.running).remove(&key) {
            cancel.cancel();
        }
    }

    /// Runs a routed `tools/call` with the turn's context; returns the JSON-RPC reply. A
    /// `notifications/cancelled` for it stops the tool.
    pub async fn call(&self, call: ToolCall, ctx: ToolContext) -> Value {
        let key = (call.thread.clone(), id_value(&call.id).to_string());
        let cancel = CancellationToken::new();
        lock(&self.running).insert(key.clone(), cancel.clone());
        let name = call.name.clone();
        let result = tokio::select! {
            outcome = self.call_tool(ctx, &call.name, call.arguments, call.tool_use_id) => outcome.result,
            _ = cancel.cancelled() => {
                debug!(thread_id = %call.thread, tool = %name, "Tool call cancelled by the CLI.");
                CallOutcome::error_result(format!("tool `{name}` was cancelled"))
            }
        };
        lock(&self.running).remove(&key);
        rpc_result(ServerResult::CallToolResult(result), call.id)
    }

    /// Registers a routed call to a tool the client runs ([`ToolCall::is_clients`]) as waiting
    /// for the client's answer, its input checked first; one the client cannot answer is
    /// answered at once, as an error the model reads.
    pub fn client_call(&self, call: ToolCall) -> ClientCall {
        let refuse = |id: RequestId, text: String| {
            let result = CallOutcome::error_result(text);
            ClientCall::Done(rpc_result(ServerResult::CallToolResult(result), id))
        };
        let Some(client) = &call.client else {
            return refuse(call.id, format!("tool `{}` is not the client's", call.name));
        };
        let input = match client.prepare(&call.name, call.arguments) {
            Ok(input) => input,
            Err(text) => {
                warn!(thread_id = %call.thread, tool = %call.name, "Client tool input rejected: {text}");
                self.metrics
                    .record(CLIENT_SERVER, ToolOutcome::InvalidInput, Duration::ZERO);
                return refuse(call.id, text);
            }
        };
        let Some(tool_use_id) = call.tool_use_id else {
            let text = format!(
                "tool `{}` was called without a tool use id to answer",
                call.name
            );
            return refuse(call.id, text);
        };
        let Some(waiting) = self.client_calls.wait(&call.thread, &tool_use_id) else {
            let text = format!("tool use {tool_use_id} is waiting already");
            return refuse(call.id, text);
        };
        ClientCall::Waiting(WaitingCall {
            thread: call.thread,
            tool_use_id,
            name: super::client::model_name(&call.name),
            id: call.id,
            waiting,
            recorded: format!("{CLIENT_SERVER}__{}", call.name),
            input,
            started: std::time::Instant::now(),
        })
    }

    /// The client's answer to `call` and the JSON-RPC reply that carries it to the CLI; `None`
    /// (and a cancelled result) when the CLI gave up on the call first (an interrupt). Dropped
    /// unanswered (the turn ended), the call waits no more. Recorded as a plugin tool's call is
    /// (its metrics under the one label `custom`: clients name these tools).
    pub async fn client_answer(&self, call: WaitingCall) -> (Option<ClientAnswer>, Value) {
        let key = (call.thread.clone(), id_value(&call.id).to_string());
        let cancel = CancellationToken::new();
        lock(&self.running).insert(key.clone(), cancel.clone());
        let running = Unregister(&self.running, key);
        let name = &call.name;
        let (answer, result) = tokio::select! {
            answer = call.waiting.answered() => {
                let mut result = rmcp::model::CallToolResult::success(answer.content.clone());
                result.result_type = None;
                result.is_error = answer.is_error.then_some(true);
                (Some(answer), result)
            }
            _ = cancel.cancelled() => {
                debug!(thread_id = %call.thread, tool = %name, "Client tool call cancelled by the CLI.");
                (None, CallOutcome::error_result(format!("tool `{name}` was cancelled")))
            }
        };
        drop(running);
        let is_error = result.is_error == Some(true);
        let took = call.started.elapsed();
        let kind = if is_error {
            ToolOutcome::Error
        } else {
            ToolOutcome::Ok
        };
        self.metrics.record(CLIENT_SERVER, kind, took);
        let record = NewToolCall {
            thread_id: Some(call.thread.clone()),
            tool: call.recorded,
            tool_use_id: Some(call.tool_use_id),
            input: call.input,
            result: serde_json::to_value(&result).ok(),
            is_error,
            duration_ms: duration_ms(took),
        };
        if let Err(err) = self.store.record_tool_call(record).await {
            warn!(tool = %name, error = %err, "Could not record a tool call.");
        }
        (
            answer,
            rpc_result(ServerResult::CallToolResult(result), call.id),
        )
    }

    /// Runs one tool and records the call. Used by the CLI's `tools/call` and by
    /// `POST /api/tools/{name}/call`, so both see the same validation and result.
    pub async fn call_tool(
        &self,
        ctx: ToolContext,
        name: &str,
        input: Value,
        tool_use_id: Option<String>,
    ) -> CallOutcome {
        self.call_tool_in(&self.registry, ctx, name, input, tool_use_id)
            .await
    }

    /// [`McpAdapter::call_tool`] on another set of tools (the MCP endpoint's: the plugin tools
    /// that need no thread, and the threads themselves): the same record and metrics.
    pub async fn call_tool_in(
        &self,
        registry: &ToolRegistry,
        ctx: ToolContext,
        name: &str,
        input: Value,
        tool_use_id: Option<String>,
    ) -> CallOutcome {
        let thread = ctx.thread_id.clone();
        let outcome = registry.call(name, input.clone(), ctx).await;
        let label = if registry.get(name).is_some() {
            name
        } else {
            "unknown"
        };
        let kind = if outcome.violations.is_some() {
            ToolOutcome::InvalidInput
        } else if outcome.is_error() {
            ToolOutcome::Error
        } else {
            ToolOutcome::Ok
        };
        self.metrics.record(label, kind, outcome.duration);
        if outcome.output_violations.is_some() {
            self.metrics.output_schema_failure(label);
        }
        let record = NewToolCall {
            thread_id: thread,
            tool: name.to_owned(),
            tool_use_id,
            input,
            result: Some(outcome.to_json()),
            is_error: outcome.is_error(),
            duration_ms: duration_ms(outcome.duration),
        };
        if let Err(err) = self.store.record_tool_call(record).await {
            warn!(tool = name, error = %err, "Could not record a tool call.");
        }
        outcome
    }
}

/// A `tools/call` from `thread`'s process as a [`ToolCall`], for the plugin tools or, with
/// `client`, for the client's.
fn tool_call(
    thread: &ThreadId,
    id: RequestId,
    call: rmcp::model::CallToolRequest,
    client: Option<Arc<ClientTools>>,
) -> ToolCall {
    // rmcp keeps a request's `_meta` in its extensions.
    let tool_use_id = call
        .extensions
        .get::<RequestMetaObject>()
        .and_then(|meta| meta.0 .0.get("claudecode/toolUseId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let params = call.params;
    ToolCall {
        thread: thread.clone(),
        name: params.name.into_owned(),
        id,
        arguments: params.arguments.map(Value::Object).unwrap_or(Value::Null),
        tool_use_id,
        client,
    }
}

/// Takes a call off the running ones when dropped.
struct Unregister<'a>(
    &'a Mutex<HashMap<(ThreadId, String), CancellationToken>>,
    (ThreadId, String),
);

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        lock(self.0).remove(&self.1);
    }
}

/// Our answer to `initialize`, as the server `server`.
pub(super) fn initialize_result(version: ProtocolVersion, server: &str) -> InitializeResult {
    let mut capabilities = ServerCapabilities::default();
    let mut tools = ToolsCapability::default();
    tools.list_changed = Some(false);
    capabilities.tools = Some(tools);
    InitializeResult::new(capabilities)
        .with_protocol_version(version)
        .with_server_info(Implementation::new(server, env!("CARGO_PKG_VERSION")))
}

fn duration_ms(took: Duration) -> u64 {
    u64::try_from(took.as_millis()).unwrap_or(u64::MAX)
}

/// A JSON-RPC result. The CLI speaks a protocol version older than 2026-07-28, which has no
/// `resultType`: left out.
fn rpc_result(mut result: ServerResult, id: RequestId) -> Value {
    result.strip_result_type_for_legacy_peer();
    serde_json::to_value(ServerJsonRpcMessage::response(result, id)).unwrap_or(Value::Null)
}

fn rpc_error(id: Option<Value>, code: ErrorCode, message: String) -> Value {
    let error = ErrorData::new(code, message, None);
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

fn id_value(id: &RequestId) -> Value {
    serde_json::to_value(id).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests;
