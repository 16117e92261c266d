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
use std::time::SystemTime;

use tracing::info;

use plugin_contract::ThreadId;

pub use crate::api::WorktreeDisposition;
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
    /// Where threads without a workspace work: a goal's grader works in its thread's folder
    /// (`crate::goals`), which lies here rather than under the roots.
    threads_dir: PathBuf,
    include: Vec<String>,
    on_archive: OnArchive,
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
            threads_dir: config.claude_workdir(),
            include: config.workspaces.include.clone(),
            on_archive: config.workspaces.on_archive,
        })
    }

    /// Checks `request` and makes what it asks for (a worktree) for thread `thread`: the tests'
    /// one call for [`Workspaces::plan`] and the making (thread creation plans first, to
    /// look for a parked worktree).
    #[cfg(test)]
    pub async fn prepare(
        &self,
        thread: &ThreadId,
        request: &WorkspaceRequest,
    ) -> Result<Workspace, WorkspaceError> {
        match self.plan(request).await? {
            Plan::Path(path) => Ok(Workspace::Path { path }),
            Plan::Worktree(plan) => self.make_worktree(thread, &plan).await,
        }
    }

    /// Checks `request` and resolves what it names, making nothing yet.
    pub async fn plan(&self, request: &WorkspaceRequest) -> Result<Plan, WorkspaceError> {
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
            } => Ok(Plan::Path(self.resolve("path", path)?)),
            WorkspaceRequest {
                path: None,
                repo: Some(repo),
                worktree: Some(true),
                base_ref,
                branch,
            } => {
                let plan = self
                    .plan_worktree(repo, base_ref.as_deref(), branch.as_deref())
                    .await?;
                Ok(Plan::Worktree(plan))
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

    /// The repository's top folder, the base resolved to a commit, and the branch checked.
    async fn plan_worktree(
        &self,
        repo: &str,
        base_ref: Option<&str>,
        branch: Option<&str>,
    ) -> Result<WorktreePlan, WorkspaceError> {
        let repo = self.resolve("repo", repo)?;
        let top = git::run(&repo, &["rev-parse", "--show-toplevel"], &[])
            .await
            .map_err(|_| invalid(format!("`repo` {} is not a git repository", repo.display())))?;
        let repo = self.resolve("repo", top.trim())?;
        let base_ref = base_ref.unwrap_or("HEAD").to_owned();
        let commit = commit_of(&repo, &base_ref).await?;
        if let Some(branch) = branch {
            check_branch(&repo, branch).await?;
        }
        Ok(WorktreePlan {
            repo,
            base_ref,
            commit,
            branch: branch.map(str::to_owned),
        })
    }

    /// Makes the worktree `plan` names for thread `thread`, on its own branch.
    pub async fn make_worktree(
        &self,
        thread: &ThreadId,
        plan: &WorktreePlan,
    ) -> Result<Workspace, WorkspaceError> {
        let repo = &plan.repo;
        let branch = plan.branch_for(thread);
        if plan.branch.is_none() {
            check_branch(repo, &branch).await?;
        }
        let path = crate::launch::thread_workdir(&self.worktrees_dir, thread);
        let shown = path.to_string_lossy().into_owned();
        git::run(
            repo,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                &branch,
                &shown,
                &plan.commit,
            ],
            &[],
        )
        .await?;
        let copied = copy_included(repo, &path, &self.include).await?;
        info!(thread_id = %thread, repo = %repo.display(), %branch, base = %plan.commit, copied, "Worktree made.");
        Ok(plan.workspace(path, branch))
    }

    /// A worktree parked ahead of need for the next thread on `repo` (a spare's, whose reserved
    /// id is `thread`): made as that thread's would be with no `branch` asked for, at the
    /// repository's `HEAD`, on branch `harness/<thread>`. The branch is there from the start
    /// because the CLI reads the git status when it starts. Returns its folder and commit.
    pub async fn park(
        &self,
        thread: &ThreadId,
        repo: &Path,
    ) -> Result<(PathBuf, String), WorkspaceError> {
        let plan = WorktreePlan {
            repo: repo.to_path_buf(),
            base_ref: "HEAD".into(),
            commit: commit_of(repo, "HEAD").await?,
            branch: None,
        };
        let made = self.make_worktree(thread, &plan).await?;
        Ok((made.path().to_path_buf(), plan.commit))
    }

    /// The parked worktree at `path` (see [`Workspaces::park`]), made for thread `thread` on
    /// `plan`'s commit, as the thread's workspace. Only a plan with no `branch` of the caller's
    /// takes one: the parked worktree is on the default branch already.
    pub fn adopt(&self, thread: &ThreadId, plan: &WorktreePlan, path: PathBuf) -> Workspace {
        plan.workspace(path, plan.branch_for(thread))
    }

    /// Removes a spare's folder `path`, which no thread took; for a parked worktree, its record
    /// in the repository and its branch go too.
    pub async fn remove_parked(&self, path: &Path) {
        let parked = if path.join(".git").is_file() {
            let common = ["rev-parse", "--path-format=absolute", "--git-common-dir"];
            let common = git::run(path, &common, &[]).await;
            let branch = git::run(path, &["symbolic-ref", "--quiet", "--short", "HEAD"], &[]).await;
            common.ok().zip(branch.ok())
        } else {
            None
        };
        if let Err(err) = std::fs::remove_dir_all(path) {
            tracing::debug!(folder = %path.display(), error = %err, "Could not remove a spare's folder.");
        }
        if let Some((common, branch)) = parked {
            let common = PathBuf::from(common.trim());
            let pruned = git::run(&common, &["worktree", "prune"], &[]).await;
            let args = ["branch", "-D", "--end-of-options", branch.trim()];
            if let Err(err) = pruned.and(git::run(&common, &args, &[]).await) {
                tracing::warn!(repo = %common.display(), error = %err, "Could not remove a parked worktree's record or branch.");
            }
        }
    }

    /// Removes the parked worktrees no thread took (left by a daemon that did not stop
    /// cleanly): those in the worktrees folder that no thread of `threads` names, last changed
    /// before `started` (this daemon's own spares are newer), still on their default branch
    /// (`harness/<folder name>`) with nothing changed in them.
    pub async fn remove_orphans(&self, threads: &[PathBuf], started: SystemTime) {
        let Ok(dir) = std::fs::read_dir(&self.worktrees_dir) else {
            return;
        };
        for folder in dir.flatten().map(|e| e.path()) {
            let changed = std::fs::metadata(&folder).and_then(|m| m.modified());
            let old = changed.is_ok_and(|at| at < started);
            if !old || threads.contains(&folder) || !folder.join(".git").is_file() {
                continue;
            }
            let Some(name) = folder.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let head = ["symbolic-ref", "--quiet", "--short", "HEAD"];
            let on_default = git::run(&folder, &head, &[])
                .await
                .is_ok_and(|b| b.trim() == format!("harness/{name}"));
            let status = git::run(&folder, &["status", "--porcelain"], &[]).await;
            if on_default && status.is_ok_and(|s| s.trim().is_empty()) {
                info!(folder = %folder.display(), "Removing a parked worktree no thread took.");
                self.remove_parked(&folder).await;
            }
        }
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
    /// thread without one (a `path` is never touched). A worktree with uncommitted, untracked or
    /// ignored work ([`ignored_work`]) is removed only under `remove`.
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
            git::verify_worktree(repo, path)
                .await
                .map_err(WorkspaceError::Unavailable)?;
            let status = git::run(path, &["status", "--porcelain"], &[]).await?;
            let dirty = !status.trim().is_empty() || ignored_work(repo, path).await?;
            if dirty && !force {
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
            let threads_dir = self.threads_dir.canonicalize().ok();
            let threads_folder = matches!(workspace, Workspace::Path { .. })
                && threads_dir.is_some_and(|d| inside(&d));
            if own_worktree || threads_folder || self.roots.iter().any(inside) {
                if let Workspace::Worktree { repo, .. } = workspace {
                    git::verify_worktree(repo, path)
                        .await
                        .map_err(WorkspaceError::Unavailable)?;
                }
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

/// What a workspace request resolves to, before anything is made.
#[derive(Clone, Debug)]
pub enum Plan {
    Path(PathBuf),
    Worktree(WorktreePlan),
}

/// A worktree to make (or a parked one to take): the repository, the base and the branch.
#[derive(Clone, Debug)]
pub struct WorktreePlan {
    /// The repository's top folder, resolved.
    pub repo: PathBuf,
    pub base_ref: String,
    /// `base_ref` resolved, when planned.
    pub commit: String,
    /// The caller's branch; `None`: `harness/<thread id>`.
    branch: Option<String>,
}

impl WorktreePlan {
    /// True when the thread gets the default branch (`harness/<thread id>`): a parked worktree
    /// (on that branch already) can be its.
    pub fn on_default_branch(&self) -> bool {
        self.branch.is_none()
    }

    fn branch_for(&self, thread: &ThreadId) -> String {
        self.branch
            .clone()
            .unwrap_or_else(|| format!("harness/{thread}"))
    }

    fn workspace(&self, path: PathBuf, branch: String) -> Workspace {
        Workspace::Worktree {
            repo: self.repo.clone(),
            path,
            branch,
            base_ref: self.base_ref.clone(),
            base_commit: self.commit.clone(),
        }
    }
}

/// The commit `base_ref` names in `repo`.
async fn commit_of(repo: &Path, base_ref: &str) -> Result<String, WorkspaceError> {
    if base_ref.starts_with('-') || base_ref.is_empty() {
        return Err(invalid(format!("`baseRef` {base_ref:?} is not a ref")));
    }
    let commit = git::run(
        repo,
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
    })?;
    Ok(commit.trim().to_owned())
}

/// The longest branch name a thread may ask for, in bytes (git's own limit is the file
/// system's, whose refusal was a 500).
const MAX_BRANCH_BYTES: usize = 200;

/// `branch` is a well-formed branch name that `repo` does not have yet: no `-` first, not `@`
/// (which git reads as `HEAD`), not a full ref (`refs/heads/main` would be
/// `refs/heads/refs/heads/main`), at most [`MAX_BRANCH_BYTES`], and what `git check-ref-format
/// --branch` takes.
async fn check_branch(repo: &Path, branch: &str) -> Result<(), WorkspaceError> {
    if branch.len() > MAX_BRANCH_BYTES {
        return Err(invalid(format!(
            "`branch` is longer than {MAX_BRANCH_BYTES} bytes"
        )));
    }
    let well_formed = !branch.starts_with('-')
        && branch != "@"
        && !branch.starts_with("refs/")
        && git::succeeds(repo, &["check-ref-format", "--branch", branch]).await?;
    if !well_formed {
        return Err(invalid(format!(
            "`branch` {branch:?} is not a valid branch name"
        )));
    }
    let branch_ref = format!("refs/heads/{branch}");
    if git::succeeds(repo, &["show-ref", "--verify", "--quiet", &branch_ref]).await? {
        return Err(WorkspaceError::BranchExists(branch.to_owned()));
    }
    Ok(())
}

fn invalid(message: impl Into<String>) -> WorkspaceError {
    WorkspaceError::Invalid(message.into())
}

/// Whether the worktree `path` holds files git ignores that are work: `git status` leaves them
/// out and `git worktree remove` deletes them, yet a thread's build output or its edited `.env`
/// is what it made. Only the files copied in from `repo` at creation ([`copy_included`]) and
/// still the same do not count. A list too long to read counts as work.
async fn ignored_work(repo: &Path, path: &Path) -> Result<bool, GitError> {
    let args = [
        "ls-files",
        "-z",
        "--others",
        "--ignored",
        "--exclude-standard",
    ];
    let listed = match git::run(path, &args, &[]).await {
        Ok(listed) => listed,
        Err(GitError::TooLong(_)) => return Ok(true),
        Err(err) => return Err(err),
    };
    let (repo, path) = (repo.to_path_buf(), path.to_path_buf());
    tokio::task::spawn_blocking(move || {
        listed
            .split('\0')
            .filter(|file| !file.is_empty())
            .any(|file| !same_regular_file(&repo.join(file), &path.join(file)))
    })
    .await
    .map_err(|err| GitError::Io(std::io::Error::other(err)))
}

/// Whether `a` and `b` are both regular files (not links) with the same bytes.
fn same_regular_file(a: &Path, b: &Path) -> bool {
    let regular = |p: &Path| std::fs::symlink_metadata(p).ok().filter(|m| m.is_file());
    match (regular(a), regular(b)) {
        (Some(ma), Some(mb)) if ma.len() == mb.len() => {
            matches!((std::fs::read(a), std::fs::read(b)), (Ok(x), Ok(y)) if x == y)
        }
        _ => false,
    }
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
