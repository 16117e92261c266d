//! Each thread's runtime state on this node, under one lock (as mini-redis keeps its `State`):
//! its line of messages, the `clientMessageId`s in it, whom its running turn acts for, the wait
//! for its process, and whether the turn that held the process has recorded its end. A thread
//! with nothing of these has no entry.
//!
//! The line is a per-thread FIFO: one turn at a time per thread, a bounded number waiting, turns
//! in the order their messages were stored. The order is fixed when a message is stored, not
//! when its task first runs: each ticket joins the line (takes the completion signal of the one
//! ahead) under the same per-thread lock as the insert that gives the message its `seq`. Tasks
//! spawned one after another may start in any order, so a fair lock taken inside the task would
//! not be enough.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use plugin_contract::ThreadId;

use crate::caller::Caller;
use crate::sync::lock;

/// Every thread's runtime state.
pub(super) struct Runtime {
    threads: Mutex<HashMap<ThreadId, ThreadState>>,
    /// Woken when a thread's turn has recorded its end (`ThreadState::unrecorded` cleared).
    recorded: Notify,
    /// The pipeline's turns: a hand-over left by a ticket that quit the line is one of them.
    tasks: TaskTracker,
}

/// One thread's runtime state.
#[derive(Default)]
struct ThreadState {
    /// Held while a message is stored and joins the line (across the insert's await).
    order: Arc<tokio::sync::Mutex<()>>,
    /// Resolves (sent or dropped) when the last ticket in line is done.
    tail: Option<oneshot::Receiver<()>>,
    /// Tickets in line, the running one's included.
    tickets: usize,
    /// Messages sent with a `clientMessageId` that wait in line: cancelled, one is withdrawn.
    waiting: HashMap<String, CancellationToken>,
    /// The `clientMessageId` of the running turn, when it had one.
    running_client: Option<String>,
    /// Whom the running turn acts for, and whether anyone attends it.
    acting: Option<(Caller, bool)>,
    /// The running turn waits for its process: an interrupt cancels the wait.
    starting: Option<CancellationToken>,
    /// The running turn holds (or held) the process and has not recorded its end yet: a turn
    /// the CLI starts by itself on that process waits for it.
    unrecorded: bool,
}

impl ThreadState {
    fn is_idle(&self) -> bool {
        self.tickets == 0
            && self.waiting.is_empty()
            && self.running_client.is_none()
            && self.acting.is_none()
            && self.starting.is_none()
            && !self.unrecorded
    }
}

/// What a stop of one `clientMessageId` found.
pub(super) enum ClientTurn {
    /// It waited in line and is withdrawn now.
    Withdrawn,
    /// It runs.
    Running,
    /// It neither waits nor runs.
    Neither,
}

impl Runtime {
    pub(super) fn new(tasks: TaskTracker) -> Runtime {
        Runtime {
            threads: Mutex::default(),
            recorded: Notify::new(),
            tasks,
        }
    }

    /// Changes `thread`'s state, and drops it when nothing is left of it.
    fn with<T>(&self, thread: &ThreadId, change: impl FnOnce(&mut ThreadState) -> T) -> T {
        let mut threads = lock(&self.threads);
        let state = threads.entry(thread.clone()).or_default();
        let out = change(state);
        if state.is_idle() {
            threads.remove(thread);
        }
        out
    }

    /// Takes a place in the thread's line, or refuses when `limit` messages already wait.
    pub(super) fn enter(self: &Arc<Self>, thread: &ThreadId, limit: usize) -> Option<QueueTicket> {
        let order = self.with(thread, |state| {
            // `limit` waiting plus the one running.
            if state.tickets > limit {
                return None;
            }
            state.tickets += 1;
            Some(state.order.clone())
        })?;
        Some(QueueTicket {
            runtime: self.clone(),
            thread: thread.clone(),
            order,
            ahead: None,
            done: None,
        })
    }

    /// The message `client` of `thread` waits in line: cancelled, it is withdrawn.
    pub(super) fn line_up(&self, thread: &ThreadId, client: &str) -> CancellationToken {
        let token = CancellationToken::new();
        self.with(thread, |state| {
            state.waiting.insert(client.to_owned(), token.clone())
        });
        token
    }

    /// The message `client` of `thread` left the line; `runs`: its turn starts now.
    pub(super) fn left_line(&self, thread: &ThreadId, client: &str, runs: bool) {
        self.with(thread, |state| {
            state.waiting.remove(client);
            if runs {
                state.running_client = Some(client.to_owned());
            }
        });
    }

