//! A scriptable mock of the Anthropic Messages API: the only fake in the end-to-end loop.
//!
//! [`MockApi::start`] serves on `127.0.0.1:0`. Every request is recorded ([`RecordedRequest`]). Each
//! `POST /v1/messages` is answered by, in order: the error of an outage in progress ([`MockApi::fail_while`]), the
//! first rule whose needle occurs in the last user message
//! ([`MockApi::when_prompt_contains`], [`MockApi::once_when_prompt_contains`]), else the next queued reply
//! ([`MockApi::enqueue`]), else the default reply: `tool said: <first tool result>` when the last user message carries
//! tool results, `echo: <last user text>` otherwise. `POST /v1/messages/count_tokens` gets `{"input_tokens":5}`;
//! anything else a 404 error body.
//!
//! `reply.rs` turns a [`Reply`] into wire steps without IO; this file owns the sockets. Dropping the [`MockApi`]
//! stops the server and ends every reply that is being held open ([`Reply::Hang`], [`Reply::StallAfterStart`]), so a
//! test that forgets a hanging CLI request still exits.

mod reply;
mod request;

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tracing::debug;

pub use reply::{usage_for, MockUsage, Reply};
pub use request::{MediaBlock, RecordedRequest, ToolResultBlock};

use reply::{Plan, ReplyContext, Step};

/// The longest a [`Reply::Hang`] or [`Reply::StallAfterStart`] holds a request open while the mock keeps running.
const HOLD_LIMIT: Duration = Duration::from_secs(600);

/// A running mock Messages API. Dropping it stops the server.
pub struct MockApi {
    /// Where the server listens; the port is chosen by the OS.
    addr: SocketAddr,
    /// Recorded requests and the script, shared with the request handlers.
    shared: Arc<Shared>,
    /// Never sent on: dropping it (with the `MockApi`) is the stop signal for the server and every held reply.
    _stop: watch::Sender<()>,
}

