//! The thread's event stream (`GET /api/threads/{id}/events`): a client connecting mid-turn gets
//! the turn so far and then live events; a client reconnecting with `Last-Event-ID` gets exactly
//! what it missed, and `live=false` the stored ones only; a `?wait=false` reply arrives on the stream and in the thread; each model
//! request and the thread's archive are on it.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, MockUsage, Reply};
use harness_tests::util::eventually_async;

use crate::support::{self, SseClient, SseEvent};

const CHUNKS: usize = 10;

/// A reply of ten chunks, 200 ms apart.
fn slow_reply() -> (Reply, String) {
    let chunks: Vec<String> = (0..CHUNKS).map(|i| format!("part{i} ")).collect();
    let text = chunks.concat();
    (Reply::slow_text(chunks, Duration::from_millis(200)), text)
}

/// Posts with `?wait=false` and returns the message id.
async fn post_no_wait(daemon: &TestDaemon, thread: &str, content: &str) -> String {
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": content}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["messageId"].as_str().expect("messageId").to_owned()
}

async fn stored_text_deltas(daemon: &TestDaemon, thread: &str) -> usize {
    support::stored_events(daemon, thread)
        .await
        .iter()
        .filter(|e| e.kind == "text_delta")
        .count()
}

fn assert_ids_strictly_increase(events: &[SseEvent]) {
    for pair in events.windows(2) {
        assert!(pair[0].id < pair[1].id, "ids must increase: {pair:?}");
    }
}

fn text_of(events: &[SseEvent]) -> String {
    events
        .iter()
        .filter(|e| e.kind == "text_delta")
        .map(|e| e.data["data"]["text"].as_str().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_connecting_mid_turn_gets_the_turn_so_far_then_live_events() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let (reply, text) = slow_reply();
    mock.once_when_prompt_contains("stream me", reply);

    let message_id = post_no_wait(&daemon, &thread, "stream me").await;
    eventually_async(Duration::from_secs(20), "two deltas stored", || async {
        stored_text_deltas(&daemon, &thread).await >= 2
    })
    .await
    .unwrap();
    let mut sse = SseClient::connect(&daemon.base, &thread, None).await;
    let events = sse
        .until(Duration::from_secs(20), support::is_terminal)
        .await
        .unwrap();

    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds[..3],
        ["message_received", "turn_started", "process_ready"],
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"turn_finished"));
    assert_ids_strictly_increase(&events);
    assert!(events
        .iter()
        .all(|e| e.data["messageId"] == message_id.as_str()));
    assert_eq!(text_of(&events), text, "every piece once, in order");
    assert_eq!(kinds.iter().filter(|k| **k == "text_delta").count(), CHUNKS);
    let finished = events.last().expect("the terminal event");
    assert_eq!(finished.data["data"]["reply"]["content"], text.as_str());
    assert_eq!(
        finished.data["data"]["reply"]["replyTo"],
        message_id.as_str()
    );

    // The stream holds what the store holds: no gaps.
    let stored: Vec<i64> = support::stored_events(&daemon, &thread)
        .await
        .iter()
        .map(|e| e.id)
        .collect();
    let seen: Vec<i64> = events.iter().map(|e| e.id).collect();
    assert_eq!(seen, stored);

    // The `?wait=false` reply is in the thread too.
    let stored_reply = support::messages(&daemon, &thread)
        .await
        .into_iter()
        .find(|m| m["replyTo"] == message_id.as_str())
        .expect("the reply is stored");
    assert_eq!(stored_reply["content"], text.as_str());
    assert_eq!(
        support::message(&daemon, &thread, &message_id).await["status"],
        "done"
    );

    // Live: the next turn arrives on the same connection.
    let next = post_no_wait(&daemon, &thread, "and live").await;
    let live = sse
        .until(Duration::from_secs(20), support::is_terminal)
        .await
        .unwrap();
    assert_eq!(live[0].kind, "message_received");
    assert!(live.iter().all(|e| e.data["messageId"] == next.as_str()));
    assert_eq!(text_of(&live), "echo: and live");
    assert!(live[0].id > events.last().map_or(0, |e| e.id));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_with_last_event_id_gets_exactly_the_missed_events() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let (reply, text) = slow_reply();
    mock.once_when_prompt_contains("reconnect", reply);

    let mut sse = SseClient::connect(&daemon.base, &thread, None).await;
    let message_id = post_no_wait(&daemon, &thread, "reconnect").await;
    let mut first = sse
        .until(Duration::from_secs(20), |e| e.kind == "text_delta")
        .await
        .unwrap();
    first.push(sse.next(Duration::from_secs(5)).await.unwrap());
    let last_seen = first.last().map(|e| e.id).expect("events");
    drop(sse);

    // While the client is away the turn goes on, and another message arrives.
    let deltas_when_dropped = stored_text_deltas(&daemon, &thread).await;
    eventually_async(Duration::from_secs(20), "missed deltas", || async {
        stored_text_deltas(&daemon, &thread).await >= deltas_when_dropped + 2
    })
    .await
    .unwrap();
    let during = post_no_wait(&daemon, &thread, "sent while away").await;

    let mut sse = SseClient::connect(&daemon.base, &thread, Some(last_seen)).await;
    let mut second = sse
        .until(Duration::from_secs(20), |e| {
            support::is_terminal(e) && e.data["messageId"] == during.as_str()
        })
        .await
        .unwrap();
    assert!(
        second[0].id > last_seen,
        "nothing from before Last-Event-ID"
    );
    let mut all = first.clone();
    all.append(&mut second.clone());
    assert_ids_strictly_increase(&all);
    let ids: HashSet<i64> = all.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), all.len(), "no duplicates");
    let stored: Vec<i64> = support::stored_events(&daemon, &thread)
        .await
        .iter()
        .map(|e| e.id)
        .collect();
    let seen: Vec<i64> = all.iter().map(|e| e.id).collect();
    assert_eq!(seen, stored, "no gaps");
    let of_first: Vec<SseEvent> = all
        .iter()
        .filter(|e| e.data["messageId"] == message_id.as_str())
        .cloned()
        .collect();
    assert_eq!(text_of(&of_first), text);
    assert!(second
        .iter()
        .any(|e| e.kind == "message_received" && e.data["data"]["content"] == "sent while away"));

    // `?after=` is the same as the header.
    let mut by_query = SseClient::connect_url(
        &format!(
            "{}/api/threads/{thread}/events?after={last_seen}",
            daemon.base
        ),
        None,
    )
    .await;
    let replay = by_query
        .until(Duration::from_secs(10), |e| {
            e.id == second.last().map_or(0, |l| l.id)
        })
        .await
        .unwrap();
    second.truncate(replay.len());
    assert_eq!(replay, second);

    // `live=false`: the stored events after `after`, then the stream ends.
    let url = format!(
        "{}/api/threads/{thread}/events?live=false&after={last_seen}",
        daemon.base
    );
    let body = tokio::time::timeout(Duration::from_secs(10), async {
        let response = reqwest::get(&url).await.expect("the replay answers");
        response.text().await.expect("its body")
    })
    .await
    .expect("a replay without live events ends");
    let replayed: Vec<i64> = body
        .lines()
        .filter_map(|line| line.strip_prefix("id:"))
        .map(|id| id.trim().parse().expect("an event id"))
        .collect();
    let stored: Vec<i64> = support::stored_events(&daemon, &thread)
        .await
        .iter()
        .map(|e| e.id)
        .filter(|id| *id > last_seen)
        .collect();
    assert!(!stored.is_empty());
    assert_eq!(replayed, stored);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_of_an_unknown_thread_is_a_404() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (status, body) = daemon.get("/api/threads/thr_nope/events").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "thread_not_found");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stream_gets_keep_alives_and_stays_open() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let mut sse = SseClient::connect(&daemon.base, &thread, None).await;
    // The daemon sends a keep-alive comment every 15 s on an idle stream.
    sse.next_comment(Duration::from_secs(20))
        .await
        .expect("a keep-alive comment");
    let message_id = post_no_wait(&daemon, &thread, "after a quiet spell").await;
    let events = sse
        .until(Duration::from_secs(20), support::is_terminal)
        .await
        .expect("events still arrive on the same connection");
    assert!(events
        .iter()
        .all(|e| e.data["messageId"] == message_id.as_str()));
    assert_eq!(text_of(&events), "echo: after a quiet spell");
    daemon.stop().await;
}

