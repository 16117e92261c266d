//! Helpers shared by the fault, event, ordering and load tests: a Server-Sent Events client for
//! `GET /api/threads/{id}/events`, and lookups of stored messages and events.

use std::pin::Pin;
use std::time::Duration;

use anyhow::{bail, Context};
use futures::{Stream, StreamExt};
use serde_json::Value;

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

type Body = Pin<Box<dyn Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>;

/// A reader of a thread's event stream. Dropping it closes the connection.
pub struct SseClient {
    body: Body,
    buffer: String,
    /// Events read while waiting for a comment, handed out first by [`Self::next`].
    pending: std::collections::VecDeque<SseEvent>,
    /// Comment lines seen (keep-alives).
    pub comments: usize,
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
        SseClient {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            pending: Default::default(),
            comments: 0,
        }
    }

    /// The next event; fails after `timeout` or when the stream ends.
    pub async fn next(&mut self, timeout: Duration) -> anyhow::Result<SseEvent> {
        tokio::time::timeout(timeout, self.next_event())
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
        let seen = self.comments;
        tokio::time::timeout(timeout, async {
            while self.comments == seen {
                if let Some(event) = self.next_block().await? {
                    self.pending.push_back(event);
                }
            }
            anyhow::Ok(())
        })
        .await
        .map_err(|_| anyhow::anyhow!("no comment within {timeout:?}"))?
    }

    async fn next_event(&mut self) -> anyhow::Result<SseEvent> {
        if let Some(event) = self.pending.pop_front() {
            return Ok(event);
        }
        loop {
            if let Some(event) = self.next_block().await? {
                return Ok(event);
            }
        }
    }

    /// The next block: an event, or `None` for a comment.
    async fn next_block(&mut self) -> anyhow::Result<Option<SseEvent>> {
        loop {
            // A complete event is a block of lines ended by an empty line.
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                return self.parse_block(&block);
            }
            match self.body.next().await {
                Some(chunk) => {
                    let chunk = chunk.context("reading the event stream")?;
                    self.buffer
                        .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
                }
                None => bail!("the event stream ended"),
            }
        }
    }

    fn parse_block(&mut self, block: &str) -> anyhow::Result<Option<SseEvent>> {
        let (mut id, mut kind, mut data) = (None, None, Vec::new());
        for line in block.lines() {
            if line.starts_with(':') {
                self.comments += 1;
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => id = Some(value.parse::<i64>().context("numeric id")?),
                "event" => kind = Some(value.to_owned()),
                "data" => data.push(value.to_owned()),
                _ => {}
            }
        }
        let Some(id) = id else {
            if data.is_empty() {
                return Ok(None);
            }
            bail!("an event without an id: {block:?}");
        };
        let data: Value = serde_json::from_str(&data.join("\n")).context("event data is JSON")?;
        Ok(Some(SseEvent {
            id,
            kind: kind.unwrap_or_else(|| "message".into()),
            data,
        }))
    }
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
