//! The event bus: it takes a thread's events ([`ThreadEvent`], defined with the API in
//! `crate::api::events`), persists them in order (their id in the store is the SSE event id) and then
//! publishes them to live subscribers of the thread.
//!
//! Invariant: one writer task per daemon appends its events, so its ids follow the order events
//! were emitted in; a subscriber that reads the store up to id N and then the live channel from
//! N+1 misses nothing. The same task writes the end of every turn (`end.rs`: the user message's
//! final status, the outcome and the terminal event in one transaction), after the turn's own
//! events. `end.rs` announces a turn's end as data (the terminal event and its webhook events,
//! `harness_db::Announcement`); `follow.rs` is the one replay-then-live stream every subscriber
//! reads (SSE, idempotent waits, `/mcp` progress).
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

use crate::api::events::{ThreadEvent, WebhookEvent};
use crate::store::{
    EventListener, EventRow, MessageId, SharedEvents, Store, StoreError, Wakeup, WebhookDraft,
};
use crate::sync::lock;
use crate::webhooks::Webhooks;

mod end;
mod follow;

pub use end::{announce, claim_lease, Ending, Reply};
pub use follow::Follow;

/// The webhook event an event of the stream stands for ([`WebhookEvent::of_event`]), when an
/// endpoint wants it (a turn's end has its own, written with the ending: `end.rs`).
async fn webhook_drafts(
    event: &ThreadEvent,
    thread: &ThreadId,
    webhooks: Option<&Webhooks>,
    store: &Store,
) -> Vec<WebhookDraft> {
    let (Some(hook), Some(webhooks)) = (WebhookEvent::of_event(thread, event), webhooks) else {
        return Vec::new();
    };
    // A thread's own endpoint hears every kind.
    let own = || async { matches!(store.thread_callback(thread).await, Ok(Some(_))) };
    let wanted = webhooks.wants(hook.kind().as_str()) || own().await;
    match wanted {
        true => vec![hook.draft()],
        false => Vec::new(),
    }
}

/// Live capacity per thread; a subscriber that falls this far behind re-reads from the store.
const CHANNEL_CAPACITY: usize = 1024;

/// What the writer task does next.
enum Job {
    Emit(Emit),
    End(end::EndJob),
}

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
    tx: mpsc::UnboundedSender<Job>,
    store: Store,
    feeds: Feeds,
    /// `Some` on PostgreSQL, where other daemons append to the same log.
    shared: Option<SharedEvents>,
    /// Live capacity per thread ([`CHANNEL_CAPACITY`]; the tests make it small).
    capacity: usize,
}

