//! Helpers shared by the fault, event, ordering and load tests: a Server-Sent Events client for
//! `GET /api/threads/{id}/events`, and lookups of stored messages and events.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use anyhow::{bail, Context};
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::sync::watch;

use harness_tests::daemon::TestDaemon;
use orchestrator::store::EventRow;
use plugin_contract::ThreadId;

/// One event as it came over the wire.
#[derive(Clone, Debug, PartialEq)]
pub struct SseEvent {
    /// The `id:` field: the stored event's id.
    pub id: i64,
    /// The `event:` field: `turn_started`, `text_delta`, `turn_finished`, …
    pub kind: String,
    /// The `data:` field, parsed: `{"id", "kind", "messageId", "data", "at"}`.
    pub data: Value,
}

type Events = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<reqwest::Error>>> + Send>>;

/// A reader of a thread's event stream. Dropping it closes the connection.
///
/// `eventsource-stream` parses the stream. It drops comments, so the keep-alives (comment lines)
/// are counted on the raw bytes before they reach the parser: on the same connection, so a test
/// can wait for a keep-alive and then read events that come after it.
pub struct SseClient {
    events: Events,
    /// Events read while waiting for a comment, handed out first by [`Self::next`].
    pending: VecDeque<SseEvent>,
    /// How many comment lines (keep-alives) the raw stream has carried so far.
    comments: watch::Receiver<usize>,
    /// The id of the last event: the parser hands an event without an `id:` field the previous
    /// one's id, so a repeat means the field was missing.
    last_id: Option<i64>,
}

impl SseClient {
    /// Connects; `last_event_id` is sent as the `Last-Event-ID` header.
    pub async fn connect(base: &str, thread: &str, last_event_id: Option<i64>) -> SseClient {
        Self::connect_url(
            &format!("{base}/api/threads/{thread}/events"),
            last_event_id,
        )
        .await
    }

    /// Connects to `url` (to pass a query such as `?after=`).
    pub async fn connect_url(url: &str, last_event_id: Option<i64>) -> SseClient {
        let mut request = reqwest::Client::new().get(url);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = request.send().await.expect("the event stream answers");
        assert_eq!(response.status(), 200, "event stream status");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        let (seen, comments) = watch::channel(0);
        let mut counter = CommentCounter::new(seen);
        let events = response
            .bytes_stream()
            .inspect(move |chunk| {
                if let Ok(bytes) = chunk {
                    counter.feed(bytes);
                }
            })
            .eventsource();
        SseClient {
            events: Box::pin(events),
            pending: VecDeque::new(),
            comments,
            last_id: None,
        }
    }

    /// The next event; fails after `timeout` or when the stream ends.
    pub async fn next(&mut self, timeout: Duration) -> anyhow::Result<SseEvent> {
        tokio::time::timeout(timeout, async {
            match self.pending.pop_front() {
                Some(event) => Ok(event),
                None => self.read_event().await,
            }
        })
        .await
        .map_err(|_| anyhow::anyhow!("no event within {timeout:?}"))?
    }

    /// Every event up to and including the first one `stop` accepts.
    pub async fn until(
        &mut self,
        timeout: Duration,
        stop: impl Fn(&SseEvent) -> bool,
    ) -> anyhow::Result<Vec<SseEvent>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = self.next(left).await.with_context(|| {
                let kinds: Vec<&str> = seen.iter().map(|e: &SseEvent| e.kind.as_str()).collect();
                format!("waiting for the last event; got {kinds:?}")
            })?;
            let done = stop(&event);
            seen.push(event);
            if done {
                return Ok(seen);
            }
        }
    }

    /// Reads until a comment (a keep-alive) arrives; events read meanwhile are kept for
    /// [`Self::next`].
    pub async fn next_comment(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let mut comments = self.comments.clone();
        let seen = *comments.borrow_and_update();
        tokio::time::timeout(timeout, async {
            loop {
                // Reading drives the raw stream, which counts the comments it carries.
                tokio::select! {
                    counted = comments.wait_for(|n| *n > seen) => {
                        counted.context("the event stream ended")?;
                        return anyhow::Ok(());
                    }
                    event = self.read_event() => self.pending.push_back(event?),
                }
            }
        })
        .await
        .map_err(|_| anyhow::anyhow!("no comment within {timeout:?}"))?
    }

    /// The next event from the parser.
    async fn read_event(&mut self) -> anyhow::Result<SseEvent> {
        let event = self
            .events
            .next()
            .await
            .context("the event stream ended")?
            .context("reading the event stream")?;
        let id = event
            .id
            .parse::<i64>()
            .with_context(|| format!("numeric id: {event:?}"))?;
        if self.last_id == Some(id) {
            bail!("an event without an id: {event:?}");
        }
        self.last_id = Some(id);
        let data: Value = serde_json::from_str(&event.data).context("event data is JSON")?;
        Ok(SseEvent {
            id,
            kind: event.event,
            data,
        })
    }
}

/// Counts the lines that start with `:` (SSE comments) in a byte stream cut anywhere; a line
/// ends at CR, LF or CRLF.
struct CommentCounter {
    at_line_start: bool,
    seen: watch::Sender<usize>,
}

