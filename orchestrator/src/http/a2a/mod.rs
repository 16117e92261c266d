//! The A2A door: Harness as an Agent2Agent (v1.0) server over JSON-RPC, for agent frameworks
//! (LiteLLM's agent gateway, Google ADK) that call agents that way. An adapter over the thread
//! service, keeping nothing of its own:
//! - a **context** is a thread (`contextId` = its id; none: a new thread, of the profile named
//!   by `metadata.skill`);
//! - a **task** is one turn: its id is the user message's (`msg_…`), read back each time with
//!   `ThreadService::turn`, so a task outlives the connection that made it and a restart;
//! - **input-required** is a permission waiting for a person (approvals mode `ask`); a message
//!   on the task answers it (`allow`/`deny`, see `wire::decision`), with the scope `approvals`;
//! - a **push notification config** is the thread's own webhook endpoint: the webhooks'
//!   outbox, retries and signature, in A2A's shape (`crate::webhooks`, its `a2a.rs`).
//!
//! Routes: `GET /.well-known/agent-card.json` (no token: discovery; a caller that presents one
//! sees every profile as a skill, anyone else one generic skill) and `POST /a2a` (behind the
//! token as `/mcp` is: `threads:read` to reach it; a method that changes something checks
//! `threads:write` itself, [`needs`]). Refusals of the credential are HTTP 401/403 as on
//! `/api`; everything else is a JSON-RPC answer (HTTP 200), errors with A2A's codes. A task of a
//! thread the caller does not see is "task not found" (`-32001`). The methods that change
//! something are written to the audit log (action `a2a <Method>`), beside `/api`'s and `/mcp`'s.
//!
//! A2A v0.3's method names (`message/send`, …) are served too, in v0.3's JSON (`legacy.rs`).
//!
//! Files: this one (routes, dispatch, errors), `wire.rs` (the protocol's JSON, no IO),
//! `legacy.rs` (v0.3's methods read as v1.0's, their answers written back, no IO),
//! `methods.rs` (each method over the service), `watch.rs` (a turn followed through its
//! thread's events: the blocking send, the cancel, the SSE stream).

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use plugin_contract::ThreadId;
use serde_json::Value;

use super::access::{forbidden, ScopeChallenge};
use super::{ApiError, ApiState};
use crate::caller::{Caller, Scope};
use crate::service::ServiceError;
use crate::store::StoreError;
use legacy::Dialect;
use wire::{Method, RpcError};

mod legacy;
mod methods;
mod watch;
pub mod wire;

/// Why a method was not answered with a result.
pub(super) enum Fail {
    /// A JSON-RPC error.
    Rpc(RpcError),
    /// The caller lacks a scope the method needs: HTTP 403, as on `/api`.
    Forbidden(Scope),
}

impl From<RpcError> for Fail {
    fn from(err: RpcError) -> Fail {
        Fail::Rpc(err)
    }
}

impl From<ServiceError> for Fail {
    fn from(err: ServiceError) -> Fail {
        Fail::Rpc(rpc_error(err))
    }
}

/// The scope `method` needs beyond `threads:read` (which the route needs).
pub fn needs(method: Method) -> Option<Scope> {
    match method {
        Method::SendMessage
        | Method::SendStreamingMessage
        | Method::CancelTask
        | Method::CreateTaskPushNotificationConfig
        | Method::DeleteTaskPushNotificationConfig => Some(Scope::ThreadsWrite),
        Method::GetTask
        | Method::SubscribeToTask
        | Method::GetTaskPushNotificationConfig
        | Method::ListTaskPushNotificationConfigs
        | Method::ListTasks
        | Method::GetExtendedAgentCard => None,
    }
}

/// The Agent Card: how to reach Harness over A2A, with every profile as a skill for a caller
/// that presents a credential (the token or a key with `threads:read`), else one generic skill
/// (a credential that does not authenticate too). No token needed: discovery comes before
/// credentials.
#[utoipa::path(get, path = "/.well-known/agent-card.json", operation_id = "a2aAgentCard",
    tag = "a2a",
    responses((status = 200, description = "The A2A v1.0 Agent Card (with v0.3's fields beside).", body = Object)))]
