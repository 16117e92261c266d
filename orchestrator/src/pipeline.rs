//! `handle_message`: the one path every message takes, from the HTTP API and from delegation.
//!
//! persist the user message (`pending`) → wait for the thread's turn (FIFO, one turn at a time
//! per thread, threads in parallel) → invoke with context → persist the reply and the CLI session
//! id → emit events.
//!
//! Invariants: the user's message is committed before the CLI sees it; a `clientMessageId` that
//! was seen before never runs a second turn; every turn ends in `done`, `error` or `interrupted`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use tokio::sync::oneshot;
use tracing::{info, warn, Instrument};

use plugin_contract::{
    CliSessionId, ContextProvider, InvokeError, InvokeOptions, Invoker, SessionStart, StreamEvent,
    ThreadId, ThreadStore, TurnContext, TurnPreparer,
};

use crate::app::App;
use crate::store::{Inserted, Message, MessageId, MessageStatus, NewUserMessage, StoreError};
use crate::sync::lock;

/// A message to process.
#[derive(Clone, Debug)]
pub struct NewMessage {
    pub thread_id: ThreadId,
    pub content: String,
    pub client_message_id: Option<String>,
    pub model: Option<String>,
    /// Bound on the turn; `None` = the daemon's default.
    pub timeout: Option<Duration>,
}

/// The reply to a message.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnReply {
    pub message: Message,
    pub thread_id: ThreadId,
    pub session_id: Option<CliSessionId>,
    pub user_message_id: MessageId,
}

/// Why a message got no reply. Each variant maps to one HTTP status in `http::error`.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("thread {0} not found")]
    ThreadNotFound(ThreadId),
    #[error("thread {thread} already has {limit} messages waiting; retry later")]
    QueueFull { thread: ThreadId, limit: usize },
    /// A `clientMessageId` sent again with other content (or model) than the first time.
    #[error("clientMessageId {client_message_id:?} was already used for message {message_id} with other content; use a new id for a new message")]
    ClientIdConflict {
        client_message_id: String,
        message_id: MessageId,
    },
    /// The turn ran and failed; the user message is kept with this status.
    #[error("{error}")]
    Turn {
        message_id: MessageId,
        status: MessageStatus,
        error: InvokeError,
    },
    /// A retried message whose first run failed.
    #[error("message {message_id} ended as {status:?}: {error}")]
    PreviousFailure {
        message_id: MessageId,
        status: MessageStatus,
        error: String,
    },
    #[error("the daemon is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for PipelineError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::ThreadNotFound(id) => PipelineError::ThreadNotFound(id),
            other => PipelineError::Store(other),
        }
    }
}

/// Per-thread FIFO: one turn at a time per thread, a bounded number waiting, turns in the order
/// their messages were stored.
///
/// The order is fixed when a message is stored, not when its task first runs: each ticket joins
/// the line (takes the completion signal of the one ahead) under the same per-thread lock as the
/// insert that gives the message its `seq`. Tasks spawned one after another may start in any
/// order, so a fair lock taken inside the task would not be enough.
#[derive(Default)]
pub struct ThreadQueues {
    slots: Mutex<HashMap<ThreadId, Arc<ThreadSlot>>>,
}

#[derive(Default)]
struct ThreadSlot {
    /// Held while a message is stored and joins the line.
    accept: tokio::sync::Mutex<()>,
    /// Resolves (sent or dropped) when the last ticket in line is done.
    tail: Mutex<Option<oneshot::Receiver<()>>>,
    queued: std::sync::atomic::AtomicUsize,
}

/// A place in a thread's queue; leaving it (drop) frees the place and lets the next one run.
pub struct QueueTicket {
    queues: Arc<ThreadQueues>,
    thread: ThreadId,
    slot: Arc<ThreadSlot>,
    /// Resolves when the ticket ahead in line is done; `None` once awaited or when first.
    ahead: Option<oneshot::Receiver<()>>,
    /// Dropped when this ticket is done, which wakes the one behind.
    done: Option<oneshot::Sender<()>>,
}