impl EventBus {
    /// Starts the writer task on `tasks`; it ends once every clone of the bus is dropped and the
    /// queue is written out. On PostgreSQL also starts the listener task, which ends when the
    /// store is closed.
    pub fn start(store: Store, tasks: &TaskTracker, webhooks: Option<Webhooks>) -> EventBus {
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        let feeds: Feeds = Arc::default();
        let shared = store.shared_events();
        let bus = EventBus {
            tx,
            store: store.clone(),
            feeds: feeds.clone(),
            shared: shared.clone(),
            capacity: CHANNEL_CAPACITY,
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
        let publisher = Publisher { feeds, follower };
        tasks.spawn(async move {
            while let Some(job) = rx.recv().await {
                match job {
                    Job::Emit(emit) => {
                        let kind = emit.event.kind().as_str();
                        let data = emit.event.data();
                        let message = emit.message.as_ref();
                        let hooks =
                            webhook_drafts(&emit.event, &emit.thread, webhooks.as_ref(), &store)
                                .await;
                        let appended = store
                            .append_announced(&emit.thread, message, kind, &data, &hooks)
                            .await;
                        if !hooks.is_empty() && appended.is_ok() {
                            if let Some(webhooks) = &webhooks {
                                webhooks.poke();
                            }
                        }
                        match appended {
                            Ok(row) => publisher.publish(&emit.thread, row).await,
                            Err(err) => {
                                warn!(thread_id = %emit.thread, kind, error = %err, "Could not store an event.")
                            }
                        }
                        if let Some(done) = emit.done {
                            let _ = done.send(());
                        }
                    }
                    Job::End(job) => {
                        let result = job.run(&store, webhooks.as_ref()).await;
                        if let Ok(Some(ended)) = &result {
                            publisher.publish(job.thread(), ended.event.clone()).await;
                            if let Some(webhooks) = &webhooks {
                                webhooks.poke();
                            }
                        }
                        job.answer(result);
                    }
                }
            }
        });
        bus
    }

    /// This bus with live channels of `capacity` events: a small one makes a subscriber lag.
    #[cfg(test)]
    fn with_capacity(mut self, capacity: usize) -> EventBus {
        self.capacity = capacity;
        self
    }

    /// Queues an event of `thread` (and of the turn of user message `message`, when there is
    /// one); never blocks.
    pub fn emit(&self, thread: &ThreadId, message: Option<&MessageId>, event: ThreadEvent) {
        let _ = self.tx.send(Job::Emit(Emit {
            thread: thread.clone(),
            message: message.cloned(),
            event,
            done: None,
        }));
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
        if self.tx.send(Job::Emit(emit)).is_ok() {
            let _ = wait.await;
        }
    }

    /// The thread's events after `after`: the stored ones, then the live ones, each once and in
    /// id order, whatever the live channel drops ([`Follow`]). `after` 0 is the whole log.
    pub async fn follow(&self, thread: &ThreadId, after: i64) -> Follow {
        let live = self.subscribe(thread).await;
        Follow::new(thread, self.store.clone(), Some(live), after, true)
    }

    /// The thread's stored events after `after`, in id order, then the end ([`Follow`] with no
    /// live channel): a replay of the log as it stands.
    pub fn stored(&self, thread: &ThreadId, after: i64) -> Follow {
        Follow::new(thread, self.store.clone(), None, after, true)
    }

    /// The thread's events stored from now on, each once and in id order ([`Follow`]): for a
    /// subscriber that only wants what happens next.
    pub async fn follow_from_now(&self, thread: &ThreadId) -> Result<Follow, StoreError> {
        let live = self.subscribe(thread).await;
        // Read after subscribing: an event stored in between is either at or below `after` (it
        // happened before), or comes through the channel.
        let after = self.store.last_event_id(thread).await?;
        Ok(Follow::new(
            thread,
            self.store.clone(),
            Some(live),
            after,
            false,
        ))
    }

    /// Live events of a thread from now on: this daemon's, and on PostgreSQL every daemon's. An
    /// event stored before the call may still come through (the stored log is in the store);
    /// one stored after it always does, once. Subscribers use [`EventBus::follow`], which
    /// replays the store and recovers what the channel drops.
    async fn subscribe(&self, thread: &ThreadId) -> broadcast::Receiver<EventRow> {
        let (rx, starting) = {
            let mut feeds = lock(&self.feeds);
            feeds.retain(|_, feed| feed.tx.receiver_count() > 0);
            match feeds.get(thread) {
                Some(feed) => (feed.tx.subscribe(), None),
                None => {
                    let feed = Arc::new(Feed {
                        tx: broadcast::channel(self.capacity).0,
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

/// Publishes what the writer stored to the thread's live feed.
struct Publisher {
    feeds: Feeds,
    /// `Some` on PostgreSQL.
    follower: Option<Follower>,
}

impl Publisher {
    async fn publish(&self, thread: &ThreadId, row: EventRow) {
        match &self.follower {
            // Read from the store like any other event: a peer's event of this thread may have
            // committed just before ours and not be published yet.
            Some(follower) => follower.catch_up(thread, Some(row.id)).await,
            None => {
                let feed = lock(&self.feeds).get(thread).cloned();
                if let Some(feed) = feed {
                    let _ = feed.tx.send(row);
                }
            }
        }
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
mod tests;
