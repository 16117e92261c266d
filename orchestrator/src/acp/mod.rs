//! An Agent Client Protocol (v1) agent for editors (Zed, JetBrains, Neovim), as an adapter over
//! a daemon's HTTP API: over stdio in `harness acp` (the API at a URL), and over a WebSocket at
//! the daemon's own `/acp` (the API through its router, as the caller: `http::acp`). It keeps
//! nothing of its own: an ACP session is a thread, and its history is the thread's.
//!
//! - [`rpc`]: JSON-RPC framing and the way back to the client (no ACP in it).
//! - [`crate::remote`]: the daemon's API calls and event stream.
//! - [`translate`]: ACP's vocabulary against the daemon's (no IO).
//! - [`session`]: the methods; [`turn`]: one prompt's turn; [`choices`]: the mode and model an
//!   editor picks for a session's prompts.
//!
//! Hand-written over `serde_json` rather than the `agent-client-protocol` crate: its v5 API is
//! built around its own component/role model, and it turns on serde_json's `preserve_order`,
//! which feature unification would switch on for the daemon's JSON too.

mod choices;
mod rpc;
mod session;
mod translate;
mod turn;

use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::remote::{Daemon, DaemonError};
use rpc::{Incoming, Peer, RpcError, INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND};
use session::Agent;

/// A daemon's refusal as the editor reads it: its status and code kept in `data`.
impl From<DaemonError> for RpcError {
    fn from(err: DaemonError) -> RpcError {
        let message = err.chain();
        match err {
            DaemonError::Unreachable { .. } => RpcError::new(INTERNAL_ERROR, message),
            DaemonError::Refused { status, code, .. } => {
                let rpc_code = match status {
                    404 => RESOURCE_NOT_FOUND,
                    400..=499 => INVALID_PARAMS,
                    _ => INTERNAL_ERROR,
                };
                RpcError {
                    code: rpc_code,
                    message,
                    data: Some(serde_json::json!({"status": status, "code": code})),
                }
            }
        }
    }
}

/// Serves ACP on this process's stdin and stdout until the client closes stdin.
pub async fn run(daemon: Daemon) -> std::io::Result<()> {
    serve(daemon, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves ACP on `input` and `output`, a message a line (the stdio transport), until `input`
/// ends; the requests still running then are dropped.
pub async fn serve(
    daemon: Daemon,
    input: impl AsyncRead + Unpin,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> std::io::Result<()> {
    let (tx, rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(write_lines(rx, output));
    let lines = tokio_stream::wrappers::LinesStream::new(BufReader::new(input).lines());
    let lines = lines.take_while(|line| std::future::ready(line.is_ok()));
    serve_messages(
        daemon,
        lines.filter_map(|line| std::future::ready(line.ok())),
        tx,
    )
    .await;
    let _ = writer.await;
    Ok(())
}

/// Serves ACP on a stream of messages (each one JSON-RPC message as text) until it ends,
/// answering on `out`; the requests still running then are dropped. Both transports end here.
pub async fn serve_messages(
    daemon: Daemon,
    mut incoming: impl Stream<Item = String> + Unpin,
    out: mpsc::UnboundedSender<Value>,
) {
    let peer = Peer::new(out);
    let agent = Agent::new(daemon, peer.clone());
    let mut handlers = JoinSet::new();
    while let Some(line) = incoming.next().await {
        if line.trim().is_empty() {
            continue;
        }
        match rpc::parse(&line) {
            Ok(Incoming::Request { id, method, params }) => {
                let (agent, peer) = (agent.clone(), peer.clone());
                handlers.spawn(async move {
                    let outcome = agent.handle(&method, params).await;
                    peer.send(rpc::response(&id, outcome));
                });
            }
            Ok(Incoming::Notification { method, params }) => {
                let agent = agent.clone();
                handlers.spawn(async move { agent.notified(&method, params).await });
            }
            Ok(Incoming::Response { id, outcome }) => peer.resolve(&id, outcome),
            Err(error) => peer.send(rpc::response(&Value::Null, Err(error))),
        }
        // Reap what finished, so a long session does not keep every handler's result.
        while handlers.try_join_next().is_some() {}
    }
    handlers.shutdown().await;
}

/// Writes each message as one line, flushed, until every sender is gone.
async fn write_lines(mut rx: mpsc::UnboundedReceiver<Value>, mut output: impl AsyncWrite + Unpin) {
    while let Some(message) = rx.recv().await {
        let mut line = message.to_string();
        line.push('\n');
        if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}
