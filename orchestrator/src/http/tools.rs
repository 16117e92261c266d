//! Tools (list, call), a thread's recorded tool calls, and the pool status.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use plugin_contract::ThreadId;

use super::{ApiError, ApiJson, ApiPath};
use crate::app::App;

pub async fn list(State(app): State<App>) -> Json<Value> {
    Json(json!({"tools": app.adapter().registry().list()}))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallTool {
    thread_id: Option<String>,
    #[serde(default)]
    input: Value,
}

/// Runs one tool through the same validation and handler path the model's calls take, and
/// answers with the same result shape the model gets.
pub async fn call(
    State(app): State<App>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<CallTool>,
) -> Result<Json<Value>, ApiError> {
    if app.adapter().registry().get(&name).is_none() {
        return Err(ApiError::not_found(format!("tool {name} not found")));
    }
    let thread = match body.thread_id {
        Some(id) => Some(
            app.store()
                .require_thread(&ThreadId::from_string(id))
                .await?
                .id,
        ),
        None => None,
    };
    let outcome = app
        .adapter()
        .call_tool(thread.as_ref(), &name, body.input, None)
        .await;
    Ok(Json(outcome.result))
}

pub async fn thread_calls(
    State(app): State<App>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let id = ThreadId::from_string(id);
    app.store().require_thread(&id).await?;
    Ok(Json(
        json!({"toolCalls": app.store().tool_calls(&id).await?}),
    ))
}

/// Each live process (thread, model, pid, age, idle time, turns served, RSS) and the pool's
/// counters, the same ones `/metrics` shows.
pub async fn pool(State(app): State<App>) -> Json<Value> {
    let pool = app.invoker().pool();
    let stats = pool.stats();
    let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    Json(json!({
        "processes": pool.snapshot(),
        "capacity": app.config().pool.max_capacity,
        "live": n(&stats.live),
        "stats": {
            "hits": n(&stats.hits), "misses": n(&stats.misses), "prewarms": n(&stats.prewarms), "prewarmsSkipped": n(&stats.prewarms_skipped),
            "spawns": n(&stats.spawns), "resumeFallbacks": n(&stats.resume_fallbacks),
            "evictions": {
                "expired": n(&stats.evicted_expired), "capacity": n(&stats.evicted_capacity),
                "error": n(&stats.evicted_error), "replaced": n(&stats.evicted_replaced),
                "shutdown": n(&stats.evicted_shutdown),
            },
        },
    }))
}
