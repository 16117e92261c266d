//! The one path every turn takes, whatever started it (the HTTP API, `/mcp`, delegation, a
//! schedule, a re-drive, the CLI itself):
//!
//! store its images and documents as files ([`crate::files`]) → persist the user message
//! (`pending`, its media as file references) → plan its turn ([`plan`]) → wait for the thread's
//! turn (FIFO, one turn at a time per thread, threads in parallel) → check out the thread's
//! process → take a place under the concurrency limit → add context → the references' bytes
//! back → run the turn → persist the reply and the CLI session id → emit events.
//!
//! - [`plan`]: `TurnPlan`, a turn as a value, and its `Source`.
//! - [`turn`]: `Pipeline::run`, the one runner, stage by stage; [`drive`]: the CLI's stream;
//!   [`conclude`]: the pure end of a turn (stored ending, the process's fate, the answer);
//!   `end`: `TurnEnder`, which ends a run once; `spans`: the turn's trace; `tally`: what
//!   a turn showed.
//! - [`runtime`]: each thread's runtime state under one lock (its line, client ids, the acting
//!   caller, the wait for its process, the unrecorded end); [`line`]: stopping one message.
//! - [`idempotency`]: a repeated `clientMessageId` (answer with the first run, retry an
//!   interrupted one, refuse other content).
//! - [`context`]: the context providers, once the session start is known.
//! - [`cli_turn`], [`redrive`]: the first stage of a CLI-started and of a re-driven turn.
//! - [`threads`]: a thread as a whole: created (its profile's rules, its workspace, a spare),
//!   forked, archived, its budget, its diff.
//!
//! Invariants: the user's message is committed before the CLI sees it; a `clientMessageId` that
//! was seen before never runs a second turn, unless its first run was interrupted; every turn
//! ends in `done`, `error` or `interrupted`, with exactly one `turn_finished` or `turn_failed`.
//! Delegation is the pipeline calling itself: [`Pipeline`] implements [`Delegate`]; the child's
//! turn is bound by the timeout the caller passes (`[plugins.delegation] timeout`).
//!
//! Forks ([`Pipeline::fork_thread`]): the store copies the parent's finished messages into a new
//! thread that keeps the parent's CLI session as `forked_session`; the launcher copies that
//! transcript into the fork's folder, and the fork's first process runs `--resume=<it>
//! --fork-session` (a fresh session with the history injected when it is gone).

mod cli_turn;
mod conclude;
mod context;
mod delegation;
mod drive;
mod end;
mod idempotency;
mod line;
mod plan;
mod redrive;
mod runtime;
mod spans;
mod tally;
mod threads;
mod turn;
mod walls;

pub use crate::throttle::ThrottleSettings;
pub use threads::Archived;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, Instrument};

use plugin_contract::{CliSessionId, ContextProvider, ThreadId, ToolContext, UserContent};

use crate::api::events::{MessageReceived, ThreadEvent};
use crate::approvals::Approvals;
use crate::budget::{BudgetExceeded, Budgets};
use crate::caller::Caller;
use crate::events::EventBus;
use crate::files::{FileError, Files};
use crate::launch::UnknownProfile;
use crate::mcp::McpAdapter;
use crate::metrics::{ThrottleMetrics, TurnMetrics};
use crate::pool::Pool;
use crate::store::{Fence, MessageId, MessageRow, MessageStatus, Store, StoreError};
use crate::throttle::Throttle;
use crate::turn_error::TurnError;
use crate::workspace::{WorkspaceError, Workspaces};
use idempotency::Admitted;
pub use line::Stopped;
use plan::{InLine, Source};
use runtime::Runtime;
use threads::{check_overridable, validate_names};

