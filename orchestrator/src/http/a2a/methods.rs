//! Each A2A method that answers once, over the thread service: extract (`wire`), call, map.

use plugin_contract::{ThreadId, UserContent};
use serde_json::{json, Value};

use super::legacy::Dialect;
use super::wire::{self, RpcError, Send};
use super::{watch, Fail};
use crate::api::threads::{CreateThread, PostMessage};
use crate::approvals::Answer;
use crate::caller::{Caller, Scope};
use crate::http::ApiState;
use crate::pipeline::Stopped;
use crate::service::{TurnState, TurnView};
use crate::store::MessageId;

/// How long `CancelTask` waits for the stop to take effect before it answers.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `SendMessage`: a new turn, or an answer to the task's permission; then the task once it
/// ends or waits for input (at once with `returnImmediately`).
pub(super) async fn send(
    state: &ApiState,
    caller: &Caller,
    params: &Value,
    dialect: Dialect,
) -> Result<Value, Fail> {
    let send = wire::send(params)?;
    let view = begin(state, caller, &send, dialect).await?;
    let view = match send.return_immediately {
        true => view,
        false => watch::settled(state, caller, &view).await?,
    };
    Ok(json!({"task": wire::task(&view)}))
}

/// Starts the turn `send` asks for, or answers the task it names; where the turn stands then.
/// A push config it carries is registered before the turn starts, so it hears all of it, and is
/// sent pushes in the request's `dialect`.
pub(super) async fn begin(
    state: &ApiState,
    caller: &Caller,
    send: &Send,
    dialect: Dialect,
) -> Result<TurnView, Fail> {
    if let Some(task) = &send.task {
        return answer(state, caller, task, send).await;
    }
    let thread = match &send.context {
        Some(id) => ThreadId::from_string(id.clone()),
        None => {
            let body = CreateThread {
                profile: send.skill.clone(),
                ..CreateThread::default()
            };
            state.threads.create(caller, body).await?.thread.id
        }
    };
    if let Some(push) = &send.push {
        register(state, caller, &thread, push, dialect).await?;
    }
    let body = PostMessage {
        content: UserContent::Text(send.text.clone()),
        client_message_id: Some(send.message_id.clone()),
        model: None,
        permission_mode: None,
        mcp_servers: None,
    };
    Ok(state.threads.start(caller, thread, body, None).await?)
}

/// A message on task `task`: the answer to the permission it waits for.
async fn answer(
    state: &ApiState,
    caller: &Caller,
    task: &str,
    send: &Send,
) -> Result<TurnView, Fail> {
    let message = MessageId::from_string(task);
    let view = state.threads.turn(caller, &message).await?;
    if send
        .context
        .as_deref()
        .is_some_and(|c| c != view.thread.as_str())
    {
        return Err(RpcError::invalid_params(format!("task {task} is not of that context")).into());
    }
    let TurnState::AwaitingApproval(asked) = &view.state else {
        let why = match view.state.is_final() {
            true => format!("task {task} has ended; send without taskId for a new turn"),
            false => format!("task {task} is working and takes no input now"),
        };
        return Err(RpcError::unsupported(why).into());
    };
    let Some(decision) = &send.decision else {
        return Err(RpcError::invalid_params(format!(
            "task {task} waits for a permission: answer with a text part `allow` or `deny`, or a \
             data part {{\"decision\": \"allow\" | \"deny\"}}"
        ))
        .into());
    };
    if !caller.has(Scope::Approvals) {
        return Err(Fail::Forbidden(Scope::Approvals));
    }
    let request = match &decision.request_id {
        Some(request) => request.clone(),
        None => asked
            .first()
            .map(|p| p.request_id.clone())
            .unwrap_or_default(),
    };
    let answer = Answer {
        allow: decision.allow,
        message: decision.reason.clone(),
        updated_input: None,
        always: decision.always,
        by: caller.clone(),
    };
    state
        .threads
        .answer_permission(caller, &view.thread, &request, answer)
        .await?;
    Ok(state.threads.turn(caller, &message).await?)
}

