//! A2A v1.0's JSON-RPC words, without IO: a request read into what the handlers act on, a
//! [`TurnView`] written as a `Task`, the Agent Card, the errors. Every case is a value test.
//!
//! Shapes are the protobuf JSON of A2A v1.0 as a2a-sdk 1.3.0 sends and reads it: camelCase
//! fields, enums as `TASK_STATE_…` and `ROLE_…`, a part one of `text`, `data`, `url`, `raw`.

use serde_json::{json, Value};

use plugin_contract::ThreadId;

use crate::api::a2a::{agent_text, status_update, TaskState};
use crate::launch::ProfileInfo;
use crate::service::{TurnState, TurnView};
use crate::store::MessageStatus;

/// The protocol version the card offers.
pub const PROTOCOL_VERSION: &str = "1.0";
/// The older version the same URL speaks too (`legacy.rs`), as v0.3 cards write it.
pub const LEGACY_VERSION: &str = "0.3.0";
/// What the bearer scheme takes.
const BEARER: &str = "The daemon's token or an API key (hk_…), as for /api.";

/// A JSON-RPC method of A2A v1.0, by the name a2a-sdk 1.3.0's JSON-RPC transport sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    CancelTask,
    SubscribeToTask,
    CreateTaskPushNotificationConfig,
    GetTaskPushNotificationConfig,
    ListTaskPushNotificationConfigs,
    DeleteTaskPushNotificationConfig,
    ListTasks,
    GetExtendedAgentCard,
}

impl Method {
    /// The method `name` is; `None`: not one of A2A's (`-32601`).
    pub fn parse(name: &str) -> Option<Method> {
        Some(match name {
            "SendMessage" => Method::SendMessage,
            "SendStreamingMessage" => Method::SendStreamingMessage,
            "GetTask" => Method::GetTask,
            "CancelTask" => Method::CancelTask,
            "SubscribeToTask" => Method::SubscribeToTask,
            "CreateTaskPushNotificationConfig" => Method::CreateTaskPushNotificationConfig,
            "GetTaskPushNotificationConfig" => Method::GetTaskPushNotificationConfig,
            "ListTaskPushNotificationConfigs" => Method::ListTaskPushNotificationConfigs,
            "DeleteTaskPushNotificationConfig" => Method::DeleteTaskPushNotificationConfig,
            "ListTasks" => Method::ListTasks,
            "GetExtendedAgentCard" => Method::GetExtendedAgentCard,
            _ => return None,
        })
    }
}

/// A JSON-RPC error, with A2A's codes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    /// Harness's own name for the error (`ErrorInfo.reason`), when it has one.
    pub reason: Option<&'static str>,
}

impl RpcError {
    pub const PARSE: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    pub const PUSH_NOT_SUPPORTED: i64 = -32003;
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;

    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            reason: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(RpcError::INVALID_PARAMS, message)
    }

    pub fn task_not_found(id: &str) -> RpcError {
        RpcError::new(RpcError::TASK_NOT_FOUND, format!("task {id} not found"))
    }

    pub fn unsupported(message: impl Into<String>) -> RpcError {
        RpcError::new(RpcError::UNSUPPORTED_OPERATION, message)
    }
}

/// A JSON-RPC success.
pub fn success(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A JSON-RPC error; Harness's reason goes in `data` as a `google.rpc.ErrorInfo`, where a2a-sdk
/// looks for it.
pub fn failure(id: &Value, err: &RpcError) -> Value {
    let mut error = json!({"code": err.code, "message": err.message});
    if let Some(reason) = err.reason {
        error["data"] = json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "harness",
        }]);
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// A JSON-RPC request: its id (`null` when it had none), method and params.
#[derive(Debug, PartialEq)]
pub struct Request {
    pub id: Value,
    pub method: String,
    pub params: Value,
}

