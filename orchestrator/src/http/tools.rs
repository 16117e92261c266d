//! Tools (list, call), a thread's recorded tool calls, and the pool status.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use plugin_contract::ThreadId;

use super::{ApiError, ApiJson, ApiPath, ApiState};
use crate::metrics::PoolCounts;
use crate::pool::ProcessInfo;
use crate::store::ToolCallRow;

/// `GET /api/tools`: every tool as `tools/list` shows it to the model.
#[derive(Debug, Serialize)]
pub struct ToolList {
    pub tools: Vec<rmcp::model::Tool>,
}

pub async fn list(State(state): State<ApiState>) -> Json<ToolList> {
    Json(ToolList {
        tools: state.mcp.registry().list(),
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallTool {
    thread_id: Option<String>,
    #[serde(default)]
    input: Value,
}

/// Runs one tool through the same validation and handler path the model's calls take, and
/// answers with the same result the model gets (`CallToolResult`).
pub async fn call(
    State(state): State<ApiState>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<CallTool>,
) -> Result<Json<rmcp::model::CallToolResult>, ApiError> {
    if state.mcp.registry().get(&name).is_none() {
        return Err(ApiError::not_found(format!("tool {name} not found")));
    }
    let thread = match body.thread_id {
        Some(id) => Some(
            state
                .store
                .require_thread(&ThreadId::from_string(id))
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
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallList {
    pub tool_calls: Vec<ToolCallRow>,
}

pub async fn thread_calls(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ToolCallList>, ApiError> {
    let id = ThreadId::from_string(id);
    state.store.require_thread(&id).await?;
    Ok(Json(ToolCallList {
        tool_calls: state.store.tool_calls(&id).await?,
    }))
}

/// `GET /api/pool`: each live process and the pool's counters, the same ones `/metrics` shows.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    pub processes: Vec<ProcessInfo>,
    pub capacity: u64,
    pub live: u64,
    /// Hits ÷ (hits + misses): the share of turns and prewarms that found a warm process;
    /// `null` before the first.
    pub hit_rate: Option<f64>,
    pub stats: PoolCounts,
}

pub async fn pool(State(state): State<ApiState>) -> Json<PoolStatus> {
    let stats = state.pool.counts();
    Json(PoolStatus {
        processes: state.pool.snapshot(),
        capacity: state.config.pool.max_capacity,
        live: stats.live,
        hit_rate: (stats.hits + stats.misses > 0)
            .then(|| stats.hits as f64 / (stats.hits + stats.misses) as f64),
        stats,
    })
}
