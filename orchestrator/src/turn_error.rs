//! [`TurnError`]: why a turn got no reply. Each variant maps to one HTTP status in
//! `http::error`.

use std::time::Duration;

use claude_cli::CliError;

#[derive(Clone, Debug, thiserror::Error)]
pub enum TurnError {
    /// The process could not be started, did not become ready, died mid-turn or refused a
    /// request: the API answers 503 (not started, not ready) or 502.
    #[error(transparent)]
    Process(#[from] CliError),
    /// No output from the CLI for too long. The API answers 504.
    #[error("the claude CLI sent nothing for {0:?}; the turn was abandoned")]
    IdleTimeout(Duration),
    /// The whole turn took too long. The API answers 504.
    #[error("the turn did not finish within {0:?}")]
    TurnTimeout(Duration),
    /// The CLI ended the turn with an error (API failure, max turns, …). The text is the CLI's.
    /// The API answers 502.
    #[error("the claude CLI reported an error: {0}")]
    Cli(String),
    /// The model asked for more tool calls in one turn than `turn.max_tool_calls` allows; the
    /// turn was stopped. The API answers 502.
    #[error(
        "the turn was stopped after more than {0} tool calls (turn.max_tool_calls, or the \
         profile's max_tool_calls)"
    )]
    ToolCallLimit(u32),
    /// The thread has an `outputSchema` and the turn ended without a value matching it (the CLI
    /// gave up: `error_max_structured_output_retries`; no `StructuredOutput` call; a value that
    /// does not match). The API answers 502.
    #[error("no valid structured output: {0}")]
    StructuredOutput(String),
    /// The turn was interrupted on request. The API answers 409.
    #[error("the turn was interrupted")]
    Interrupted,
    /// The daemon is shutting down. The API answers 503.
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// The thread's workspace is not on this node and cannot be made again here; the turn was
    /// not run (never in another folder). The API answers 409.
    #[error("{0}")]
    WorkspaceUnavailable(String),
    /// The thread's profile is no longer configured; the turn was not run (never with another
    /// profile's powers). The API answers 409.
    #[error("{0}")]
    ProfileUnavailable(String),
}