impl CommentCounter {
    fn new(seen: watch::Sender<usize>) -> CommentCounter {
        CommentCounter {
            at_line_start: true,
            seen,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        let mut found = 0;
        for &byte in bytes {
            if self.at_line_start && byte == b':' {
                found += 1;
            }
            self.at_line_start = byte == b'\n' || byte == b'\r';
        }
        if found > 0 {
            self.seen.send_modify(|n| *n += found);
        }
    }
}

#[test]
fn comment_lines_are_counted_across_chunks_and_line_ends() {
    let (seen, comments) = watch::channel(0);
    let mut counter = CommentCounter::new(seen);
    // A keep-alive, an event whose data holds colons, a comment split over two chunks, CRLF.
    for chunk in [
        ":\n\nid: 1\nevent: x\ndata: {\"a\":\":b\"}\n\n",
        "\r\n",
        ":",
        " ping\r\n\r\n:\r:\n",
    ] {
        counter.feed(chunk.as_bytes());
    }
    assert_eq!(*comments.borrow(), 4);
}

/// True for the events that end a turn.
pub fn is_terminal(event: &SseEvent) -> bool {
    is_terminal_kind(&event.kind)
}

/// True for the kinds of event that end a turn.
pub fn is_terminal_kind(kind: &str) -> bool {
    kind == "turn_finished" || kind == "turn_failed"
}

/// The thread's stored events, oldest first.
pub async fn stored_events(daemon: &TestDaemon, thread: &str) -> Vec<EventRow> {
    daemon
        .daemon()
        .store
        .events_after(&ThreadId::from_string(thread), 0, 10_000)
        .await
        .expect("events readable")
}

/// The id of the thread's latest stored event (0 when none): pass it to [`wait_for_event`] to
/// wait only for what comes next.
pub async fn last_event_id(daemon: &TestDaemon, thread: &str) -> i64 {
    stored_events(daemon, thread)
        .await
        .last()
        .map_or(0, |e| e.id)
}

/// Polls until the thread has a stored event of `kind` with an id above `after`.
pub async fn wait_for_event(
    daemon: &TestDaemon,
    thread: &str,
    kind: &str,
    after: i64,
    timeout: Duration,
) {
    let found = harness_tests::util::eventually_async(timeout, kind, || async {
        stored_events(daemon, thread)
            .await
            .iter()
            .any(|e| e.kind == kind && e.id > after)
    })
    .await;
    found.unwrap_or_else(|err| panic!("{err}"));
}

/// The thread's messages as `GET /api/threads/{id}` shows them.
pub async fn messages(daemon: &TestDaemon, thread: &str) -> Vec<Value> {
    let (status, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(status, 200, "{body}");
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// Asserts that `thread` holds exactly these user messages, in order, each answered by the mock's
/// echo right after it.
pub async fn assert_echoed_in_order(daemon: &TestDaemon, thread: &str, sent: &[String]) {
    let mut messages = messages(daemon, thread).await;
    messages.sort_by_key(|m| m["seq"].as_i64());
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let got: Vec<(String, String)> = messages
        .iter()
        .map(|m| (text(&m["role"]), text(&m["content"])))
        .collect();
    let expected: Vec<(String, String)> = sent
        .iter()
        .flat_map(|text| {
            [
                ("user".to_owned(), text.clone()),
                ("assistant".to_owned(), format!("echo: {text}")),
            ]
        })
        .collect();
    assert_eq!(got, expected, "thread {thread}");
    for pair in messages.chunks(2) {
        assert_eq!(pair[1]["replyTo"], pair[0]["id"], "thread {thread}");
    }
}

/// The stored message with this id.
pub async fn message(daemon: &TestDaemon, thread: &str, id: &str) -> Value {
    messages(daemon, thread)
        .await
        .into_iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("message {id} is stored"))
}

/// The stored user message with this content.
pub async fn user_message(daemon: &TestDaemon, thread: &str, content: &str) -> Value {
    messages(daemon, thread)
        .await
        .into_iter()
        .find(|m| m["role"] == "user" && m["content"] == content)
        .unwrap_or_else(|| panic!("a user message {content:?} is stored"))
}

/// Sends SIGKILL (or another signal) to one process.
pub fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
        .unwrap_or_else(|err| panic!("signal {signal} to {pid}: {err}"));
}

/// A request to the daemon at `base`, with `bearer` when given: (status, the body as JSON, or
/// as a JSON string when it is not JSON, headers). A body goes as JSON, with the `Accept` an MCP
/// client sends (the API takes it too).
pub(crate) async fn call(
    base: &str,
    bearer: Option<&str>,
    method: reqwest::Method,
    path: impl Into<String>,
    body: Option<Value>,
) -> (reqwest::StatusCode, Value, reqwest::header::HeaderMap) {
    let path: String = path.into();
    let mut request = reqwest::Client::new().request(method, format!("{base}{path}"));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    if let Some(body) = body {
        request = request
            .header("accept", "application/json, text/event-stream")
            .json(&body);
    }
    let response = request.send().await.expect("the daemon answers");
    let (status, headers) = (response.status(), response.headers().clone());
    let text = response.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body, headers)
}
