//! Workspaces: a thread that works in a folder of the caller's choosing (`{"path"}`), or in a git
//! worktree made for it (`{"repo", "worktree": true}`), instead of a folder of its own.
//!
//! [`Workspaces::prepare`] turns a caller's [`WorkspaceRequest`] into the stored
//! [`Workspace`] once, at creation; the launcher reads the stored value into the thread's
//! `ProcessSpec`. Rules:
//! - Every path lies under `workspaces.roots` once symlinks and `..` are resolved (a symlink
//!   that leads outside is refused, naming where it leads); no roots: workspaces are off.
//! - A worktree is `<workspaces.worktrees_dir>/<thread id>` on a new branch (default
//!   `harness/<thread id>`) from `baseRef` (default `HEAD`), resolved to a commit then: the base
//!   of the thread's diff. The files the repository ignores that its `.worktreeinclude` (or
//!   `workspaces.include`) names are copied in. Git runs with the repository's hooks off.
//! - Two threads share a working tree only when both ask for the same `path`; even then each has
//!   its own CLI project data (the launcher gives a `path` thread a config dir of its own).
//! - Before each turn, [`Workspaces::ready`] checks the folder is there: a worktree that is gone
//!   (another node, a wiped disk) is made again from its branch when the repository is here;
//!   otherwise the turn is refused (`workspace_unavailable`), never run in another folder.

use std::path::{Path, PathBuf};

use serde::Serialize;
use tracing::info;

use plugin_contract::ThreadId;

pub use crate::config::WorkspaceRequest;
use crate::config::{Config, OnArchive};
use crate::store::Workspace;

pub mod diff;
mod git;

pub use diff::{DiffSummary, FileChange};

pub use git::GitError;

/// Why a workspace was refused or is unusable.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// Bad input: the API answers 422.
    #[error("{0}")]
    Invalid(String),
    /// The branch asked for exists already: 409.
    #[error("the branch `{0}` exists already in the repository")]
    BranchExists(String),
    /// The thread's folder is not here and cannot be made again: 409.
    #[error("the thread's workspace {0} is not available on this node")]
    Unavailable(String),
    /// The thread has no workspace to diff (its own folder, or a folder outside git): 409.
    #[error("{0}")]
    NoDiff(String),
    /// Git failed where it should not: 500.
    #[error(transparent)]
    Git(#[from] GitError),
}

/// The daemon's workspace settings, with the roots resolved.
#[derive(Clone, Debug)]
pub struct Workspaces {
    roots: Vec<PathBuf>,
    worktrees_dir: PathBuf,
    include: Vec<String>,
    on_archive: OnArchive,
}

/// What archiving did to a thread's worktree (`workspaces.on_archive`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeDisposition {
    /// The worktree's folder was removed.
    pub removed: bool,
    /// Kept because it held uncommitted or untracked work (`remove-if-clean`).
    pub kept_dirty: bool,
    /// Its branch was deleted (it had no commit of its own, or `remove`).
    pub branch_deleted: bool,
}

impl Workspaces {
    /// Resolves `workspaces.roots` (each must exist) and creates the worktrees folder when
    /// workspaces are on.
    pub fn new(config: &Config) -> std::io::Result<Workspaces> {
        let mut roots = Vec::new();
        for root in &config.workspaces.roots {
            let resolved = root.canonicalize().map_err(|err| {
                std::io::Error::new(
                    err.kind(),
                    format!("workspaces.roots: {}: {err}", root.display()),
                )
            })?;
            roots.push(resolved);
        }
        let mut worktrees_dir = config.worktrees_dir();
        if !roots.is_empty() {
            crate::private_fs::create_dir(&worktrees_dir)?;
            worktrees_dir = worktrees_dir.canonicalize()?;
        }
        Ok(Workspaces {
            roots,
            worktrees_dir,
            include: config.workspaces.include.clone(),
            on_archive: config.workspaces.on_archive,
        })
    }

