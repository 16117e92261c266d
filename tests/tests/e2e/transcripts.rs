//! Transcripts in the database: children run with `--session-mirror`, the pool stores every
//! mirrored entry, and a thread whose CLI session files are gone (a wiped `data_dir/claude`, another
//! node) resumes its real CLI session from the stored transcript, not the injected history.

use std::collections::HashSet;

use plugin_contract::ThreadId;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use orchestrator::store::TranscriptEntry;

use crate::support::stored_events;

mod at_risk;

/// The context plugin's marker for injected history: present only after a resume fell back.
const INJECTED: &str = "<conversation_history>";

async fn stored(daemon: &TestDaemon, thread: &str) -> Vec<TranscriptEntry> {
    daemon
        .daemon()
        .store
        .thread_transcript(&ThreadId::from_string(thread))
        .await
        .expect("transcript readable")
}

/// Asserts no entry with a uuid is stored twice in its session.
fn assert_no_duplicates(entries: &[TranscriptEntry]) {
    let mut seen = HashSet::new();
    for entry in entries {
        if let Some(uuid) = &entry.uuid {
            assert!(
                seen.insert((entry.session_id.as_str().to_owned(), uuid.clone())),
                "{uuid} stored twice"
            );
        }
    }
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

/// The text of one API message: a string content, or its text blocks joined (without the
/// CLI's `<system-reminder>` blocks).
fn message_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .filter(|t| !t.trim_start().starts_with("<system-reminder>"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The request's conversation as (role, text) pairs.
fn conversation(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                message_text(m),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_claude_dir_resumes_from_the_stored_transcript() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "the first word is tangerine").await;
    daemon.reply(&thread, "the second word is kumquat").await;
    let (_, before) = daemon.get(&format!("/api/threads/{thread}")).await;
    let session = before["cliSessionId"]
        .as_str()
        .expect("a session")
        .to_owned();
    let entries = stored(&daemon, &thread).await;
    // Stored before the reply was: the turn's last entry (its answer) is in already.
    assert!(
        entries.iter().any(|e| e.line.contains("\"assistant\"")
            && e.line.contains("echo: the second word is kumquat")),
        "the second turn's entries were stored with the turn"
    );
    assert!(entries.iter().all(|e| e.session_id.as_str() == session));
    let config_dir = daemon.data_dir().join("claude");
    let projects = config_dir.join("threads").join(&thread).join("projects");
    assert!(projects.is_dir(), "{}", projects.display());

    let daemon = daemon
        .restart_after(|data| std::fs::remove_dir_all(data.join("claude")).expect("wiped"))
        .await;
    assert!(!projects.exists(), "the CLI's files are gone");
    assert_eq!(
        daemon.reply(&thread, "what were the words?").await,
        "echo: what were the words?"
    );

    // The earlier turns are real messages of the conversation, in order (the CLI also sends a
    // `system` environment message in between, left out here).
    let last = mock.message_requests().last().unwrap().clone();
    let sent = conversation(last.messages());
    let turns: Vec<(&str, &str)> = sent
        .iter()
        .filter(|(role, _)| role == "user" || role == "assistant")
        .map(|(role, text)| (role.as_str(), text.as_str()))
        .collect();
    assert_eq!(
        turns,
        [
            ("user", "the first word is tangerine"),
            ("assistant", "echo: the first word is tangerine"),
            ("user", "the second word is kumquat"),
            ("assistant", "echo: the second word is kumquat"),
            ("user", "what were the words?"),
        ],
        "{sent:#?}"
    );
    assert!(
        !last.all_text().contains(INJECTED),
        "resumed, not injected: {sent:#?}"
    );
    assert_eq!(last_start(&daemon, &thread).await["kind"], "resumed");
    let counts = daemon.counts();
    assert_eq!(
        counts.resume_fallbacks, 0,
        "harness_pool_resume_fallbacks_total"
    );
    assert_eq!(counts.transcript_restores, 1);
    let (_, after) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(
        after["cliSessionId"],
        session.as_str(),
        "the same CLI session"
    );

    let entries = stored(&daemon, &thread).await;
    assert_no_duplicates(&entries);
    assert!(entries
        .iter()
        .any(|e| e.line.contains("what were the words?")));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_session_the_cli_lost_forks_the_stored_transcript() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let parent = daemon.create_thread().await;
    daemon.reply(&parent, "remember PINEAPPLE").await;
    let daemon = daemon
        .restart_after(|data| std::fs::remove_dir_all(data.join("claude")).expect("wiped"))
        .await;

    let (status, forked) = daemon
        .post(&format!("/api/threads/{parent}/fork"), json!({}))
        .await;
    assert_eq!(status, 201, "{forked}");
    let child = forked["id"].as_str().expect("fork id").to_owned();
    daemon.reply(&child, "fork asks").await;
    let last = mock.message_requests().last().unwrap().clone();
    let sent = conversation(last.messages());
    assert!(
        sent.iter()
            .any(|(r, t)| r == "user" && t == "remember PINEAPPLE"),
        "{sent:#?}"
    );
    assert!(!last.all_text().contains(INJECTED), "{sent:#?}");
    assert_eq!(daemon.counts().resume_fallbacks, 0);
    assert_eq!(last_start(&daemon, &child).await["kind"], "resumed");
    let (_, fork_body) = daemon.get(&format!("/api/threads/{child}")).await;
    let (_, parent_body) = daemon.get(&format!("/api/threads/{parent}")).await;
    // The fork's own session is mirrored whole (the forked history included), so it can be
    // restored in turn.
    let fork_entries = stored(&daemon, &child).await;
    assert!(fork_entries
        .iter()
        .any(|e| e.line.contains("remember PINEAPPLE")
            && e.session_id.as_str() == fork_body["cliSessionId"]));
    assert_no_duplicates(&fork_entries);
    assert_ne!(
        fork_body["cliSessionId"], parent_body["cliSessionId"],
        "a session of its own"
    );
    daemon.stop().await;
}
