//! Real git repositories for the workspace tests.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `git -C dir args…` and returns its stdout; panics with git's stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs (install it: apt-get install git)");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository at `dir` (created) with one commit on `main`: `README.md`.
pub fn repository(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("the repository's folder");
    git(dir, &["init", "--quiet", "-b", "main"]);
    git(dir, &["config", "user.email", "tests@example.com"]);
    git(dir, &["config", "user.name", "tests"]);
    std::fs::write(dir.join("README.md"), "hello\n").expect("README.md");
    git(dir, &["add", "README.md"]);
    git(dir, &["commit", "--quiet", "-m", "first"]);
    dir.to_path_buf()
}