    /// Checks `request` and makes what it asks for (a worktree) for thread `thread`.
    pub async fn prepare(
        &self,
        thread: &ThreadId,
        request: &WorkspaceRequest,
    ) -> Result<Workspace, WorkspaceError> {
        if self.roots.is_empty() {
            return Err(invalid(
                "workspaces are off on this daemon (set [workspaces] roots in the config)",
            ));
        }
        match request {
            WorkspaceRequest {
                path: Some(path),
                repo: None,
                worktree: None | Some(false),
                base_ref: None,
                branch: None,
            } => Ok(Workspace::Path {
                path: self.resolve("path", path)?,
            }),
            WorkspaceRequest {
                path: None,
                repo: Some(repo),
                worktree: Some(true),
                base_ref,
                branch,
            } => {
                self.make_worktree(thread, repo, base_ref.as_deref(), branch.as_deref())
                    .await
            }
            WorkspaceRequest {
                path: None,
                repo: Some(_),
                worktree: None | Some(false),
                ..
            } => Err(invalid(
                "`repo` needs `\"worktree\": true`; to work in the repository itself, give it as `path`",
            )),
            WorkspaceRequest {
                path: Some(_),
                repo: Some(_),
                ..
            } => Err(invalid("give either `path` or `repo`, not both")),
            WorkspaceRequest {
                path: Some(_), ..
            } => Err(invalid(
                "`worktree`, `baseRef` and `branch` go with `repo`, not `path`",
            )),
            WorkspaceRequest { path: None, .. } => {
                Err(invalid("a workspace needs `path` or `repo`"))
            }
        }
    }

    /// `path` resolved (symlinks, `..`), an existing folder under one of the roots.
    fn resolve(&self, field: &str, path: &str) -> Result<PathBuf, WorkspaceError> {
        let given = Path::new(path);
        if !given.is_absolute() {
            return Err(invalid(format!(
                "`{field}` must be an absolute path: {path}"
            )));
        }
        let resolved = given
            .canonicalize()
            .map_err(|err| invalid(format!("`{field}` {path}: {err}")))?;
        if !resolved.is_dir() {
            return Err(invalid(format!("`{field}` {path} is not a folder")));
        }
        if !self.roots.iter().any(|root| resolved.starts_with(root)) {
            let roots: Vec<String> = self.roots.iter().map(|r| r.display().to_string()).collect();
            let leads = if resolved == given {
                String::new()
            } else {
                format!(" (it leads to {})", resolved.display())
            };
            return Err(invalid(format!(
                "`{field}` {path}{leads} is outside workspaces.roots ({})",
                roots.join(", ")
            )));
        }
        Ok(resolved)
    }

