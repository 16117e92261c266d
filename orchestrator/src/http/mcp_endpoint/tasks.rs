//! MCP Tasks (`io.modelcontextprotocol/tasks`, SEP-2663) on `/mcp`: a `threads__send` from a
//! client that declares the extension on its request answers at once with a task instead of
//! waiting for the turn, so that a long turn outlives the client's tool timeout, its connection,
//! and a restart of the daemon.
//!
//! **The task is the message's turn** ([`crate::service::turns`]): its id is the user message's
//! id, and every `tasks/get` reads where the turn stands from the thread, so nothing is kept
//! here. The mapping ([`detailed`]):
//!
//! | the turn                           | the task                                         |
//! |------------------------------------|--------------------------------------------------|
//! | in line or running                 | `working`                                        |
//! | waiting for a person's approval    | `input_required`: one `elicitation/create` per pending permission, keyed by its request id |
//! | replied, failed, refused           | `completed`: the result `threads__send` would have answered |
//! | stopped (a cancel, an interrupt, a restart) | `cancelled`, the reason in `statusMessage` |
//!
//! `failed` is never used: a turn's failure is a tool result (`isError`, or a `status`), as the
//! extension asks. `tasks/update`'s `inputResponses` answer the permissions (accept with
//! `allow` not false allows; anything else denies), `tasks/cancel` stops the turn as an
//! interrupt would. `subscriptions/listen` with `taskIds` is a stream of `notifications/tasks`,
//! each the whole task as `tasks/get` would show it, until every task named has ended.
//!
//! A client that does not declare the extension on a request never gets a task (today's
//! blocking `threads__send`), and its `tasks/*` requests are refused with `-32021` (by rmcp);
//! the capability is advertised to a `server/discover` that declares it.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolResponse, CreateTaskResult, DetailedTask, ErrorCode, ErrorData, InputRequest,
    InputRequests, InputResponses, JsonObject, Task, TaskPayload, TaskStatus, TASKS_EXTENSION_ID,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tracing::debug;

use super::threads;
use super::McpEndpoint;
use crate::api;
use crate::approvals::Answer;
use crate::caller::{Caller, Scope};
use crate::mcp::ToolRegistry;
use crate::service::{ServiceError, ThreadService, TurnState, TurnView};
use crate::store::MessageId;

/// The tool whose calls may become tasks.
pub const TASK_TOOL: &str = "threads__send";

/// How often a client is asked to poll (`pollIntervalMs`).
const POLL_INTERVAL_MS: u64 = 1_000;

/// The extension's capability, as the server declares it: no settings.
pub fn capability() -> (String, JsonObject) {
    (TASKS_EXTENSION_ID.to_owned(), JsonObject::new())
}

/// A `tools/call` of `name` that answers with a task, for a request that declared the extension.
pub fn becomes_task(name: &str, declared: bool) -> bool {
    declared && name == TASK_TOOL
}

/// Starts the call as a task: its input checked as a call's would be, its message stored and
/// its turn queued. A refusal is the error result the blocking call would have answered.
pub async fn start(endpoint: &McpEndpoint, caller: &Caller, arguments: Value) -> CallToolResponse {
    let registry = endpoint.registry();
    let arguments = match registry.prepare(TASK_TOOL, arguments) {
        Ok(arguments) => arguments,
        Err(refused) => return CallToolResponse::Complete(refused),
    };
    match threads::start_send(endpoint.threads.service(), caller, arguments).await {
        Ok(view) => {
            debug!(task = %view.message, thread = %view.thread, "A threads__send became a task.");
            CallToolResponse::Task(CreateTaskResult::new(detailed(&view, registry).task))
        }
        Err(err) => CallToolResponse::Complete(registry.answer(TASK_TOOL, Err(err))),
    }
}