impl ThreadQueues {
    /// Takes a place in the thread's queue, or refuses when `limit` messages are already there.
    pub fn enter(self: &Arc<Self>, thread: &ThreadId, limit: usize) -> Option<QueueTicket> {
        use std::sync::atomic::Ordering;
        let mut slots = lock(&self.slots);
        let slot = slots.entry(thread.clone()).or_default().clone();
        // `limit` waiting plus the one running.
        if slot.queued.load(Ordering::SeqCst) > limit {
            return None;
        }
        slot.queued.fetch_add(1, Ordering::SeqCst);
        Some(QueueTicket {
            queues: self.clone(),
            thread: thread.clone(),
            slot,
            ahead: None,
            done: None,
        })
    }
}

impl QueueTicket {
    /// Takes the last place in line. Called once, while holding the slot's `accept` lock.
    fn join_line(&mut self) {
        let (done, next) = oneshot::channel();
        self.ahead = lock(&self.slot.tail).replace(next);
        self.done = Some(done);
    }

    /// Waits until every ticket ahead is done.
    async fn wait_turn(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            // Sent or dropped, either way the one ahead is done.
            let _ = ahead.await;
        }
    }
}

impl Drop for QueueTicket {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        // Left the line before its turn came: the one behind must still wait for the one ahead.
        if let (Some(ahead), Some(done)) = (self.ahead.take(), self.done.take()) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = ahead.await;
                    drop(done);
                });
            }
        }
        let mut slots = lock(&self.queues.slots);
        if self.slot.queued.fetch_sub(1, Ordering::SeqCst) == 1 {
            slots.remove(&self.thread);
        }
    }
}

/// Processes one message. The turn runs in a task of its own, so a client that goes away does not
/// cancel it half-way; the returned future only waits for it.
pub async fn handle_message(app: &App, msg: NewMessage) -> Result<TurnReply, PipelineError> {
    let accepted = accept_message(app, msg).await?;
    accepted.finish().await
}

/// A message that is stored and queued; [`Accepted::finish`] waits for its reply.
pub struct Accepted {
    pub message_id: MessageId,
    pub thread_id: ThreadId,
    pub duplicate: bool,
    outcome: tokio::sync::oneshot::Receiver<Result<TurnReply, PipelineError>>,
}

impl Accepted {
    pub async fn finish(self) -> Result<TurnReply, PipelineError> {
        self.outcome
            .await
            .unwrap_or(Err(PipelineError::ShuttingDown))
    }
}