    async fn make_worktree(
        &self,
        thread: &ThreadId,
        repo: &str,
        base_ref: Option<&str>,
        branch: Option<&str>,
    ) -> Result<Workspace, WorkspaceError> {
        let repo = self.resolve("repo", repo)?;
        let top = git::run(&repo, &["rev-parse", "--show-toplevel"], &[])
            .await
            .map_err(|_| invalid(format!("`repo` {} is not a git repository", repo.display())))?;
        let repo = self.resolve("repo", top.trim())?;
        let base_ref = base_ref.unwrap_or("HEAD").to_owned();
        let branch = branch.map_or_else(|| format!("harness/{thread}"), str::to_owned);
        if base_ref.starts_with('-') || base_ref.is_empty() {
            return Err(invalid(format!("`baseRef` {base_ref:?} is not a ref")));
        }
        let commit = git::run(
            &repo,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &format!("{base_ref}^{{commit}}"),
            ],
            &[],
        )
        .await
        .map_err(|_| {
            invalid(format!(
                "`baseRef` {base_ref} names no commit in {}",
                repo.display()
            ))
        })?
        .trim()
        .to_owned();
        let well_formed = !branch.starts_with('-')
            && git::succeeds(&repo, &["check-ref-format", "--branch", &branch]).await?;
        if !well_formed {
            return Err(invalid(format!(
                "`branch` {branch:?} is not a valid branch name"
            )));
        }
        let branch_ref = format!("refs/heads/{branch}");
        if git::succeeds(&repo, &["show-ref", "--verify", "--quiet", &branch_ref]).await? {
            return Err(WorkspaceError::BranchExists(branch));
        }
        let path = crate::launch::thread_workdir(&self.worktrees_dir, thread);
        let shown = path.to_string_lossy().into_owned();
        git::run(
            &repo,
            &["worktree", "add", "--quiet", "-b", &branch, &shown, &commit],
            &[],
        )
        .await?;
        let copied = copy_included(&repo, &path, &self.include).await?;
        info!(thread_id = %thread, repo = %repo.display(), %branch, base = %commit, copied, "Worktree made.");
        Ok(Workspace::Worktree {
            repo,
            path,
            branch,
            base_ref,
            base_commit: commit,
        })
    }

    /// Undoes [`Workspaces::prepare`] for a thread that was not created after all: its worktree
    /// and branch are removed (nothing can be in them yet).
    pub async fn discard(&self, workspace: &Workspace) {
        if let Workspace::Worktree {
            repo, path, branch, ..
        } = workspace
        {
            let shown = path.to_string_lossy().into_owned();
            let removed = git::run(repo, &["worktree", "remove", "--force", &shown], &[]).await;
            let deleted = git::run(repo, &["branch", "-D", "--end-of-options", branch], &[]).await;
            if let Err(err) = removed.and(deleted) {
                tracing::warn!(error = %err, path = %shown, "Could not remove an unused worktree.");
            }
        }
    }

    /// Does to an archived thread's worktree what `workspaces.on_archive` says; `None` for a
    /// thread without one (a `path` is never touched). A worktree with uncommitted or untracked
    /// work is removed only under `remove`.
    pub async fn archive(
        &self,
        workspace: Option<&Workspace>,
    ) -> Result<Option<WorktreeDisposition>, WorkspaceError> {
        let Some(Workspace::Worktree {
            repo,
            path,
            branch,
            base_commit,
            ..
        }) = workspace
        else {
            return Ok(None);
        };
        let mut done = WorktreeDisposition {
            removed: false,
            kept_dirty: false,
            branch_deleted: false,
        };
        if self.on_archive == OnArchive::Keep || !repo.is_dir() {
            return Ok(Some(done));
        }
        let shown = path.to_string_lossy().into_owned();
        let force = self.on_archive == OnArchive::Remove;
        if path.is_dir() {
            let status = git::run(path, &["status", "--porcelain"], &[]).await?;
            if !status.trim().is_empty() && !force {
                done.kept_dirty = true;
                return Ok(Some(done));
            }
            let mut args = vec!["worktree", "remove"];
            if force {
                args.push("--force");
            }
            args.push(&shown);
            git::run(repo, &args, &[]).await?;
        } else {
            git::run(repo, &["worktree", "prune"], &[]).await?;
        }
        done.removed = true;
        let tip = git::run(
            repo,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
            &[],
        )
        .await
        .ok();
        let own_commits = tip.as_deref().map(str::trim) != Some(base_commit.as_str());
        if tip.is_some() && (force || !own_commits) {
            git::run(repo, &["branch", "-D", "--end-of-options", branch], &[]).await?;
            done.branch_deleted = true;
        }
        info!(path = %shown, %branch, ?done, "Archived thread's worktree dealt with.");
        Ok(Some(done))
    }

    /// `git worktree prune` in each repository: the records of worktrees removed by hand go.
    pub async fn prune<'a>(&self, repos: impl IntoIterator<Item = &'a Path>) {
        for repo in repos {
            if let Err(err) = git::run(repo, &["worktree", "prune"], &[]).await {
                tracing::warn!(repo = %repo.display(), error = %err, "git worktree prune failed.");
            }
        }
    }

    /// Makes sure the thread's folder is here before a turn: a worktree that is gone is made
    /// again from its branch when its repository is here.
    pub async fn ready(&self, workspace: &Workspace) -> Result<(), WorkspaceError> {
        let path = workspace.path();
        if path.is_dir() {
            // Checked again: a folder swapped for a symlink since must not lead a turn outside.
            let resolved = path.canonicalize().ok();
            let inside = |root: &PathBuf| resolved.as_ref().is_some_and(|r| r.starts_with(root));
            let own_worktree =
                matches!(workspace, Workspace::Worktree { .. }) && inside(&self.worktrees_dir);
            if own_worktree || self.roots.iter().any(inside) {
                return Ok(());
            }
            return Err(WorkspaceError::Unavailable(format!(
                "{} (it no longer lies under workspaces.roots)",
                path.display()
            )));
        }
        let unavailable = || WorkspaceError::Unavailable(path.display().to_string());
        let Workspace::Worktree { repo, branch, .. } = workspace else {
            return Err(unavailable());
        };
        if !repo.is_dir() {
            return Err(unavailable());
        }
        let shown = path.to_string_lossy().into_owned();
        // A worktree removed by hand leaves its record behind; `add` refuses until it is pruned.
        git::run(repo, &["worktree", "prune"], &[]).await?;
        git::run(repo, &["worktree", "add", "--quiet", &shown, branch], &[])
            .await
            .map_err(|_| unavailable())?;
        info!(path = %shown, %branch, "Worktree made again from its branch.");
        Ok(())
    }

    /// The workspace's changes against its base: the commit a worktree started from, or the
    /// `HEAD` of a `path` that is a git work tree.
    pub async fn base_of(
        &self,
        workspace: Option<&Workspace>,
    ) -> Result<(PathBuf, String), WorkspaceError> {
        match workspace {
            Some(Workspace::Worktree {
                path, base_commit, ..
            }) => Ok((path.clone(), base_commit.clone())),
            Some(Workspace::Path { path }) => {
                let head = git::run(path, &["rev-parse", "--verify", "--quiet", "HEAD"], &[])
                    .await
                    .map_err(|_| {
                        WorkspaceError::NoDiff(format!(
                            "the thread's folder {} is not a git work tree with a commit",
                            path.display()
                        ))
                    })?;
                Ok((path.clone(), head.trim().to_owned()))
            }
            None => Err(WorkspaceError::NoDiff(
                "the thread has no workspace: it works in a folder of its own".into(),
            )),
        }
    }
}

