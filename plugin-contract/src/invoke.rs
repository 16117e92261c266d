//! Running one turn of a thread on the `claude` CLI: the [`Invoker`] trait, its options, its
//! outcome and the events it streams while the turn runs.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::{CliSessionId, ThreadId};

/// How the process that runs a turn came to be. The context hook uses it to decide whether the
/// model already knows the thread's history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SessionStart {
    /// A live process that already served this thread: the CLI holds the history in memory.
    Warm,
    /// A new process started with `--resume`: the CLI loaded the history from its transcript.
    Resumed,
    /// A new process with an empty CLI session. `resume_failed` is true when the thread had a
    /// session the CLI could no longer load, so history must be supplied by us.
    Fresh { resume_failed: bool },
}

impl SessionStart {
    /// True when the model will not see the thread's earlier messages unless we put them in the
    /// prompt.
    pub fn needs_history(self) -> bool {
        matches!(self, SessionStart::Fresh { .. })
    }

    /// True when the turn runs on a process that was already running before the turn.
    pub fn is_warm(self) -> bool {
        matches!(self, SessionStart::Warm)
    }
}

/// Something that happened during a turn, in the order the CLI reported it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum StreamEvent {
    /// The process for the turn is ready and the prompt was written to it.
    TurnStarted {
        start: SessionStart,
        pid: Option<u32>,
    },
    /// A piece of the assistant's text, as the API streams it.
    TextDelta { text: String },
    /// A complete assistant text block.
    AssistantText { text: String },
    /// The model called a tool.
    ToolCallStarted {
        tool_use_id: String,
        name: String,
        input: serde_json::Value,
    },
    /// A tool result went back to the model.
    ToolCallFinished {
        tool_use_id: String,
        is_error: bool,
        content: serde_json::Value,
    },
    /// The CLI is retrying a failed Messages API request.
    ApiRetry {
        attempt: u64,
        max_retries: u64,
        retry_delay_ms: u64,
        error: String,
        status: Option<u64>,
    },
}

/// Receives [`StreamEvent`]s while a turn runs. Called from the invoker's reader; must not block.
pub type EventSink = Arc<dyn Fn(StreamEvent) + Send + Sync>;

/// Builds the prompt for a turn once the invoker knows how the process started. This is where
/// context (earlier messages for a fresh session) is added; see [`crate::ContextProvider`].
#[async_trait::async_trait]
pub trait TurnPreparer: Send + Sync {
    async fn prepare(&self, start: SessionStart, prompt: &str) -> String;
}

/// Options for one [`Invoker::invoke`] call.
#[derive(Clone)]
pub struct InvokeOptions {
    /// The pool key: the process for this thread is reused across turns.
    pub thread_id: ThreadId,
    /// The CLI session to resume when no process is warm for the thread.
    pub session_id: Option<CliSessionId>,
    /// The model; `None` lets the daemon's default apply. A change replaces the thread's process.
    pub model: Option<String>,
    /// Bound on the whole turn; `None` means the daemon's default.
    pub timeout: Option<Duration>,
    /// Where turn events go.
    pub on_event: Option<EventSink>,
    /// Adds context to the prompt once the session start is known.
    pub preparer: Option<Arc<dyn TurnPreparer>>,
}

impl InvokeOptions {
    pub fn new(thread_id: ThreadId) -> Self {
        Self {
            thread_id,
            session_id: None,
            model: None,
            timeout: None,
            on_event: None,
            preparer: None,
        }
    }
}

impl fmt::Debug for InvokeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InvokeOptions")
            .field("thread_id", &self.thread_id)
            .field("session_id", &self.session_id)
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What a finished turn produced.
#[derive(Clone, Debug, Serialize)]
pub struct InvokeOutcome {
    /// The assistant's final text (the `result` line's `result`).
    pub text: String,
    /// The CLI session id the CLI reported for this turn; store it for `--resume`.
    pub session_id: Option<CliSessionId>,
    /// How the process for the turn started.
    pub start: SessionStart,
    /// The CLI process's pid.
    pub pid: Option<u32>,
    /// API round trips in the turn.
    pub num_turns: u64,
    /// Wall time of the turn, including any spawn.
    pub duration: Duration,
}

/// Why a turn did not produce a reply. Each variant says what the user sees.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InvokeError {
    /// The CLI binary could not be started (missing, not executable). The API answers 503.
    #[error("could not start the claude CLI ({bin}): {reason}")]
    Spawn { bin: String, reason: String },
    /// The process exited or closed stdout before the turn ended. The API answers 502.
    #[error("the claude CLI exited mid-turn ({status}); stderr: {stderr_tail}")]
    ProcessDied { status: String, stderr_tail: String },
    /// The CLI did not become ready in time.
    #[error("the claude CLI did not become ready within {0:?}")]
    NotReady(Duration),
    /// No output from the CLI for too long.
    #[error("the claude CLI sent nothing for {0:?}; the turn was abandoned")]
    IdleTimeout(Duration),
    /// The whole turn took too long.
    #[error("the turn did not finish within {0:?}")]
    TurnTimeout(Duration),
    /// The CLI ended the turn with an error (API failure, max turns, …). The text is the CLI's.
    #[error("the claude CLI reported an error: {0}")]
    Cli(String),
    /// The turn was interrupted on request.
    #[error("the turn was interrupted")]
    Interrupted,
    /// The model asked for more tool calls in one turn than `turn.max_tool_calls` allows; the
    /// turn was stopped. The API answers 502.
    #[error("the turn was stopped after more than {0} tool calls (turn.max_tool_calls)")]
    ToolCallLimit(u32),
    /// The daemon is shutting down.
    #[error("the daemon is shutting down")]
    ShuttingDown,
}

/// Runs turns on the `claude` CLI. The daemon's implementation keeps a warm process per thread.
#[async_trait::async_trait]
pub trait Invoker: Send + Sync {
    /// Runs one turn for `options.thread_id`, reusing the thread's warm process when there is one.
    async fn invoke(
        &self,
        prompt: &str,
        options: InvokeOptions,
    ) -> Result<InvokeOutcome, InvokeError>;

    /// Starts the process for `thread_id` and waits until it is ready, without sending a turn.
    async fn prewarm(
        &self,
        thread_id: &ThreadId,
        session_id: Option<CliSessionId>,
        model: Option<String>,
    ) -> Result<(), InvokeError>;
}
