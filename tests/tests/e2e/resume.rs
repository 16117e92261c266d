//! Cold threads: resume the CLI session after a restart, fall back to injected history when the
//! session is gone, and never run a retried message twice.

use plugin_contract::{CliSessionId, ThreadId};
use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::process_exists;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_resumes_the_thread() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "the secret word is tangerine").await;
    let old_pid = daemon.pid_of(&thread).unwrap();
    let (_, before) = daemon.get(&format!("/api/threads/{thread}")).await;
    let session = before["cliSessionId"]
        .as_str()
        .expect("session id stored")
        .to_owned();

    let daemon = daemon.restart().await;
    assert!(!process_exists(old_pid));
    assert_eq!(
        daemon.reply(&thread, "what was the word?").await,
        "echo: what was the word?"
    );
    let last = mock.message_requests().last().unwrap().clone();
    assert!(
        last.all_text().contains("the secret word is tangerine"),
        "history loaded by --resume"
    );
    assert!(
        !last.all_text().contains("<conversation_history>"),
        "resumed, not injected"
    );
    let (_, after) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(
        after["cliSessionId"],
        session.as_str(),
        "claude 2.1.330 keeps the id on resume"
    );
    assert_eq!(daemon.counts().resume_fallbacks, 0);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_session_falls_back_to_injected_history() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "my name is Ada").await;
    // The CLI's transcript is gone (a wiped config dir, another machine): point at a session that
    // does not exist, and make the next turn cold.
    let id = ThreadId::from_string(&thread);
    let stale = CliSessionId::from_string(uuid::Uuid::new_v4().to_string());
    daemon
        .daemon()
        .store
        .set_cli_session(&id, Some(&stale))
        .await
        .unwrap();
    let daemon = daemon.restart().await;

    // The mock echoes the whole prompt: history block first, then the new message.
    let reply = daemon.reply(&thread, "what is my name?").await;
    assert!(
        reply.starts_with("echo: <conversation_history>") && reply.ends_with("what is my name?"),
        "{reply}"
    );
    let last = mock.message_requests().last().unwrap().clone();
    let text = last.all_text();
    assert!(
        text.contains("<conversation_history>") && text.contains("my name is Ada"),
        "{text}"
    );
    assert_eq!(daemon.counts().resume_fallbacks, 1);
    let (_, after) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_ne!(
        after["cliSessionId"],
        stale.as_str(),
        "the new session id replaced the stale one"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_client_message_id_runs_one_turn() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let path = format!("/api/threads/{thread}/messages");
    let body = json!({"content": "only once", "clientMessageId": "client-1"});
    // Concurrent retries while the first is running, then one after it finished.
    let (a, b) = tokio::join!(
        daemon.post(&path, body.clone()),
        daemon.post(&path, body.clone())
    );
    let c = daemon.post(&path, body).await;
    for (status, reply) in [&a, &b, &c] {
        assert_eq!(*status, 200, "{reply}");
        assert_eq!(reply["message"]["content"], "echo: only once");
        assert_eq!(
            reply["message"]["id"], a.1["message"]["id"],
            "every retry gets the first reply"
        );
    }
    let runs = mock
        .message_requests()
        .iter()
        .filter(|r| r.last_user_text() == "only once")
        .count();
    assert_eq!(runs, 1, "the mock saw the message once");
    let (_, thread_body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(
        thread_body["messages"].as_array().unwrap().len(),
        2,
        "one user message, one reply"
    );
    daemon.stop().await;
}