pub async fn card(State(state): State<ApiState>, parts: Parts) -> Json<Value> {
    let presented = parts
        .headers
        .contains_key(axum::http::header::AUTHORIZATION);
    let mut profiles = None;
    if presented {
        if let Ok(caller) = super::authenticate(&state, &parts).await {
            profiles = caller
                .has(Scope::ThreadsRead)
                .then(|| state.pool.profiles());
        }
    }
    Json(wire::card(
        &interface_url(&state, &parts.headers),
        profiles.as_deref(),
    ))
}

/// One A2A JSON-RPC request: `SendMessage`, `SendStreamingMessage` (SSE), `GetTask`,
/// `CancelTask`, `SubscribeToTask` (SSE), `CreateTaskPushNotificationConfig`,
/// `GetTaskPushNotificationConfig`, `ListTaskPushNotificationConfigs`, … Needs `threads:read`;
/// sending, cancelling and registering a push endpoint need `threads:write` too, answering an
/// input-required task `approvals` (403 without). Errors are JSON-RPC errors with A2A's codes
/// (`-32001` task not found, `-32002` not cancelable, `-32004` unsupported, `-32005` content
/// type not supported, `-32602` invalid params). See `docs/a2a.md`.
#[utoipa::path(post, path = "/a2a", operation_id = "a2aPost", tag = "a2a",
    request_body(content = Object, content_type = "application/json",
                 description = "A JSON-RPC 2.0 request of A2A v1.0 (or v0.3: `message/send`, …)."),
    responses(
        (status = 200, description = "The JSON-RPC response, or for the streaming methods \
                                      Server-Sent Events of JSON-RPC responses.", content(
            (Object = "application/json"),
            (String = "text/event-stream"),
        )),
    ))]
pub async fn rpc(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    challenge: Option<Extension<ScopeChallenge>>,
    connected: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (request, method, dialect) = match read(&body) {
        Ok(read) => read,
        Err((id, err)) => return Json(wire::failure(&id, &err)).into_response(),
    };
    let id = request.id.clone();
    let refuse = |scope: Scope| {
        let challenge = challenge.as_ref().map(|c| c.0.clone()).unwrap_or_default();
        let said = challenge.of(&caller, &headers, "/a2a", scope);
        super::oauth::with_challenge(forbidden(scope), &said)
    };
    let changes = needs(method) == Some(Scope::ThreadsWrite);
    let audit = |thread: Option<ThreadId>, status: StatusCode| {
        let remote = connected.as_ref().map(|c| c.0 .0.to_string());
        let (state, caller) = (state.clone(), caller.clone());
        async move {
            let entry = super::audit::Entry {
                caller: &caller,
                action: &format!("a2a {method:?}"),
                path: "/a2a",
                thread: thread.as_ref(),
                status,
                remote: remote.as_deref(),
            };
            if changes {
                super::audit::write(&state.store, entry).await;
            }
        }
    };
    if let Some(scope) = needs(method).filter(|scope| !caller.has(*scope)) {
        audit(None, StatusCode::FORBIDDEN).await;
        return refuse(scope);
    }
    match answer(&state, &caller, &headers, request, method, dialect).await {
        Ok(Answered::Stream(stream, thread)) => {
            audit(Some(thread), StatusCode::OK).await;
            stream
        }
        Ok(Answered::Once(result)) => {
            audit(wire::context_of(&result), StatusCode::OK).await;
            Json(wire::success(&id, dialect.result(method, result))).into_response()
        }
        Err(fail) => {
            audit(None, fail.status()).await;
            fail.answer(&id, refuse)
        }
    }
}

/// The request in `body`, the method it names and the version of A2A it speaks, its params
/// read as v1.0's; else the error to answer, with the request's id.
fn read(body: &[u8]) -> Result<(wire::Request, Method, Dialect), (Value, RpcError)> {
    let request = wire::request(body)?;
    let Some((method, dialect)) = legacy::method(&request.method) else {
        let why = format!("no method {}", request.method);
        return Err((request.id, RpcError::new(RpcError::METHOD_NOT_FOUND, why)));
    };
    match dialect.params(method, request.params) {
        Ok(params) => Ok((wire::Request { params, ..request }, method, dialect)),
        Err(err) => Err((request.id, err)),
    }
}

/// What a method answers: its v1.0 result, or an SSE stream of its task and the task's
/// thread.
enum Answered {
    Once(Value),
    Stream(Response, ThreadId),
}