/// A message to process.
#[derive(Clone, Debug)]
pub struct NewMessage {
    pub thread_id: ThreadId,
    /// Its text, images and documents; the pipeline stores the images and documents and keeps
    /// references to them ([`crate::files`]).
    pub content: UserContent,
    pub client_message_id: Option<String>,
    pub model: Option<String>,
    /// The permission mode of this turn (`plan`, say), switched in place on the warm process;
    /// `None`: the profile's own. Never wider than the profile's.
    pub permission_mode: Option<String>,
    /// The external MCP servers of this turn, by name: a subset of the profile's, the others
    /// switched off in place on the warm process; `None`: all of the profile's.
    pub mcp_servers: Option<Vec<String>>,
    /// Bound on the turn; `None` = the daemon's default.
    pub timeout: Option<Duration>,
    /// The lease this node took on the thread when clustering is on: the turn's writes carry it
    /// and are refused (`LeaseLost`) once a peer took the thread over. `None`: clustering is off.
    pub fence: Option<Fence>,
    /// No person attends the turn (a schedule's run): a tool permission its profile's rules
    /// leave to a person is denied instead of waiting.
    pub unattended: bool,
    /// Who sent it: stored on the user message; a child thread it delegates to acts for it too.
    pub caller: Caller,
    /// The W3C `traceparent` the request carried (or the parent turn's tool call, for a
    /// delegated child): the turn's trace is its child ([`crate::traces`]).
    pub traceparent: Option<String>,
}

/// The reply to a message (`api::Reply` is what clients see of it).
#[derive(Clone, Debug)]
pub struct TurnReply {
    pub message: MessageRow,
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
        error: TurnError,
    },
    /// A request to the thread's process (an interrupt) failed.
    #[error("{0}")]
    Process(TurnError),
    /// A retried message whose first run failed.
    #[error("message {message_id} ended as {status:?}: {error}")]
    PreviousFailure {
        message_id: MessageId,
        status: MessageStatus,
        error: String,
    },
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// A budget is spent: the message is stored `refused` and nothing reached the CLI.
    #[error("{exceeded}")]
    BudgetExceeded {
        message_id: MessageId,
        exceeded: BudgetExceeded,
    },
    #[error(transparent)]
    Store(StoreError),
    /// An image or document of the message was refused (nothing of it was stored).
    #[error(transparent)]
    File(#[from] FileError),
    /// A workspace refused at creation, or one to diff that is not there.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The thread is archived: it takes no more messages. The API answers 409.
    #[error("thread {0} is archived: it takes no more messages")]
    Archived(ThreadId),
    /// The thread's profile is gone from the config: the API answers 409.
    #[error(transparent)]
    Profile(#[from] UnknownProfile),
}

impl From<StoreError> for PipelineError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::ThreadNotFound(id) => PipelineError::ThreadNotFound(id),
            other => PipelineError::Store(other),
        }
    }
}

/// What the pipeline's turns are bound by.
#[derive(Clone, Debug)]
pub struct PipelineSettings {
    pub max_message_chars: usize,
    pub queue_limit: usize,
    /// A turn's total bound when its message sets none. Its other limits are its profile's
    /// (`launch::TurnLimits`).
    pub turn_timeout: Duration,
    /// The adaptive limit on turns at once (`[rate_limit]`).
    pub throttle: ThrottleSettings,
}

/// The parts the pipeline uses, and nothing else.
pub struct PipelineParts {
    pub store: Store,
    pub pool: Pool,
    pub mcp: Arc<McpAdapter>,
    pub events: EventBus,
    pub approvals: Approvals,
    pub context: Vec<Arc<dyn ContextProvider>>,
    pub settings: PipelineSettings,
    pub budgets: Budgets,
    pub workspaces: Workspaces,
    pub files: Files,
    pub traces: crate::traces::Traces,
}

/// The pipeline. Cheap to clone: clones share one.
#[derive(Clone)]
pub struct Pipeline {
    inner: Arc<Inner>,
}

struct Inner {
    /// What it uses, as it was built with.
    parts: PipelineParts,
    /// API keys and their limits on this node: their turns at once, their daily budgets.
    keys: Arc<crate::keys::Keys>,
    /// Each thread's runtime state on this node, under one lock: its line, its running turn.
    runtime: Arc<Runtime>,
    /// Turns at once, across threads: a turn holds a permit from its checkout to its end.
    throttle: Throttle,
    throttle_metrics: ThrottleMetrics,
    turns: TurnMetrics,
    /// Every turn runs in a tracked task, so shutdown can wait for them.
    tasks: TaskTracker,
    /// Cancelled when shutdown begins: no turn starts after it.
    stopping: CancellationToken,
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

impl Pipeline {
    pub fn new(parts: PipelineParts) -> Pipeline {
        let tasks = TaskTracker::new();
        let throttle_metrics = ThrottleMetrics::default();
        let throttle = Throttle::new(&parts.settings.throttle, throttle_metrics.clone());
        let keys = Arc::new(crate::keys::Keys::new(parts.store.clone()));
        Pipeline {
            inner: Arc::new(Inner {
                parts,
                keys,
                runtime: Arc::new(Runtime::new(tasks.clone())),
                throttle,
                throttle_metrics,
                turns: TurnMetrics::default(),
                tasks,
                stopping: CancellationToken::new(),
            }),
        }
    }