impl MockApi {
    /// Binds `127.0.0.1:0` and serves in a background task of the current tokio runtime.
    pub async fn start() -> MockApi {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the mock Messages API to 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("a bound listener has a local address");
        let (stop_tx, stop_rx) = watch::channel(());
        let shared = Arc::new(Shared {
            script: Mutex::new(Script::default()),
            next_number: AtomicU64::new(1),
            stop: stop_rx.clone(),
        });
        let app = Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::disable())
            .with_state(Arc::clone(&shared));
        let mut stop = stop_rx;
        tokio::spawn(async move {
            let served = axum::serve(
                KillableListener(listener),
                app.into_make_service_with_connect_info::<Conn>(),
            )
            .with_graceful_shutdown(async move {
                // Err once the sender is dropped; nothing is ever sent.
                let _ = stop.changed().await;
            })
            .await;
            if let Err(err) = served {
                debug!(error = %err, "Mock API server ended with an error.");
            }
        });
        debug!(%addr, "Mock API listening.");
        MockApi {
            addr,
            shared,
            _stop: stop_tx,
        }
    }

    /// `http://127.0.0.1:PORT`, the value for `ANTHROPIC_BASE_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.script().requests.clone()
    }

    /// Only the `POST /v1/messages` requests (not count_tokens or anything else), in arrival order.
    pub fn message_requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .script()
            .requests
            .iter()
            .filter(|request| request.is_message_request())
            .cloned()
            .collect()
    }

    /// Polls until at least `n` message requests have arrived and returns all of them; fails after `timeout` with
    /// what did arrive.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<RecordedRequest>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let seen = self.message_requests();
            if seen.len() >= n {
                return Ok(seen);
            }
            if tokio::time::Instant::now() >= deadline {
                let prompts: Vec<String> =
                    seen.iter().map(RecordedRequest::last_user_text).collect();
                anyhow::bail!(
                    "mock API: waited {timeout:?} for {n} message requests, got {}; their last user texts: {prompts:?}",
                    seen.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Answers every request whose last user message contains `needle` with `reply`, for as long as the mock runs.
    pub fn when_prompt_contains(&self, needle: &str, reply: Reply) {
        self.add_rule(needle, reply, false);
    }

    /// Like [`Self::when_prompt_contains`], but the rule is removed after it answered once.
    pub fn once_when_prompt_contains(&self, needle: &str, reply: Reply) {
        self.add_rule(needle, reply, true);
    }

    /// Appends to the FIFO used when no rule matches.
    pub fn enqueue(&self, reply: Reply) {
        self.shared.script().queue.push_back(reply);
    }

    /// Answers every message request with [`Reply::error`]`(status)` (429 `rate_limit_error`, 529
    /// `overloaded_error`, …), ahead of rules and queue, until the returned [`Outage`] ends or is dropped: an API
    /// that is overloaded for a while.
    pub fn fail_while(&self, status: u16) -> Outage {
        let mut script = self.shared.script();
        script.outages += 1;
        let id = script.outages;
        script.outage = Some((id, Reply::error(status)));
        Outage {
            shared: Arc::clone(&self.shared),
            id,
        }
    }

    /// Answers every message request for `model` with [`Reply::error`]`(status)`, as
    /// [`MockApi::fail_while`] does for all of them: one model overloaded, the others not.
    pub fn fail_model(&self, model: &str, status: u16) {
        self.shared
            .script()
            .failing_models
            .push((model.to_owned(), status));
    }

    /// Every reply from now on reports `usage` (instead of [`usage_for`] its number): a model
    /// whose requests cost what a test needs.
    pub fn report_usage(&self, usage: MockUsage) {
        self.shared.script().usage = Some(usage);
    }

    /// Clears rules, queue, an outage in progress and recorded requests. Ids (`msg_mock_N`) keep counting, so they stay unique.
    pub fn reset(&self) {
        let mut script = self.shared.script();
        // Outage numbers keep counting, so an [`Outage`] from before cannot end a later one.
        let outages = script.outages;
        *script = Script {
            outages,
            ..Script::default()
        };
    }

    fn add_rule(&self, needle: &str, reply: Reply, once: bool) {
        self.shared.script().rules.push(Rule {
            needle: needle.to_owned(),
            reply,
            once,
        });
    }
}

/// State shared by the [`MockApi`] handle and the request handlers.
struct Shared {
    /// One lock for recording and choosing, so the recorded order is the order replies were chosen in.
    script: Mutex<Script>,
    /// The next request number (`msg_mock_N`, `toolu_mock_N`); counts message requests from 1.
    next_number: AtomicU64,
    /// Resolves (with `Err`) when the [`MockApi`] is dropped.
    stop: watch::Receiver<()>,
}

impl Shared {
    /// A poisoned lock only means another handler panicked; the data is still usable for a test mock.
    fn script(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a message request and picks its reply: rules, then queue, then the default.
    fn record_and_choose(&self, request: RecordedRequest) -> (Reply, ReplyContext) {
        let prompt = request.prompt_text();
        let mut script = self.script();
        // Numbered under the lock, so `msg_mock_N` follows the recorded order.
        let number = self.next_number.fetch_add(1, Ordering::Relaxed);
        let ctx = ReplyContext {
            usage: script.usage.unwrap_or_else(|| usage_for(number)),
            number,
            model: request.model().unwrap_or("claude-mock").to_owned(),
            stream: request.is_streaming(),
        };
        let ruled = script
            .rules
            .iter()
            .position(|rule| prompt.contains(&rule.needle));
        let outage = script
            .outage
            .as_ref()
            .map(|(_, reply)| reply.clone())
            .or_else(|| {
                let model = request.model()?;
                let failing = script.failing_models.iter().find(|(m, _)| m == model)?;
                Some(Reply::error(failing.1))
            });
        // An outage answers first and uses up no rule or queued reply.
        let reply = match (outage, ruled) {
            (Some(error), _) => error,
            (None, Some(i)) if script.rules[i].once => script.rules.remove(i).reply,
            (None, Some(i)) => script.rules[i].reply.clone(),
            (None, None) => match script.queue.pop_front() {
                Some(reply) => reply,
                None => default_reply(&request),
            },
        };
        script.requests.push(request);
        (reply, ctx)
    }
}

/// The recorded requests and the script.
#[derive(Default)]
struct Script {
    requests: Vec<RecordedRequest>,
    rules: Vec<Rule>,
    queue: VecDeque<Reply>,
    /// The outage in progress, by its number, and the error every message request gets meanwhile.
    outage: Option<(u64, Reply)>,
    /// Outages started so far; numbers them, so an old [`Outage`] cannot end a newer one.
    outages: u64,
    /// What every reply reports it used, when set ([`MockApi::report_usage`]).
    usage: Option<MockUsage>,
    /// Models whose every request fails with this status ([`MockApi::fail_model`]).
    failing_models: Vec<(String, u16)>,
}

/// An outage of the mock API ([`MockApi::fail_while`]); it lasts until [`Outage::end`] or drop.
#[must_use = "the outage ends when this is dropped"]
pub struct Outage {
    shared: Arc<Shared>,
    id: u64,
}

impl Outage {
    /// Ends the outage: requests from now on get their ordinary replies.
    pub fn end(self) {}
}

impl Drop for Outage {
    fn drop(&mut self) {
        let mut script = self.shared.script();
        if script.outage.as_ref().is_some_and(|(id, _)| *id == self.id) {
            script.outage = None;
        }
    }
}

/// A reply for prompts containing `needle`.
struct Rule {
    needle: String,
    reply: Reply,
    /// Removed after its first use.
    once: bool,
}

/// `tool said: <first tool result>` or `echo: <last user text>`: lets a test see which question a reply answers.
fn default_reply(request: &RecordedRequest) -> Reply {
    match request.tool_results().into_iter().next() {
        Some(result) => Reply::Text(format!("tool said: {}", result.text)),
        None => Reply::Text(format!("echo: {}", request.last_user_text())),
    }
}

/// The one handler: records, then answers by route.
async fn handle(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(conn): ConnectInfo<Conn>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: parse_body(&body),
        at: Instant::now(),
    };
    debug!(method = %method, path = %request.path, "Mock API request.");
    if request.is_message_request() {
        let (reply, ctx) = shared.record_and_choose(request);
        debug!(number = ctx.number, ?reply, "Mock API reply chosen.");
        return respond(reply::plan(&reply, &ctx), &ctx, conn, shared.stop.clone()).await;
    }
    let count_tokens = method == Method::POST && request.path == "/v1/messages/count_tokens";
    let path = request.path.clone();
    shared.script().requests.push(request);
    if count_tokens {
        return Json(json!({"input_tokens": 5})).into_response();
    }
    let message = format!("mock: no route for {method} {path}");
    (
        StatusCode::NOT_FOUND,
        Json(reply::error_body("not_found_error", &message)),
    )
        .into_response()
}

fn parse_body(body: &Bytes) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// Carries out a [`Plan`].
async fn respond(
    plan: Plan,
    ctx: &ReplyContext,
    conn: Conn,
    mut stop: watch::Receiver<()>,
) -> Response {
    let request_id = format!("req_mock_{}", ctx.number);
    match plan {
        Plan::Json {
            status,
            body,
            delay,
        } => {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, [("request-id", request_id)], Json(body)).into_response()
        }
        Plan::Hang => {
            tokio::select! {
                _ = stop.changed() => {}
                _ = tokio::time::sleep(HOLD_LIMIT) => {}
            }
            conn.kill();
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        Plan::Drop => {
            conn.kill();
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        Plan::Stream(steps) => {
            let (tx, rx) = mpsc::channel::<Result<Bytes, io::Error>>(16);
            tokio::spawn(stream_steps(steps, tx, stop));
            let body = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            });
            (
                [
                    (header::CONTENT_TYPE, "text/event-stream".to_owned()),
                    (header::CACHE_CONTROL, "no-cache".to_owned()),
                ],
                [("request-id", request_id)],
                Body::from_stream(body),
            )
                .into_response()
        }
    }
}

