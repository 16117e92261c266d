//! How the session of a turn started, which decides whether the model already knows the
//! thread's history (see [`crate::ContextProvider`]).

use serde::Serialize;

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
