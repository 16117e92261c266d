//! The `claude` CLI as a library.
//!
//! - [`protocol`]: the stream-json protocol: the command line, what we write to stdin, and the
//!   typed decoding of what the CLI writes to stdout. No IO, so every case is a string test.
//! - [`CliProcess`]: one child process: spawn and `initialize`, one turn at a time as a stream of
//!   [`TurnEvent`]s, our control requests (interrupt), kill and reap.
//!
//! Files: `protocol.rs` (typed stdout; `protocol/input.rs`: argv and stdin lines;
//! `protocol/content.rs`: [`UserContent`]; `protocol/system.rs`: `system` lines, each subtype
//! mapped or ignored with its reason), `process.rs` (feature `process`: turns as streams,
//! [`HostRequest`]s, CLI-started turns, transcript frames, reap; `process/start.rs`: the spawn;
//! `process/reader.rs`: stdout).
//!
//! With `--session-mirror` ([`SpawnOptions::session_mirror`]) the CLI copies each transcript write
//! to stdout; those frames arrive as [`TranscriptMirror`]s on a channel of their own
//! ([`Started::mirror`]), turn or no turn, until stdout's EOF.
//!
//! The CLI's own control requests (an MCP message for an in-process server, later a permission
//! request) arrive as [`HostRequest`]s on a channel, each carrying its reply handle: whoever owns
//! the process decides. While one is unanswered the process counts as waiting on the host
//! ([`CliProcess::waiting_on_host`]), so silence then is ours, not the CLI's.
//!
//! Without the default `process` feature only [`protocol`] is built (no tokio, no IO): that is
//! what `plugin-contract` uses, for [`UserContent`].
//!
//! **Boundary:** nothing here knows threads, MCP method names or storage.
//! Reference: `shared/protocol/claude-cli-protocol.md` (verified against claude 2.1.330; what was
//! re-verified on 2.1.332, the pin, is in `docs/cli-upgrades.md`).

#[cfg(feature = "process")]
mod process;
pub mod protocol;

#[cfg(feature = "process")]
pub use process::{
    CliProcess, CliTurn, CliTurns, Confine, HostRequest, HostRequests, Launch, MirrorFrames,
    SpawnError, Started, Step, StopReport, TurnEvents,
};
pub use protocol::{
    ApiRetry, ApiUsage, AssistantText, AssistantThinking, ContentBlock, ExternalMcpServers, Hooks,
    MediaSource, MemoryRecall, MirrorError, ModelCall, ModelRefusalFallback, RateLimit,
    RecalledMemory, SdkMcpServer, SkillShellCommand, SpawnOptions, StartupClass, StartupFailure,
    TextDelta, ToolCallFinished, ToolCallStarted, TranscriptMirror, TurnEvent, TurnResult,
    TurnUsage, UserContent,
};

use std::time::Duration;

/// Why a process or one of its turns failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CliError {
    /// The binary could not be started (missing, not executable).
    #[error("could not start the claude CLI ({bin}): {reason}")]
    Spawn { bin: String, reason: String },
    /// The process exited or closed stdout before it answered.
    #[error("the claude CLI exited mid-turn ({status}); stderr: {stderr_tail}")]
    ProcessDied { status: String, stderr_tail: String },
    /// The CLI did not answer `initialize` in time.
    #[error("the claude CLI did not become ready within {0:?}")]
    NotReady(Duration),
    /// The CLI refused one of our control requests.
    #[error("the claude CLI refused the request: {0}")]
    Refused(String),
    /// The turn's `result` answers another message than the one the turn wrote (a turn the CLI
    /// started by itself ended first): its output is not this turn's reply, and the process's
    /// stream no longer pairs results with messages.
    #[error("the claude CLI answered another message than this turn's (result for {got:?}); the process is replaced")]
    Unpaired { got: Vec<String> },
    /// The CLI refused to start and said why ([`StartupFailure`]); its class says whether a
    /// retry can help.
    #[error("the claude CLI could not start: {0}")]
    StartupFailed(StartupFailure),
}
