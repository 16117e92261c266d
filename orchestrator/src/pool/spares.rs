//! Parked spares (`pool.spares`): fresh processes started ahead of need, each for a thread id
//! reserved for the next thread to be created and already working in that thread's folder. A
//! new thread takes a spare's id ([`Pool::take_spare`]), and the spare becomes its process as if
//! it had been prewarmed; a replacement is parked. Only a new thread on the default model takes
//! one. A spare that does not answer then (2 s, `SPARE_PING`) is killed and the thread starts
//! cold. A spare never pushes out a process, and is the first to go when a turn needs its slot.
//!
//! Why not the CLI's own spares (`--await-claim` + `claim_session`, which any session can
//! claim): measured on CLI 2.1.330 (`just bench`, "A process's first turn"), a claim followed by
//! the first turn takes about 175–270 ms, where a fresh process started in its folder answers its
//! first turn in about 100–140 ms; the claim redoes the per-folder set-up. A spare is also warmed
//! while parked with `get_context_usage` (local, no API request), which took 0–23% off a fresh
//! process's first turn across runs and costs nothing on the critical path. The price: a spare
//! serves only a thread created after it was parked, not an existing thread that has no session
//! yet (that one starts cold, or is prewarmed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use claude_cli::SpawnError;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, info, warn};

use plugin_contract::{SessionStart, ThreadId};

use super::entry::Entry;
use super::{EvictionCause, Pool, SPARE_RETRY};
use crate::launch::Fit;
use crate::store::NewThread;

/// How long a spare has to answer before a thread takes it (it answers in a millisecond or two).
const SPARE_PING: Duration = Duration::from_secs(2);

impl Pool {
    /// Starts spares until `pool.spares` are parked or starting, each in a free slot (a spare
    /// never pushes out a process). A failure to start one holds the next try back a while.
    pub fn ensure_spares(&self) {
        let inner = &self.inner;
        loop {
            // A slot first, then the count: a spare never waits for a slot.
            let Ok(permit) = inner.slots.clone().try_acquire_owned() else {
                return;
            };
            if !inner.state.lock().start_spare(Instant::now()) {
                return;
            }
            let pool = self.clone();
            inner.tasks.spawn(async move {
                let started = pool.start_spare(permit).await;
                if let Err(err) = &started {
                    warn!(error = ?err, "Could not start a spare; trying again in a while.");
                }
                let failed = started.is_err();
                let mut state = pool.inner.state.lock();
                state.spare_start_ended(failed, Instant::now(), SPARE_RETRY);
            });
        }
    }

    async fn start_spare(&self, permit: OwnedSemaphorePermit) -> Result<(), SpawnError> {
        let inner = &self.inner;
        let spec = inner.launcher.spare_spec(&ThreadId::generate());
        let start = SessionStart::Fresh {
            resume_failed: false,
        };
        let spare = self.start_process(&spec, start, false, permit).await?;
        warm_up(&spare).await;
        let parked = inner.state.lock().park(spare.clone());
        match parked {
            Ok(()) => {
                info!(pid = spare.process.pid(), thread_id = %spec.thread, "Spare parked.");
                inner.metrics.spare_parked();
            }
            // Shutting down.
            Err(spare) => self.discard_spare(spare),
        }
        Ok(())
    }

    /// The id of a parked spare that answers, now the thread's process (as if prewarmed), for a
    /// thread about to be created from `new`: a spare is claimed when the spec the thread would
    /// have with the spare's id fits the spare's. `None` when no spare fits (the thread gets a
    /// fresh id and its first turn starts a process). Spares run the default options: a thread
    /// on another model does not take one, since `set_model` on a process that has run no turn
    /// sends the model a probe (a paid request). A spare that does not answer is killed and
    /// counted.
    pub async fn take_spare(&self, new: &NewThread) -> Option<ThreadId> {
        let inner = &self.inner;
        let fits = |spare: &Arc<Entry>| {
            let wanted = inner.launcher.new_thread_spec(&spare.spec.thread, new);
            wanted.is_ok_and(|wanted| spare.fits(&wanted) == Fit::Yes)
        };
        loop {
            let spare = inner.state.lock().take_spare(fits)?;
            // Parked spares are not leased: a lease keeps admission off it while it is checked.
            let Some(lease) = spare.lease(self) else {
                inner.metrics.spare_gone();
                inner.metrics.spare_failed("process_died");
                self.discard_spare(spare);
                continue;
            };
            let ping = spare
                .process
                .request(serde_json::json!({"subtype": "mcp_status"}));
            match tokio::time::timeout(SPARE_PING, ping).await {
                Ok(Ok(_)) => {}
                outcome => {
                    let reason = if outcome.is_ok() {
                        "process_died"
                    } else {
                        "no_answer"
                    };
                    warn!(
                        pid = spare.process.pid(),
                        reason, "A parked spare did not answer; killing it."
                    );
                    inner.metrics.spare_gone();
                    inner.metrics.spare_failed(reason);
                    drop(lease);
                    self.discard_spare(spare);
                    self.ensure_spares();
                    continue;
                }
            }
            let thread = spare.spec.thread.clone();
            inner.cache.insert(thread.clone(), spare.clone()).await;
            inner.metrics.spare_claimed();
            info!(thread_id = %thread, pid = spare.process.pid(), "A new thread took a spare.");
            lease.finish(super::Finish::Keep).await;
            self.ensure_spares();
            return Some(thread);
        }
    }

    /// Lets go of a spare that no thread took: killed, and its folder removed once it is gone.
    pub(super) fn discard_spare(&self, spare: Arc<Entry>) {
        spare.retire();
        spare.process.kill();
        let folder = spare.spec.workdir.clone();
        self.inner.tasks.spawn(async move {
            spare.process.wait_exit().await;
            if let Err(err) = std::fs::remove_dir_all(&folder) {
                debug!(folder = %folder.display(), error = %err, "Could not remove a spare's folder.");
            }
        });
    }

    /// Forgets a thread's process (its thread was never created, say).
    pub async fn forget(&self, thread: &ThreadId) {
        self.remove(thread, EvictionCause::Error).await;
    }
}

/// Does, while the process waits, local work the CLI would otherwise do on its first turn: its
/// context accounting (`get_context_usage`, no API request).
pub(super) async fn warm_up(entry: &Entry) {
    let request = entry
        .process
        .request(serde_json::json!({"subtype": "get_context_usage"}));
    match tokio::time::timeout(SPARE_PING, request).await {
        Ok(Ok(_)) => {}
        Ok(Err(reason)) => debug!(pid = entry.process.pid(), %reason, "Warm-up refused."),
        Err(_) => debug!(pid = entry.process.pid(), "Warm-up not answered in time."),
    }
}