/// Runs `method` over the service.
async fn answer(
    state: &ApiState,
    caller: &Caller,
    headers: &HeaderMap,
    request: wire::Request,
    method: Method,
    dialect: Dialect,
) -> Result<Answered, Fail> {
    let params = &request.params;
    let result = match method {
        Method::SendStreamingMessage => {
            let (stream, thread) =
                watch::send(state.clone(), caller.clone(), request, dialect).await?;
            return Ok(Answered::Stream(stream, thread));
        }
        Method::SubscribeToTask => {
            let (stream, thread) =
                watch::subscribe(state.clone(), caller.clone(), request, dialect).await?;
            return Ok(Answered::Stream(stream, thread));
        }
        Method::SendMessage => methods::send(state, caller, params, dialect).await?,
        Method::GetTask => methods::get(state, caller, params).await?,
        Method::CancelTask => methods::cancel(state, caller, params).await?,
        Method::CreateTaskPushNotificationConfig => {
            methods::set_push(state, caller, params, dialect).await?
        }
        Method::GetTaskPushNotificationConfig => methods::get_push(state, caller, params).await?,
        Method::ListTaskPushNotificationConfigs => {
            methods::list_push(state, caller, params).await?
        }
        Method::DeleteTaskPushNotificationConfig => {
            let why = "a context's push endpoint is replaced by a new one, never deleted";
            return Err(Fail::Rpc(RpcError::unsupported(why)));
        }
        Method::ListTasks => {
            let why =
                "tasks are not listed: GET /api/threads/{id}/messages lists a context's turns";
            return Err(Fail::Rpc(RpcError::unsupported(why)));
        }
        Method::GetExtendedAgentCard => {
            wire::card(&interface_url(state, headers), Some(&state.pool.profiles()))
        }
    };
    Ok(Answered::Once(result))
}

impl Fail {
    /// The status the audit log records for it, as `/api` would have answered.
    fn status(&self) -> StatusCode {
        match self {
            Fail::Forbidden(_) => StatusCode::FORBIDDEN,
            Fail::Rpc(err) => match err.code {
                RpcError::TASK_NOT_FOUND => StatusCode::NOT_FOUND,
                RpcError::TASK_NOT_CANCELABLE | RpcError::UNSUPPORTED_OPERATION => {
                    StatusCode::CONFLICT
                }
                RpcError::INTERNAL => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::UNPROCESSABLE_ENTITY,
            },
        }
    }

    /// The answer to request `id`: a JSON-RPC error, or `refuse`'s 403.
    fn answer(self, id: &Value, refuse: impl FnOnce(Scope) -> Response) -> Response {
        match self {
            Fail::Rpc(err) => Json(wire::failure(id, &err)).into_response(),
            Fail::Forbidden(scope) => refuse(scope),
        }
    }
}

/// The JSON-RPC endpoint's URL as callers reach it: under `oauth.public_url` when set, else
/// the request's own scheme (`X-Forwarded-Proto`, default `http`) and `Host`.
fn interface_url(state: &ApiState, headers: &HeaderMap) -> String {
    if let Some(public) = &state.config.oauth.public_url {
        return format!("{}/a2a", public.trim_end_matches('/'));
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let scheme = header("x-forwarded-proto").unwrap_or("http");
    let host = header("host").unwrap_or("localhost");
    format!("{scheme}://{host}/a2a")
}

/// What the caller reads of a service error: a thread or a turn it does not see is a task not
/// found; its mistakes are invalid params; a turn that cannot take it now is unsupported.
fn rpc_error(err: ServiceError) -> RpcError {
    match err {
        ServiceError::NotFound(why) => RpcError::new(RpcError::TASK_NOT_FOUND, why),
        ServiceError::Store(StoreError::ThreadNotFound(id)) => {
            RpcError::new(RpcError::TASK_NOT_FOUND, format!("context {id} not found"))
        }
        ServiceError::Invalid(why) => RpcError::invalid_params(why),
        other => {
            let api = ApiError::from(other);
            let code = match api.status.as_u16() {
                404 => RpcError::TASK_NOT_FOUND,
                400 | 413 | 422 => RpcError::INVALID_PARAMS,
                409 => RpcError::UNSUPPORTED_OPERATION,
                _ => RpcError::INTERNAL,
            };
            if code == RpcError::INTERNAL {
                tracing::warn!(status = %api.status, error = %api.message, "An A2A request failed.");
            }
            RpcError {
                code,
                message: api.message,
                reason: Some(api.code),
            }
        }
    }
}
