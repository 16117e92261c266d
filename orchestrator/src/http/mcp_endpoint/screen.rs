//! What `/mcp` does with each POST before rmcp sees it ([`screen`]): the JSON-RPC errors rmcp
//! would answer in plain text or not at all, the scope check of a tool call, a cancel (which rmcp
//! drops when stateless), the session label of an `initialize`, and a `subscriptions/listen`
//! for tasks ([`super::tasks::listen`]).

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode,
    ErrorData, InitializeRequestParams,
};
use serde_json::Value;
use std::sync::Arc;
use tracing::{debug, info, warn};

use super::in_flight::Cancelled;
use super::{session, tasks, McpEndpoint, PROTOCOL_VERSION_HEADER};

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
    if let Some(task_ids) = tasks::listened(&message) {
        let caller = crate::http::caller_in(&parts.extensions);
        let declared = message["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
            ["extensions"]
            .get(rmcp::model::TASKS_EXTENSION_ID)
            .is_some();
        return tasks::listen(&endpoint, caller, id, task_ids, declared).await;
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
}
