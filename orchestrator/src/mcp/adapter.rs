//! JSON-RPC for the in-process MCP server `harness`, carried in the CLI's `mcp_message` control
//! requests (see §6 of the protocol notes). Each request is answered at once except `tools/call`,
//! which runs the tool (in its own task, see [`ToolRegistry::call`]); the process reader never
//! waits on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use plugin_contract::{Delegate, Invoker, ThreadId, ThreadStore, ToolContext};

use super::registry::{CallOutcome, ToolRegistry};
use crate::invoker::process::ControlHandler;
use crate::invoker::protocol::MCP_SERVER;
use crate::store::{NewToolCall, Store};
use crate::sync::lock;

/// The protocol version we speak when the CLI asks for one we do not know.
const PROTOCOL_VERSION: &str = "2025-06-18";
const KNOWN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// What tool handlers get besides the thread id. Bound after the app is built, because the
/// invoker (which needs this adapter) is itself one of the services.
#[derive(Clone)]
pub struct ToolServices {
    pub store: Arc<dyn ThreadStore>,
    pub invoker: Arc<dyn Invoker>,
    pub delegate: Arc<dyn Delegate>,
}

pub struct McpAdapter {
    registry: Arc<ToolRegistry>,
    store: Store,
    services: OnceLock<ToolServices>,
    /// Running `tools/call`s by (thread, JSON-RPC id), so `notifications/cancelled` can stop them.
    running: Mutex<HashMap<(ThreadId, String), CancellationToken>>,
    metrics: crate::metrics::ToolMetrics,
}

impl McpAdapter {
    pub fn new(registry: Arc<ToolRegistry>, store: Store) -> McpAdapter {
        McpAdapter {
            registry,
            store,
            services: OnceLock::new(),
            running: Mutex::default(),
            metrics: Default::default(),
        }
    }

    pub fn bind(&self, services: ToolServices) {
        let _ = self.services.set(services);
    }

    pub fn registry(&self) -> &Arc<ToolRegistry> {
        &self.registry
    }

    /// Tool call counters and latency, registered in `/metrics`.
    pub fn metrics(&self) -> &crate::metrics::ToolMetrics {
        &self.metrics
    }

    /// Runs one tool for `thread` and records the call. Used by the CLI's `tools/call` and by
    /// `POST /api/tools/{name}/call`, so both see the same validation and result.
    pub async fn call_tool(
        &self,
        thread: Option<&ThreadId>,
        name: &str,
        input: Value,
        tool_use_id: Option<String>,
    ) -> CallOutcome {
        let Some(services) = self.services.get().cloned() else {
            return CallOutcome {
                result: json!({"content": [{"type": "text", "text": "tools are not ready yet"}], "isError": true}),
                is_error: true,
                duration: Default::default(),
                violations: None,
            };
        };
        let ctx = ToolContext {
            thread_id: thread.cloned().unwrap_or_else(|| ThreadId::from_string("")),
            store: services.store,
            invoker: services.invoker,
            delegate: services.delegate,
        };
        let outcome = self.registry.call(name, input.clone(), ctx).await;
        let known = self.registry.get(name).is_some();
        self.metrics.record(name, known, &outcome);
        let record = NewToolCall {
            thread_id: thread.cloned(),
            tool: name.to_owned(),
            tool_use_id,
            input,
            result: Some(outcome.result.clone()),
            is_error: outcome.is_error,
            duration_ms: outcome.duration.as_millis() as u64,
        };
        if let Err(err) = self.store.record_tool_call(record).await {
            warn!(tool = name, error = %err, "Could not record a tool call.");
        }
        outcome
    }

    async fn handle(&self, thread: &ThreadId, message: Value) -> Value {
        let id = message.get("id").cloned();
        let method = message.get("method").and_then(Value::as_str).unwrap_or("");
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        debug!(thread_id = %thread, method, "MCP request.");
        let result = match method {
            "initialize" => {
                let asked = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or(PROTOCOL_VERSION);
                let version = if KNOWN_VERSIONS.contains(&asked) {
                    asked
                } else {
                    PROTOCOL_VERSION
                };
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": {"name": MCP_SERVER, "version": env!("CARGO_PKG_VERSION")},
                })
            }
            "ping" => json!({}),
            "tools/list" => json!({"tools": self.registry.list()}),
            "tools/call" => {
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let input = params.get("arguments").cloned().unwrap_or(Value::Null);
                let tool_use_id = params
                    .pointer("/_meta/claudecode~1toolUseId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let key = (
                    thread.clone(),
                    id.clone().unwrap_or(Value::Null).to_string(),
                );
                let cancel = CancellationToken::new();
                lock(&self.running).insert(key.clone(), cancel.clone());
                let outcome = tokio::select! {
                    outcome = self.call_tool(Some(thread), &name, input, tool_use_id) => outcome.result,
                    _ = cancel.cancelled() => {
                        debug!(thread_id = %thread, tool = %name, "Tool call cancelled by the CLI.");
                        json!({"content": [{"type": "text", "text": format!("tool `{name}` was cancelled")}], "isError": true})
                    }
                };
                lock(&self.running).remove(&key);
                outcome
            }
            "notifications/cancelled" => {
                // The CLI gave up on a call (interrupt, its own timeout): stop the tool.
                let request = params
                    .get("requestId")
                    .cloned()
                    .unwrap_or(Value::Null)
                    .to_string();
                if let Some(cancel) = lock(&self.running).remove(&(thread.clone(), request)) {
                    cancel.cancel();
                }
                return json!({"jsonrpc": "2.0", "result": {}});
            }
            m if m.starts_with("notifications/") => return json!({"jsonrpc": "2.0", "result": {}}),
            other => return rpc_error(id, -32601, &format!("method not found: {other}")),
        };
        json!({"jsonrpc": "2.0", "id": id, "result": result})
    }
}

#[cfg(test)]
mod tests;

fn rpc_error(id: Option<Value>, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[async_trait::async_trait]
impl ControlHandler for McpAdapter {
    async fn mcp_message(&self, thread: &ThreadId, server: &str, message: Value) -> Value {
        if server != MCP_SERVER {
            return rpc_error(
                message.get("id").cloned(),
                -32601,
                &format!("Server '{server}' not found"),
            );
        }
        self.handle(thread, message).await
    }
}
