//! What the `harness` binary logs at start, read from the file its stderr goes to (#46): no
//! terminal colour codes in a file, and a warning when API keys are live on a daemon with no
//! operator token (without one, a request that names no key is the operator: keys isolate
//! nothing).

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use harness_tests::cli::claude_bin;
use harness_tests::util::eventually;
use tempfile::TempDir;

/// `harness serve` on port 0 with its data in `dir`, text logs to a file there, no token; returns
/// once it logged that it listens, with the log's text then.
async fn serve(dir: &Path) -> (tokio::process::Child, PathBuf) {
    let claude = tokio::task::spawn_blocking(claude_bin)
        .await
        .expect("installer task")
        .expect("the claude CLI is installed by test support");
    let config = dir.join("harness.toml");
    std::fs::write(&config, "[pool]\nspares = 0\n").expect("the config");
    let log = dir.join("harness.log");
    let log_file = std::fs::File::create(&log).expect("the log file");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness"));
    command
        .arg("serve")
        .arg("--bind=127.0.0.1:0")
        .arg(format!("--data-dir={}", dir.display()))
        .arg(format!("--config={}", config.display()))
        .arg(format!("--claude-bin={}", claude.display()))
        .arg("--log-format=text")
        .env("RUST_LOG", "info")
        // What would turn colour off whatever the binary does.
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .kill_on_drop(true);
    support::clean_env(&mut command);
    let mut child = command.spawn().expect("harness starts");
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    let listening = eventually(Duration::from_secs(30), "the daemon listens", || {
        text().contains("Harness listening.") || child.try_wait().ok().flatten().is_some()
    })
    .await;
    assert!(
        listening.is_ok() && text().contains("Harness listening."),
        "{listening:?}\n{}",
        text()
    );
    (child, log)
}

/// Stops the daemon with SIGTERM and waits for it.
async fn stop(mut child: tokio::process::Child) {
    let pid = child.id().expect("the daemon runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("signal the daemon");
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the daemon stops")
        .expect("wait for it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_written_to_a_file_has_no_colour_codes() {
    let dir = TempDir::new().expect("temp dir");
    let (child, log) = serve(dir.path()).await;
    let text = std::fs::read_to_string(&log).expect("the log");
    assert!(
        !text.contains("\x1b["),
        "colour codes in a log file:\n{text}"
    );
    assert!(text.contains(" INFO "), "plain levels: {text}");
    stop(child).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_keys_on_a_daemon_without_a_token_are_warned_about() {
    let dir = TempDir::new().expect("temp dir");
    support::keys(
        dir.path(),
        &["create", "--tenant", "acme", "--scopes", "threads:read"],
    )
    .await;
    let (child, log) = serve(dir.path()).await;
    let text = std::fs::read_to_string(&log).expect("the log");
    let warning = text
        .lines()
        .find(|line| line.contains("no operator token is set"))
        .unwrap_or_else(|| panic!("no warning:\n{text}"));
    assert!(
        warning.contains("WARN") && warning.contains("keys=1"),
        "{warning}"
    );
    stop(child).await;
}
