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
    /// What becomes of a thread's worktree when the thread is archived: `keep`,
    /// `remove-if-clean` (the default: removed when it holds no uncommitted or untracked work
    /// and no ignored file but those copied in unchanged, its branch deleted when it has no
    /// commit of its own), or `remove` (worktree and branch, whatever they hold). A `path`
    /// workspace is the operator's and is never removed.
    pub on_archive: OnArchive,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnArchive {
    Keep,
    #[default]
    RemoveIfClean,
    Remove,
}

/// What a caller asks for in `POST /api/threads` (`workspace`): `{"path": …}` or
/// `{"repo": …, "worktree": true, "baseRef"?: …, "branch"?: …}`.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspaceRequest {
    /// Work in this folder as it is (absolute).
    pub path: Option<String>,
    /// Make a worktree of this repository (absolute) for the thread; needs `"worktree": true`.
    pub repo: Option<String>,
    pub worktree: Option<bool>,
    /// What the worktree starts from (a branch, tag or commit); default `HEAD`.
    pub base_ref: Option<String>,
    /// The worktree's new branch; default `harness/<thread id>`.
    pub branch: Option<String>,
}