    /// API keys and their limits on this node (the HTTP API authenticates with it).
    pub fn keys(&self) -> &Arc<crate::keys::Keys> {
        &self.inner.keys
    }

    /// The images and documents of messages (the API uploads and serves them through it).
    pub fn files(&self) -> &Files {
        &self.inner.parts.files
    }

    /// The event bus the pipeline writes to.
    pub fn events(&self) -> &EventBus {
        &self.inner.parts.events
    }

    /// The calls to tools the client runs that wait for its answer (the Managed Agents API
    /// answers them through it).
    pub fn client_calls(&self) -> &crate::mcp::ClientCalls {
        self.inner.parts.mcp.client_calls()
    }

    /// The tool approvals of every turn (the API answers pending ones through it).
    pub fn approvals(&self) -> &Approvals {
        &self.inner.parts.approvals
    }

    /// Turn latency and outcomes, registered in `/metrics`.
    pub fn metrics(&self) -> &TurnMetrics {
        &self.inner.turns
    }

    /// The concurrency limit and the API's push-back, registered in `/metrics`.
    pub fn throttle_metrics(&self) -> &ThrottleMetrics {
        &self.inner.throttle_metrics
    }

    /// The limit on turns at once (the model gateway reports the upstream's push-back to it).
    pub fn throttle(&self) -> &Throttle {
        &self.inner.throttle
    }

    /// The turns' traces (the model gateway adds its requests' spans).
    pub fn traces(&self) -> &crate::traces::Traces {
        &self.inner.parts.traces
    }

    /// The budgets and the running turns' spending (the model gateway meters into them).
    pub fn budgets(&self) -> &Budgets {
        &self.inner.parts.budgets
    }

    pub fn is_shutting_down(&self) -> bool {
        self.inner.stopping.is_cancelled()
    }

    /// Cancelled when shutdown begins.
    pub fn stopping(&self) -> &CancellationToken {
        &self.inner.stopping
    }

    /// The thread's events after `after`, stored then live (`EventBus::follow`).
    pub async fn follow(&self, thread: &ThreadId, after: i64) -> crate::events::Follow {
        self.inner.parts.events.follow(thread, after).await
    }

    /// The thread's stored events after `after`, then the end (`EventBus::stored`).
    pub fn stored_events(&self, thread: &ThreadId, after: i64) -> crate::events::Follow {
        self.inner.parts.events.stored(thread, after)
    }

    /// The thread's events from now on (`EventBus::follow_from_now`).
    pub async fn follow_from_now(
        &self,
        thread: &ThreadId,
    ) -> Result<crate::events::Follow, crate::store::StoreError> {
        self.inner.parts.events.follow_from_now(thread).await
    }

    /// Processes one message. The turn runs in a task of its own, so a client that goes away
    /// does not cancel it half-way; the returned future only waits for it.
    pub async fn handle_message(&self, msg: NewMessage) -> Result<TurnReply, PipelineError> {
        self.accept_message(msg).await?.finish().await
    }

    /// Stores the message and starts its turn in the background; returns once the message is
    /// safe.
    pub async fn accept_message(&self, msg: NewMessage) -> Result<Accepted, PipelineError> {
        self.accept(msg, Nesting::TopLevel).await
    }

