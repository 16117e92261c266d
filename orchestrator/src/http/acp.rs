//! `/acp`: the Agent Client Protocol agent over a WebSocket, the remote transport of ACP's
//! Streamable HTTP & WebSocket proposal (its WebSocket profile, which a server may offer alone),
//! so that an editor on one machine reaches a Harness on another. One JSON-RPC message per text
//! frame, the lifecycle as over stdio (`initialize` first).
//!
//! Behind the same token, keys and tenants as `/api`: the upgrade needs the caller's
//! credentials (`threads:read`), and every call the agent makes for the editor goes through this
//! daemon's own router with them ([`Daemon::in_process`]), so it may see and do exactly what
//! the caller may over `/api`, recorded in the audit log as `/api`'s calls are. The agent is the
//! one `harness acp` runs over stdio ([`crate::acp`]); nothing is kept per connection but the
//! turns running in it, which end with it.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::error::ErrorBody;
use super::{ApiError, ApiState};
use crate::remote::Daemon;

/// `GET /acp` with `Upgrade: websocket`: an ACP connection.
#[utoipa::path(get, path = "/acp", operation_id = "acpConnect", tag = "acp",
    responses(
        (status = 101, description = "Switching to a WebSocket carrying ACP's JSON-RPC messages, one per text frame."),
        (status = 400, description = "Not a WebSocket upgrade (`not_a_websocket`).", body = ErrorBody),
        (status = 401, description = "No valid token or key.", body = ErrorBody),
        (status = 403, description = "The caller lacks `threads:read`, or a `Host` or `Origin` the daemon does not serve.", body = ErrorBody),
        (status = 503, description = "Every stream the daemon allows is open (`too_many_streams`, `http.max_streams`).", body = ErrorBody),
    ))]
pub async fn connect(
    State(state): State<ApiState>,
    headers: HeaderMap,
    remote: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(refused) => {
            let why = format!("/acp speaks ACP over a WebSocket: {refused}");
            return ApiError::new(refused.status(), "not_a_websocket", why).into_response();
        }
    };
    let remote = remote.map(|Extension(remote)| remote);
    // Held while the connection lasts: a WebSocket is a long-lived stream like an event stream.
    let permit = match state.streams.take() {
        Ok(permit) => permit,
        Err(full) => return ApiError::from(full).into_response(),
    };
    let router = state.router.get().cloned().unwrap_or_default();
    let daemon = Daemon::in_process(router, &headers, remote);
    let stopping = state.pipeline.stopping().clone();
    upgrade
        .max_message_size(
            state
                .config
                .files
                .message_body_limit(state.config.max_body_bytes),
        )
        .on_upgrade(move |socket| async move {
            serve(daemon, socket, stopping).await;
            drop(permit);
        })
}

/// Serves one connection until the editor closes it or the daemon stops.
async fn serve(daemon: Daemon, socket: WebSocket, stopping: tokio_util::sync::CancellationToken) {
    let (mut sink, stream) = socket.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            if sink
                .send(Message::Text(message.to_string().into()))
                .await
                .is_err()
            {
                return;
            }
        }
        let _ = sink.close().await;
    });
    // Text frames are messages; binary frames are not ACP's and are skipped; a close or a
    // broken socket ends the connection.
    let incoming = stream
        .take_while(|frame| {
            std::future::ready(matches!(frame, Ok(m) if !matches!(m, Message::Close(_))))
        })
        .filter_map(|frame| {
            std::future::ready(match frame {
                Ok(Message::Text(text)) => Some(text.to_string()),
                _ => None,
            })
        })
        .take_until(stopping.cancelled_owned());
    crate::acp::serve_messages(daemon, Box::pin(incoming), tx).await;
    let _ = writer.await;
}