/// Feeds an SSE body. Ends early when the client goes away; a stall or a stop ends the body with an error, which
/// makes hyper abort the connection instead of finishing the chunked body cleanly.
async fn stream_steps(
    steps: Vec<Step>,
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    mut stop: watch::Receiver<()>,
) {
    for step in steps {
        let wait = match step {
            Step::Send(frame) => {
                if tx.send(Ok(Bytes::from(frame))).await.is_err() {
                    return;
                }
                continue;
            }
            Step::Sleep(delay) => delay,
            Step::Stall => HOLD_LIMIT,
        };
        let stopped = tokio::select! {
            _ = tx.closed() => return,
            _ = stop.changed() => true,
            _ = tokio::time::sleep(wait) => matches!(step, Step::Stall),
        };
        if stopped {
            let _ = tx
                .send(Err(io::Error::other(
                    "mock: reply held open and then abandoned",
                )))
                .await;
            return;
        }
    }
}

/// A connection's kill switch, handed to the handler as connect info.
#[derive(Clone, Debug)]
struct Conn {
    killed: Arc<AtomicBool>,
}

impl Conn {
    /// The next read or write on the connection fails, so hyper drops it without writing a response.
    fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
    }
}

impl Connected<IncomingStream<'_, KillableListener>> for Conn {
    fn connect_info(stream: IncomingStream<'_, KillableListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// A TCP listener whose connections can be killed from a handler ([`Reply::DropConnection`]); axum offers no other
/// way to close a connection without a response.
struct KillableListener(TcpListener);

impl Listener for KillableListener {
    type Io = KillableStream;
    type Addr = Conn;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    let killed = Arc::new(AtomicBool::new(false));
                    let conn = Conn {
                        killed: Arc::clone(&killed),
                    };
                    return (KillableStream { stream, killed }, conn);
                }
                // Like axum's own listener: out of file descriptors and similar errors are transient.
                Err(err) => {
                    debug!(error = %err, "Mock API accept failed; retrying.");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr().map(|_| Conn {
            killed: Arc::new(AtomicBool::new(false)),
        })
    }
}

/// A TCP stream that fails every operation once its [`Conn`] was killed.
struct KillableStream {
    stream: TcpStream,
    killed: Arc<AtomicBool>,
}

impl KillableStream {
    fn check(&self) -> io::Result<()> {
        if self.killed.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "mock: connection dropped on purpose",
            ));
        }
        Ok(())
    }
}

impl AsyncRead for KillableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
