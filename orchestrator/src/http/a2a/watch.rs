//! A turn followed through its thread's events: the blocking `SendMessage`, `CancelTask`'s wait,
//! and the SSE streams of `SendStreamingMessage` and `SubscribeToTask`.
//!
//! The turn is read again (`ThreadService::turn`) whenever its thread says something happened
//! (any event of the turn but a text delta), and every [`RECHECK`] in case the bus missed one;
//! a [`Watch`] subscribes before its first read, so no change falls between the two. Nothing is
//! kept but the last view: the store says where the turn stands.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use plugin_contract::ThreadId;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::legacy::Dialect;
use super::wire::{self, Request, RpcError};
use super::{methods, Fail};
use crate::api::events::EventKind;
use crate::caller::Caller;
use crate::events::Follow;
use crate::http::ApiState;
use crate::service::{ServiceError, TurnView};
use crate::store::MessageId;

/// How often a watched turn is read again when its thread is quiet.
const RECHECK: Duration = Duration::from_secs(5);

/// One turn, followed.
struct Watch {
    state: ApiState,
    caller: Caller,
    message: MessageId,
    follow: Follow,
    /// The daemon's shutdown: a watch ends with it.
    stop: CancellationToken,
}

impl Watch {
    /// A watch of `view`'s turn, and the turn as it stands once the watch is on.
    async fn start(
        state: &ApiState,
        caller: &Caller,
        view: &TurnView,
    ) -> Result<(Watch, TurnView), ServiceError> {
        let follow = state.pipeline.follow_from_now(&view.thread).await?;
        let now = state.threads.turn(caller, &view.message).await?;
        let watch = Watch {
            state: state.clone(),
            caller: caller.clone(),
            message: view.message.clone(),
            follow,
            stop: state.pipeline.stopping().clone(),
        };
        Ok((watch, now))
    }

    /// The turn once it stands elsewhere than `last` (another state, other permissions);
    /// `None` when the daemon stops first.
    async fn next(&mut self, last: &TurnView) -> Result<Option<TurnView>, ServiceError> {
        let seen = wire::stage(last);
        loop {
            tokio::select! {
                next = self.follow.next() => match next? {
                    Some(row) if row.kind == EventKind::TextDelta.as_str() => continue,
                    Some(row) if row.message_id.as_ref().is_some_and(|m| *m != self.message) => {
                        continue
                    }
                    Some(_) => {}
                    None => return Ok(None),
                },
                () = tokio::time::sleep(RECHECK) => {}
                () = self.stop.cancelled() => return Ok(None),
            }
            let view = self.state.threads.turn(&self.caller, &self.message).await?;
            if wire::stage(&view) != seen {
                return Ok(Some(view));
            }
        }
    }
}

/// The turn once it ends or waits for input (or as it stands when the daemon stops).
pub(super) async fn settled(
    state: &ApiState,
    caller: &Caller,
    view: &TurnView,
) -> Result<TurnView, ServiceError> {
    let (mut watch, mut view) = Watch::start(state, caller, view).await?;
    while !wire::state_of(&view.state).ends_stream() {
        match watch.next(&view).await? {
            Some(next) => view = next,
            None => break,
        }
    }
    Ok(view)
}

/// The turn once it has ended, or as it stands after `limit`.
pub(super) async fn ended(
    state: &ApiState,
    caller: &Caller,
    view: &TurnView,
    limit: Duration,
) -> Result<TurnView, ServiceError> {
    let (mut watch, mut view) = Watch::start(state, caller, view).await?;
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    while !view.state.is_final() {
        tokio::select! {
            next = watch.next(&view) => match next? {
                Some(next) => view = next,
                None => break,
            },
            () = &mut deadline => break,
        }
    }
    Ok(view)
}

/// `SendStreamingMessage`: the turn started (or the task answered), then its events as SSE; and
/// the turn's thread.
pub(super) async fn send(
    state: ApiState,
    caller: Caller,
    request: Request,
    dialect: Dialect,
) -> Result<(Response, ThreadId), Fail> {
    let send = wire::send(&request.params)?;
    let view = methods::begin(&state, &caller, &send, dialect).await?;
    let thread = view.thread.clone();
    Ok((
        stream(state, caller, request.id, view, dialect).await?,
        thread,
    ))
}

/// `SubscribeToTask`: the events of a task that has not ended, as SSE; and the task's thread.
pub(super) async fn subscribe(
    state: ApiState,
    caller: Caller,
    request: Request,
    dialect: Dialect,
) -> Result<(Response, ThreadId), Fail> {
    let task = MessageId::from_string(wire::task_id(&request.params, "id")?);
    let view = state.threads.turn(&caller, &task).await?;
    if view.state.is_final() {
        return Err(RpcError::unsupported(format!("task {task} has ended")).into());
    }
    let thread = view.thread.clone();
    Ok((
        stream(state, caller, request.id, view, dialect).await?,
        thread,
    ))
}

/// The SSE answer: each frame a JSON-RPC response with the request's `id`, holding a
/// `StreamResponse`: the task first, then each change of its status (the reply as an artifact
/// just before `completed`); it ends when the task ends or waits for input. Each in `dialect`.
async fn stream(
    state: ApiState,
    caller: Caller,
    id: Value,
    view: TurnView,
    dialect: Dialect,
) -> Result<Response, Fail> {
    // Held while the stream runs, as the thread event streams hold one.
    let permit = state
        .streams
        .take()
        .map_err(|full| RpcError::new(RpcError::INTERNAL, full.to_string()))?;
    let (watch, view) = Watch::start(&state, &caller, &view).await?;
    let first = vec![json!({"task": wire::task(&view)})];
    let rest = futures::stream::unfold(Some((watch, view)), |going| async move {
        let (mut watch, last) = going?;
        if wire::state_of(&last.state).ends_stream() {
            return None;
        }
        match watch.next(&last).await {
            Ok(Some(view)) => {
                let mut frames: Vec<Value> = wire::artifact_update(&view).into_iter().collect();
                frames.push(wire::update(&view));
                Some((Ok(frames), Some((watch, view))))
            }
            Ok(None) => None,
            Err(err) => Some((Err(super::rpc_error(err)), None)),
        }
    });
    let frames = futures::stream::iter([Ok(first)])
        .chain(rest)
        .flat_map(move |frames| {
            let _held = &permit;
            let out: Vec<Value> = match frames {
                Ok(frames) => frames
                    .into_iter()
                    .map(|f| wire::success(&id, dialect.event(f)))
                    .collect(),
                Err(err) => vec![wire::failure(&id, &err)],
            };
            futures::stream::iter(out)
        })
        .map(|frame| Ok::<_, Infallible>(Event::default().data(frame.to_string())));
    Ok(Sse::new(frames)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}
