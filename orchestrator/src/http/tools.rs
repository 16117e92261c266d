//! Tools (list, call), a thread's recorded tool calls, and the pool status.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use plugin_contract::ThreadId;

use super::error::ErrorBody;
use super::{ApiError, ApiJson, ApiPath, ApiState};
use crate::api;
use crate::metrics::PoolCounts;
use crate::pool::ProcessInfo;

/// `GET /api/tools`: every tool as `tools/list` shows it to the model.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ToolList {
    /// MCP `Tool`s: `name`, `description`, `inputSchema` (normalized JSON Schema), and
    /// `outputSchema` when the tool declares one.
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<rmcp::model::Tool>,
}

/// Every tool, as `tools/list` shows it to the model.
#[utoipa::path(get, path = "/tools", operation_id = "listTools", tag = "tools",
    responses((status = 200, description = "The tools.", body = ToolList)))]
pub async fn list(State(state): State<ApiState>) -> Json<ToolList> {
    Json(ToolList {
        tools: state.mcp.registry().list(),
    })
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallTool {
    /// The calling thread, for tools that need one.
    thread_id: Option<String>,
    /// The tool's input, checked against its schema.
    #[serde(default)]
    input: Value,
}

/// Runs one tool through the same validation and handler path the model's calls take, and
/// answers with the same result the model gets (`CallToolResult`).
#[utoipa::path(post, path = "/tools/{name}/call", operation_id = "callTool", tag = "tools",
    params(("name" = String, Path, description = "The tool's full name (`<plugin>__<tool>`).")),
    request_body = CallTool,
    responses(
        (status = 200, description = "MCP `CallToolResult` (`content`, `structuredContent`, `isError`): a bad input or a failing tool is `isError: true`, not an HTTP error.",
         body = Object),
        (status = 404, description = "Unknown tool or thread.", body = ErrorBody),
        (status = 422, description = "A missing or invalid field.", body = ErrorBody),
    ))]
pub async fn call(
    State(state): State<ApiState>,
    axum::Extension(caller): axum::Extension<crate::caller::Caller>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<CallTool>,
) -> Result<Json<rmcp::model::CallToolResult>, ApiError> {
    if state.mcp.registry().get(&name).is_none() {
        return Err(ApiError::not_found(format!("tool {name} not found")));
    }
    let thread = match body.thread_id {
        Some(id) => Some(
            super::access::visible_thread(&state.store, &caller, &ThreadId::from_string(id))
                .await?
                .id,
        ),
        None => None,
    };
    let ctx = state.pipeline.tool_context(thread);
    let outcome = state.mcp.call_tool(ctx, &name, body.input, None).await;
    Ok(Json(outcome.result))
}

/// `GET /api/threads/{id}/tool-calls`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallList {
    pub tool_calls: Vec<api::ToolCall>,
}

/// The thread's recorded tool calls.
#[utoipa::path(get, path = "/threads/{id}/tool-calls", operation_id = "listToolCalls", tag = "tools",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    responses(
        (status = 200, description = "The calls, oldest first.", body = ToolCallList),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
    ))]
pub async fn thread_calls(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ToolCallList>, ApiError> {
    let id = ThreadId::from_string(id);
    state.store.require_thread(&id).await?;
    Ok(Json(ToolCallList {
        tool_calls: state
            .store
            .tool_calls(&id)
            .await?
            .into_iter()
            .map(api::ToolCall::from)
            .collect(),
    }))
}

/// `GET /api/pool`: each live process and the pool's counters, the same ones `/metrics` shows.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    pub processes: Vec<ProcessInfo>,
    pub capacity: u64,
    pub live: u64,
    /// Hits ÷ (hits + misses): the share of turns and prewarms that found a warm process;
    /// `null` before the first.
    pub hit_rate: Option<f64>,
    pub stats: PoolCounts,
    /// Why no spare is started, when the CLI refused one for a reason a retry does not mend
    /// (a policy, a broken configuration file); spares start again once a process of the
    /// same profile does. `null` otherwise.
    pub spares_held: Option<String>,
}

/// The live processes and the pool's counters.
#[utoipa::path(get, path = "/pool", operation_id = "getPool", tag = "pool",
    responses((status = 200, description = "The pool.", body = PoolStatus)))]
pub async fn pool(State(state): State<ApiState>) -> Json<PoolStatus> {
    let stats = state.pool.counts();
    Json(PoolStatus {
        processes: state.pool.snapshot(),
        capacity: state.config.pool.max_capacity,
        live: stats.live,
        hit_rate: (stats.hits + stats.misses > 0)
            .then(|| stats.hits as f64 / (stats.hits + stats.misses) as f64),
        stats,
        spares_held: state.pool.spares_held(),
    })
}