/// `GetTask`: where the turn stands.
pub(super) async fn get(state: &ApiState, caller: &Caller, params: &Value) -> Result<Value, Fail> {
    let task = MessageId::from_string(wire::task_id(params, "id")?);
    Ok(wire::task(&state.threads.turn(caller, &task).await?))
}

/// `CancelTask`: the turn withdrawn or interrupted, answered once it has stopped (or after
/// [`CANCEL_WAIT`], as it stands then). A task that had ended is not cancelable.
pub(super) async fn cancel(
    state: &ApiState,
    caller: &Caller,
    params: &Value,
) -> Result<Value, Fail> {
    let id = wire::task_id(params, "id")?;
    let (stopped, view) = state
        .threads
        .cancel(caller, &MessageId::from_string(id.as_str()))
        .await?;
    if stopped == Stopped::Neither && view.state.is_final() {
        return Err(RpcError::new(
            RpcError::TASK_NOT_CANCELABLE,
            format!(
                "task {id} has ended: {}",
                wire::state_of(&view.state).as_str()
            ),
        )
        .into());
    }
    let view = watch::ended(state, caller, &view, CANCEL_WAIT).await?;
    Ok(wire::task(&view))
}

/// `CreateTaskPushNotificationConfig`: the task's thread's own endpoint becomes `url`, sent
/// pushes in the request's `dialect`.
pub(super) async fn set_push(
    state: &ApiState,
    caller: &Caller,
    params: &Value,
    dialect: Dialect,
) -> Result<Value, Fail> {
    let task = wire::task_id(params, "taskId")?;
    let push = wire::push(params)?;
    let view = state
        .threads
        .turn(caller, &MessageId::from_string(task.as_str()))
        .await?;
    register(state, caller, &view.thread, &push, dialect).await?;
    Ok(config(&view.thread, &task, &push.url))
}

/// `GetTaskPushNotificationConfig`: the endpoint of the task's thread.
pub(super) async fn get_push(
    state: &ApiState,
    caller: &Caller,
    params: &Value,
) -> Result<Value, Fail> {
    let (thread, task, url) = pushed(state, caller, params).await?;
    url.map(|url| config(&thread, &task, &url)).ok_or_else(|| {
        RpcError::invalid_params(format!("task {task} has no push notification config")).into()
    })
}

/// `ListTaskPushNotificationConfigs`: the endpoint of the task's thread, if any.
pub(super) async fn list_push(
    state: &ApiState,
    caller: &Caller,
    params: &Value,
) -> Result<Value, Fail> {
    let (thread, task, url) = pushed(state, caller, params).await?;
    let configs: Vec<Value> = url
        .map(|url| config(&thread, &task, &url))
        .into_iter()
        .collect();
    Ok(json!({"configs": configs}))
}

/// The thread of the task `params.taskId` names, and its endpoint.
async fn pushed(
    state: &ApiState,
    caller: &Caller,
    params: &Value,
) -> Result<(ThreadId, String, Option<String>), Fail> {
    let task = wire::task_id(params, "taskId")?;
    let view = state
        .threads
        .turn(caller, &MessageId::from_string(task.as_str()))
        .await?;
    let url = state.threads.pushed_to(caller, &view.thread).await?;
    Ok((view.thread, task, url))
}

/// Makes `push` the thread's own endpoint, in A2A's shape (v0.3's for a `dialect` of v0.3).
async fn register(
    state: &ApiState,
    caller: &Caller,
    thread: &ThreadId,
    push: &wire::Push,
    dialect: Dialect,
) -> Result<(), Fail> {
    let v03 = dialect == Dialect::V03;
    let secret = crate::webhooks::a2a_callback_secret(push.token.as_deref(), v03)
        .map_err(RpcError::invalid_params)?;
    state
        .threads
        .push_to(caller, thread, &push.url, &secret)
        .await?;
    Ok(())
}

/// A `TaskPushNotificationConfig`: its id is the context's (one endpoint per thread).
fn config(thread: &ThreadId, task: &str, url: &str) -> Value {
    json!({"id": thread.as_str(), "taskId": task, "url": url})
}