/// The task of a turn, with what its status carries: the pending permissions as input
/// requests, or the result.
pub fn detailed(view: &TurnView, registry: &ToolRegistry) -> DetailedTask {
    let (payload, message) = match &view.state {
        TurnState::Working => (
            TaskPayload::Working,
            "The turn is queued or running.".into(),
        ),
        TurnState::AwaitingApproval(pending) => (
            TaskPayload::InputRequired {
                input_requests: input_requests(pending),
            },
            format!(
                "The turn waits for a person to allow {}.",
                pending
                    .iter()
                    .map(|p| p.tool_name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        TurnState::Stopped { error } => (TaskPayload::Cancelled, error.clone()),
        TurnState::Replied(_) | TurnState::Failed { .. } => {
            let output = threads::turn_answer(view).unwrap_or_else(|| {
                Err(plugin_contract::ToolError::Failed(
                    "the turn has not ended".into(),
                ))
            });
            let mut result = registry.answer(TASK_TOOL, output);
            // The result the call would have answered a 2026-07-28 client.
            result.result_type = Some(rmcp::model::ResultType::COMPLETE);
            let message = match &view.state {
                TurnState::Failed { error, .. } => error.clone(),
                _ => "The turn replied.".into(),
            };
            let result = serde_json::to_value(result)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .unwrap_or_default();
            (TaskPayload::Completed { result }, message)
        }
    };
    let task = Task::new(
        view.message.to_string(),
        TaskStatus::Working,
        view.created_at.to_rfc3339(),
        view.updated_at.to_rfc3339(),
    )
    .with_status_message(message)
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    DetailedTask::new(task, payload)
}

/// One `elicitation/create` per pending permission, keyed by its request id (unique over the
/// turn, as the extension asks of keys).
fn input_requests(pending: &[api::Permission]) -> InputRequests {
    pending
        .iter()
        .filter_map(|permission| {
            let request = json!({
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": format!(
                        "Claude wants to use {} with {}. Allow it?",
                        permission.tool_name, permission.input
                    ),
                    "requestedSchema": {
                        "type": "object",
                        "properties": {
                            "allow": {
                                "type": "boolean",
                                "title": "Allow",
                                "description": "Allow this tool use (accepting without it allows).",
                                "default": true,
                            },
                            "always": {
                                "type": "boolean",
                                "title": "Allow always",
                                "description": "Allow the same call again on this thread \
                                                without asking (a rule for this thread).",
                                "default": false,
                            },
                            "reason": {
                                "type": "string",
                                "title": "Reason",
                                "description": "For a denial: what Claude reads.",
                            },
                        },
                    },
                },
            });
            let request = serde_json::from_value::<InputRequest>(request).ok()?;
            Some((permission.request_id.clone(), request))
        })
        .collect()
}

/// A person's answer from an elicitation result: accepted (with `allow` not false) allows, and
/// with `always` allows it always on the thread; declined, cancelled or anything else denies,
/// with the `reason` given.
fn answer_of(response: &Value, caller: &Caller) -> Answer {
    let accepted = response["action"] == "accept";
    let allow = accepted && response["content"]["allow"].as_bool() != Some(false);
    let message = response["content"]["reason"]
        .as_str()
        .filter(|r| !r.trim().is_empty())
        .map(str::to_owned);
    Answer {
        allow,
        message,
        updated_input: None,
        always: allow && response["content"]["always"].as_bool() == Some(true),
        by: caller.clone(),
    }
}

/// `tasks/get`: the task as it stands.
pub async fn get(
    endpoint: &McpEndpoint,
    caller: &Caller,
    task_id: &str,
) -> Result<DetailedTask, ErrorData> {
    let view = turn(endpoint.threads.service(), caller, task_id).await?;
    Ok(detailed(&view, endpoint.registry()))
}

/// `tasks/update`: the responses to the task's outstanding permissions; a key that is not one
/// of them (never issued, or decided already) is ignored, as the extension asks.
pub async fn update(
    endpoint: &McpEndpoint,
    caller: &Caller,
    task_id: &str,
    responses: &InputResponses,
) -> Result<(), ErrorData> {
    needs_write(caller)?;
    let service = endpoint.threads.service();
    let view = turn(service, caller, task_id).await?;
    let TurnState::AwaitingApproval(pending) = &view.state else {
        return Ok(());
    };
    for permission in pending {
        let Some(response) = responses.get(&permission.request_id) else {
            continue;
        };
        let answer = answer_of(response, caller);
        let answered = service
            .answer_permission(caller, &view.thread, &permission.request_id, answer)
            .await;
        match answered {
            Ok(_) | Err(ServiceError::Conflict(_) | ServiceError::NotFound(_)) => {}
            Err(err) => return Err(internal(err)),
        }
    }
    Ok(())
}

/// `tasks/cancel`: the turn stopped (withdrawn while in line, interrupted once it runs); a task
/// that has ended stays as it is.
pub async fn cancel(
    endpoint: &McpEndpoint,
    caller: &Caller,
    task_id: &str,
) -> Result<(), ErrorData> {
    needs_write(caller)?;
    let message = MessageId::from_string(task_id.to_owned());
    match endpoint.threads.service().cancel(caller, &message).await {
        Ok(_) => Ok(()),
        Err(ServiceError::NotFound(_)) => Err(not_found()),
        Err(err) => Err(internal(err)),
    }
}

/// The turn of `task_id`, when the caller sees it.
async fn turn(
    service: &ThreadService,
    caller: &Caller,
    task_id: &str,
) -> Result<TurnView, ErrorData> {
    let message = MessageId::from_string(task_id.to_owned());
    match service.turn(caller, &message).await {
        Ok(view) => Ok(view),
        Err(ServiceError::NotFound(_)) => Err(not_found()),
        Err(err) => Err(internal(err)),
    }
}

fn needs_write(caller: &Caller) -> Result<(), ErrorData> {
    if caller.has(Scope::ThreadsWrite) {
        return Ok(());
    }
    Err(ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        crate::http::access::missing_scope(Scope::ThreadsWrite),
        Some(json!({"scope": Scope::ThreadsWrite.as_str()})),
    ))
}