fn invalid(message: impl Into<String>) -> WorkspaceError {
    WorkspaceError::Invalid(message.into())
}

/// Copies into the new worktree `to` the files of `repo` that git ignores and that its
/// `.worktreeinclude` or `patterns` name (`.gitignore` syntax), each to the same relative path.
/// Symlinks are not copied. Returns how many files were.
async fn copy_included(repo: &Path, to: &Path, patterns: &[String]) -> Result<usize, GitError> {
    let listed_in_repo = repo.join(".worktreeinclude").is_file();
    if !listed_in_repo && patterns.is_empty() {
        return Ok(0);
    }
    let mut args: Vec<String> = ["ls-files", "-z", "--others", "--ignored"]
        .map(str::to_owned)
        .to_vec();
    if listed_in_repo {
        args.push("--exclude-from=.worktreeinclude".into());
    }
    args.extend(patterns.iter().map(|p| format!("--exclude={p}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let listed = git::run(repo, &args, &[]).await?;
    let mut copied = 0;
    for file in listed.split('\0').filter(|f| !f.is_empty()) {
        let relative = Path::new(file);
        if relative.is_absolute() || relative.components().any(|c| c.as_os_str() == "..") {
            continue;
        }
        let source = repo.join(relative);
        let is_file = std::fs::symlink_metadata(&source).is_ok_and(|m| m.file_type().is_file());
        if !is_file {
            continue;
        }
        let target = to.join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(GitError::Io)?;
        }
        std::fs::copy(&source, &target).map_err(GitError::Io)?;
        copied += 1;
    }
    Ok(copied)
}

#[cfg(test)]
mod tests;