/// `body` read as a JSON-RPC 2.0 request; the error names the id when there was one.
pub fn request(body: &[u8]) -> Result<Request, (Value, RpcError)> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| (Value::Null, RpcError::new(RpcError::PARSE, err.to_string())))?;
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let invalid = |why: &str| (id.clone(), RpcError::new(RpcError::INVALID_REQUEST, why));
    if value.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("not a JSON-RPC 2.0 request"));
    }
    let Some(method) = value.get("method").and_then(Value::as_str) else {
        return Err(invalid("the request names no method"));
    };
    let params = value.get("params").cloned().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return Err(invalid("params is an object"));
    }
    Ok(Request {
        id,
        method: method.to_owned(),
        params,
    })
}

/// A person's answer to the permission a task waits for.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub allow: bool,
    /// Which permission; `None`: the oldest the task waits for.
    pub request_id: Option<String>,
    /// Told to the model with a denial.
    pub reason: Option<String>,
    /// Allow it always on the thread (`"always": true` beside `"decision": "allow"`).
    pub always: bool,
}

/// Where to push a task's updates.
#[derive(Clone, Debug, PartialEq)]
pub struct Push {
    pub url: String,
    /// Sent back as `X-A2A-Notification-Token`, and the key of the signature.
    pub token: Option<String>,
}

/// A `SendMessage` (or `SendStreamingMessage`) as the handlers act on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Send {
    /// The caller's message id: the message's `clientMessageId`, so a repeat starts no second
    /// turn.
    pub message_id: String,
    /// The thread; `None`: a new one.
    pub context: Option<String>,
    /// The task the message answers (input-required); `None`: a new turn.
    pub task: Option<String>,
    /// The text parts, then each data part as JSON, one paragraph each.
    pub text: String,
    /// An answer to input-required found in the parts (see [`decision`]).
    pub decision: Option<Decision>,
    /// `configuration.returnImmediately`: answer at once instead of when the turn settles.
    pub return_immediately: bool,
    pub push: Option<Push>,
    /// The profile of a new thread: `metadata.skill` (a skill of the card).
    pub skill: Option<String>,
}

/// The params of `SendMessage` read.
pub fn send(params: &Value) -> Result<Send, RpcError> {
    let message = params
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| RpcError::invalid_params("params.message is required"))?;
    let string = |value: &Value, field: &str| {
        value
            .get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let message_id = string(message, "messageId")
        .ok_or_else(|| RpcError::invalid_params("message.messageId is required"))?;
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .filter(|parts| !parts.is_empty())
        .ok_or_else(|| RpcError::invalid_params("message.parts holds at least one part"))?;
    let mut paragraphs = Vec::new();
    let mut decisions = Vec::new();
    for part in parts {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            paragraphs.push(text.to_owned());
            decisions.extend(decision(part));
        } else if let Some(data) = part.get("data") {
            paragraphs.push(data.to_string());
            decisions.extend(decision(part));
        } else {
            let media = part
                .get("mediaType")
                .and_then(Value::as_str)
                .unwrap_or("a file");
            return Err(RpcError::new(
                RpcError::CONTENT_TYPE_NOT_SUPPORTED,
                format!("only text and data parts are taken, not {media}"),
            ));
        }
    }
    let text = paragraphs.join("\n\n");
    if text.trim().is_empty() {
        return Err(RpcError::invalid_params("the message has no text"));
    }
    let configuration = params.get("configuration").cloned().unwrap_or_default();
    let push = match configuration.get("taskPushNotificationConfig") {
        Some(config) => Some(push(config)?),
        None => None,
    };
    let metadata = |value: &Value| value.get("metadata").and_then(|m| string(m, "skill"));
    Ok(Send {
        message_id,
        context: string(message, "contextId"),
        task: string(message, "taskId"),
        text,
        decision: decisions.into_iter().next(),
        return_immediately: configuration
            .get("returnImmediately")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        push,
        skill: metadata(params).or_else(|| metadata(message)),
    })
}

