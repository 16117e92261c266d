//! Threads, their messages, prewarm, interrupt and the event stream.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::Json;
use futures::Stream;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tracing::{info, warn, Instrument};

use plugin_contract::{Invoker, ThreadId};

use super::{ApiError, ApiJson};
use crate::app::App;
use crate::pipeline::{self, NewMessage};
use crate::store::{EventRow, NewThread};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateThread {
    title: Option<String>,
    model: Option<String>,
}

/// The body is optional: an empty POST creates an untitled thread with the default model.
pub async fn create(
    State(app): State<App>,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let body: CreateThread = if body.iter().all(u8::is_ascii_whitespace) {
        CreateThread {
            title: None,
            model: None,
        }
    } else {
        super::error::parse_json(&body)?
    };
    let thread = app
        .store()
        .create_thread(NewThread {
            title: body.title,
            model: body.model,
            parent_id: None,
        })
        .await?;
    info!(thread_id = %thread.id, "Thread created.");
    Ok((StatusCode::CREATED, Json(thread)))
}

pub async fn list(State(app): State<App>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({"threads": app.store().list_threads().await?})))
}

pub async fn get_one(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = ThreadId::from_string(id);
    let thread = app.store().require_thread(&id).await?;
    let messages = app.store().list_messages(&id).await?;
    let mut body = serde_json::to_value(thread).unwrap_or_default();
    body["messages"] = json!(messages);
    Ok(Json(body))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostMessage {
    content: String,
    client_message_id: Option<String>,
    model: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct PostQuery {
    /// `false`: answer 202 as soon as the message is stored; the reply comes as events.
    wait: Option<bool>,
}

pub async fn post_message(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(query): Query<PostQuery>,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<axum::response::Response, ApiError> {
    let msg = NewMessage {
        thread_id: ThreadId::from_string(id),
        content: body.content,
        client_message_id: body.client_message_id,
        model: body.model,
        timeout: None,
    };
    let accepted = pipeline::accept_message(&app, msg).await?;
    if query.wait == Some(false) {
        let body = json!({
            "messageId": accepted.message_id,
            "threadId": accepted.thread_id,
            "duplicate": accepted.duplicate,
            "status": "accepted",
        });
        return Ok((StatusCode::ACCEPTED, Json(body)).into_response());
    }
    let reply = accepted.finish().await?;
    Ok(Json(json!({
        "message": reply.message,
        "threadId": reply.thread_id,
        "sessionId": reply.session_id,
        "userMessageId": reply.user_message_id,
    }))
    .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prewarm {
    thread_id: String,
    model: Option<String>,
}

/// Starts the thread's process in the background; answers at once.
pub async fn prewarm(
    State(app): State<App>,
    ApiJson(body): ApiJson<Prewarm>,
) -> Result<impl IntoResponse, ApiError> {
    let thread = app
        .store()
        .require_thread(&ThreadId::from_string(body.thread_id))
        .await?;
    let model = body.model.or(thread.model.clone());
    let thread_id = thread.id.clone();
    let span = tracing::info_span!("prewarm", thread_id = %thread_id);
    let task_app = app.clone();
    app.tasks().spawn(
        async move {
            if let Err(err) = task_app
                .invoker()
                .prewarm(&thread.id, thread.cli_session_id.clone(), model)
                .await
            {
                warn!(error = %err, "Prewarm failed.");
            }
        }
        .instrument(span),
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"threadId": thread_id, "status": "warming"})),
    ))
}

pub async fn interrupt(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = ThreadId::from_string(id);
    app.store().require_thread(&id).await?;
    let interrupted = app.invoker().interrupt(&id).await.map_err(|err| {
        let (status, code) = super::error::invoke_status(&err);
        ApiError::new(status, code, err.to_string())
    })?;
    Ok(Json(json!({"threadId": id, "interrupted": interrupted})))
}

#[derive(Debug, Default, Deserialize)]
pub struct EventsQuery {
    /// Same as the `Last-Event-ID` header: only events after this id.
    after: Option<i64>,
}

/// Server-Sent Events of the thread's turns. Replays stored events after `Last-Event-ID`, then
/// streams live ones; keep-alive comments hold idle connections open.
pub async fn events(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let id = ThreadId::from_string(id);
    app.store().require_thread(&id).await?;
    let header_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let after = header_id.or(query.after).unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel::<EventRow>(256);
    // Subscribe before reading the store, so nothing falls between the two.
    let mut live = app.events().subscribe(&id);
    let stop = app.shutdown_token().clone();
    tokio::spawn(async move {
        let mut last = after;
        if !replay(&app, &id, &mut last, &tx).await {
            return;
        }
        loop {
            tokio::select! {
                received = live.recv() => match received {
                    Ok(row) if row.id > last => {
                        last = row.id;
                        if tx.send(row).await.is_err() { return; }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        if !replay(&app, &id, &mut last, &tx).await { return; }
                    }
                    Err(RecvError::Closed) => return,
                },
                _ = tx.closed() => return,
                _ = stop.cancelled() => return,
            }
        }
    });
    let stream = ReceiverStream::new(rx).map(|row| {
        let data = json!({"id": row.id, "kind": row.kind, "messageId": row.message_id, "data": row.data, "at": row.created_at});
        Ok(Event::default().id(row.id.to_string()).event(row.kind).data(data.to_string()))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Sends stored events after `last`; false when the client has gone.
async fn replay(
    app: &App,
    thread: &ThreadId,
    last: &mut i64,
    tx: &tokio::sync::mpsc::Sender<EventRow>,
) -> bool {
    loop {
        let rows = match app.store().events_after(thread, *last, 500).await {
            Ok(rows) => rows,
            Err(err) => {
                warn!(thread_id = %thread, error = %err, "Could not read stored events.");
                return false;
            }
        };
        if rows.is_empty() {
            return true;
        }
        for row in rows {
            *last = row.id;
            if tx.send(row).await.is_err() {
                return false;
            }
        }
    }
}
