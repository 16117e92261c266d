//! Turn events: their kinds ([`EventKind`], whose names are the documented SSE event names), and
//! the bus that persists them in order (their SQLite id is the SSE event id) and then publishes
//! them to live subscribers of the thread.
//!
//! Invariant: one writer task appends every event, so ids follow the order events were emitted
//! in, across all threads; a subscriber that reads the store up to id N and then the live channel
//! from N+1 misses nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::task::TaskTracker;
use tracing::warn;

use plugin_contract::ThreadId;

use crate::store::{EventRow, MessageId, Store};
use crate::sync::lock;

/// Live capacity per thread; a subscriber that falls this far behind re-reads from the store.
const CHANNEL_CAPACITY: usize = 1024;

/// Every kind of event a thread's stream carries. The serialized names are the SSE `event:`
/// names the README lists. A new kind is documented in `http::openapi::event_data` (it does not
/// compile until it is).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A message was stored and queued: `{messageId, content, clientMessageId}`.
    MessageReceived,
    /// The message's turn began (before any process is found or started): `{messageId}`.
    TurnStarted,
    /// A process took the turn: `{start, pid}`; `start.kind` is `warm`, `resumed` or `fresh`.
    ProcessReady,
    /// A piece of the reply as the API streams it: `{text}`.
    TextDelta,
    /// A complete text block of the reply: `{text}`.
    AssistantText,
    /// The model called a tool: `{tool_use_id, name, input}`.
    ToolCallStarted,
    /// A tool result went back to the model: `{tool_use_id, is_error, content}`.
    ToolCallFinished,
    /// The CLI is retrying a failed API request: `{attempt, max_retries, retry_delay_ms, error, status}`.
    ApiRetry,
    /// The account's rate-limit state changed (OAuth logins only): `{status, resets_at,
    /// rate_limit_type, utilization, surpassed_threshold, is_using_overage}`; `status` is
    /// `allowed`, `allowed_warning` or `rejected`.
    RateLimit,
    /// The turn waits because as many turns as the concurrency limit allows are running (the
    /// limit drops when the API answers 429/529): `{messageId, limit, running, position}`;
    /// `position` 1 is next. Sent once, before the wait; the turn goes on in arrival order.
    TurnThrottled,
    /// The CLI asks whether a tool may run and a person is to answer (`approvals.mode = ask`):
    /// `{requestId, toolName, input, toolUseId}`.
    PermissionRequested,
    /// A tool permission was decided: `{requestId, toolName, decision, decidedBy, reason}`.
    PermissionDecided,
    /// The turn ended with a reply: `{messageId, reply}`. Exactly one of this and `turn_failed`
    /// ends every turn.
    TurnFinished,
    /// The turn ended without a reply: `{messageId, status, error}`.
    TurnFailed,
}

impl EventKind {
    pub const ALL: [EventKind; 14] = [
        EventKind::MessageReceived,
        EventKind::TurnStarted,
        EventKind::ProcessReady,
        EventKind::TextDelta,
        EventKind::AssistantText,
        EventKind::ToolCallStarted,
        EventKind::ToolCallFinished,
        EventKind::ApiRetry,
        EventKind::RateLimit,
        EventKind::TurnThrottled,
        EventKind::PermissionRequested,
        EventKind::PermissionDecided,
        EventKind::TurnFinished,
        EventKind::TurnFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::MessageReceived => "message_received",
            EventKind::TurnStarted => "turn_started",
            EventKind::ProcessReady => "process_ready",
            EventKind::TextDelta => "text_delta",
            EventKind::AssistantText => "assistant_text",
            EventKind::ToolCallStarted => "tool_call_started",
            EventKind::ToolCallFinished => "tool_call_finished",
            EventKind::ApiRetry => "api_retry",
            EventKind::RateLimit => "rate_limit",
            EventKind::TurnThrottled => "turn_throttled",
            EventKind::PermissionRequested => "permission_requested",
            EventKind::PermissionDecided => "permission_decided",
            EventKind::TurnFinished => "turn_finished",
            EventKind::TurnFailed => "turn_failed",
        }
    }

    /// True for the two kinds that end a turn.
    pub fn is_terminal(self) -> bool {
        matches!(self, EventKind::TurnFinished | EventKind::TurnFailed)
    }
}

