use super::*;

use crate::api::events::TurnFailed;
use crate::store::{MessageStatus, NewThread};

fn text(text: &str) -> ThreadEvent {
    ThreadEvent::TextDelta(claude_cli::TextDelta { text: text.into() })
}

fn failed(error: &str) -> ThreadEvent {
    ThreadEvent::TurnFailed(TurnFailed {
        message_id: MessageId::from_string("msg_1"),
        status: MessageStatus::Error,
        cause: crate::store::EndCause::Error,
        error: error.into(),
        budget: None,
    })
}

/// Two stores and event buses on one PostgreSQL database, as two daemons have, and a thread.
struct TwoDaemons {
    store_a: Store,
    store_b: Store,
    a: EventBus,
    b: EventBus,
    thread: ThreadId,
    _tasks: TaskTracker,
}

/// [`TwoDaemons`]; `None` (the test is skipped) where `HARNESS_TEST_PG=skip` and no
/// PostgreSQL is installed.
async fn two_daemons() -> Option<TwoDaemons> {
    if std::env::var("HARNESS_TEST_PG").as_deref() == Ok("skip") && !pg_test::available() {
        return None;
    }
    let url = pg_test::database_url().await.expect("a test PostgreSQL");
    let (store_a, store_b) = (
        Store::open(&url).await.unwrap(),
        Store::open(&url).await.unwrap(),
    );
    let tasks = TaskTracker::new();
    let (a, b) = (
        EventBus::start(store_a.clone(), &tasks, None),
        EventBus::start(store_b.clone(), &tasks, None),
    );
    let thread = store_a
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .id;
    Some(TwoDaemons {
        store_a,
        store_b,
        a,
        b,
        thread,
        _tasks: tasks,
    })
}

/// Two buses on one PostgreSQL database, as two daemons have: a subscriber on B gets A's
/// events and B's own, once each, in id order; a wait that subscribed on B sees A's terminal
/// event. Skipped where `HARNESS_TEST_PG=skip` and no PostgreSQL is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_on_one_daemon_follows_events_stored_by_another() {
    let Some(TwoDaemons {
        store_a,
        store_b,
        a,
        b,
        thread: t,
        _tasks,
    }) = two_daemons().await
    else {
        return;
    };
    a.emit_and_wait(&t, None, text("before")).await;

    let mut live = b.subscribe(&t).await;
    for (bus, said) in [(&a, "a1"), (&b, "b1"), (&a, "a2"), (&a, "a3"), (&b, "b2")] {
        bus.emit(&t, None, text(said));
    }
    a.emit(&t, None, failed("end"));

    let mut got = Vec::new();
    while got.len() < 6 {
        let row = tokio::time::timeout(Duration::from_secs(10), live.recv())
            .await
            .expect("the next event within 10 s")
            .unwrap();
        got.push(row);
    }
    let stored = store_b.events_after(&t, 0, 100).await.unwrap();
    assert_eq!(
        got.iter().map(|e| e.id).collect::<Vec<_>>(),
        stored[1..].iter().map(|e| e.id).collect::<Vec<_>>(),
        "every event after the subscription, once, in id order"
    );
    // Each daemon's events keep their order; the two daemons' interleave.
    let texts: Vec<&str> = got
        .iter()
        .filter_map(|e| e.data["text"].as_str().or(e.data["error"].as_str()))
        .collect();
    let from = |prefix: &[&str]| -> Vec<&str> {
        texts
            .iter()
            .copied()
            .filter(|t| prefix.contains(t))
            .collect()
    };
    assert_eq!(
        from(&["a1", "a2", "a3", "end"]),
        ["a1", "a2", "a3", "end"],
        "{texts:?}"
    );
    assert_eq!(from(&["b1", "b2"]), ["b1", "b2"], "{texts:?}");
    assert!(got.iter().any(|e| e.kind == "turn_failed"));
    assert!(matches!(
        live.try_recv(),
        Err(broadcast::error::TryRecvError::Empty)
    ));
    store_a.close().await;
    store_b.close().await;
}

/// The listeners' connections are killed: after reconnecting, every feed is read again, so
/// a row whose notification was lost (here: one that never had one) still reaches B's
/// subscriber, and notifications flow again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listener_reconnects_and_nothing_is_missed() {
    let Some(TwoDaemons {
        store_a,
        store_b,
        a,
        b,
        thread: t,
        _tasks,
    }) = two_daemons().await
    else {
        return;
    };
    let mut live = b.subscribe(&t).await;
    let listeners = "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND query ILIKE 'LISTEN%'";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while store_a.test_count(listeners).await < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "both listeners connect"
        );
        tokio::task::yield_now().await;
    }

    // A row no notification announces: only the re-read after reconnecting can find it.
    store_a
        .test_execute(&format!(
            "INSERT INTO events (thread_id, kind, data, created_at)
             VALUES ('{t}', 'text_delta', '{{\"text\":\"unannounced\"}}',
                     '2026-01-01T00:00:00.000000Z')"
        ))
        .await;
    store_a
        .test_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
        )
        .await;
    let row = tokio::time::timeout(Duration::from_secs(10), live.recv())
        .await
        .expect("the event within 10 s")
        .unwrap();
    assert_eq!(row.data, serde_json::json!({"text": "unannounced"}));

    a.emit(&t, None, text("after"));
    let row = tokio::time::timeout(Duration::from_secs(10), live.recv())
        .await
        .expect("the next event within 10 s")
        .unwrap();
    assert_eq!(row.data, serde_json::json!({"text": "after"}));
    assert!(matches!(
        live.try_recv(),
        Err(broadcast::error::TryRecvError::Empty)
    ));
    store_a.close().await;
    store_b.close().await;
}

