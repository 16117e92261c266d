//! A turn's end has one owner: whatever ends it (a reply, an error, a budget, its caller
//! withdrawing it, an interrupt, shutdown, a crash found at the next start; a takeover is in
//! `cluster.rs`), the turn gets exactly one outcome row and one terminal event, written in one
//! transaction, the outcome naming the event.

use std::time::Duration;

use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use orchestrator::store::MessageId;

use crate::support;

/// The user message `message` of `thread` ended once, for `cause`: one outcome, one terminal
/// event (the one the outcome names, saying the same), and the message's status to match.
async fn assert_ended_once(daemon: &TestDaemon, thread: &str, message: &str, cause: &str) {
    let store = &daemon.daemon().store;
    let outcomes = store
        .outcomes_of(&MessageId::from_string(message))
        .await
        .expect("outcomes readable");
    assert_eq!(outcomes.len(), 1, "{cause}: {outcomes:?}");
    let outcome = &outcomes[0];
    assert_eq!(outcome.cause.as_str(), cause, "{outcome:?}");
    let events = support::stored_events(daemon, thread).await;
    let ends: Vec<_> = events
        .iter()
        .filter(|e| e.message_id.as_ref().map(MessageId::as_str) == Some(message))
        .filter(|e| support::is_terminal_kind(&e.kind))
        .collect();
    assert_eq!(ends.len(), 1, "{cause}: {ends:?}");
    assert_eq!(ends[0].id, outcome.event_id, "{cause}");
    if cause == "done" {
        assert_eq!(ends[0].kind, "turn_finished");
        let reply = outcome.reply_id.as_ref().expect("a reply").as_str();
        assert_eq!(ends[0].data["reply"]["id"], reply);
    } else {
        assert_eq!(ends[0].kind, "turn_failed");
        assert_eq!(ends[0].data["cause"], cause, "{:?}", ends[0]);
        assert_eq!(ends[0].data["status"], outcome.status.as_str());
    }
    let stored = support::message(daemon, thread, message).await;
    assert_eq!(stored["status"], outcome.status.as_str(), "{stored}");
}

/// The id of the user message with `content`.
async fn id_of(daemon: &TestDaemon, thread: &str, content: &str) -> String {
    let message = support::user_message(daemon, thread, content).await;
    message["id"].as_str().expect("an id").to_owned()
}

/// Sends `content` without waiting and waits until the model was asked (the `asked`-th request
/// to the mock).
async fn start_slow(
    daemon: &TestDaemon,
    mock: &MockApi,
    thread: &str,
    content: &str,
    asked: usize,
) {
    mock.once_when_prompt_contains(
        content,
        Reply::slow_text(["never ", "finished"], Duration::from_secs(30)),
    );
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": content}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    mock.wait_for_requests(asked, Duration::from_secs(60))
        .await
        .expect("the turn reaches the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ending_writes_one_outcome_and_one_terminal_event() {
    let mock = MockApi::start().await;
    let mut daemon = TestDaemon::start(&mock, |c| {
        c.shutdown_grace = Duration::from_millis(200);
    })
    .await;
    let thread = daemon.create_thread().await;

    // A reply.
    let (status, body) = daemon.send(&thread, "hello").await;
    assert_eq!(status, 200, "{body}");
    let done = body["userMessageId"].as_str().expect("id").to_owned();
    assert_ended_once(&daemon, &thread, &done, "done").await;

    // An error from the API, on a thread of its own: every later request of a thread carries
    // its history, which the mock's rule would fail too.
    let erring = daemon.create_thread().await;
    mock.when_prompt_contains("make it fail", Reply::error(400));
    let (status, body) = daemon.send(&erring, "make it fail").await;
    assert_eq!(status, 502, "{body}");
    let failed = id_of(&daemon, &erring, "make it fail").await;
    assert_ended_once(&daemon, &erring, &failed, "error").await;

    // A budget: the first turn spends past it, the second is refused.
    let (_, body) = daemon
        .post("/api/threads", json!({"maxBudgetUsd": 0.000001}))
        .await;
    let budgeted = body["id"].as_str().expect("id").to_owned();
    daemon.reply(&budgeted, "first").await;
    let (status, body) = daemon.send(&budgeted, "second").await;
    assert_eq!(status, 402, "{body}");
    let refused = id_of(&daemon, &budgeted, "second").await;
    assert_ended_once(&daemon, &budgeted, &refused, "refused").await;
    let refusal = support::stored_events(&daemon, &budgeted).await;
    let refusal = refusal.last().expect("the refusal");
    assert_eq!(refusal.data["budget"]["budget"], "thread", "{refusal:?}");

    // Withdrawn while it waited, then the turn ahead of it interrupted.
    let asked = mock.message_requests().len();
    start_slow(&daemon, &mock, &thread, "slow one", asked + 1).await;
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": "queued one", "clientMessageId": "c-2"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let interrupt = |query: &'static str| {
        let (daemon, thread) = (&daemon, &thread);
        async move {
            let path = format!("/api/threads/{thread}/interrupt{query}");
            let (status, body) = daemon.post(&path, json!({})).await;
            assert_eq!(status, 200, "{body}");
            body
        }
    };
    assert_eq!(interrupt("?clientMessageId=c-2").await["withdrawn"], true);
    assert_eq!(interrupt("").await["interrupted"], true);
    let slow = id_of(&daemon, &thread, "slow one").await;
    let queued = id_of(&daemon, &thread, "queued one").await;
    harness_tests::util::eventually_async(Duration::from_secs(10), "both end", || async {
        let statuses: Vec<Value> = support::messages(&daemon, &thread)
            .await
            .iter()
            .filter(|m| m["id"] == slow.as_str() || m["id"] == queued.as_str())
            .map(|m| m["status"].clone())
            .collect();
        statuses == [json!("interrupted"), json!("interrupted")]
    })
    .await
    .unwrap();
    assert_ended_once(&daemon, &thread, &queued, "withdrawn").await;
    assert_ended_once(&daemon, &thread, &slow, "interrupted").await;

    // Cut by a graceful shutdown.
    let asked = mock.message_requests().len();
    start_slow(&daemon, &mock, &thread, "cut by shutdown", asked + 1).await;
    daemon = daemon.restart().await;
    let cut = id_of(&daemon, &thread, "cut by shutdown").await;
    assert_ended_once(&daemon, &thread, &cut, "shutdown").await;

    // Cut by a crash: ended when the next start finds it.
    let asked = mock.message_requests().len();
    start_slow(&daemon, &mock, &thread, "cut by a crash", asked + 1).await;
    daemon = daemon.crash_and_restart().await;
    let crashed = id_of(&daemon, &thread, "cut by a crash").await;
    assert_ended_once(&daemon, &thread, &crashed, "crash").await;

    // Everything ended once, and nothing ended twice on the way.
    for (message, cause) in [(&done, "done"), (&cut, "shutdown")] {
        assert_ended_once(&daemon, &thread, message, cause).await;
    }
    assert_ended_once(&daemon, &erring, &failed, "error").await;
    daemon.stop().await;
}