    /// Withdraws the message `client` of `thread` when it waits, or says whether it runs.
    pub(super) fn stop_client(&self, thread: &ThreadId, client: &str) -> ClientTurn {
        self.with(thread, |state| {
            if let Some(token) = state.waiting.get(client) {
                token.cancel();
                return ClientTurn::Withdrawn;
            }
            match state.running_client.as_deref() == Some(client) {
                true => ClientTurn::Running,
                false => ClientTurn::Neither,
            }
        })
    }

    /// The turn of message `client` of `thread` ended: it no longer runs (a message withdrawn
    /// from the line never ran, and leaves the running one's be).
    pub(super) fn client_turn_ended(&self, thread: &ThreadId, client: &str) {
        self.with(thread, |state| {
            if state.running_client.as_deref() == Some(client) {
                state.running_client = None;
            }
        });
    }

    /// Records, while the guard lives, whom `thread`'s running turn acts for and whether anyone
    /// attends it, so that a child it delegates to acts for the same caller, unattended too.
    pub(super) fn act(
        self: &Arc<Self>,
        thread: &ThreadId,
        caller: Caller,
        unattended: bool,
    ) -> Acting {
        self.with(thread, |state| state.acting = Some((caller, unattended)));
        Acting {
            runtime: self.clone(),
            thread: thread.clone(),
        }
    }

    /// Whom `thread`'s running turn acts for, and whether anyone attends it.
    pub(super) fn acting(&self, thread: &ThreadId) -> Option<(Caller, bool)> {
        lock(&self.threads)
            .get(thread)
            .and_then(|s| s.acting.clone())
    }

    /// Registers, while the guard lives, that `thread`'s turn waits for its process, so that an
    /// interrupt can cancel the wait ([`Self::cancel_start`]).
    pub(super) fn starting(self: &Arc<Self>, thread: &ThreadId) -> Starting {
        let token = CancellationToken::new();
        self.with(thread, |state| state.starting = Some(token.clone()));
        Starting {
            runtime: self.clone(),
            thread: thread.clone(),
            token,
        }
    }

