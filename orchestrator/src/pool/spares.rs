//! Parked spares (`pool.spares`): processes started with `--await-claim` in a folder of their
//! own, bound to no thread, each holding a free pool slot. The first turn of a thread with no
//! CLI session claims one into the thread's folder instead of spawning; a replacement is parked
//! after every claim. A claim that fails (refused, or no answer within `turn.ready_timeout`)
//! kills the spare, and the turn spawns.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use claude_cli::{SpawnError, SpawnOptions};
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{info, warn};

use plugin_contract::{SessionStart, ThreadId};

use super::{Entry, Fit, Pool, SPARE_RETRY};
use crate::mcp::SERVER_NAME;
use crate::sync::lock;

impl Pool {
    /// Starts spares until `pool.spares` are parked or starting, each in a free slot (a spare
    /// never pushes out a process). A failure to start one holds the next try back a while.
    pub fn ensure_spares(&self) {
        let inner = &self.inner;
        if inner.spare_target == 0
            || inner.stopping.load(Ordering::SeqCst)
            // A slot freed for a waiting spawn is the spawn's.
            || inner.waiting.load(Ordering::SeqCst) > 0
            || Instant::now() < *lock(&inner.spare_retry_at)
        {
            return;
        }
        loop {
            let have = lock(&inner.spares).len() + inner.spares_starting.load(Ordering::SeqCst);
            if have >= inner.spare_target {
                return;
            }
            let Ok(permit) = inner.slots.clone().try_acquire_owned() else {
                return;
            };
            inner.spares_starting.fetch_add(1, Ordering::SeqCst);
            let pool = self.clone();
            inner.tasks.spawn(async move {
                if let Err(err) = pool.start_spare(permit).await {
                    warn!(error = ?err, "Could not start a spare; trying again in a while.");
                    *lock(&pool.inner.spare_retry_at) = Instant::now() + SPARE_RETRY;
                }
                pool.inner.spares_starting.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }

    async fn start_spare(&self, permit: OwnedSemaphorePermit) -> Result<(), SpawnError> {
        let inner = &self.inner;
        let launch = inner
            .launcher
            .spare_launch()
            .map_err(|err| self.folder_error(err))?;
        let options = inner.launcher.options(None);
        let placeholder = ThreadId::from_string(format!(
            "spare-{}",
            launch
                .workdir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
        ));
        let start = SessionStart::Fresh {
            resume_failed: false,
        };
        let spare = self
            .start_process(&launch, &placeholder, &options, None, start, false, permit)
            .await?;
        if inner.stopping.load(Ordering::SeqCst) {
            spare.process.kill();
            return Ok(());
        }
        info!(pid = spare.process.pid(), "Spare parked.");
        lock(&inner.spares).push(spare);
        inner.metrics.spare_parked();
        Ok(())
    }

    /// A parked spare bound to `thread` as a fresh session in its folder, switched to the
    /// options' model, or `None` (no spare fits, or the CLI refused the claim: counted, and the
    /// caller spawns).
    pub(super) async fn claim_spare(
        &self,
        thread: &ThreadId,
        options: &SpawnOptions,
    ) -> Option<Arc<Entry>> {
        let inner = &self.inner;
        let spare = {
            let mut spares = lock(&inner.spares);
            let at = spares
                .iter()
                .position(|s| !s.process.has_exited() && s.fits(options) != Fit::No)?;
            spares.remove(at)
        };
        let outcome = self.bind_spare(&spare, thread, options).await;
        // Replace it, claimed or not.
        self.ensure_spares();
        match outcome {
            Ok(entry) => {
                inner.metrics.spare_claimed();
                info!(thread_id = %thread, pid = entry.process.pid(), "Spare claimed.");
                Some(entry)
            }
            Err(reason) => {
                inner.metrics.spare_gone();
                let token = reason.split(':').next().unwrap_or("").trim();
                inner.metrics.claim_failed(token);
                warn!(thread_id = %thread, %reason, "The CLI refused to claim a spare; starting a process.");
                spare.retire();
                None
            }
        }
    }

    async fn bind_spare(
        &self,
        spare: &Arc<Entry>,
        thread: &ThreadId,
        options: &SpawnOptions,
    ) -> Result<Arc<Entry>, String> {
        let inner = &self.inner;
        let folder = inner
            .launcher
            .thread_folder(thread)
            .map_err(|err| format!("cwd_not_found: cannot create the thread's folder: {err}"))?;
        let servers = [SERVER_NAME.to_owned()];
        // A claim takes about a tenth of a second; a spare that does not answer is no spare.
        let limit = inner.launcher.ready_timeout();
        tokio::time::timeout(limit, spare.process.claim(&folder, &servers))
            .await
            .map_err(|_| format!("claim_timeout: the spare did not answer within {limit:?}"))??;
        *lock(&spare.served_thread) = thread.clone();
        if *lock(&spare.model) != options.model {
            // Right after a claim the CLI applies it like --model, with no probe.
            spare
                .process
                .request(json!({"subtype": "set_model", "model": options.model}))
                .await
                .map_err(|reason| format!("set_model_refused: {reason}"))?;
        }
        let entry = Arc::new(Entry::new(
            spare.process.clone(),
            thread.clone(),
            spare.served_thread.clone(),
            spare.options.clone(),
            options.model.clone(),
            SessionStart::Fresh {
                resume_failed: false,
            },
            spare.calls.clone(),
        ));
        lock(&inner.live).insert(entry.process.pid(), entry.clone());
        Ok(entry)
    }
}
