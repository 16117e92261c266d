//! Forks against the real CLI: `POST /api/threads/{id}/fork` makes a thread that carries the
//! parent's history (its CLI session forked with `--resume=<id> --fork-session`, or the history
//! injected when neither the CLI nor the stored transcripts have it) and then goes its own way.

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use plugin_contract::{CliSessionId, ThreadId};

use crate::support::{messages, stored_events};

async fn fork(daemon: &TestDaemon, parent: &str) -> Value {
    let (status, body) = daemon
        .post(&format!("/api/threads/{parent}/fork"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["parentId"], parent, "{body}");
    body
}

/// How the thread's last turn got its process: `warm`, `resumed` or `fresh`.
async fn last_start(daemon: &TestDaemon, thread: &str) -> Value {
    let events = stored_events(daemon, thread).await;
    let ready = events
        .iter()
        .rev()
        .find(|e| e.kind == "process_ready")
        .expect("a process took the turn");
    ready.data["start"].clone()
}

/// Everything the model was sent in the mock's last request.
fn last_sent(mock: &MockApi) -> String {
    mock.message_requests()
        .last()
        .expect("a request reached the mock")
        .all_text()
}

async fn session_of(daemon: &TestDaemon, thread: &str) -> Value {
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    body["cliSessionId"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_carries_the_parents_history_and_then_diverges() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let parent = daemon.create_thread().await;
    daemon.reply(&parent, "remember PINEAPPLE").await;
    let forked = fork(&daemon, &parent).await;
    let child = forked["id"].as_str().expect("fork id").to_owned();
    let copied = messages(&daemon, &child).await;
    assert_eq!(copied.len(), 2, "the history is the fork's own: {copied:?}");
    assert_eq!(copied[1]["replyTo"], copied[0]["id"]);

    daemon.reply(&child, "fork asks").await;
    assert!(
        last_sent(&mock).contains("remember PINEAPPLE"),
        "the fork knows the history"
    );
    assert_eq!(
        last_start(&daemon, &child).await["kind"],
        "resumed",
        "the parent's session was forked, not injected"
    );
    let (parent_session, child_session) = (
        session_of(&daemon, &parent).await,
        session_of(&daemon, &child).await,
    );
    assert!(child_session.is_string());
    assert_ne!(
        parent_session, child_session,
        "the fork has a session of its own"
    );

    daemon.reply(&parent, "parent only BANANA").await;
    daemon.reply(&child, "fork only CHERRY").await;
    let sent = last_sent(&mock);
    assert!(
        sent.contains("fork asks") && sent.contains("PINEAPPLE"),
        "{sent}"
    );
    assert!(
        !sent.contains("BANANA"),
        "the fork does not see the parent's later turns"
    );
    daemon.reply(&parent, "parent again").await;
    let sent = last_sent(&mock);
    assert!(
        sent.contains("BANANA") && sent.contains("PINEAPPLE"),
        "{sent}"
    );
    assert!(
        !sent.contains("CHERRY") && !sent.contains("fork asks"),
        "nor the parent the fork's"
    );

    let (status, body) = daemon.post("/api/threads/nope/fork", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_thread_whose_session_is_gone_gets_the_history_injected() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let parent = daemon.create_thread().await;
    daemon.reply(&parent, "remember MANGO").await;
    // Gone from the CLI's files and from the stored transcripts (a session from before they
    // were stored): point the parent at a session nobody has. A session only the files lost is
    // restored instead (`transcripts.rs`).
    let stale = CliSessionId::from_string(uuid::Uuid::new_v4().to_string());
    daemon
        .daemon()
        .store
        .set_cli_session(&ThreadId::from_string(&parent), Some(&stale))
        .await
        .unwrap();
    let child = fork(&daemon, &parent).await["id"]
        .as_str()
        .expect("fork id")
        .to_owned();
    daemon.reply(&child, "what was the fruit").await;
    assert!(
        last_sent(&mock).contains("remember MANGO"),
        "the history was injected"
    );
    assert_eq!(last_start(&daemon, &child).await["kind"], "fresh");
    daemon.stop().await;
}
