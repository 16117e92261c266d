//! Turn events: persisted in order (their SQLite id is the SSE event id), then published to live
//! subscribers of the thread.
//!
//! Invariant: one writer task appends every event, so ids follow the order events were emitted
//! in, across all threads; a subscriber that reads the store up to id N and then the live channel
//! from N+1 misses nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::warn;

use plugin_contract::ThreadId;

use crate::store::{EventRow, MessageId, Store};
use crate::sync::lock;

/// Live capacity per thread; a subscriber that falls this far behind re-reads from the store.
const CHANNEL_CAPACITY: usize = 1024;

struct Emit {
    thread: ThreadId,
    message: Option<MessageId>,
    kind: &'static str,
    data: Value,
    done: Option<oneshot::Sender<()>>,
}

#[derive(Clone)]
pub struct EventBus {
    tx: mpsc::UnboundedSender<Emit>,
    channels: Arc<Mutex<HashMap<ThreadId, broadcast::Sender<EventRow>>>>,
}

impl EventBus {
    /// Starts the writer task.
    pub fn start(store: Store) -> EventBus {
        let (tx, mut rx) = mpsc::unbounded_channel::<Emit>();
        let channels: Arc<Mutex<HashMap<ThreadId, broadcast::Sender<EventRow>>>> = Arc::default();
        let bus = EventBus {
            tx,
            channels: channels.clone(),
        };
        tokio::spawn(async move {
            while let Some(emit) = rx.recv().await {
                match store
                    .append_event(&emit.thread, emit.message.as_ref(), emit.kind, &emit.data)
                    .await
                {
                    Ok(row) => {
                        if let Some(tx) = lock(&channels).get(&emit.thread) {
                            let _ = tx.send(row);
                        }
                    }
                    Err(err) => {
                        warn!(thread_id = %emit.thread, kind = emit.kind, error = %err, "Could not store an event.")
                    }
                }
                if let Some(done) = emit.done {
                    let _ = done.send(());
                }
            }
        });
        bus
    }

    /// Queues an event; never blocks.
    pub fn emit(
        &self,
        thread: &ThreadId,
        message: Option<&MessageId>,
        kind: &'static str,
        data: Value,
    ) {
        let _ = self.tx.send(Emit {
            thread: thread.clone(),
            message: message.cloned(),
            kind,
            data,
            done: None,
        });
    }

    /// Queues an event and waits until it is stored and published.
    pub async fn emit_and_wait(
        &self,
        thread: &ThreadId,
        message: Option<&MessageId>,
        kind: &'static str,
        data: Value,
    ) {
        let (done, wait) = oneshot::channel();
        let emit = Emit {
            thread: thread.clone(),
            message: message.cloned(),
            kind,
            data,
            done: Some(done),
        };
        if self.tx.send(emit).is_ok() {
            let _ = wait.await;
        }
    }

    /// Live events of a thread from now on.
    pub fn subscribe(&self, thread: &ThreadId) -> broadcast::Receiver<EventRow> {
        let mut channels = lock(&self.channels);
        channels.retain(|_, tx| tx.receiver_count() > 0);
        channels
            .entry(thread.clone())
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe()
    }
}
