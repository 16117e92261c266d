//! The event bus: it takes a thread's events ([`ThreadEvent`], defined with the API in
//! `crate::api::events`), persists them in order (their id in the store is the SSE event id) and then
//! publishes them to live subscribers of the thread.
//!
//! Invariant: one writer task per daemon appends its events, so its ids follow the order events
//! were emitted in; a subscriber that reads the store up to id N and then the live channel from
//! N+1 misses nothing.
//!
//! On SQLite (one daemon) the writer publishes each stored row itself. On PostgreSQL other
//! daemons append to the same log, so the live channel is fed from the store instead: a
//! listener task hears every append's `NOTIFY` and the writer wakes it for its own appends; each
//! wake-up reads the thread's rows after the last one published (a thread's events commit in id
//! order, see `store::events`), so every event reaches a subscriber once, in id order, whichever
//! daemon stored it. After the listener (re)connects, every feed is read again. Idempotent
//! retries and MCP progress subscribe through the same bus, so a retry on node B of a turn
//! running on node A wakes at A's `turn_finished`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use plugin_contract::ThreadId;

use crate::api::events::ThreadEvent;
use crate::store::{EventListener, EventRow, MessageId, SharedEvents, Store, Wakeup};
use crate::sync::lock;

/// Live capacity per thread; a subscriber that falls this far behind re-reads from the store.
const CHANNEL_CAPACITY: usize = 1024;

struct Emit {
    thread: ThreadId,
    message: Option<MessageId>,
    event: ThreadEvent,
    done: Option<oneshot::Sender<()>>,
}

/// One thread's live channel on this daemon.
struct Feed {
    tx: broadcast::Sender<EventRow>,
    /// PostgreSQL only: the id of the last event published on `tx`; the next read of the store
    /// starts after it. `None` until the first subscriber has read where the log stands. Held
    /// across a read and its publishing, so two wake-ups never publish the same row.
    last: Arc<tokio::sync::Mutex<Option<i64>>>,
}

type Feeds = Arc<Mutex<HashMap<ThreadId, Arc<Feed>>>>;

#[derive(Clone)]
pub struct EventBus {
    tx: mpsc::UnboundedSender<Emit>,
    feeds: Feeds,
    /// `Some` on PostgreSQL, where other daemons append to the same log.
    shared: Option<SharedEvents>,
}

impl EventBus {
    /// Starts the writer task on `tasks`; it ends once every clone of the bus is dropped and the
    /// queue is written out. On PostgreSQL also starts the listener task, which ends when the
    /// store is closed.
    pub fn start(store: Store, tasks: &TaskTracker) -> EventBus {
        let (tx, mut rx) = mpsc::unbounded_channel::<Emit>();
        let feeds: Feeds = Arc::default();
        let shared = store.shared_events();
        let bus = EventBus {
            tx,
            feeds: feeds.clone(),
            shared: shared.clone(),
        };
        if let Some(shared) = &shared {
            tasks.spawn(listen(
                shared.listener(),
                Follower {
                    feeds: feeds.clone(),
                    store: store.clone(),
                    shared: shared.clone(),
                },
                tasks.clone(),
            ));
        }
        let follower = shared.map(|shared| Follower {
            feeds: feeds.clone(),
            store: store.clone(),
            shared,
        });
        tasks.spawn(async move {
            while let Some(emit) = rx.recv().await {
                let kind = emit.event.kind().as_str();
                match store
                    .append_event(&emit.thread, emit.message.as_ref(), kind, &emit.event.data())
                    .await
                {
                    Ok(row) => match &follower {
                        // Read from the store like any other event: a peer's event of this
                        // thread may have committed just before ours and not be published yet.
                        Some(follower) => follower.catch_up(&emit.thread, Some(row.id)).await,
                        None => {
                            let feed = lock(&feeds).get(&emit.thread).cloned();
                            if let Some(feed) = feed {
                                let _ = feed.tx.send(row);
                            }
                        }
                    },
                    Err(err) => {
                        warn!(thread_id = %emit.thread, kind, error = %err, "Could not store an event.")
                    }
                }
                if let Some(done) = emit.done {
                    let _ = done.send(());
                }
            }
        });
        bus
    }

    /// Queues an event of `thread` (and of the turn of user message `message`, when there is
    /// one); never blocks.
    pub fn emit(&self, thread: &ThreadId, message: Option<&MessageId>, event: ThreadEvent) {
        let _ = self.tx.send(Emit {
            thread: thread.clone(),
            message: message.cloned(),
            event,
            done: None,
        });
    }

    /// Queues an event and waits until it is stored and published.
    pub async fn emit_and_wait(
        &self,
        thread: &ThreadId,
        message: Option<&MessageId>,
        event: ThreadEvent,
    ) {
        let (done, wait) = oneshot::channel();
        let emit = Emit {
            thread: thread.clone(),
            message: message.cloned(),
            event,
            done: Some(done),
        };
        if self.tx.send(emit).is_ok() {
            let _ = wait.await;
        }
    }

