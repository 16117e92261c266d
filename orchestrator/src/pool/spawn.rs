//! Starting a process for a thread: the older processes of the thread reaped first, its session
//! restored when resumed ([`super::transcript`]), a fresh session when the resume fails; then
//! the process's tasks (its control requests, its transcript, its own turns, its reaper) and its
//! registration as live. Whether to start one, and in which slot, is the pool's and admission's.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use claude_cli::{CliError, CliProcess, SpawnError, StartupFailure};
use tokio::sync::{watch, OwnedSemaphorePermit};
use tracing::{debug, info, warn, Instrument};

use plugin_contract::SessionStart;

use super::at_risk::TranscriptNote;
use super::entry::{Entry, Inboxes};
use super::host::serve_host_requests;
use super::transcript::{store_transcript, Resumable};
use super::Pool;
use crate::launch::ProcessSpec;
use crate::mcp::SERVER_NAME;
use crate::turn_error::TurnError;

/// How long the CLI gets to finish its MCP handshake after the `initialize` reply; the first turn
/// would wait for it otherwise.
const MCP_HANDSHAKE_WAIT: Duration = Duration::from_secs(5);

impl Pool {
    /// A new process of `spec`, resuming its session when it names one (a fresh session with
    /// the history injected when the CLI cannot, or when the session's stored transcript it
    /// would be restored from is incomplete), in `slot` or one admission finds.
    pub(super) async fn spawn_for(
        &self,
        spec: ProcessSpec,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Arc<Entry>, TurnError> {
        self.inner.metrics.miss();
        self.reap_thread(&spec.thread).await;
        if let Some(session) = &spec.resume {
            if let Resumable::No(reason) = self.restore_session(&spec, session).await {
                warn!(thread_id = %spec.thread, session_id = %session, %reason, "The session's stored transcript is incomplete; starting a fresh session, history will be injected.");
                let note = TranscriptNote::Unrepaired {
                    session: session.clone(),
                    reason,
                };
                self.inner.at_risk.note(&spec.thread, note);
                return self.spawn_fresh(spec, slot).await;
            }
        }
        match self.spawn_one(&spec, false, slot).await {
            Ok(entry) => Ok(entry),
            Err(SpawnError::MissingSession(reason)) => {
                warn!(thread_id = %spec.thread, session_id = ?spec.resume, %reason, "Resume failed; starting a fresh session, history will be injected.");
                self.spawn_fresh(spec, None).await
            }
            Err(SpawnError::Failed(err)) => Err(err.into()),
        }
    }

    /// A fresh session for `spec`'s thread instead of the one it names: the turn injects the
    /// history.
    async fn spawn_fresh(
        &self,
        spec: ProcessSpec,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Arc<Entry>, TurnError> {
        self.inner.metrics.resume_fallback();
        let fresh = ProcessSpec {
            resume: None,
            ..spec
        };
        match self.spawn_one(&fresh, true, slot).await {
            Ok(entry) => Ok(entry),
            Err(SpawnError::MissingSession(reason)) => Err(TurnError::Cli(reason)),
            Err(SpawnError::Failed(err)) => Err(err.into()),
        }
    }

    async fn spawn_one(
        &self,
        spec: &ProcessSpec,
        resume_failed: bool,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Arc<Entry>, SpawnError> {
        let asked = std::time::SystemTime::now();
        let (permit, overflow) = match slot {
            Some(permit) => (permit, false),
            None => self.acquire_slot().await,
        };
        let slot = std::time::SystemTime::now();
        let start = match spec.resume {
            Some(_) => SessionStart::Resumed,
            None => SessionStart::Fresh { resume_failed },
        };
        let entry = self.start_process(spec, start, overflow, permit).await?;
        let ready = std::time::SystemTime::now();
        let _ = entry.born.set(super::entry::Born { asked, slot, ready });
        Ok(entry)
    }

    /// Why the process of `spec` could not be set up: its folder is gone (a workspace deleted
    /// under the thread: the caller's, as the CLI's `cwd_unavailable` would be), or another
    /// error of the daemon's own folders.
    fn folder_error(&self, spec: &ProcessSpec, err: std::io::Error) -> SpawnError {
        if !spec.workdir.is_dir() {
            let failure = StartupFailure::cwd_unavailable(err.to_string());
            return SpawnError::Failed(CliError::StartupFailed(failure));
        }
        SpawnError::Failed(CliError::Spawn {
            bin: self.inner.launcher.bin().display().to_string(),
            reason: format!("cannot create the process's folder: {err}"),
        })
    }

    /// Starts a process of `spec` (its folder created), serves its control requests, waits for
    /// its MCP handshake unless the CLI took our manifest, and registers it as live (holding
    /// `permit` until it is reaped).
    pub(super) async fn start_process(
        &self,
        spec: &ProcessSpec,
        start: SessionStart,
        overflow: bool,
        permit: OwnedSemaphorePermit,
    ) -> Result<Arc<Entry>, SpawnError> {
        let inner = &self.inner;
        // The process's token at the model gateway: valid while it lives; so is its tree.
        let crate::launch::Launched { launch, pass, tree } = inner
            .launcher
            .launch(spec)
            .map_err(|err| self.folder_error(spec, err))
            .inspect_err(|err| self.count_startup_failure(err))?;
        let thread = &spec.thread;
        let resume = spec.resume.as_ref().map(|s| s.as_str());
        inner.metrics.spawn();
        let started = Instant::now();
        let started_process = CliProcess::spawn(&launch, &spec.options, resume, &inner.tasks)
            .await
            .inspect_err(|err| self.count_startup_failure(err))?;
        // It started: whatever held this profile's spares back is gone.
        inner.state.lock().release_plain_spares(&spec.profile);
        let (process, requests) = (started_process.process, started_process.requests);
        let (stored_tx, transcript_stored) = watch::channel(0);
        // With our manifest parked, the CLI answers its own MCP handshake: nothing to wait for.
        let parked = started_process.initialize["sdk_mcp_manifests_parked"][SERVER_NAME]
            .as_str()
            .map(str::to_owned);
        let calls: Arc<Inboxes> = Arc::default();
        let (ready_tx, mut ready) = watch::channel(false);
        let span = tracing::info_span!("cli", thread_id = %thread, pid = process.pid());
        inner.tasks.spawn(
            store_transcript(
                thread.clone(),
                started_process.mirror,
                inner.store.clone(),
                inner.at_risk.clone(),
                stored_tx,
            )
            .instrument(span.clone()),
        );
        inner.tasks.spawn(
            serve_host_requests(
                thread.clone(),
                requests,
                inner.mcp.clone(),
                (inner.launcher.profile(Some(&spec.profile)).ok())
                    .and_then(|profile| profile.client_tools().cloned()),
                calls.clone(),
                ready_tx,
            )
            .instrument(span),
        );
        // Without a parked manifest the CLI runs its MCP handshake right after `initialize`; a
        // first turn would wait for it.
        let handshake = async {
            if parked.as_deref() != Some("parked") {
                debug!(thread_id = %thread, manifest = ?parked, "The CLI did not take our MCP manifest; waiting for its handshake.");
                let _ = tokio::time::timeout(MCP_HANDSHAKE_WAIT, ready.wait_for(|r| *r)).await;
            }
        };
        tokio::select! {
            _ = handshake => {}
            _ = process.wait_exit() => {
                return Err(SpawnError::Failed(CliError::ProcessDied {
                    status: process.exit_status(),
                    stderr_tail: process.stderr_tail(),
                }));
            }
        }
        inner.metrics.ready(started.elapsed());
        info!(thread_id = %thread, pid = process.pid(), ms = started.elapsed().as_millis() as u64, resumed = resume.is_some(), "Process ready.");
        let entry = Arc::new(Entry::new(
            process,
            spec.clone(),
            start,
            calls,
            transcript_stored,
            tree.clone(),
            pass.as_ref()
                .map(crate::gateway::Pass::meter_slot)
                .unwrap_or_default(),
        ));
        self.watch(&entry, tree);
        entry.one_turn.store(overflow, Ordering::SeqCst);
        inner.state.lock().started(entry.clone());
        inner.tasks.spawn(
            self.clone()
                .serve_cli_turns(entry.clone(), started_process.cli_turns),
        );
        self.reap_when_gone(entry.clone(), permit, pass);
        Ok(entry)
    }

    /// Counts a start the CLI (or the folder) refused, by its reason.
    fn count_startup_failure(&self, err: &SpawnError) {
        if let SpawnError::Failed(CliError::StartupFailed(failure)) = err {
            warn!(reason = %failure.reason, class = failure.class().as_str(), %failure, "The claude CLI refused to start.");
            self.inner.metrics.startup_failed(failure);
        }
    }

    /// Once `entry`'s process is gone: its books closed (a spare's parked worktree removed), its
    /// pool slot (`permit`) freed and its gateway token (`pass`) dropped.
    fn reap_when_gone(
        &self,
        entry: Arc<Entry>,
        permit: OwnedSemaphorePermit,
        pass: Option<crate::gateway::Pass>,
    ) {
        let pool = self.clone();
        self.inner.tasks.spawn(async move {
            entry.process.wait_exit().await;
            let was_spare = pool.inner.state.lock().reaped(entry.process.pid());
            if was_spare {
                pool.inner.metrics.spare_gone();
                pool.inner
                    .workspaces
                    .remove_parked(&entry.spec.workdir)
                    .await;
            }
            pool.inner.metrics.reaped();
            // The slot is free only once the process is gone; so is its token.
            drop(permit);
            drop(pass);
        });
    }

    /// What the pool watches of a new process: its first memory sample, for `/api/pool` (then
    /// every `MEMORY_SAMPLE_EVERY`), and its walled tree's limits ([`Pool::watch_walls`]).
    fn watch(&self, entry: &Arc<Entry>, tree: Option<Arc<walls::Tree>>) {
        let inner = &self.inner;
        let sampled = entry.clone();
        inner.tasks.spawn_blocking(move || sampled.take_sample());
        if let Some(tree) = tree {
            tree.started(entry.process.pid());
            inner.metrics.walled(true);
            inner
                .tasks
                .spawn(self.clone().watch_walls(entry.clone(), tree));
        }
    }

    /// Checks `entry`'s tree against its limits while the process lives (every
    /// [`WALLS_CHECK_EVERY`]): what was stopped goes to the pipeline; when the process itself
    /// was, its turn ends saying so. Once the process is gone, what is left of its tree is
    /// killed and its cgroups removed.
    async fn watch_walls(self, entry: Arc<Entry>, tree: Arc<walls::Tree>) {
        let thread = entry.spec.thread.clone();
        let mut tick = tokio::time::interval(WALLS_CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut exited = false;
        while !exited {
            tokio::select! {
                // Once more after the process is gone: a limit it died of is recorded too.
                _ = entry.process.wait_exit() => exited = true,
                _ = tick.tick() => {}
            }
            let checked = tree.clone();
            let Ok(breaches) = tokio::task::spawn_blocking(move || checked.check()).await else {
                break;
            };
            for breach in breaches {
                warn!(thread_id = %thread, limit = breach.limit.as_str(), pid = breach.pid, command = %breach.command, "The walls stopped a process.");
                self.inner.metrics.wall_breach(breach.limit.as_str());
                if breach.root {
                    let _ = entry.stopped.set(breach.clone());
                    entry.retired.store(true, Ordering::SeqCst);
                }
                let _ = self.inner.breaches.send((thread.clone(), breach));
            }
        }
        let _ = tokio::task::spawn_blocking(move || tree.release()).await;
        self.inner.metrics.walled(false);
    }
}

/// How often a walled tree's limits are checked: how long a tree at its memory limit waits
/// before one of its processes is stopped.
const WALLS_CHECK_EVERY: Duration = Duration::from_millis(100);
