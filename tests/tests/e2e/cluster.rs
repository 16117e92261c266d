//! Several nodes on one PostgreSQL database (issue #14): each thread has one owner, recorded in
//! its lease; a request reaching another node is forwarded there, so the warm process stays put;
//! a dead owner's threads are taken over once its lease expires and resume from the stored
//! transcript; the old owner's writes are fenced off by the epoch.

use std::time::Duration;

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use orchestrator::api::events::Audience;
use orchestrator::cluster::FORWARDED_HEADER;
use orchestrator::store::{Ending, Fence, MessageId, StoreError, TurnKey};
use plugin_contract::ThreadId;

use crate::support;

/// Long enough that no lease expires during a test that does not wait for it.
const TTL: Duration = Duration::from_secs(15);

/// Nodes A and B on a fresh database, leases of `ttl`.
pub(crate) async fn two_nodes(mock: &MockApi, ttl: Duration) -> (TestDaemon, TestDaemon) {
    let url = pg_test::database_url().await.expect("a test PostgreSQL");
    let a = TestDaemon::start_node(mock, &url, ttl, |_| {}).await;
    let b = TestDaemon::start_node(mock, &url, ttl, |_| {}).await;
    (a, b)
}

/// The node's id (`node_…`), as lease rows name it.
pub(crate) fn node_id(daemon: &TestDaemon) -> String {
    daemon
        .daemon()
        .cluster
        .as_ref()
        .expect("clustering is on")
        .node_id()
        .to_owned()
}