fn not_found() -> ErrorData {
    ErrorData::invalid_params("Failed to retrieve task: Task not found", None)
}

fn internal(err: ServiceError) -> ErrorData {
    tracing::warn!(error = %err, "An MCP task request failed.");
    ErrorData::internal_error(err.to_string(), None)
}

/// The task ids a `subscriptions/listen` asks about, when it asks about tasks.
pub fn listened(message: &Value) -> Option<Vec<String>> {
    let ids = message["params"]["notifications"]["taskIds"].as_array()?;
    Some(
        ids.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
    )
}

/// `subscriptions/listen` for tasks: an SSE stream that acknowledges the tasks the caller sees,
/// then sends each one's `notifications/tasks` now and at every change, and ends with the
/// listen's result once every one of them has ended (or with the client, or the daemon).
pub async fn listen(
    endpoint: &McpEndpoint,
    caller: Caller,
    id: Value,
    task_ids: Vec<String>,
    declared: bool,
) -> Response {
    if !declared {
        let error = ErrorData::new(
            ErrorCode(-32021),
            "Missing required client capability",
            Some(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}})),
        );
        let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
        return (StatusCode::OK, axum::Json(body)).into_response();
    }
    // Held while the stream runs, as every door's streams hold one.
    let permit = match endpoint.streams.take() {
        Ok(permit) => permit,
        Err(full) => {
            let error = ErrorData::internal_error(full.to_string(), None);
            let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
            return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
        }
    };
    let service = endpoint.threads.service().clone();
    let mut views = BTreeMap::new();
    for task_id in task_ids {
        if let Ok(view) = service
            .turn(&caller, &MessageId::from_string(task_id.clone()))
            .await
        {
            views.insert(task_id, view);
        }
    }
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let meta = json!({"io.modelcontextprotocol/subscriptionId": id});
    let ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": meta, "notifications": {"taskIds": views.keys().collect::<Vec<_>>()}},
    });
    let _ = tx.try_send(frame(&ack));
    let watch = Watch {
        service,
        registry: endpoint.registry().clone(),
        pipeline: endpoint.pipeline.clone(),
        caller,
        id,
        tx,
    };
    tokio::spawn(async move {
        watch.run(views).await;
        drop(permit);
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

use futures::StreamExt;

/// One listen stream's watcher.
struct Watch {
    service: ThreadService,
    registry: std::sync::Arc<ToolRegistry>,
    pipeline: crate::pipeline::Pipeline,
    caller: Caller,
    id: Value,
    tx: mpsc::Sender<Bytes>,
}

impl Watch {
    /// Sends each task now, then again whenever its thread's events change it; ends when every
    /// task has ended, the client has gone, or the daemon stops.
    async fn run(self, views: BTreeMap<String, TurnView>) {
        let mut sent: HashMap<String, Value> = HashMap::new();
        let mut follows = futures::stream::SelectAll::new();
        let mut threads = std::collections::HashSet::new();
        for view in views.values() {
            if threads.insert(view.thread.clone()) {
                if let Ok(follow) = self.pipeline.follow_from_now(&view.thread).await {
                    let stop = self.pipeline.stopping().clone();
                    follows.push(Box::pin(follow.into_stream(stop)));
                }
            }
        }
        let mut open: Vec<String> = views.keys().cloned().collect();
        for view in views.values() {
            if !self.notify(view, &mut sent).await {
                return;
            }
        }
        open.retain(|id| !views[id].state.is_final());
        while !open.is_empty() {
            tokio::select! {
                event = follows.next() => {
                    if event.is_none() {
                        return;
                    }
                }
                () = self.tx.closed() => return,
            }
            let mut still = Vec::new();
            for task_id in open {
                let message = MessageId::from_string(task_id.clone());
                let Ok(view) = self.service.turn(&self.caller, &message).await else {
                    continue;
                };
                if !self.notify(&view, &mut sent).await {
                    return;
                }
                if !view.state.is_final() {
                    still.push(task_id);
                }
            }
            open = still;
        }
        let done = json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "result": {
                "resultType": "complete",
                "_meta": {"io.modelcontextprotocol/subscriptionId": self.id},
            },
        });
        let _ = self.tx.send(frame(&done)).await;
    }

    /// Sends the task when it differs from what was last sent of it; false once the client has
    /// gone.
    async fn notify(&self, view: &TurnView, sent: &mut HashMap<String, Value>) -> bool {
        let task = serde_json::to_value(detailed(view, &self.registry)).unwrap_or_default();
        if sent.get(view.message.as_str()) == Some(&task) {
            return true;
        }
        let mut params = task.clone();
        params["_meta"] = json!({"io.modelcontextprotocol/subscriptionId": self.id});
        let note = json!({"jsonrpc": "2.0", "method": "notifications/tasks", "params": params});
        sent.insert(view.message.to_string(), task);
        self.tx.send(frame(&note)).await.is_ok()
    }
}

/// One SSE frame of a JSON-RPC message.
fn frame(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

#[cfg(test)]
mod tests;
