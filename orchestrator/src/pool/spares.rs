//! Parked spares: fresh processes started ahead of need, each for a thread id reserved for the
//! next thread to be created and already working in that thread's folder. A new thread takes a
//! spare's id ([`Pool::take_spare`]), and the spare becomes its process as if it had been
//! prewarmed; a replacement is parked. A spare that does not answer then (2 s, `SPARE_PING`) is
//! killed and the thread starts cold. A spare never pushes out a process, and is the first to go
//! when a turn needs its slot. Two kinds:
//! - `pool.spares` plain ones, in a folder of their own, on the default profile; only a new
//!   thread on the default model takes one.
//! - `pool.workspace_spares`: one each for the (profile, repository) pairs whose worktree threads
//!   were created last, in a worktree parked at the repository's `HEAD`, detached
//!   ([`crate::workspace::Workspaces::park`]). A new worktree thread of that profile on that
//!   repository, based on that commit, takes it ([`Pool::take_worktree_spare`]): its branch is
//!   created in the parked worktree, so the thread also skips making one. A spare whose
//!   repository moved on is discarded when the next thread of the pair is created.
//!
//! Why not the CLI's own spares (`--await-claim` + `claim_session`, which any session can
//! claim, in any folder): measured on CLI 2.1.330 (`just bench`, "A process's first turn"), a
//! claim followed by the first turn takes about 175–270 ms, where a fresh process started in its
//! folder answers its first turn in about 100–140 ms; the claim redoes the per-folder set-up. A
//! spare is also warmed while parked with `get_context_usage` (local, no API request), which took
//! 0–23% off a fresh process's first turn across runs and costs nothing on the critical path. The
//! price: a spare serves only a thread created after it was parked, not an existing thread that
//! has no session yet (that one starts cold, or is prewarmed).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use claude_cli::{CliError, SpawnError};
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, info, warn};

use plugin_contract::{SessionStart, ThreadId};

use super::entry::Entry;
use super::state::{Parked, SpareFor, WorktreeKey};
use super::{EvictionCause, Pool, SPARE_RETRY};
use crate::launch::{Fit, UnknownProfile};
use crate::store::NewThread;
use crate::workspace::WorkspaceError;

/// How long a spare has to answer before a thread takes it (it answers in a millisecond or two).
const SPARE_PING: Duration = Duration::from_secs(2);