/// The answer a part carries: a data part `{"decision": "allow" | "deny", "requestId"?,
/// "reason"?, "always"?}`, or a text part that is `allow` or `deny` alone (any case).
pub fn decision(part: &Value) -> Option<Decision> {
    let word = |w: &str| match w.trim().to_ascii_lowercase().as_str() {
        "allow" => Some(true),
        "deny" => Some(false),
        _ => None,
    };
    if let Some(text) = part.get("text").and_then(Value::as_str) {
        return word(text).map(|allow| Decision {
            allow,
            request_id: None,
            reason: None,
            always: false,
        });
    }
    let data = part.get("data")?;
    let allow = word(data.get("decision")?.as_str()?)?;
    let field = |name: &str| data.get(name).and_then(Value::as_str).map(str::to_owned);
    Some(Decision {
        allow,
        request_id: field("requestId"),
        reason: field("reason"),
        always: allow && data.get("always").and_then(Value::as_bool) == Some(true),
    })
}

/// A `TaskPushNotificationConfig`'s url and token.
pub fn push(config: &Value) -> Result<Push, RpcError> {
    let url = config
        .get("url")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| RpcError::invalid_params("the push notification config needs a url"))?;
    Ok(Push {
        url: url.to_owned(),
        token: config
            .get("token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_owned),
    })
}

/// The task a request names in `field` (`id` for `GetTask`, `taskId` for a push config).
pub fn task_id(params: &Value, field: &str) -> Result<String, RpcError> {
    params
        .get(field)
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| RpcError::invalid_params(format!("params.{field} names the task")))
}

/// The context (thread) a method's result names: a task's, or a push config's.
pub fn context_of(result: &Value) -> Option<ThreadId> {
    let task = result.get("task").unwrap_or(result);
    task.get("contextId")
        .or_else(|| result.get("taskId").and(result.get("id")))
        .and_then(Value::as_str)
        .map(ThreadId::from_string)
}

/// The A2A state a turn is in.
pub fn state_of(state: &TurnState) -> TaskState {
    match state {
        TurnState::Working => TaskState::Working,
        TurnState::AwaitingApproval(_) => TaskState::InputRequired,
        TurnState::Replied(_) => TaskState::Completed,
        TurnState::Failed {
            status: MessageStatus::Refused,
            ..
        } => TaskState::Rejected,
        TurnState::Failed { .. } => TaskState::Failed,
        TurnState::Stopped { .. } => TaskState::Canceled,
    }
}

/// What tells one state of a turn from the next, for a stream: its A2A state and the
/// permissions it waits for.
pub fn stage(view: &TurnView) -> (TaskState, Vec<String>) {
    let waits = match &view.state {
        TurnState::AwaitingApproval(asked) => asked.iter().map(|p| p.request_id.clone()).collect(),
        _ => Vec::new(),
    };
    (state_of(&view.state), waits)
}

/// The turn as an A2A `Task`: id the user message, context the thread, the reply as its one
/// artifact.
pub fn task(view: &TurnView) -> Value {
    let (task, context) = (view.message.to_string(), view.thread.to_string());
    let mut out = json!({
        "id": task,
        "contextId": context,
        "status": status(view),
    });
    if let Some(artifact) = reply_artifact(view) {
        out["artifacts"] = json!([artifact]);
    }
    out
}

/// The turn's status update (`StreamResponse.statusUpdate`).
pub fn update(view: &TurnView) -> Value {
    let status = status(view);
    status_update(
        view.message.as_str(),
        view.thread.as_str(),
        state_of(&view.state),
        status["timestamp"].as_str().unwrap_or_default(),
        status.get("message").cloned(),
    )
}

/// The reply as an artifact update (`StreamResponse.artifactUpdate`), once there is one.
pub fn artifact_update(view: &TurnView) -> Option<Value> {
    let artifact = reply_artifact(view)?;
    Some(json!({"artifactUpdate": {
        "taskId": view.message.as_str(),
        "contextId": view.thread.as_str(),
        "artifact": artifact,
        "lastChunk": true,
    }}))
}

