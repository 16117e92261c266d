//! Retention (#29): events of turns older than `retention.events_max_age` are compacted a whole
//! turn at a time; a replay from before the cut starts with `log_compacted` naming it, then goes
//! on; the thread's messages are untouched; the daemon's own task does it on its interval.

use std::time::Duration;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::eventually_async;
use plugin_contract::ThreadId;

use crate::support::{self, SseClient};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_from_before_the_cut_says_so_and_goes_on_after_it() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let store = daemon.daemon().store.clone();
    let thread = daemon.create_thread().await;
    let id = ThreadId::from_string(&thread);
    daemon.reply(&thread, "one").await;
    daemon.reply(&thread, "two").await;
    let cut = support::last_event_id(&daemon, &thread).await;
    // Turns ending after this are newer than the cut-off.
    let cutoff = orchestrator::store::now_text();
    daemon.reply(&thread, "three").await;
    let mut kept = support::stored_events(&daemon, &thread).await;
    kept.retain(|e| e.id > cut);
    assert_eq!(
        kept.first().map(|e| e.kind.as_str()),
        Some("message_received")
    );

    let removed = store.compact_events(&cutoff, 100).await.expect("compacts");
    assert!(removed >= 4, "two turns' events at least: {removed}");
    assert_eq!(store.compacted_through(&id).await.unwrap(), cut);
    let ids =
        |rows: &[orchestrator::store::EventRow]| rows.iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(&support::stored_events(&daemon, &thread).await),
        ids(&kept)
    );

    // From the start: the marker, then exactly what is left, then live events.
    let mut sse = SseClient::connect(&daemon.base, &thread, None).await;
    let marker = sse.next(WAIT).await.expect("the first frame");
    assert_eq!(marker.kind, "log_compacted");
    assert_eq!(marker.id, cut);
    assert_eq!(marker.data["data"]["compactedThrough"], cut);
    let replayed = sse.until(WAIT, support::is_terminal).await.unwrap();
    let replayed: Vec<i64> = replayed.iter().map(|e| e.id).collect();
    assert_eq!(replayed, ids(&kept));
    daemon.reply(&thread, "four").await;
    let live = sse.until(WAIT, support::is_terminal).await.unwrap();
    assert_eq!(live[0].kind, "message_received");
    assert!(live.iter().all(|e| e.kind != "log_compacted"));

    // From inside the cut (an old `Last-Event-ID`): the marker again; from the cut on: none.
    let mut sse = SseClient::connect(&daemon.base, &thread, Some(cut - 1)).await;
    assert_eq!(sse.next(WAIT).await.unwrap().kind, "log_compacted");
    let mut sse = SseClient::connect(&daemon.base, &thread, Some(cut)).await;
    let first = sse.next(WAIT).await.unwrap();
    assert_eq!(
        (first.id, first.kind.as_str()),
        (kept[0].id, "message_received")
    );

    // Every message of every turn is still there.
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    let contents: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(contents, ["one", "two", "three", "four"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_compacts_on_its_interval_and_the_next_turn_streams_whole() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |config| {
        config.retention.events_max_age = Duration::from_millis(1);
        config.retention.interval = Duration::from_millis(50);
        config.retention.vacuum_every = Duration::from_millis(200);
    })
    .await;
    let store = daemon.daemon().store.clone();
    let thread = daemon.create_thread().await;
    let id = ThreadId::from_string(&thread);
    daemon.reply(&thread, "one").await;
    // The id the turn's end was announced under (its events may be gone already).
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    let question = orchestrator::store::MessageId::from_string(
        body["messages"][0]["id"].as_str().expect("the message"),
    );
    let end = store.outcomes_of(&question).await.unwrap()[0].event_id;
    eventually_async(WAIT, "the turn's events compacted", || async {
        store.compacted_through(&id).await.unwrap() == end
    })
    .await
    .unwrap();
    assert!(support::stored_events(&daemon, &thread).await.is_empty());
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(body["messages"].as_array().unwrap().len(), 2);
    // The next turn streams whole to a client that was there from the start.
    let mut sse = SseClient::connect(&daemon.base, &thread, Some(end)).await;
    daemon.reply(&thread, "two").await;
    let live = sse.until(WAIT, support::is_terminal).await.unwrap();
    assert_eq!(live[0].kind, "message_received", "{live:?}");
    assert_eq!(live.last().unwrap().kind, "turn_finished");
}