    /// [`Self::accept_message`] for a top-level turn or one nested in a tool call.
    async fn accept(
        &self,
        mut msg: NewMessage,
        nesting: Nesting,
    ) -> Result<Accepted, PipelineError> {
        if self.is_shutting_down() {
            return Err(PipelineError::ShuttingDown);
        }
        let thread = self.admissible(&mut msg).await?;
        let limit = self.inner.parts.settings.queue_limit;
        let ticket = (self.inner.runtime)
            .enter(&thread.id, limit)
            .ok_or_else(|| PipelineError::QueueFull {
                thread: thread.id.clone(),
                limit,
            })?;
        let (admitted, ticket) = idempotency::admit(&self.inner.parts.store, &msg, ticket).await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let span = tracing::info_span!("message", thread_id = %thread.id, message_id = %admitted.message().id);
        let message_id = admitted.message().id.clone();
        let duplicate = matches!(admitted, Admitted::Wait(_));
        let thread_id = thread.id.clone();
        match admitted {
            Admitted::Wait(first) => {
                drop(ticket);
                info!(thread_id = %thread.id, message_id = %first.id, "Repeated clientMessageId; answering with the first run.");
                let pipeline = self.clone();
                self.inner.tasks.spawn(
                    async move {
                        let parts = &pipeline.inner.parts;
                        let first =
                            idempotency::wait_for_outcome(&parts.store, &parts.events, &first);
                        let _ = tx.send(first.await);
                    }
                    .instrument(span),
                );
            }
            Admitted::Run(message) => {
                let plan = match self.plan_checked(thread, message, msg).await {
                    Ok(plan) => plan,
                    Err(err) => {
                        drop(ticket);
                        return Err(err);
                    }
                };
                let source = Source::Message(InLine { ticket, nesting });
                let pipeline = self.clone();
                self.inner.tasks.spawn(
                    async move {
                        let _ = tx.send(pipeline.run(plan, source).await);
                    }
                    .instrument(span),
                );
            }
        }
        Ok(Accepted {
            message_id,
            thread_id,
            duplicate,
            outcome: rx,
        })
    }

    /// The thread `msg` goes to, when it may: its content and names valid, the thread there and
    /// not archived, what it asks of the thread's profile allowed. Its images and documents are
    /// stored as files.
    async fn admissible(
        &self,
        msg: &mut NewMessage,
    ) -> Result<crate::store::ThreadRow, PipelineError> {
        let parts = &self.inner.parts;
        validate_content(&msg.content, parts.settings.max_message_chars)?;
        validate_names(None, msg.model.as_deref())?;
        let thread = parts.store.require_thread(&msg.thread_id).await?;
        if thread.archived_at.is_some() {
            return Err(PipelineError::Archived(thread.id));
        }
        msg.content = parts.files.accept(&msg.caller, msg.content.clone()).await?;
        if msg.model.is_none() && msg.permission_mode.is_none() && msg.mcp_servers.is_none() {
            return Ok(thread);
        }
        let profile = &*parts.pool.profile(thread.profile.as_deref())?;
        if msg.model.is_some() {
            check_overridable(profile, "model")?;
        }
        if let Some(mode) = &msg.permission_mode {
            check_overridable(profile, "permissionMode")?;
            if let Some(why) = profile.refuses_mode(mode) {
                return Err(PipelineError::InvalidInput(format!(
                    "permissionMode: {why}"
                )));
            }
        }
        if let Some(names) = &msg.mcp_servers {
            check_overridable(profile, "mcpServers")?;
            msg.mcp_servers = profile
                .mcp_selection(names)
                .map_err(|why| PipelineError::InvalidInput(format!("mcpServers: {why}")))?;
        }
        Ok(thread)
    }

    /// The plan of stored message `message`'s turn, announced (`message_received`) and checked
    /// against its budgets: refused here, the caller hears 402 at once (the turn checks again
    /// when it comes up, for what the turns ahead of it spend).
    async fn plan_checked(
        &self,
        thread: crate::store::ThreadRow,
        message: MessageRow,
        msg: NewMessage,
    ) -> Result<plan::TurnPlan, PipelineError> {
        let parts = &self.inner.parts;
        parts.events.emit(
            &thread.id,
            Some(&message.id),
            ThreadEvent::MessageReceived(MessageReceived {
                message_id: message.id.clone(),
                content: message.content.clone(),
                blocks: message.content_blocks(),
                client_message_id: message.client_message_id.clone(),
                origin: message.origin,
            }),
        );
        let charged = self.charge(&thread, &msg.caller).await?;
        if let Err(exceeded) = parts.budgets.check(&parts.store, &charged.1).await? {
            return Err(self.refuse(&message, exceeded).await);
        }
        Ok(self.plan(thread, message, msg, charged))
    }

