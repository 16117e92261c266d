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