/// What the mock reports for every model request of [`model_requests_and_the_archive_are_on_the_stream`].
const REPORTED: MockUsage = MockUsage {
    input_tokens: 321,
    output_tokens: 12,
    cache_read_input_tokens: 45,
    cache_creation_input_tokens: 6,
};

/// Each model request of a turn is on the stream (the model gateway's): `model_request_started`
/// before the text it brings, then `model_request_finished` naming it, with the tokens the API
/// reported; archiving the thread is the stream's last event, `thread_archived`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_requests_and_the_archive_are_on_the_stream() {
    let mock = MockApi::start().await;
    mock.report_usage(REPORTED);
    mock.when_prompt_contains(
        "with spans",
        Reply::slow_text(["one ", "two"], Duration::from_millis(100)),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let mut sse = SseClient::connect(&daemon.base, &thread, None).await;
    let message = post_no_wait(&daemon, &thread, "with spans").await;
    let mut events = sse
        .until(Duration::from_secs(30), support::is_terminal)
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let started = kinds.iter().position(|k| *k == "model_request_started");
    let text = kinds.iter().position(|k| *k == "text_delta");
    assert!(
        started.is_some() && started < text,
        "a request starts before its text: {kinds:?}"
    );

    let (status, body) = daemon
        .post(&format!("/api/threads/{thread}/archive"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let rest = sse
        .until(Duration::from_secs(10), |e| e.kind == "thread_archived")
        .await
        .unwrap();
    events.extend(rest);
    assert_eq!(
        events.last().map(|e| e.kind.as_str()),
        Some("thread_archived")
    );
    let of_kind =
        |kind: &str| -> Vec<&SseEvent> { events.iter().filter(|e| e.kind == kind).collect() };
    let (starts, ends) = (
        of_kind("model_request_started"),
        of_kind("model_request_finished"),
    );
    assert_eq!(starts.len(), ends.len(), "{events:?}");
    for end in &ends {
        let data = &end.data["data"];
        let start = starts
            .iter()
            .find(|s| s.data["data"]["requestId"] == data["requestId"])
            .unwrap_or_else(|| panic!("the start of {data}"));
        assert!(start.id < end.id, "{events:?}");
        assert_eq!(data["status"], 200, "{data}");
        assert_eq!(data["isError"], false, "{data}");
        let tokens = [
            "inputTokens",
            "outputTokens",
            "cacheReadTokens",
            "cacheWriteTokens",
        ]
        .map(|k| data[k].as_u64());
        assert_eq!(tokens, [321, 12, 45, 6].map(Some), "{data}");
    }
    assert!(
        ends.iter().any(|e| e.data["messageId"] == message.as_str()),
        "the turn's request is under its message: {ends:?}"
    );
    daemon.stop().await;
}
