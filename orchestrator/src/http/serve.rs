//! The listener: an accept loop over hyper's HTTP/1 server. `axum::serve` sets no timer and no
//! bound, so a client that never finishes its request head would hold a socket for ever, and a
//! few hundred of them would starve the daemon of file descriptors.
//!
//! - At start ([`Door::open`]) the soft limit on open files is raised to the hard one, and both
//!   are logged. The connection bound is `http.max_connections`, less what the limit leaves
//!   (a reserve stays for the CLI's pipes, the database and the logs).
//! - Each connection has `http.read_timeout` to send a request head, counted from its start or
//!   from the end of the previous response: a half-sent head and an idle keep-alive connection
//!   are both closed when it runs out (hyper's header read timeout).
//! - The listener always accepts. Past the bound, the oldest connection that is serving nothing
//!   (a head not finished yet, or an idle keep-alive) is closed to make room; when every
//!   connection is serving a request, the newcomer is closed instead. So connections that only
//!   hold a socket cannot shut the door on `/healthz` or a turn.
//! - Long-lived streams (`GET …/events`) take one of [`Door::streams`] permits (half the
//!   connections at most, `http.max_streams` at most): past them a stream gets 503, so streams
//!   alone cannot take every connection.
//! - When `stop` is cancelled no connection is accepted any more, and open ones finish the
//!   request they are serving, then close.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tracing::{debug, info, warn};

use crate::config::HttpConfig;
use crate::sync::lock;

/// File descriptors kept beside the connections: each CLI process's pipes, the database, logs.
const FD_RESERVE: u64 = 128;
/// The fewest connections the bound leaves, however low the file limit.
const MIN_CONNECTIONS: usize = 16;

/// The listener's bounds, set once at start.
#[derive(Clone, Debug)]
pub struct Door {
    /// Most connections open at once.
    pub connections: usize,
    /// Permits for long-lived streams.
    pub streams: crate::sync::Streams,
}

impl Door {
    /// Raises the soft file limit to the hard one (logging both), and sets the bounds from it
    /// and `settings`.
    pub fn open(settings: &HttpConfig) -> Door {
        let soft = raise_file_limit();
        let by_files = soft.map_or(usize::MAX, |soft| {
            usize::try_from(soft.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX)
        });
        let connections = settings.max_connections.min(by_files).max(MIN_CONNECTIONS);
        if connections < settings.max_connections {
            warn!(
                configured = settings.max_connections,
                connections, "http.max_connections lowered to what the open-file limit allows."
            );
        }
        let max_streams = settings.max_streams.min(connections / 2).max(1);
        info!(connections, streams = max_streams, "Listener bounds.");
        Door {
            connections,
            streams: crate::sync::Streams::new(max_streams),
        }
    }
}

/// Raises the soft limit on open files to the hard one; the soft limit then, `None` when it
/// cannot be read.
fn raise_file_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(err) => {
            warn!(error = %err, "Could not read the open-file limit.");
            return None;
        }
    };
    if soft < hard {
        if let Err(err) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            warn!(soft, hard, error = %err, "Could not raise the open-file limit.");
            return Some(soft);
        }
    }
    info!(
        soft_was = soft,
        hard, "Open-file limit raised to the hard limit."
    );
    Some(hard)
}

/// One open connection, as the accept loop sees it.
struct Open {
    /// Requests it is serving (until their response bodies end).
    serving: Arc<AtomicUsize>,
    close: CancellationToken,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Connections(Mutex<BTreeMap<u64, Open>>);

impl Connections {
    /// Closes the oldest connection serving nothing; false when every one is serving.
    fn close_one_idle(&self) -> bool {
        let mut open = lock(&self.0);
        let idle = open
            .iter()
            .find(|(_, c)| c.serving.load(Ordering::SeqCst) == 0)
            .map(|(id, _)| *id);
        // Out of the count at once, so the next newcomer does not pick it again.
        match idle.and_then(|id| open.remove(&id)) {
            Some(connection) => {
                connection.close.cancel();
                true
            }
            None => false,
        }
    }
}

/// Serves `router` on `listener` until `stop` is cancelled and every connection has closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &HttpConfig,
    door: &Door,
    stop: CancellationToken,
) {
    let open = Arc::new(Connections::default());
    let tasks = TaskTracker::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.read_timeout);
    let mut next_id = 0u64;
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors (or a connection reset before accept): make room
                    // if a connection serves nothing, else wait a moment rather than spin.
                    warn!(error = %err, "Accept failed.");
                    if open.close_one_idle() {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                        _ = stop.cancelled() => break,
                    }
                }
            },
            _ = stop.cancelled() => break,
        };
        if lock(&open.0).len() >= door.connections && !open.close_one_idle() {
            debug!(%remote, "Every connection is serving a request; this one is closed.");
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let id = next_id;
        next_id += 1;
        let serving = Arc::new(AtomicUsize::new(0));
        let close = CancellationToken::new();
        lock(&open.0).insert(
            id,
            Open {
                serving: serving.clone(),
                close: close.clone(),
            },
        );
        let service = counted(router.clone(), serving, remote);
        // With upgrades: `/acp` turns its connection into a WebSocket (held as a stream then,
        // `http::acp`).
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let (stop, open) = (stop.clone(), open.clone());
        tasks.spawn(async move {
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                // Made room for a newer one: it was serving nothing.
                _ = close.cancelled() => Ok(()),
                _ = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            lock(&open.0).remove(&id);
            if let Err(err) = result {
                debug!(%remote, error = %err, "Connection ended with an error.");
            }
        });
    }
    tasks.close();
    tasks.wait().await;
}

/// `router` as one connection's hyper service, counting in `serving` the requests it serves
/// until their response bodies end (a stream counts for as long as it streams).
fn counted(
    router: Router,
    serving: Arc<AtomicUsize>,
    remote: std::net::SocketAddr,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let (router, serving) = (router.clone(), serving.clone());
        async move {
            serving.fetch_add(1, Ordering::SeqCst);
            let guard = Serving(serving);
            let mut request = request.map(Body::new);
            // Who is at the other end (the audit log records it).
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(remote));
            let response = router.oneshot(request).await?;
            Ok(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _held = &guard;
                    frame
                }))
            }))
        }
    })
}

/// One request served: counted down when dropped (with its response body).
struct Serving(Arc<AtomicUsize>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
