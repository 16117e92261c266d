//! History at risk: the store refuses a turn's transcript entries for real (a trigger on the
//! daemon's own database), and the turn still ends well, marked `transcript_at_risk`. Once the
//! store takes them again the held entries are written first (`transcript_repaired`) and a
//! session restored from the store is whole; when the daemon that held them stopped, the session
//! is not resumed from its incomplete copy (`transcript_unrepaired`), and the history is injected.

use std::time::Duration;

use serde_json::Value;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::eventually_async;
use orchestrator::store::EventRow;

use super::{conversation, last_start, stored, INJECTED};
use crate::support::stored_events;

/// The title that makes the store refuse a thread's transcript entries, by a trigger of the
/// test's on the daemon's own database (installed while no daemon runs, then switched with the
/// thread's title: no schema change under a running daemon).
const REFUSING: &str = "refuse transcripts";
const TRIGGER_SQLITE: &str = "CREATE TRIGGER refuse_transcripts BEFORE INSERT ON transcript_entries
     WHEN EXISTS (SELECT 1 FROM threads WHERE id = NEW.thread_id AND title = 'refuse transcripts')
     BEGIN SELECT RAISE(ABORT, 'forced by the test'); END;";
const TRIGGER_POSTGRES: &str = "CREATE FUNCTION refuse_transcripts() RETURNS trigger
     LANGUAGE plpgsql AS $$ BEGIN
       IF EXISTS (SELECT 1 FROM threads WHERE id = NEW.thread_id AND title = 'refuse transcripts')
       THEN RAISE EXCEPTION 'forced by the test'; END IF;
       RETURN NEW;
     END $$;
     CREATE TRIGGER refuse_transcripts BEFORE INSERT ON transcript_entries
     FOR EACH ROW EXECUTE FUNCTION refuse_transcripts();";

/// The daemon again, with the trigger installed.
async fn with_trigger(daemon: TestDaemon) -> TestDaemon {
    let sql = match daemon.on_postgres() {
        true => TRIGGER_POSTGRES,
        false => TRIGGER_SQLITE,
    };
    daemon.restart_with_sql(sql).await
}

