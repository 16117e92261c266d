//! Events from any node (issue #14): two daemons on one PostgreSQL database, no clustering
//! configured. A thread's event stream through B carries the turns A runs, live and from
//! `Last-Event-ID`, once each with A's stored ids; a retry through B waits for A's turn.

use std::time::Duration;

use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};

use crate::support::{self, SseClient, SseEvent};

/// The kinds of one plain turn, in order (its text deltas folded into one; the model request's
/// pair left out, as its end may come before or after the text it brought).
const TURN: [&str; 6] = [
    "message_received",
    "turn_started",
    "process_ready",
    "text_delta",
    "assistant_text",
    "turn_finished",
];

async fn two_daemons_on_one_database(mock: &MockApi) -> (TestDaemon, TestDaemon) {
    let url = pg_test::database_url().await.expect("a test PostgreSQL");
    // Each its own data directory; only the database is shared.
    let a = TestDaemon::start(mock, |c| c.db = Some(url.clone())).await;
    let b = TestDaemon::start(mock, |c| c.db = Some(url.clone())).await;
    assert_ne!(a.data_dir(), b.data_dir());
    (a, b)
}

/// The kinds in order, consecutive repeats folded, without the model requests'.
fn kinds(events: &[SseEvent]) -> Vec<&str> {
    let mut kinds: Vec<&str> = events
        .iter()
        .map(|e| e.kind.as_str())
        .filter(|kind| !kind.starts_with("model_request_"))
        .collect();
    kinds.dedup();
    kinds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_through_b_follows_and_replays_what_a_produced() {
    let mock = MockApi::start().await;
    let (a, b) = two_daemons_on_one_database(&mock).await;
    let thread = a.create_thread().await;
    mock.once_when_prompt_contains(
        "from a",
        Reply::slow_text(
            ["one ", "two ", "three ", "four"],
            Duration::from_millis(150),
        ),
    );

    let mut sse = SseClient::connect(&b.base, &thread, None).await;
    let (status, body) = a
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": "from a"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let live = sse
        .until(Duration::from_secs(30), support::is_terminal)
        .await
        .unwrap();

    assert_eq!(kinds(&live), TURN, "{live:?}");
    let stored = support::stored_events(&a, &thread).await;
    let stored_ids: Vec<i64> = stored.iter().map(|e| e.id).collect();
    let live_ids: Vec<i64> = live.iter().map(|e| e.id).collect();
    assert_eq!(live_ids, stored_ids, "A's events, each once, with A's ids");
    let text: String = live
        .iter()
        .filter(|e| e.kind == "text_delta")
        .map(|e| e.data["data"]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(text, "one two three four");
    // Nothing more follows the turn's end.
    assert!(sse.next(Duration::from_millis(300)).await.is_err());
    drop(sse);

    // Back to B from the middle of the turn: the rest, nothing twice.
    let middle = live.len() / 2;
    let mut again = SseClient::connect(&b.base, &thread, Some(live_ids[middle])).await;
    let rest = again
        .until(Duration::from_secs(10), support::is_terminal)
        .await
        .unwrap();
    assert_eq!(rest, live[middle + 1..], "replayed from Last-Event-ID");
    assert!(again.next(Duration::from_millis(300)).await.is_err());

    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_through_b_waits_for_the_turn_running_on_a() {
    let mock = MockApi::start().await;
    let (a, b) = two_daemons_on_one_database(&mock).await;
    let thread = a.create_thread().await;
    mock.once_when_prompt_contains(
        "only once",
        Reply::slow_text(["echo: ", "only ", "once"], Duration::from_millis(300)),
    );
    let path = format!("/api/threads/{thread}/messages");
    let body = json!({"content": "only once", "clientMessageId": "across-1"});

    let first = a.post(&path, body.clone());
    let retry = async {
        // The client gave up on A and retries through B while A's turn runs.
        mock.wait_for_requests(1, Duration::from_secs(30))
            .await
            .unwrap();
        b.post(&path, body.clone()).await
    };
    let ((s1, b1), (s2, b2)) = tokio::join!(first, retry);
    assert_eq!((s1.as_u16(), s2.as_u16()), (200, 200), "{b1} {b2}");
    assert_eq!(b1["message"]["content"], "echo: only once");
    assert_eq!(b2["message"], b1["message"], "B answers with A's reply");
    let runs = mock
        .message_requests()
        .iter()
        .filter(|r| r.last_user_text().contains("only once"))
        .count();
    assert_eq!(runs, 1, "the turn ran once, on A");

    a.stop().await;
    b.stop().await;
}