/// `TaskStatus`: the state, when it last changed, and what the agent says about it.
fn status(view: &TurnView) -> Value {
    let (task, context) = (view.message.as_str(), view.thread.as_str());
    let said = |id: &str, text: &str| Some(agent_text(id, task, context, text));
    let message = match &view.state {
        TurnState::Working => None,
        TurnState::AwaitingApproval(asked) => {
            let lines: Vec<String> = asked
                .iter()
                .map(|p| format!("{} asks to run with {}", p.tool_name, p.input))
                .collect();
            let text = format!("{}\nAnswer on this task: allow or deny.", lines.join("\n"));
            let first = asked.first().map_or("", |p| p.request_id.as_str());
            let mut message = agent_text(&format!("{task}-{first}"), task, context, &text);
            let permissions: Vec<Value> = asked
                .iter()
                .map(|p| {
                    json!({"requestId": p.request_id, "toolName": p.tool_name, "input": p.input})
                })
                .collect();
            if let Some(parts) = message["parts"].as_array_mut() {
                parts.push(json!({"data": {"permissions": permissions}}));
            }
            Some(message)
        }
        TurnState::Replied(reply) => said(reply.id.as_str(), &reply.content),
        TurnState::Failed { error, .. } | TurnState::Stopped { error } => {
            said(&format!("{task}-status"), error)
        }
    };
    let mut status = json!({
        "state": state_of(&view.state).as_str(),
        "timestamp": view.updated_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    });
    if let Some(message) = message {
        status["message"] = message;
    }
    status
}

/// The reply as an `Artifact`: its text, and its structured output as a data part.
fn reply_artifact(view: &TurnView) -> Option<Value> {
    let TurnState::Replied(reply) = &view.state else {
        return None;
    };
    let mut parts = vec![json!({"text": reply.content})];
    if let Some(output) = &reply.structured_output {
        parts.push(json!({"data": output}));
    }
    Some(json!({"artifactId": reply.id.as_str(), "name": "reply", "parts": parts}))
}

/// The Agent Card: the JSON-RPC interface at `url`, bearer auth, streaming and push
/// notifications, and `profiles` as skills (`None`: one generic skill, for an anonymous
/// reader).
pub fn card(url: &str, profiles: Option<&[ProfileInfo]>) -> Value {
    let skills: Vec<Value> = match profiles {
        Some(profiles) => profiles.iter().map(skill).collect(),
        None => vec![json!({
            "id": "harness",
            "name": "Harness agent",
            "description": "A Claude Code agent: a conversation (context) of turns (tasks). \
                            Present a credential when reading this card to see each profile.",
            "tags": ["claude-code", "agent"],
        })],
    };
    json!({
        "name": "Harness",
        "description": "Claude Code agents behind the Harness daemon. A context is a thread; a \
                        task is one turn; input-required is a tool permission waiting for an \
                        answer (allow or deny).",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": PROTOCOL_VERSION},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": LEGACY_VERSION},
        ],
        // v0.3's fields for the same: its readers need them, v1.0's skip them.
        "url": url,
        "preferredTransport": "JSONRPC",
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {
            "streaming": true,
            "pushNotifications": true,
            "extendedAgentCard": false,
        },
        // Each scheme in v1.0's shape and v0.3's (`type`, …) side by side.
        "securitySchemes": {
            "bearer": {
                "httpAuthSecurityScheme": {"scheme": "Bearer", "description": BEARER},
                "type": "http",
                "scheme": "Bearer",
                "description": BEARER,
            },
        },
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "security": [{"bearer": []}],
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": skills,
    })
}

/// A profile as a skill: a new context (thread) runs as it with `metadata.skill` = its id.
fn skill(profile: &ProfileInfo) -> Value {
    let mut tags = vec![profile.base.clone()];
    if profile.default {
        tags.push("default".into());
    }
    let description = profile
        .description
        .clone()
        .unwrap_or_else(|| format!("Threads of the `{}` profile.", profile.name));
    json!({"id": profile.name, "name": profile.name, "description": description, "tags": tags})
}

#[cfg(test)]
mod tests;