impl From<&claude_cli::TurnEvent> for EventKind {
    fn from(event: &claude_cli::TurnEvent) -> Self {
        use claude_cli::TurnEvent;
        match event {
            TurnEvent::TextDelta { .. } => EventKind::TextDelta,
            TurnEvent::AssistantText { .. } => EventKind::AssistantText,
            TurnEvent::ToolCallStarted { .. } => EventKind::ToolCallStarted,
            TurnEvent::ToolCallFinished { .. } => EventKind::ToolCallFinished,
            TurnEvent::ApiRetry { .. } => EventKind::ApiRetry,
            TurnEvent::RateLimit { .. } => EventKind::RateLimit,
        }
    }
}

struct Emit {
    thread: ThreadId,
    message: Option<MessageId>,
    kind: EventKind,
    data: Value,
    done: Option<oneshot::Sender<()>>,
}

#[derive(Clone)]
pub struct EventBus {
    tx: mpsc::UnboundedSender<Emit>,
    channels: Arc<Mutex<HashMap<ThreadId, broadcast::Sender<EventRow>>>>,
}

impl EventBus {
    /// Starts the writer task on `tasks`; it ends once every clone of the bus is dropped and the
    /// queue is written out.
    pub fn start(store: Store, tasks: &TaskTracker) -> EventBus {
        let (tx, mut rx) = mpsc::unbounded_channel::<Emit>();
        let channels: Arc<Mutex<HashMap<ThreadId, broadcast::Sender<EventRow>>>> = Arc::default();
        let bus = EventBus {
            tx,
            channels: channels.clone(),
        };
        tasks.spawn(async move {
            while let Some(emit) = rx.recv().await {
                let kind = emit.kind.as_str();
                match store
                    .append_event(&emit.thread, emit.message.as_ref(), kind, &emit.data)
                    .await
                {
                    Ok(row) => {
                        if let Some(tx) = lock(&channels).get(&emit.thread) {
                            let _ = tx.send(row);
                        }
                    }
                    Err(err) => {
                        warn!(thread_id = %emit.thread, kind, error = %err, "Could not store an event.")
                    }
                }
                if let Some(done) = emit.done {
                    let _ = done.send(());
                }
            }
        });
        bus
    }

    /// Queues an event; never blocks.
    pub fn emit(
        &self,
        thread: &ThreadId,
        message: Option<&MessageId>,
        kind: EventKind,
        data: Value,
    ) {
        let _ = self.tx.send(Emit {
            thread: thread.clone(),
            message: message.cloned(),
            kind,
            data,
            done: None,
        });
    }

    /// Queues an event and waits until it is stored and published.
    pub async fn emit_and_wait(
        &self,
        thread: &ThreadId,
        message: Option<&MessageId>,
        kind: EventKind,
        data: Value,
    ) {
        let (done, wait) = oneshot::channel();
        let emit = Emit {
            thread: thread.clone(),
            message: message.cloned(),
            kind,
            data,
            done: Some(done),
        };
        if self.tx.send(emit).is_ok() {
            let _ = wait.await;
        }
    }

    /// Live events of a thread from now on.
    pub fn subscribe(&self, thread: &ThreadId) -> broadcast::Receiver<EventRow> {
        let mut channels = lock(&self.channels);
        channels.retain(|_, tx| tx.receiver_count() > 0);
        channels
            .entry(thread.clone())
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialized_names_are_the_documented_ones() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("the README");
        let events_row = readme
            .lines()
            .find(|l| l.starts_with("| `GET /api/threads/{id}/events`"))
            .expect("the README's API table lists the event stream");
        for kind in EventKind::ALL {
            let name = serde_json::to_value(kind).unwrap();
            assert_eq!(name, kind.as_str(), "{kind:?}");
            assert!(
                events_row.contains(&format!("`{}`", kind.as_str())),
                "the README's event list lacks {}",
                kind.as_str()
            );
        }
    }
}