    /// Cancels the wait of `thread`'s turn for its process; false when none waits.
    pub(super) fn cancel_start(&self, thread: &ThreadId) -> bool {
        match lock(&self.threads)
            .get(thread)
            .and_then(|s| s.starting.as_ref())
        {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// `thread`'s turn holds its process and has not recorded its end.
    pub(super) fn hold(&self, thread: &ThreadId) {
        self.with(thread, |state| state.unrecorded = true);
    }

    /// `thread`'s turn has recorded its end: a turn the CLI started on its process may go on.
    pub(super) fn end_recorded(&self, thread: &ThreadId) {
        if self.with(thread, |state| std::mem::take(&mut state.unrecorded)) {
            self.recorded.notify_waiters();
        }
    }

    /// Waits (a few seconds at most) until the turn that held `thread`'s process has recorded
    /// its end, so that what the CLI starts next on it comes after that turn in the thread.
    pub(super) async fn after_recorded(&self, thread: &ThreadId) {
        let wait = async {
            loop {
                let notified = self.recorded.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !lock(&self.threads)
                    .get(thread)
                    .is_some_and(|s| s.unrecorded)
                {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .is_err()
        {
            warn!(thread_id = %thread, "The turn before the CLI's own did not record its end within 5 s; going on.");
        }
    }
}

/// A place in a thread's line; leaving it (drop) frees the place and lets the next one run.
pub(super) struct QueueTicket {
    runtime: Arc<Runtime>,
    thread: ThreadId,
    order: Arc<tokio::sync::Mutex<()>>,
    /// Resolves when the ticket ahead in line is done; `None` once awaited or when first.
    ahead: Option<oneshot::Receiver<()>>,
    /// Dropped when this ticket is done, which wakes the one behind.
    done: Option<oneshot::Sender<()>>,
}

impl QueueTicket {
    /// The thread's insert lock: a message is stored and joins the line while it is held, so
    /// turns run in `seq` order.
    pub(super) async fn lock_order(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.order.clone().lock_owned().await
    }

    /// Takes the last place in line. Called once, while holding [`Self::lock_order`].
    pub(super) fn join_line(&mut self) {
        let (done, next) = oneshot::channel();
        self.ahead = self
            .runtime
            .with(&self.thread, |state| state.tail.replace(next));
        self.done = Some(done);
    }

    /// Waits until every ticket ahead is done; true when one was ahead (the thread may have
    /// changed meanwhile).
    pub(super) async fn wait_turn(&mut self) -> bool {
        match self.ahead.take() {
            Some(ahead) => {
                // Sent or dropped, either way the one ahead is done.
                let _ = ahead.await;
                true
            }
            None => false,
        }
    }
}

impl Drop for QueueTicket {
    fn drop(&mut self) {
        // Left the line before its turn came: the one behind must still wait for the one ahead.
        if let (Some(ahead), Some(done)) = (self.ahead.take(), self.done.take()) {
            if tokio::runtime::Handle::try_current().is_ok() {
                self.runtime.tasks.spawn(async move {
                    let _ = ahead.await;
                    drop(done);
                });
            }
        }
        self.runtime.with(&self.thread, |state| {
            state.tickets -= 1;
            if state.tickets == 0 {
                state.tail = None;
            }
        });
    }
}

/// Whom a thread's running turn acts for, while it lives ([`Runtime::act`]).
pub(super) struct Acting {
    runtime: Arc<Runtime>,
    thread: ThreadId,
}

impl Drop for Acting {
    fn drop(&mut self) {
        self.runtime.with(&self.thread, |state| state.acting = None);
    }
}

/// A turn waiting for its process, while it lives ([`Runtime::starting`]).
pub(super) struct Starting {
    runtime: Arc<Runtime>,
    thread: ThreadId,
    pub(super) token: CancellationToken,
}

impl Drop for Starting {
    fn drop(&mut self) {
        self.runtime
            .with(&self.thread, |state| state.starting = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> Arc<Runtime> {
        Arc::new(Runtime::new(TaskTracker::new()))
    }

    #[tokio::test]
    async fn a_thread_with_nothing_left_has_no_entry() {
        let runtime = runtime();
        let thread = ThreadId::generate();
        let mut ticket = runtime.enter(&thread, 4).expect("a place");
        let order = ticket.lock_order().await;
        ticket.join_line();
        drop(order);
        let token = runtime.line_up(&thread, "c1");
        runtime.left_line(&thread, "c1", true);
        assert!(!token.is_cancelled());
        let acting = runtime.act(&thread, Caller::cli(), false);
        runtime.hold(&thread);
        assert_eq!(lock(&runtime.threads).len(), 1);
        runtime.client_turn_ended(&thread, "c1");
        runtime.end_recorded(&thread);
        drop(acting);
        drop(ticket);
        assert!(
            lock(&runtime.threads).is_empty(),
            "nothing is left of the thread"
        );
    }

    #[tokio::test]
    async fn the_line_is_bounded_and_runs_in_order() {
        let runtime = runtime();
        let thread = ThreadId::generate();
        let mut first = runtime.enter(&thread, 1).expect("running");
        first.join_line();
        let mut second = runtime.enter(&thread, 1).expect("waiting");
        second.join_line();
        assert!(
            runtime.enter(&thread, 1).is_none(),
            "one running, one waiting"
        );
        assert!(!first.wait_turn().await, "nobody was ahead of the first");
        let waits = tokio::spawn(async move { second.wait_turn().await });
        tokio::task::yield_now().await;
        assert!(!waits.is_finished(), "the second waits for the first");
        drop(first);
        assert!(
            waits.await.expect("joined"),
            "someone was ahead of the second"
        );
    }

    #[tokio::test]
    async fn a_waiting_client_is_withdrawn_and_a_running_one_found() {
        let runtime = runtime();
        let thread = ThreadId::generate();
        let token = runtime.line_up(&thread, "c1");
        assert!(matches!(
            runtime.stop_client(&thread, "c1"),
            ClientTurn::Withdrawn
        ));
        assert!(token.is_cancelled());
        runtime.left_line(&thread, "c1", true);
        assert!(matches!(
            runtime.stop_client(&thread, "c1"),
            ClientTurn::Running
        ));
        assert!(matches!(
            runtime.stop_client(&thread, "c2"),
            ClientTurn::Neither
        ));
        runtime.client_turn_ended(&thread, "c2");
        assert!(
            matches!(runtime.stop_client(&thread, "c1"), ClientTurn::Running),
            "another message's end leaves the running one's be"
        );
        runtime.client_turn_ended(&thread, "c1");
        assert!(matches!(
            runtime.stop_client(&thread, "c1"),
            ClientTurn::Neither
        ));
    }
}