/// A bus on a fresh SQLite store, with live channels of `capacity` events, and a thread.
async fn one_daemon(capacity: usize) -> (EventBus, Store, ThreadId, TaskTracker) {
    let store = Store::open(":memory:").await.unwrap();
    let tasks = TaskTracker::new();
    let bus = EventBus::start(store.clone(), &tasks, None).with_capacity(capacity);
    let thread = store.create_thread(NewThread::default()).await.unwrap().id;
    (bus, store, thread, tasks)
}

/// The next `n` events of `follow`, each within 10 s.
async fn take(follow: &mut Follow, n: usize) -> Vec<EventRow> {
    let mut got = Vec::new();
    while got.len() < n {
        let row = tokio::time::timeout(Duration::from_secs(10), follow.next())
            .await
            .expect("the next event within 10 s")
            .unwrap()
            .expect("the bus is open");
        got.push(row);
    }
    got
}

/// Nothing more comes within a moment.
async fn assert_quiet(follow: &mut Follow) {
    let next = tokio::time::timeout(Duration::from_millis(200), follow.next()).await;
    assert!(next.is_err(), "one event too many: {next:?}");
}

fn ids(rows: &[EventRow]) -> Vec<i64> {
    rows.iter().map(|row| row.id).collect()
}

/// Stored events, then live ones: each once, in id order, with nothing lost or repeated where
/// the replay meets the live channel (an event stored after the subscription is in both).
#[tokio::test]
async fn a_follow_replays_then_goes_live_without_a_duplicate_at_the_seam() {
    let (bus, store, t, _tasks) = one_daemon(1024).await;
    for said in ["s1", "s2", "s3"] {
        bus.emit_and_wait(&t, None, text(said)).await;
    }
    let mut follow = bus.follow(&t, 0).await;
    // Stored and published before the replay reads: in the store and in the channel.
    bus.emit_and_wait(&t, None, text("l1")).await;
    let first = take(&mut follow, 4).await;
    bus.emit_and_wait(&t, None, text("l2")).await;
    let second = take(&mut follow, 1).await;
    assert_quiet(&mut follow).await;

    let got: Vec<EventRow> = first.into_iter().chain(second).collect();
    let stored = store.events_after(&t, 0, 100).await.unwrap();
    assert_eq!(ids(&got), ids(&stored));
    let texts: Vec<&str> = got.iter().filter_map(|e| e.data["text"].as_str()).collect();
    assert_eq!(texts, ["s1", "s2", "s3", "l1", "l2"]);
}

/// `after` in the middle of the log: the events after it, then live ones.
#[tokio::test]
async fn a_follow_from_the_middle_starts_after_it() {
    let (bus, store, t, _tasks) = one_daemon(1024).await;
    for said in ["a", "b", "c", "d"] {
        bus.emit_and_wait(&t, None, text(said)).await;
    }
    let stored = store.events_after(&t, 0, 100).await.unwrap();
    let mut follow = bus.follow(&t, stored[1].id).await;
    bus.emit_and_wait(&t, None, text("e")).await;
    let got = take(&mut follow, 3).await;
    assert_quiet(&mut follow).await;
    let texts: Vec<&str> = got.iter().filter_map(|e| e.data["text"].as_str()).collect();
    assert_eq!(texts, ["c", "d", "e"]);

    // From now: only what comes next.
    let mut from_now = bus.follow_from_now(&t).await.unwrap();
    bus.emit_and_wait(&t, None, text("f")).await;
    let got = take(&mut from_now, 1).await;
    assert_eq!(got[0].data["text"], "f");
    assert_quiet(&mut from_now).await;
}

/// The stored events only: those after `after`, over more than one page, then the end, even
/// when more events come while it is read.
#[tokio::test]
async fn a_stored_follow_ends_after_the_newest_stored_event() {
    let (bus, store, t, _tasks) = one_daemon(1024).await;
    for n in 0..620 {
        bus.emit_and_wait(&t, None, text(&format!("e{n}"))).await;
    }
    let stored = store.events_after(&t, 0, 1000).await.unwrap();
    let mut follow = bus.stored(&t, stored[9].id);
    let got = take(&mut follow, 610).await;
    assert_eq!(ids(&got), ids(&stored[10..]));
    bus.emit_and_wait(&t, None, text("later")).await;
    let end = tokio::time::timeout(Duration::from_secs(10), follow.next()).await;
    assert!(matches!(end, Ok(Ok(None))), "it ends: {end:?}");
}

/// A subscriber that falls behind more than the live channel holds (here 2 events) misses
/// nothing: the follow reads what the channel dropped from the store, in order, once.
#[tokio::test]
async fn a_follow_that_lags_reads_what_it_missed_from_the_store() {
    let (bus, store, t, _tasks) = one_daemon(2).await;
    bus.emit_and_wait(&t, None, text("before")).await;
    let mut follow = bus.follow(&t, 0).await;
    assert_eq!(take(&mut follow, 1).await[0].data["text"], "before");
    for i in 0..10 {
        bus.emit_and_wait(&t, None, text(&format!("burst {i}")))
            .await;
    }
    let got = take(&mut follow, 10).await;
    bus.emit_and_wait(&t, None, text("after")).await;
    let after = take(&mut follow, 1).await;
    assert_quiet(&mut follow).await;

    let stored = store.events_after(&t, 0, 100).await.unwrap();
    let got: Vec<EventRow> = got.into_iter().chain(after).collect();
    assert_eq!(ids(&got), ids(&stored[1..]));
    assert_eq!(got.last().unwrap().data["text"], "after");
}
