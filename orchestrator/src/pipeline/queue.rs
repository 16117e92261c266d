//! Per-thread FIFO: one turn at a time per thread, a bounded number waiting, turns in the order
//! their messages were stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use plugin_contract::ThreadId;

use crate::sync::lock;

/// Per-thread FIFO: one turn at a time per thread, a bounded number waiting, turns in the order
/// their messages were stored.
///
/// The order is fixed when a message is stored, not when its task first runs: each ticket joins
/// the line (takes the completion signal of the one ahead) under the same per-thread lock as the
/// insert that gives the message its `seq`. Tasks spawned one after another may start in any
/// order, so a fair lock taken inside the task would not be enough.
pub struct ThreadQueues {
    slots: Mutex<HashMap<ThreadId, Arc<ThreadSlot>>>,
    /// The pipeline's turns: a hand-over left by a ticket that quit the line is one of them.
    tasks: TaskTracker,
}

#[derive(Default)]
struct ThreadSlot {
    /// Held while a message is stored and joins the line.
    accept: Arc<tokio::sync::Mutex<()>>,
    /// Resolves (sent or dropped) when the last ticket in line is done.
    tail: Mutex<Option<oneshot::Receiver<()>>>,
    queued: std::sync::atomic::AtomicUsize,
}

/// A place in a thread's queue; leaving it (drop) frees the place and lets the next one run.
pub struct QueueTicket {
    queues: Arc<ThreadQueues>,
    thread: ThreadId,
    slot: Arc<ThreadSlot>,
    /// Resolves when the ticket ahead in line is done; `None` once awaited or when first.
    ahead: Option<oneshot::Receiver<()>>,
    /// Dropped when this ticket is done, which wakes the one behind.
    done: Option<oneshot::Sender<()>>,
}

impl ThreadQueues {
    pub fn new(tasks: TaskTracker) -> ThreadQueues {
        ThreadQueues {
            slots: Mutex::default(),
            tasks,
        }
    }

    /// Takes a place in the thread's queue, or refuses when `limit` messages are already there.
    pub fn enter(self: &Arc<Self>, thread: &ThreadId, limit: usize) -> Option<QueueTicket> {
        use std::sync::atomic::Ordering;
        let mut slots = lock(&self.slots);
        let slot = slots.entry(thread.clone()).or_default().clone();
        // `limit` waiting plus the one running.
        if slot.queued.load(Ordering::SeqCst) > limit {
            return None;
        }
        slot.queued.fetch_add(1, Ordering::SeqCst);
        Some(QueueTicket {
            queues: self.clone(),
            thread: thread.clone(),
            slot,
            ahead: None,
            done: None,
        })
    }
}

impl QueueTicket {
    /// The thread's insert lock: a message is stored and joins the line while it is held, so
    /// turns run in `seq` order.
    pub(super) async fn lock_order(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.slot.accept.clone().lock_owned().await
    }

    /// Takes the last place in line. Called once, while holding the slot's `accept` lock.
    pub(super) fn join_line(&mut self) {
        let (done, next) = oneshot::channel();
        self.ahead = lock(&self.slot.tail).replace(next);
        self.done = Some(done);
    }

    /// Waits until every ticket ahead is done.
    pub(super) async fn wait_turn(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            // Sent or dropped, either way the one ahead is done.
            let _ = ahead.await;
        }
    }
}

impl Drop for QueueTicket {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        // Left the line before its turn came: the one behind must still wait for the one ahead.
        if let (Some(ahead), Some(done)) = (self.ahead.take(), self.done.take()) {
            if tokio::runtime::Handle::try_current().is_ok() {
                self.queues.tasks.spawn(async move {
                    let _ = ahead.await;
                    drop(done);
                });
            }
        }
        let mut slots = lock(&self.queues.slots);
        if self.slot.queued.fetch_sub(1, Ordering::SeqCst) == 1 {
            slots.remove(&self.thread);
        }
    }
}
