//! `[workspaces]`: threads that work in a folder of the operator's choosing, or in a git worktree
//! made for them (see `crate::workspace`).

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspacesConfig {
    /// The folders a workspace (a `path`, a `repo`) may lie under, after symlinks are resolved.
    /// Empty: workspaces are off, and a thread asking for one is refused.
    pub roots: Vec<PathBuf>,
    /// Where each thread's worktree is made (`<dir>/<thread id>`); default
    /// `<data_dir>/worktrees`.
    pub worktrees_dir: Option<PathBuf>,
    /// Patterns (`.gitignore` syntax) of files the repository ignores that are copied into each
    /// new worktree, besides those its own `.worktreeinclude` lists: `[".env"]`, say.
    pub include: Vec<String>,
}