/// The thread's lease as stored: (owner, epoch).
pub(crate) async fn lease(daemon: &TestDaemon, thread: &str) -> (String, i64) {
    let lease = daemon
        .daemon()
        .store
        .lease(&ThreadId::from_string(thread))
        .await
        .expect("the lease reads")
        .expect("a lease row");
    (lease.owner, lease.epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_through_another_node_is_served_by_the_owners_warm_process() {
    let mock = MockApi::start().await;
    let (a, b) = two_nodes(&mock, TTL).await;
    let thread = a.create_thread().await;
    assert_eq!(a.reply(&thread, "first").await, "echo: first");
    let pid = a.pid_of(&thread).expect("A's process");

    assert_eq!(b.reply(&thread, "second").await, "echo: second");
    assert_eq!(b.spawns(), 0, "B started no process for A's thread");
    assert!(b.live_pids().is_empty());
    assert_eq!(a.spawns(), 1, "A's warm process served both turns");
    assert_eq!(a.pid_of(&thread), Some(pid));
    // Reads are served from the database by any node.
    support::assert_echoed_in_order(&b, &thread, &["first".into(), "second".into()]).await;

    assert_eq!(lease(&a, &thread).await, (node_id(&a), 1));

    // A request marked as forwarded is never forwarded again: B refuses it.
    let response = reqwest::Client::new()
        .post(format!("{}/api/threads/{thread}/messages", b.base))
        .header(FORWARDED_HEADER, "node_test")
        .json(&json!({"content": "third"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_owner", "{body}");
    assert_eq!(support::messages(&a, &thread).await.len(), 4);

    // A prewarm through B warms the owner's process, not one on B.
    let (status, body) = b.post("/api/prewarm", json!({"threadId": thread})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["threadId"], thread.as_str());
    assert_eq!(b.spawns(), 0);
    assert!(b.live_pids().is_empty());
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_messages_through_three_nodes_run_in_order_once_each() {
    let mock = MockApi::start().await;
    let url = pg_test::database_url().await.expect("a test PostgreSQL");
    let a = TestDaemon::start_node(&mock, &url, TTL, |_| {}).await;
    let b = TestDaemon::start_node(&mock, &url, TTL, |_| {}).await;
    let c = TestDaemon::start_node(&mock, &url, TTL, |_| {}).await;
    let thread = a.create_thread().await;
    let sent: Vec<String> = (0..9).map(|i| format!("question {i}")).collect();
    let nodes = [&a, &b, &c];
    let posts = sent
        .iter()
        .enumerate()
        .map(|(i, text)| nodes[i % 3].send(&thread, text));
    for (status, body) in join_all(posts).await {
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let mut messages = support::messages(&a, &thread).await;
    messages.sort_by_key(|m| m["seq"].as_i64());
    let order: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    let mut seen = order.clone();
    seen.sort();
    assert_eq!(seen, sent, "every message exactly once");
    // Answered in the order they were stored (`seq`), each once, each by its own echo.
    let users: Vec<&Value> = messages.iter().filter(|m| m["role"] == "user").collect();
    let replies: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(replies.len(), users.len());
    for (user, reply) in users.iter().zip(&replies) {
        assert_eq!(reply["replyTo"], user["id"], "replies follow the seq order");
        assert_eq!(
            reply["content"],
            format!("echo: {}", user["content"].as_str().unwrap())
        );
        assert_eq!(user["status"], "done");
    }
    assert_eq!((b.spawns(), c.spawns()), (0, 0));
    assert_eq!(a.spawns(), 1);
    a.stop().await;
    b.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owners_thread_is_taken_over_with_its_history_and_the_old_epoch_is_fenced() {
    let mock = MockApi::start().await;
    let ttl = Duration::from_secs(2);
    let url = pg_test::database_url().await.expect("a test PostgreSQL");
    let a = TestDaemon::start_node(&mock, &url, ttl, |_| {}).await;
    let b = TestDaemon::start_node(&mock, &url, ttl, |_| {}).await;
    let thread = a.create_thread().await;
    assert_eq!(
        a.reply(&thread, "the secret word is tangerine").await,
        "echo: the secret word is tangerine"
    );
    let a_node = node_id(&a);
    let old = Fence {
        owner: a_node.clone(),
        epoch: 1,
    };
    // Dies like `kill -9`: its lease stays until it expires.
    a.abort().await;

    // B forwards, finds A unreachable, waits for the lease to expire, takes it, resumes.
    let started = std::time::Instant::now();
    assert_eq!(
        b.reply(&thread, "what was the word?").await,
        "echo: what was the word?"
    );
    assert!(started.elapsed() < ttl * 2 + Duration::from_secs(30));
    let last = mock.message_requests().last().unwrap().clone();
    assert!(
        last.all_text().contains("the secret word is tangerine"),
        "the full history reached the model"
    );
    assert_eq!(b.spawns(), 1);
    assert_eq!(lease(&b, &thread).await, (node_id(&b), 2));
    support::assert_echoed_in_order(
        &b,
        &thread,
        &[
            "the secret word is tangerine".into(),
            "what was the word?".into(),
        ],
    )
    .await;

    // A comes back (a new node on the same database): it serves nothing of the thread it lost,
    // and a write carrying its old epoch is refused.
    let a2 = TestDaemon::start_node(&mock, &url, ttl, |_| {}).await;
    assert_eq!(a2.reply(&thread, "and now?").await, "echo: and now?");
    assert_eq!(a2.spawns(), 0, "forwarded to B");
    let messages = support::messages(&b, &thread).await;
    let pending = messages
        .iter()
        .find(|m| m["content"] == "and now?")
        .unwrap();
    let (thread_id, message_id) = (
        ThreadId::from_string(thread.clone()),
        MessageId::from_string(pending["id"].as_str().unwrap()),
    );
    let cause = orchestrator::store::EndCause::Error;
    let ending = Ending::failed(cause, "a stale owner");
    let turn = TurnKey {
        thread: &thread_id,
        message: &message_id,
    };
    let err = a2
        .daemon()
        .store
        .end_turn(
            turn,
            ending,
            Some(&old),
            &orchestrator::events::announce(None, &ending, &Audience::of(turn), None),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost(_)), "{err:?}");
    support::assert_echoed_in_order(
        &b,
        &thread,
        &[
            "the secret word is tangerine".into(),
            "what was the word?".into(),
            "and now?".into(),
        ],
    )
    .await;
    a2.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_releases_the_leases_at_once() {
    let mock = MockApi::start().await;
    let (a, b) = two_nodes(&mock, TTL).await;
    let thread = a.create_thread().await;
    a.reply(&thread, "hello").await;
    a.stop().await;
    // No TTL to wait: B takes the thread as soon as it is asked.
    let started = std::time::Instant::now();
    assert_eq!(b.reply(&thread, "again").await, "echo: again");
    assert!(started.elapsed() < TTL, "{:?}", started.elapsed());
    assert_eq!(lease(&b, &thread).await, (node_id(&b), 2));
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_short_by_a_dead_owner_is_interrupted_at_takeover_and_runs_again_on_retry() {
    let mock = MockApi::start().await;
    let ttl = Duration::from_secs(2);
    let (a, b) = two_nodes(&mock, ttl).await;
    let thread = a.create_thread().await;
    a.reply(&thread, "hello").await;
    // A dies in the middle of a turn.
    mock.once_when_prompt_contains(
        "slow question",
        Reply::slow_text(["echo: ", "slow ", "question"], Duration::from_secs(30)),
    );
    let body = json!({"content": "slow question", "clientMessageId": "retry-me"});
    let (status, accepted) = a
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            body.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    mock.wait_for_requests(2, Duration::from_secs(30))
        .await
        .unwrap();
    a.abort().await;

    // The retry reaches B: it takes the thread over, which ends A's turn `interrupted`, and the
    // same clientMessageId runs it again, once.
    let (status, reply) = b
        .post(&format!("/api/threads/{thread}/messages"), body)
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["message"]["content"], "echo: slow question");
    assert_eq!(reply["userMessageId"], accepted["messageId"]);
    // The turn A never finished ended on the thread's stream at the takeover, then ran again.
    let events = b
        .daemon()
        .store
        .events_after(&ThreadId::from_string(&thread), 0, 1000)
        .await
        .unwrap();
    let ends: Vec<_> = events
        .iter()
        .filter(|e| e.message_id.as_ref().map(|m| m.as_str()) == accepted["messageId"].as_str())
        .filter(|e| e.kind == "turn_failed" || e.kind == "turn_finished")
        .collect();
    let kinds: Vec<&str> = ends.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["turn_failed", "turn_finished"], "{events:?}");
    assert_eq!(ends[0].data["status"], "interrupted", "{:?}", ends[0]);
    assert_eq!(ends[0].data["cause"], "takeover", "{:?}", ends[0]);
    // One outcome per run, each naming its event: the takeover's, then the retry's.
    let outcomes = b
        .daemon()
        .store
        .outcomes_of(&MessageId::from_string(
            accepted["messageId"].as_str().expect("an id"),
        ))
        .await
        .unwrap();
    let seen: Vec<(&str, i64)> = outcomes
        .iter()
        .map(|o| (o.cause.as_str(), o.event_id))
        .collect();
    assert_eq!(seen, [("takeover", ends[0].id), ("done", ends[1].id)]);

    let messages = support::messages(&b, &thread).await;
    let users: Vec<&Value> = messages.iter().filter(|m| m["role"] == "user").collect();
    let contents: Vec<&str> = users.iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(contents, ["hello", "slow question"], "each message once");
    for user in &users {
        assert_eq!(user["status"], "done", "{user}");
        let replies: Vec<&Value> = messages
            .iter()
            .filter(|m| m["replyTo"] == user["id"])
            .collect();
        assert_eq!(replies.len(), 1, "one reply to {user}");
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertise_on_sqlite_stops_start_up() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config =
        harness_tests::daemon::test_config(&mock, dir.path(), "/nonexistent/claude".into());
    config.cluster.advertise = Some("auto".into());
    let err = match orchestrator::server::start(config, Vec::new()).await {
        Ok(running) => {
            running.stop().await;
            panic!("a clustered daemon started on SQLite");
        }
        Err(err) => err.to_string(),
    };
    assert!(err.contains("PostgreSQL"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_lease_was_taken_evicts_the_threads_process() {
    let mock = MockApi::start().await;
    let (a, b) = two_nodes(&mock, Duration::from_secs(3)).await;
    let thread = a.create_thread().await;
    a.reply(&thread, "hello").await;
    let pid = a.pid_of(&thread).expect("A's process");
    // As if A's heartbeats stalled past the TTL: its lease looks expired, and B takes the thread.
    a.daemon().store.release_leases(&node_id(&a)).await.unwrap();
    assert_eq!(b.reply(&thread, "again").await, "echo: again");
    assert_eq!(b.spawns(), 1);
    // A's next heartbeat finds the lease gone and kills its process for the thread.
    harness_tests::util::eventually(Duration::from_secs(10), "A evicted the thread", || {
        a.pid_of(&thread).is_none() && !harness_tests::util::process_exists(pid)
    })
    .await
    .unwrap();
    // A forwards to B now.
    assert_eq!(a.reply(&thread, "via A").await, "echo: via A");
    assert_eq!(a.spawns(), 1);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_back_on_its_first_node_resumes_what_the_peer_added() {
    let mock = MockApi::start().await;
    let (a, b) = two_nodes(&mock, TTL).await;
    let thread = a.create_thread().await;
    a.reply(&thread, "the first word is apricot").await;
    // As if A stalled past the TTL: B takes the thread over and goes on with it, from the
    // stored transcript. A keeps its own copy of the session's file, which B's turn is not in.
    a.daemon().store.release_leases(&node_id(&a)).await.unwrap();
    b.reply(&thread, "the second word is banana").await;
    assert_eq!(b.spawns(), 1);
    // Now B stalls, and the thread comes back to A: it must not resume its older copy.
    b.daemon().store.release_leases(&node_id(&b)).await.unwrap();
    assert_eq!(
        a.reply(&thread, "which words were they?").await,
        "echo: which words were they?"
    );
    let last = mock.message_requests().last().unwrap().clone();
    for word in ["apricot", "banana"] {
        assert!(
            last.all_text().contains(word),
            "{word} reached the model: {}",
            last.all_text()
        );
    }
    assert_eq!(a.spawns(), 2, "A's first process had not seen B's turn");
    assert_eq!(lease(&a, &thread).await, (node_id(&a), 3));
    a.stop().await;
    b.stop().await;
}