/// Why a spare could not be started.
#[derive(Debug, thiserror::Error)]
enum SpareError {
    /// The process of the profile named did not start.
    #[error("{1:?}")]
    Spawn(String, SpawnError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Profile(#[from] UnknownProfile),
}

impl Pool {
    /// Starts spares until every kind has its count parked or starting, each in a free slot (a
    /// spare never pushes out a process). A failure to start a plain one holds the next try
    /// back a while.
    pub fn ensure_spares(&self) {
        let inner = &self.inner;
        // Demand fell back: the extra ones go.
        let surplus = inner.state.lock().surplus_spares(Instant::now());
        for spare in surplus {
            inner.metrics.spare_gone();
            self.discard_spare(spare);
        }
        loop {
            // A slot first, then the count: a spare never waits for a slot.
            let Some(permit) = self.free_slot() else {
                return;
            };
            let Some(of) = inner.state.lock().start_spare(Instant::now()) else {
                return;
            };
            let pool = self.clone();
            inner.tasks.spawn(async move {
                let started = pool.start_spare(&of, permit).await;
                if let Err(err) = &started {
                    warn!(error = %err, spare_for = ?of, "Could not start a spare; trying again in a while.");
                }
                let failed = started.is_err();
                let mut state = pool.inner.state.lock();
                state.spare_start_ended(&of, failed, Instant::now(), SPARE_RETRY);
                if let (
                    SpareFor::Plain,
                    Err(SpareError::Spawn(
                        profile,
                        SpawnError::Failed(CliError::StartupFailed(failure)),
                    )),
                ) = (&of, &started)
                {
                    // Trying again fails the same way: no spare until a process of the
                    // profile starts (the cause was mended) or the daemon restarts.
                    if !failure.class().retryable() {
                        warn!(%profile, %failure, "Spares are held: the CLI refuses to start them.");
                        state.hold_plain_spares(profile, failure.to_string());
                    }
                }
            });
        }
    }

    async fn start_spare(
        &self,
        of: &SpareFor,
        permit: OwnedSemaphorePermit,
    ) -> Result<(), SpareError> {
        let inner = &self.inner;
        let thread = ThreadId::generate();
        let (spec, commit) = match of {
            SpareFor::Plain => (inner.launcher.spare_spec(&thread), None),
            SpareFor::Worktree(key) => {
                let (path, commit) = inner.workspaces.park(&thread, &key.repo).await?;
                let spec = inner
                    .launcher
                    .worktree_spare_spec(&thread, &key.profile, path.clone());
                match spec {
                    Ok(spec) => (spec, Some(commit)),
                    Err(err) => {
                        inner.workspaces.remove_parked(&path).await;
                        return Err(err.into());
                    }
                }
            }
        };
        let start = SessionStart::Fresh {
            resume_failed: false,
        };
        let spare = match self.start_process(&spec, start, false, permit).await {
            Ok(spare) => spare,
            Err(err) => {
                inner.workspaces.remove_parked(&spec.workdir).await;
                return Err(SpareError::Spawn(spec.profile.clone(), err));
            }
        };
        warm_up(&spare).await;
        let parked = inner.state.lock().park(Parked {
            of: of.clone(),
            commit,
            entry: spare.clone(),
        });
        match parked {
            Ok(()) => {
                info!(pid = spare.process.pid(), thread_id = %spec.thread, spare_for = ?of, "Spare parked.");
                inner.metrics.spare_parked();
            }
            // Shutting down, or no longer wanted.
            Err(spare) => self.discard_spare(spare),
        }
        Ok(())
    }

    /// The id of a parked spare that answers, now the thread's process (as if prewarmed), for a
    /// thread about to be created from `new`: a spare is claimed when the spec the thread would
    /// have with the spare's id fits the spare's. `None` when no spare fits (the thread gets a
    /// fresh id and its first turn starts a process). Spares run the default options: a thread
    /// on another model does not take one, since `set_model` on a process that has run no turn
    /// sends the model a probe (a paid request).
    pub async fn take_spare(&self, new: &NewThread) -> Option<ThreadId> {
        self.inner.state.lock().demand.created(Instant::now());
        let launcher = &self.inner.launcher;
        let fits = |spare: &Arc<Entry>, _: Option<&str>| {
            let wanted = launcher.new_thread_spec(&spare.spec.thread, new, None);
            wanted.is_ok_and(|wanted| spare.fits(&wanted) == Fit::Yes)
        };
        let spare = self.take_parked(&SpareFor::Plain, fits).await?;
        Some(spare.spec.thread.clone())
    }

    /// Like [`Pool::take_spare`], for a new thread of `key`'s profile on a worktree of its
    /// repository at `commit`: the id of the spare taken and the folder of its parked worktree
    /// ([`crate::workspace::Workspaces::adopt`] makes it the thread's).
    pub async fn take_worktree_spare(
        &self,
        new: &NewThread,
        key: &WorktreeKey,
        commit: &str,
    ) -> Option<(ThreadId, PathBuf)> {
        let launcher = &self.inner.launcher;
        let fits = |spare: &Arc<Entry>, parked_on: Option<&str>| {
            let folder = Some(spare.spec.workdir.as_path());
            let wanted = launcher.new_thread_spec(&spare.spec.thread, new, folder);
            parked_on == Some(commit) && wanted.is_ok_and(|w| spare.fits(&w) == Fit::Yes)
        };
        let of = SpareFor::Worktree(key.clone());
        let spare = self.take_parked(&of, fits).await?;
        Some((spare.spec.thread.clone(), spare.spec.workdir.clone()))
    }

    /// A worktree thread of `key`'s profile on its repository was created, its worktree on
    /// `commit`: the pair keeps a spare for its next thread (the pair used longest ago loses
    /// its own past `pool.workspace_spares`).
    pub fn worktree_used(&self, key: &WorktreeKey, commit: &str) {
        let gone = self.inner.state.lock().worktree_used(key, commit);
        for spare in gone {
            self.inner.metrics.spare_gone();
            self.discard_spare(spare);
        }
        self.ensure_spares();
    }

    /// Takes the oldest parked spare for `of` that `fits` and answers; it becomes its thread's
    /// process. A spare that does not answer is killed and counted.
    async fn take_parked(
        &self,
        of: &SpareFor,
        fits: impl Fn(&Arc<Entry>, Option<&str>) -> bool,
    ) -> Option<Arc<Entry>> {
        let inner = &self.inner;
        loop {
            // A spare whose folder was deleted under it would run its turns nowhere.
            let gone = |spare: &Arc<Entry>, _: Option<&str>| !spare.spec.workdir.is_dir();
            let lost = inner.state.lock().take_spare(of, gone);
            if let Some(spare) = lost {
                warn!(pid = spare.process.pid(), folder = %spare.spec.workdir.display(), "A parked spare's folder is gone; discarding it.");
                inner.metrics.spare_gone();
                inner.metrics.spare_failed("folder_gone");
                self.discard_spare(spare);
                self.ensure_spares();
                continue;
            }
            let spare = inner.state.lock().take_spare(of, &fits)?;
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
            return Some(spare);
        }
    }

    /// Lets go of a spare that no thread took: killed, and its folder (a parked worktree with
    /// its record) removed once it is gone.
    pub(super) fn discard_spare(&self, spare: Arc<Entry>) {
        spare.retire();
        spare.process.kill();
        let pool = self.clone();
        self.inner.tasks.spawn(async move {
            spare.process.wait_exit().await;
            pool.inner
                .workspaces
                .remove_parked(&spare.spec.workdir)
                .await;
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