    /// Waits until user message `id` (stored by this node or, with clustering, a peer) has
    /// finished, and answers with its outcome, as a repeat of its `clientMessageId` would.
    pub async fn outcome(&self, id: &MessageId) -> Result<TurnReply, PipelineError> {
        let first = self
            .inner
            .parts
            .store
            .get_message(id)
            .await?
            .ok_or_else(|| StoreError::MessageNotFound(id.clone()))?;
        idempotency::wait_for_outcome(&self.inner.parts.store, &self.inner.parts.events, &first)
            .await
    }

    /// Starts the thread's process ahead of its first message (see [`Pool::prewarm`]).
    pub async fn prewarm(
        &self,
        thread: &ThreadId,
        model: Option<String>,
    ) -> Result<(), PipelineError> {
        threads::validate_names(None, model.as_deref())?;
        let thread = self.inner.parts.store.require_thread(thread).await?;
        let spec = self
            .inner
            .parts
            .pool
            .spec(&thread, model.or(thread.model.clone()))?;
        let pool = self.inner.parts.pool.clone();
        let span = tracing::info_span!("prewarm", thread_id = %thread.id);
        self.inner.tasks.spawn(
            async move {
                if let Err(err) = pool.prewarm(&spec).await {
                    tracing::warn!(error = %err, "Prewarm failed.");
                }
            }
            .instrument(span),
        );
        Ok(())
    }

    /// Asks the thread's running turn to stop; false when none is running. A turn still waiting
    /// for its process (a cold start, a full pool) stops there; one already on its process gets
    /// the CLI's interrupt.
    pub async fn interrupt(&self, thread: &ThreadId) -> Result<bool, PipelineError> {
        self.inner.parts.store.require_thread(thread).await?;
        // Nobody decides for a turn that is stopping: what waits for a person is denied.
        self.inner.parts.approvals.deny_waiting(Some(thread)).await;
        if self.inner.runtime.cancel_start(thread) {
            return Ok(true);
        }
        self.inner
            .parts
            .pool
            .interrupt(thread)
            .await
            .map_err(PipelineError::Process)
    }

    /// What a tool gets when it runs for `thread` (none for a call from the HTTP API without one).
    pub fn tool_context(&self, thread: Option<ThreadId>) -> ToolContext {
        ToolContext {
            thread_id: thread,
            store: Arc::new(self.inner.parts.store.clone()),
            delegate: Arc::new(self.clone()),
        }
    }

    /// The context of a thread's tool call whose span is `traceparent`: a child it delegates to
    /// is traced under the call.
    fn traced_tool_context(&self, thread: ThreadId, traceparent: Option<String>) -> ToolContext {
        let delegate = delegation::TracedDelegate {
            pipeline: self.clone(),
            traceparent,
        };
        ToolContext {
            delegate: Arc::new(delegate),
            ..self.tool_context(Some(thread))
        }
    }

    /// Begins shutdown: no queued turn starts any more; waits up to `grace` for the running ones.
    /// Returns false when the grace period ran out.
    pub async fn stop(&self, grace: Duration) -> bool {
        self.inner.stopping.cancel();
        self.inner.tasks.close();
        // A turn waiting for a person would hold the whole grace period.
        self.inner.parts.approvals.deny_waiting(None).await;
        tokio::time::timeout(grace, self.inner.tasks.wait())
            .await
            .is_ok()
    }

    /// Sends the traces still buffered and stops their exporter (at shutdown).
    pub async fn send_traces(&self) {
        let traces = self.inner.parts.traces.clone();
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }

    /// Waits (up to `bound`) for the turns cut short by killed processes to record their end.
    pub async fn wait_turns(&self, bound: Duration) -> bool {
        tokio::time::timeout(bound, self.inner.tasks.wait())
            .await
            .is_ok()
    }
}

/// Whether a turn runs inside another turn's tool call (a delegation's child). Such a turn takes
/// its place under the concurrency limit without waiting in line: its parent holds one and waits
/// for it (see `throttle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nesting {
    TopLevel,
    InToolCall,
}

fn validate_content(content: &UserContent, max_chars: usize) -> Result<(), PipelineError> {
    if content.is_blank() {
        return Err(PipelineError::InvalidInput(
            "content must not be empty".into(),
        ));
    }
    let content = content.text();
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
