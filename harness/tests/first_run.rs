//! First run, as a new user would start the daemon with the README's command on a machine
//! without `claude` on the PATH: it installs the pinned CLI under its data dir with npm and
//! serves turns with it; without npm, or with `claude.install` off, it refuses to start and
//! says exactly what to install (once it came up with a warning and then failed every turn).

mod support;

use std::process::Command;

use serde_json::json;
use tempfile::TempDir;

use harness_tests::mock::MockApi;
use support::{Harness, Launch};

/// `harness serve` with `claude.bin` naming no program, `PATH` set to `path`; its exit status
/// and what it said.
fn serve_without_cli(dir: &TempDir, path: &str, config: &str) -> (bool, String) {
    let config_file = dir.path().join("harness.toml");
    std::fs::write(&config_file, config).expect("a config file");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("serve")
        .arg("--bind=127.0.0.1:0")
        .arg(format!("--data-dir={}", dir.path().display()))
        .arg(format!("--config={}", config_file.display()))
        .arg("--claude-bin=claude-is-not-installed-here")
        .env_clear()
        .env("PATH", path)
        .output()
        .expect("harness runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn without_npm_or_with_the_install_off_it_refuses_to_start_saying_what_to_install() {
    let dir = TempDir::new().expect("a temporary folder");
    let empty = TempDir::new().expect("a folder with no programs");
    let (ok, said) = serve_without_cli(&dir, &empty.path().display().to_string(), "");
    assert!(!ok, "{said}");
    assert!(said.contains("npm is not either"), "{said}");
    assert!(said.contains("apt-get install nodejs npm"), "{said}");
    assert!(
        said.contains("npm install -g @anthropic-ai/claude-code@2.1.332"),
        "{said}"
    );
    let path = std::env::var("PATH").unwrap_or_default();
    let (ok, said) = serve_without_cli(&dir, &path, "[claude]\ninstall = false\n");
    assert!(!ok, "{said}");
    assert!(said.contains("claude.install is off"), "{said}");
    assert!(!dir.path().join("cli").exists(), "nothing was installed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_installs_the_pinned_cli_under_its_data_dir_and_serves_turns() {
    let npm = Command::new("npm").arg("--version").output();
    if !npm.is_ok_and(|out| out.status.success()) {
        // Test support installs the CLI with npm too: without it no test here runs at all.
        panic!("npm is needed (Debian: apt-get install nodejs npm)");
    }
    let dir = TempDir::new().expect("a temporary folder");
    let mock = MockApi::start().await;
    let launch = Launch {
        claude_bin: Some("claude-is-not-installed-here"),
        ..Launch::with_grace(5)
    };
    let daemon = Harness::start(dir.path(), &mock, &launch).await;
    let installed = dir.path().join("cli/node_modules/.bin/claude");
    let version = Command::new(&installed)
        .arg("--version")
        .output()
        .expect("the installed CLI runs");
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with("2.1.332"),
        "{version:?}"
    );
    assert!(daemon.log_text().contains("installing it with npm"));
    let (_, thread) = daemon.client.post("/api/threads", json!({})).await;
    let id = thread["id"].as_str().expect("an id");
    let (status, reply) = daemon
        .client
        .post(
            &format!("/api/threads/{id}/messages"),
            json!({"content": "first run"}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["message"]["content"], "echo: first run");
    daemon.stop().await;
}
