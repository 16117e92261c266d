//! Running `git`: one command, its output, and an error that says what failed. Every command
//! runs with the repository's hooks off (`core.hooksPath=/dev/null`): a workspace's repository
//! is the operator's, but nothing in it runs as the daemon because a thread was created.

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

/// `git -C dir <args>` with `envs` set, its stdout when it exits 0.
pub async fn run(dir: &Path, args: &[&str], envs: &[(&str, &Path)]) -> Result<String, GitError> {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(dir)
        .args(["-c", "core.hooksPath=/dev/null"])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        // Never ask for credentials or an editor on the daemon's terminal.
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_EDITOR", "true");
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
