//! The listener: an accept loop over hyper's HTTP/1 server. `axum::serve` sets no timer and no
//! bound, so a client that never finishes its request head would hold a socket for ever, and a
//! few hundred of them would starve the daemon of file descriptors.
//!
//! - Each connection has `http.read_timeout` to send a request head, counted from its start or
//!   from the end of the previous response: a half-sent head and an idle keep-alive connection
//!   are both closed when it runs out (hyper's header read timeout).
//! - At most `http.max_connections` are open at once: at the bound the loop stops accepting
//!   (the kernel's backlog holds newcomers) until one closes.
//! - When `stop` is cancelled no connection is accepted any more, and open ones finish the
//!   request they are serving, then close.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::config::HttpConfig;

/// Serves `router` on `listener` until `stop` is cancelled and every connection has closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &HttpConfig,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(settings.max_connections));
    let connections = TaskTracker::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.read_timeout);
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = stop.cancelled() => break,
        };
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors (or a connection reset before accept): wait a
                    // moment rather than spin.
                    warn!(error = %err, "Accept failed.");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                        _ = stop.cancelled() => break,
                    }
                }
            },
            _ = stop.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let stop = stop.clone();
        connections.spawn(async move {
            let _slot = permit;
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(err) = result {
                debug!(%remote, error = %err, "Connection ended with an error.");
            }
        });
    }
    connections.close();
    connections.wait().await;
}
