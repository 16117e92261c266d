//! The daemon's secrets leave its environment (#46): with `approvals.mode = "allow"` a thread's
//! `ps eww` of its parent, or `cat /proc/<daemon pid>/environ`, printed `ANTHROPIC_API_KEY=…`
//! and `HARNESS_TOKEN=…`. The binary now keeps them in memory and writes their bytes over in
//! its own environment block before any thread starts, so even a reader allowed to trace it
//! finds none; the token still guards the API and the key still reaches the model. A secret
//! may also come as a file (`<NAME>_FILE`), as systemd's `LoadCredential=` hands it over.

mod support;

use reqwest::StatusCode;
use serde_json::json;
use tempfile::TempDir;

use harness_tests::mock::MockApi;
use support::{Harness, Launch};

const TOKEN: &str = "operator-token-SECRET-5a1c";
const KEY: &str = "sk-ant-env-SECRET-77e3";
const FILE_KEY: &str = "sk-ant-file-SECRET-4242";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_secrets_leave_its_environment() {
    let dir = TempDir::new().expect("a temporary folder");
    let mock = MockApi::start().await;
    // A secret handed over as a file, as systemd's `LoadCredential=` does.
    let key_file = dir.path().join("anthropic-key");
    std::fs::write(&key_file, format!("{FILE_KEY}\n")).expect("the key file");
    let key_file = key_file.display().to_string();
    let launch = Launch {
        env: &[
            ("HARNESS_TOKEN", TOKEN),
            ("ANTHROPIC_AUTH_TOKEN", KEY),
            ("ANTHROPIC_API_KEY_FILE", &key_file),
        ],
        ..Launch::with_grace(5)
    };
    let daemon = Harness::start(dir.path(), &mock, &launch).await;

    // What `ps eww` and `cat /proc/<pid>/environ` read (this test runs as root: it may).
    let environ = std::fs::read(format!("/proc/{}/environ", daemon.pid())).expect("environ");
    let text = String::from_utf8_lossy(&environ);
    assert!(
        !text.contains(TOKEN),
        "the token is in the daemon's environment"
    );
    assert!(
        !text.contains(KEY),
        "the key is in the daemon's environment"
    );
    assert!(!text.contains(&key_file), "the key file's path is in it");
    assert!(
        text.contains("RUST_LOG=info"),
        "the rest of it is there: {text}"
    );

    // The token still guards the API, and turns still reach the model.
    let anonymous = reqwest::get(format!("{}/api/threads", daemon.client.base()))
        .await
        .expect("an answer");
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let (status, created) = daemon.client.post("/api/threads", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let thread = created["id"].as_str().expect("an id").to_owned();
    let reply = daemon.client.reply(&thread, "still working").await;
    assert!(reply.contains("still working"), "{reply}");
    // Nor in the thread's CLI, which the gateway serves with its own token.
    let children = daemon.cli_pids().await;
    assert!(!children.is_empty());
    for pid in children {
        let child = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let child = String::from_utf8_lossy(&child);
        assert!(
            !child.contains(FILE_KEY) && !child.contains(TOKEN),
            "{child}"
        );
    }
    daemon.stop().await;
}
