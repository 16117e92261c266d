//! Running `git`: one command, its output, and an error that says what failed.
//!
//! **Git never runs what a repository says.** A workspace's repository is the operator's, and a
//! thread's commands may have written into it (without walls, its `.git/config` too): nothing
//! configured there runs as the daemon. Every command runs with the hooks off
//! (`core.hooksPath=/dev/null`), no file-system monitor (`core.fsmonitor=false`), no signing,
//! credential helper, ssh or askpass program, and every filter and diff driver command the
//! repository's configuration names emptied (`filter.*.clean|smudge|process`,
//! `diff.*.textconv|command`, `merge.*.driver`), found first with `git config` (which runs
//! nothing); diffs run `--no-ext-diff --no-textconv` (`diff.external`). A worktree's git dir is
//! checked against its repository before git runs in it ([`verify_worktree`]).

use std::path::Path;
use std::process::Stdio;

use tokio::process::Command;

/// Most bytes of output kept from one command (a diff can be long): beyond, [`GitError::TooLong`].
pub const MAX_OUTPUT: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// Git could not be run, or a file around it could not be read or written.
    #[error("{0}")]
    Io(std::io::Error),
    /// Exit status not 0; the text is git's stderr.
    #[error("git {command} failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("git {0} printed more than {MAX_OUTPUT} bytes")]
    TooLong(String),
}

/// Settings that would make git run a program, each set to run none.
const SAFE: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.sshCommand=",
    "core.askPass=",
    "core.pager=cat",
    "credential.helper=",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
];

/// Configuration keys whose values are commands git runs: each one the repository sets is
/// emptied for the command.
const COMMAND_KEYS: &str =
    r"^(filter\..+\.(clean|smudge|process)|diff\..+\.(textconv|command)|merge\..+\.driver)$";

/// `git -C dir` with the safe settings, nothing else yet.
fn git(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command.arg("-C").arg(dir);
    for setting in SAFE {
        command.args(["-c", setting]);
    }
    command
        .stdin(Stdio::null())
        .kill_on_drop(true)
        // Never ask for credentials or an editor on the daemon's terminal.
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_EDITOR", "true");
    command
}

/// The configured keys under `dir` whose values are commands ([`COMMAND_KEYS`]).
async fn command_keys(dir: &Path) -> Vec<String> {
    let mut command = git(dir);
    command.args(["config", "--name-only", "--get-regexp", COMMAND_KEYS]);
    match command.output().await {
        Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// `git -C dir <args>` with `envs` set, its stdout when it exits 0.
pub async fn run(dir: &Path, args: &[&str], envs: &[(&str, &Path)]) -> Result<String, GitError> {
    let mut command = git(dir);
    for key in command_keys(dir).await {
        command.arg("-c").arg(format!("{key}="));
    }
    command.args(args);
    for (key, value) in envs {
        command.env(key, value);
    }
    let output = command.output().await.map_err(GitError::Io)?;
    let name = args.first().copied().unwrap_or_default().to_owned();
    if !output.status.success() {
        return Err(GitError::Failed {
            command: name,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    if output.stdout.len() > MAX_OUTPUT {
        return Err(GitError::TooLong(name));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether `git -C dir <args>` exits 0 (a question, such as "does this branch exist").
pub async fn succeeds(dir: &Path, args: &[&str]) -> Result<bool, GitError> {
    match run(dir, args, &[]).await {
        Ok(_) => Ok(true),
        Err(GitError::Failed { .. }) => Ok(false),
        Err(err) => Err(err),
    }
}

/// Checks that the worktree at `path` is one of `repo`'s: its `.git` is a file (not a link)
/// naming a git dir under the repository's own `worktrees/`, whose common dir is the
/// repository's. A worktree whose `.git` was swapped (`gitdir: ./evil`) is refused before any
/// git runs in it.
pub async fn verify_worktree(repo: &Path, path: &Path) -> Result<(), String> {
    let refused = |why: &str| format!("the worktree {} {why}", path.display());
    let dot_git = path.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).map_err(|_| refused("has no .git"))?;
    if !meta.is_file() {
        return Err(refused("has a .git that is not a file"));
    }
    let text = std::fs::read_to_string(&dot_git).map_err(|_| refused("has an unreadable .git"))?;
    let named = text
        .strip_prefix("gitdir:")
        .map(str::trim)
        .ok_or_else(|| refused("has a .git that names no git dir"))?;
    let gitdir = path
        .join(named)
        .canonicalize()
        .map_err(|_| refused("names a git dir that is not there"))?;
    let common = run(repo, &["rev-parse", "--git-common-dir"], &[])
        .await
        .map_err(|err| refused(&format!("cannot be checked: {err}")))?;
    let common = repo
        .join(common.trim())
        .canonicalize()
        .map_err(|_| refused("has a repository with no git dir"))?;
    if gitdir.parent() != Some(common.join("worktrees").as_path()) {
        return Err(refused("names a git dir that is not its repository's"));
    }
    let commondir = std::fs::read_to_string(gitdir.join("commondir"))
        .ok()
        .and_then(|c| gitdir.join(c.trim()).canonicalize().ok());
    if commondir.as_deref() != Some(common.as_path()) {
        return Err(refused("names a git dir of another repository"));
    }
    Ok(())
}