/// Stores the message and starts its turn in the background; returns once the message is safe.
pub async fn accept_message(app: &App, msg: NewMessage) -> Result<Accepted, PipelineError> {
    if app.is_shutting_down() {
        return Err(PipelineError::ShuttingDown);
    }
    validate_content(&msg.content, app.config().max_message_chars)?;
    let thread = app.store().require_thread(&msg.thread_id).await?;
    let mut ticket = app
        .queues()
        .enter(&thread.id, app.config().turn.queue_limit)
        .ok_or_else(|| PipelineError::QueueFull {
            thread: thread.id.clone(),
            limit: app.config().turn.queue_limit,
        })?;
    let admitted = {
        let slot = ticket.slot.clone();
        let _in_order = slot.accept.lock().await;
        let inserted = app
            .store()
            .insert_user_message(NewUserMessage {
                thread_id: thread.id.clone(),
                content: msg.content.clone(),
                client_message_id: msg.client_message_id.clone(),
                model: msg.model.clone(),
            })
            .await?;
        let admitted = match inserted {
            Inserted::New(message) => Admitted::Run(message),
            Inserted::Duplicate(first) => {
                if first.content != msg.content || first.model != msg.model {
                    return Err(PipelineError::ClientIdConflict {
                        client_message_id: msg.client_message_id.unwrap_or_default(),
                        message_id: first.id,
                    });
                }
                // A retry of a message a crash, a shutdown or an interrupt cut short runs it.
                let retried = match first.status {
                    MessageStatus::Interrupted => app.store().retry_interrupted(&first.id).await?,
                    _ => None,
                };
                match retried {
                    Some(message) => {
                        info!(thread_id = %thread.id, message_id = %message.id, "Retry of an interrupted message; running it again.");
                        Admitted::Run(message)
                    }
                    None => Admitted::Wait(first),
                }
            }
        };
        if matches!(admitted, Admitted::Run(_)) {
            ticket.join_line();
        }
        admitted
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (message, duplicate) = match admitted {
        Admitted::Run(message) => (message, false),
        Admitted::Wait(message) => (message, true),
    };
    let app2 = app.clone();
    let span = tracing::info_span!("message", thread_id = %thread.id, message_id = %message.id);
    let message_id = message.id.clone();
    if duplicate {
        drop(ticket);
        info!(thread_id = %thread.id, message_id = %message.id, "Duplicate clientMessageId; answering with the first run.");
        app.tasks().spawn(
            async move {
                let _ = tx.send(wait_for_outcome(&app2, &message).await);
            }
            .instrument(span),
        );
    } else {
        app2.events().emit(
            &thread.id,
            Some(&message.id),
            "message_received",
            json!({"messageId": message.id, "content": message.content}),
        );
        app.tasks().spawn(
            async move {
                let result = run_turn(&app2, &message, msg, ticket).await;
                let _ = tx.send(result);
            }
            .instrument(span),
        );
    }
    Ok(Accepted {
        message_id,
        thread_id: thread.id,
        duplicate,
        outcome: rx,
    })
}

/// What a stored message does next.
enum Admitted {
    /// Its turn runs (a new message, or the retry of an interrupted one).
    Run(Message),
    /// A repeat of a message that ran or runs: answer with that run's outcome.
    Wait(Message),
}

fn validate_content(content: &str, max_chars: usize) -> Result<(), PipelineError> {
    if content.trim().is_empty() {
        return Err(PipelineError::InvalidInput(
            "content must not be empty".into(),
        ));
    }
    let chars = content.chars().count();
    if chars > max_chars {
        return Err(PipelineError::InvalidInput(format!(
            "content is {chars} characters; the limit is {max_chars}"
        )));
    }
    if content
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(PipelineError::InvalidInput(
            "content contains control characters other than newline, carriage return and tab"
                .into(),
        ));
    }
    Ok(())
}

/// Runs the message's turn once the ones ahead of it are done, and ends it on the event stream:
/// `turn_finished` or `turn_failed`, stored before the caller hears the outcome.
async fn run_turn(
    app: &App,
    user: &Message,
    msg: NewMessage,
    mut ticket: QueueTicket,
) -> Result<TurnReply, PipelineError> {
    ticket.wait_turn().await;
    let terminal = TerminalEvent::new(app, user);
    let result = execute_turn(app, user, msg).await;
    match &result {
        Ok(reply) => {
            terminal
                .finished(json!({"messageId": user.id, "reply": reply.message}))
                .await
        }
        Err(PipelineError::Turn { status, error, .. }) => {
            terminal.failed(*status, error.to_string()).await
        }
        Err(other) => {
            // Not the CLI (the store, the thread): the turn is over all the same, and the message
            // must not stay `pending`.
            let error = other.to_string();
            if let Err(err) = app
                .store()
                .fail_turn(&user.id, MessageStatus::Error, &error, None)
                .await
            {
                warn!(message_id = %user.id, error = %err, "Could not mark the failed turn.");
            }
            terminal.failed(MessageStatus::Error, error).await
        }
    }
    // Only now may the next message of the thread start.
    drop(ticket);
    result
}