    /// Live events of a thread from now on: this daemon's, and on PostgreSQL every daemon's. An
    /// event stored before the call may still come through (the stored log is in the store);
    /// one stored after it always does, once.
    pub async fn subscribe(&self, thread: &ThreadId) -> broadcast::Receiver<EventRow> {
        let (rx, starting) = {
            let mut feeds = lock(&self.feeds);
            feeds.retain(|_, feed| feed.tx.receiver_count() > 0);
            match feeds.get(thread) {
                Some(feed) => (feed.tx.subscribe(), None),
                None => {
                    let feed = Arc::new(Feed {
                        tx: broadcast::channel(CHANNEL_CAPACITY).0,
                        last: Arc::default(),
                    });
                    // Held from before the feed is visible, so no wake-up reads ahead of us.
                    let starting = feed
                        .last
                        .clone()
                        .try_lock_owned()
                        .expect("a new feed's lock is free");
                    feeds.insert(thread.clone(), feed.clone());
                    (feed.tx.subscribe(), Some(starting))
                }
            }
        };
        if let (Some(mut last), Some(shared)) = (starting, &self.shared) {
            match shared.last_event_id(thread).await {
                Ok(id) => *last = Some(id),
                // The next wake-up tries again; events in between reach the stream's replay,
                // not the live channel.
                Err(err) => {
                    warn!(thread_id = %thread, error = %err, "Could not read where the event log stands.")
                }
            }
        }
        rx
    }
}

/// On PostgreSQL, what publishes stored events to this daemon's feeds: it reads each woken
/// thread's log after the last id it published. Order and exactly-once come from the ids (a
/// thread's events commit in id order, see `store::events`), not from the notifications, which
/// only say "look".
#[derive(Clone)]
struct Follower {
    feeds: Feeds,
    store: Store,
    shared: SharedEvents,
}

impl Follower {
    /// Publishes the thread's stored events after the feed's last one. `seen` is an id the
    /// caller knows is stored: when the feed is already past it there is nothing to read.
    async fn catch_up(&self, thread: &ThreadId, seen: Option<i64>) {
        let Some(feed) = lock(&self.feeds).get(thread).cloned() else {
            return;
        };
        if feed.tx.receiver_count() == 0 {
            return;
        }
        let mut last = feed.last.lock().await;
        let Some(mut after) = *last else {
            // The first subscriber could not read where the log stood; start from here.
            if let Ok(id) = self.shared.last_event_id(thread).await {
                *last = Some(id);
            }
            return;
        };
        if seen.is_some_and(|seen| seen <= after) {
            return;
        }
        loop {
            let rows = match self.store.events_after(thread, after, READ_BATCH).await {
                Ok(rows) => rows,
                Err(err) => {
                    warn!(thread_id = %thread, error = %err, "Could not read new events.");
                    return;
                }
            };
            let full = rows.len() == READ_BATCH as usize;
            for row in rows {
                after = row.id;
                *last = Some(after);
                let _ = feed.tx.send(row);
            }
            if !full {
                return;
            }
        }
    }

    /// Every feed, after the listener (re)connected: notifications may have been lost.
    async fn catch_up_all(&self, tasks: &TaskTracker) {
        let threads: Vec<ThreadId> = lock(&self.feeds).keys().cloned().collect();
        for thread in threads {
            let follower = self.clone();
            tasks.spawn(async move { follower.catch_up(&thread, None).await });
        }
    }
}

/// Rows read per query when catching up.
const READ_BATCH: u32 = 500;

/// The listener task: hears every stored event's notification and wakes the thread's feed, if
/// this daemon has one. Reconnects with back-off; ends when the store closes.
async fn listen(mut listener: EventListener, follower: Follower, tasks: TaskTracker) {
    let mut backoff = BACKOFF_MIN;
    loop {
        match listener.next().await {
            Ok(Some(Wakeup::Event { thread, id })) => {
                let known = lock(&follower.feeds).contains_key(&thread);
                if known {
                    let follower = follower.clone();
                    tasks.spawn(async move { follower.catch_up(&thread, Some(id)).await });
                }
            }
            Ok(Some(Wakeup::Connected)) => {
                backoff = BACKOFF_MIN;
                debug!("Listening for events stored by any daemon.");
                follower.catch_up_all(&tasks).await;
            }
            Ok(None) => return,
            Err(err) => {
                warn!(error = %err, retry_in = ?backoff, "Lost the event listener; reconnecting.");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
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
            EventBus::start(store_a.clone(), &tasks),
            EventBus::start(store_b.clone(), &tasks),
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
}