/// Makes the store refuse (or take again) `thread`'s transcript entries.
async fn refuse_transcripts(daemon: &TestDaemon, thread: &str, refuse: bool) {
    let title = if refuse { REFUSING } else { "taken" };
    let (status, body) = daemon
        .patch(
            &format!("/api/threads/{thread}"),
            serde_json::json!({ "title": title }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

/// The thread's events of `kind`, oldest first.
async fn events_of(daemon: &TestDaemon, thread: &str, kind: &str) -> Vec<EventRow> {
    let events = stored_events(daemon, thread).await;
    events.into_iter().filter(|e| e.kind == kind).collect()
}

/// Waits until the thread has `count` events of `kind`, and returns them.
async fn wait_for(daemon: &TestDaemon, thread: &str, kind: &str, count: usize) -> Vec<EventRow> {
    let what = format!("{count} {kind} event(s)");
    eventually_async(Duration::from_secs(20), &what, || async {
        events_of(daemon, thread, kind).await.len() >= count
    })
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    events_of(daemon, thread, kind).await
}

/// The message id of the thread's last finished turn.
async fn last_turn(daemon: &TestDaemon, thread: &str) -> Value {
    let finished = events_of(daemon, thread, "turn_finished").await;
    finished.last().expect("a finished turn").data["messageId"].clone()
}

fn entries(events: &[EventRow]) -> u64 {
    events
        .iter()
        .map(|e| e.data["entries"].as_u64().expect("a count"))
        .sum()
}

/// A daemon with the trigger and one thread that has answered one turn; the thread's CLI
/// session.
async fn thread_with_a_turn(mock: &MockApi) -> (TestDaemon, String, String) {
    let daemon = TestDaemon::start(mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "the first word is tangerine").await;
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    let session = body["cliSessionId"].as_str().expect("a session").to_owned();
    (with_trigger(daemon).await, thread, session)
}

/// Refuses the store's transcript inserts for one turn, which must end well all the same, marked
/// at risk with its session's entries held.
async fn a_turn_at_risk(daemon: &TestDaemon, thread: &str, session: &str) -> Vec<EventRow> {
    refuse_transcripts(daemon, thread, true).await;
    let stored_before = stored(daemon, thread).await.len();
    assert_eq!(
        daemon.reply(thread, "the second word is kumquat").await,
        "echo: the second word is kumquat",
        "the turn does not fail for its transcript"
    );
    let at_risk = wait_for(daemon, thread, "transcript_at_risk", 1).await;
    let first = &at_risk[0];
    assert_eq!(
        first.message_id.as_ref().map(|m| m.as_str()),
        last_turn(daemon, thread).await.as_str(),
        "the turn is marked"
    );
    assert_eq!(first.data["sessionId"], session);
    assert_eq!(first.data["held"], true);
    assert!(
        first.data["error"]
            .as_str()
            .expect("an error")
            .contains("forced by the test"),
        "{}",
        first.data
    );
    assert!(entries(&at_risk) > 0);
    assert_eq!(
        stored(daemon, thread).await.len(),
        stored_before,
        "nothing of the turn was stored"
    );
    at_risk
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_transcript_is_held_and_written_at_the_next_turn() {
    let mock = MockApi::start().await;
    let (daemon, thread, session) = thread_with_a_turn(&mock).await;
    a_turn_at_risk(&daemon, &thread, &session).await;
    assert!(events_of(&daemon, &thread, "transcript_repaired")
        .await
        .is_empty());

    refuse_transcripts(&daemon, &thread, false).await;
    daemon.reply(&thread, "the third word is lime").await;
    let repaired = wait_for(&daemon, &thread, "transcript_repaired", 1).await;
    // Every entry held was written (the at-risk ones of late frames too), once.
    let at_risk = events_of(&daemon, &thread, "transcript_at_risk").await;
    assert_eq!(entries(&repaired), entries(&at_risk));
    let lines: Vec<String> = stored(&daemon, &thread)
        .await
        .into_iter()
        .map(|e| e.line)
        .collect();
    let at = |text: &str| lines.iter().position(|l| l.contains(text));
    let (second, third) = (at("kumquat"), at("lime"));
    assert!(second.is_some() && second < third, "in order: {lines:#?}");

    // The stored transcript is whole: a session restored from it alone knows every turn.
    let daemon = daemon
        .restart_after(|data| std::fs::remove_dir_all(data.join("claude")).expect("wiped"))
        .await;
    daemon.reply(&thread, "what were the words?").await;
    let last = mock.message_requests().last().unwrap().clone();
    let sent = conversation(last.messages());
    let users: Vec<&str> = sent
        .iter()
        .filter(|(role, _)| role == "user")
        .map(|(_, text)| text.as_str())
        .collect();
    assert_eq!(
        users,
        [
            "the first word is tangerine",
            "the second word is kumquat",
            "the third word is lime",
            "what were the words?"
        ],
        "{sent:#?}"
    );
    assert!(!last.all_text().contains(INJECTED), "resumed: {sent:#?}");
    assert_eq!(last_start(&daemon, &thread).await["kind"], "resumed");
    assert!(events_of(&daemon, &thread, "transcript_unrepaired")
        .await
        .is_empty());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_held_by_a_daemon_that_stopped_are_not_resumed_from_the_store() {
    let mock = MockApi::start().await;
    let (daemon, thread, session) = thread_with_a_turn(&mock).await;
    a_turn_at_risk(&daemon, &thread, &session).await;
    refuse_transcripts(&daemon, &thread, false).await;
    // The held entries go with the daemon; so do the CLI's own files.
    let daemon = daemon
        .restart_after(|data| std::fs::remove_dir_all(data.join("claude")).expect("wiped"))
        .await;

    daemon.reply(&thread, "what were the words?").await;
    let unrepaired = wait_for(&daemon, &thread, "transcript_unrepaired", 1).await;
    assert_eq!(unrepaired[0].data["sessionId"], session.as_str());
    assert_eq!(
        unrepaired[0].message_id.as_ref().map(|m| m.as_str()),
        last_turn(&daemon, &thread).await.as_str(),
        "the turn is marked"
    );
    assert_eq!(
        last_start(&daemon, &thread).await,
        serde_json::json!({"kind": "fresh", "resume_failed": true})
    );
    // Not the stored copy, which lacks the second turn: the history the daemon holds.
    let last = mock.message_requests().last().unwrap().clone();
    let text = last.all_text();
    assert!(text.contains(INJECTED), "{text}");
    assert!(text.contains("the second word is kumquat"), "{text}");
    assert_eq!(daemon.counts().resume_fallbacks, 1);
    assert!(events_of(&daemon, &thread, "transcript_repaired")
        .await
        .is_empty());
    daemon.stop().await;
}