async fn execute_turn(
    app: &App,
    user: &Message,
    msg: NewMessage,
) -> Result<TurnReply, PipelineError> {
    if app.is_shutting_down() {
        // Shutdown began while this message waited in line: the grace period is for turns that
        // are running, and a turn started now would only be killed (or outlive the pool).
        let error = InvokeError::ShuttingDown;
        let status = MessageStatus::Interrupted;
        app.store()
            .fail_turn(&user.id, status, &error.to_string(), None)
            .await?;
        return Err(PipelineError::Turn {
            message_id: user.id.clone(),
            status,
            error,
        });
    }
    let thread = app.store().require_thread(&user.thread_id).await?;
    let model = msg.model.clone().or(thread.model.clone());
    let events = app.events().clone();
    let thread_id = thread.id.clone();
    let message_id = user.id.clone();
    events.emit(
        &thread_id,
        Some(&message_id),
        "turn_started",
        json!({"messageId": message_id}),
    );
    let sink_events = events.clone();
    let (sink_thread, sink_message) = (thread_id.clone(), message_id.clone());
    let mut options = InvokeOptions::new(thread_id.clone());
    options.session_id = thread.cli_session_id.clone();
    options.model = model.clone();
    options.timeout = msg.timeout;
    let tally = crate::metrics::TurnTally::default();
    let sink_tally = tally.clone();
    options.on_event = Some(Arc::new(move |event: StreamEvent| {
        sink_tally.observe(&event);
        let kind = match &event {
            StreamEvent::TurnStarted { .. } => "process_ready",
            StreamEvent::TextDelta { .. } => "text_delta",
            StreamEvent::AssistantText { .. } => "assistant_text",
            StreamEvent::ToolCallStarted { .. } => "tool_call_started",
            StreamEvent::ToolCallFinished { .. } => "tool_call_finished",
            StreamEvent::ApiRetry { .. } => "api_retry",
        };
        let data = serde_json::to_value(&event).unwrap_or_default();
        sink_events.emit(&sink_thread, Some(&sink_message), kind, data);
    }));
    options.preparer = Some(Arc::new(ContextPreparer {
        providers: app.context_providers().to_vec(),
        store: Arc::new(app.store().clone()),
        thread: thread_id.clone(),
    }));
    let started = std::time::Instant::now();
    let outcome = app.invoker().invoke(&user.content, options).await;
    match outcome {
        Ok(reply) => {
            let message = app
                .store()
                .complete_turn(
                    &user.id,
                    &reply.text,
                    model.as_deref(),
                    reply.session_id.as_ref(),
                )
                .await?;
            app.metrics()
                .turns()
                .finished(Some(reply.start), "done", started.elapsed());
            info!(
                thread_id = %thread_id, message_id = %user.id, start = ?reply.start, warm = reply.start.is_warm(),
                ms = started.elapsed().as_millis() as u64, api_calls = reply.num_turns,
                tool_calls = tally.tool_calls(), outcome = "done", "Turn finished."
            );
            Ok(TurnReply {
                message,
                thread_id,
                session_id: reply.session_id,
                user_message_id: user.id.clone(),
            })
        }
        Err(error) => {
            let cause = error.to_string();
            let (status, error) = match error {
                InvokeError::Interrupted | InvokeError::ShuttingDown => {
                    (MessageStatus::Interrupted, error)
                }
                // Killed by shutdown (the process death is only how): the user did nothing wrong
                // and may send it again.
                _ if app.is_shutting_down() => {
                    (MessageStatus::Interrupted, InvokeError::ShuttingDown)
                }
                other => (MessageStatus::Error, other),
            };
            app.store()
                .fail_turn(&user.id, status, &error.to_string(), None)
                .await?;
            app.metrics()
                .turns()
                .finished(tally.start(), status.as_str(), started.elapsed());
            warn!(
                thread_id = %thread_id, message_id = %user.id, start = tally.start_label(),
                ms = started.elapsed().as_millis() as u64, tool_calls = tally.tool_calls(),
                outcome = ?status, error = %cause, "Turn failed."
            );
            Err(PipelineError::Turn {
                message_id: user.id.clone(),
                status,
                error,
            })
        }
    }
}

/// The end of a turn on the thread's event stream. Sent exactly once: by [`Self::finished`] or
/// [`Self::failed`], or on drop (the task running the turn panicked or was cancelled), so no
/// client of the stream waits forever for a turn that is over.
struct TerminalEvent {
    app: App,
    thread: ThreadId,
    message: MessageId,
    sent: bool,
}

impl TerminalEvent {
    fn new(app: &App, user: &Message) -> Self {
        Self {
            app: app.clone(),
            thread: user.thread_id.clone(),
            message: user.id.clone(),
            sent: false,
        }
    }

    async fn finished(mut self, data: serde_json::Value) {
        self.sent = true;
        self.app
            .events()
            .emit_and_wait(&self.thread, Some(&self.message), "turn_finished", data)
            .await;
    }

    async fn failed(mut self, status: MessageStatus, error: String) {
        self.sent = true;
        let data = json!({"messageId": self.message, "status": status, "error": error});
        self.app
            .events()
            .emit_and_wait(&self.thread, Some(&self.message), "turn_failed", data)
            .await;
    }
}

impl Drop for TerminalEvent {
    fn drop(&mut self) {
        if self.sent {
            return;
        }
        let error = "the turn ended unexpectedly";
        warn!(thread_id = %self.thread, message_id = %self.message, "A turn ended without an outcome.");
        self.app.events().emit(
            &self.thread,
            Some(&self.message),
            "turn_failed",
            json!({"messageId": self.message, "status": MessageStatus::Error, "error": error}),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (app, message) = (self.app.clone(), self.message.clone());
            runtime.spawn(async move {
                let _ = app
                    .store()
                    .fail_turn(&message, MessageStatus::Error, error, None)
                    .await;
            });
        }
    }
}

/// Waits until a message first sent earlier has finished, and answers with its outcome.
async fn wait_for_outcome(app: &App, first: &Message) -> Result<TurnReply, PipelineError> {
    let mut live = app.events().subscribe(&first.thread_id);
    loop {
        let message = app
            .store()
            .get_message(&first.id)
            .await?
            .unwrap_or_else(|| first.clone());
        match message.status {
            MessageStatus::Done => {
                let reply = app.store().reply_for(&message.id).await?;
                let thread = app.store().require_thread(&message.thread_id).await?;
                if let Some(reply) = reply {
                    return Ok(TurnReply {
                        message: reply,
                        thread_id: thread.id,
                        session_id: thread.cli_session_id,
                        user_message_id: message.id,
                    });
                }
            }
            MessageStatus::Pending => {}
            status => {
                return Err(PipelineError::PreviousFailure {
                    message_id: message.id,
                    status,
                    error: message.error.unwrap_or_default(),
                })
            }
        }
        // Wait for the thread's next turn to end, then look again.
        loop {
            match live.recv().await {
                Ok(event) if event.kind == "turn_finished" || event.kind == "turn_failed" => break,
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return Err(PipelineError::ShuttingDown)
                }
            }
        }
    }
}

/// Runs the context providers once the session start is known.
struct ContextPreparer {
    providers: Vec<Arc<dyn ContextProvider>>,
    store: Arc<dyn ThreadStore>,
    thread: ThreadId,
}

#[async_trait::async_trait]
impl TurnPreparer for ContextPreparer {
    async fn prepare(&self, start: SessionStart, prompt: &str) -> String {
        let turn = TurnContext {
            thread_id: self.thread.clone(),
            start,
            store: self.store.clone(),
        };
        let mut parts = Vec::new();
        for provider in &self.providers {
            match provider.context(&turn).await {
                Ok(Some(text)) if !text.is_empty() => parts.push(text),
                Ok(_) => {}
                Err(err) => {
                    warn!(thread_id = %self.thread, error = %err, "A context provider failed; going on without it.")
                }
            }
        }
        if parts.is_empty() {
            return prompt.to_owned();
        }
        parts.push(prompt.to_owned());
        parts.join("\n\n")
    }
}
