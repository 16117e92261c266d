//! The re-drive sweep: finds the threads with a turn to run again (`onInterrupt: "retry"`, see
//! `pipeline::redrive`) and re-drives each on the node that holds it.
//!
//! A single node sweeps once at start-up, after it ended what the previous run left (`crash`)
//! and before it serves requests, so the re-driven turns run ahead of anything sent after. On a
//! cluster every node sweeps at start and on each heartbeat: a thread whose owner died (a
//! message still `pending` under an expired lease) is taken over here, which ends that turn as a
//! `takeover`, and then re-driven; a thread a live peer holds is left to it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::cluster::Cluster;
use crate::pipeline::Pipeline;
use crate::store::Store;

/// The sweep of one node.
#[derive(Clone)]
pub struct Redrive {
    store: Store,
    pipeline: Pipeline,
    cluster: Option<Cluster>,
    /// `turn.redrive_attempts`.
    max_cuts: u32,
}

impl Redrive {
    pub fn new(
        store: Store,
        pipeline: Pipeline,
        cluster: Option<Cluster>,
        max_cuts: u32,
    ) -> Redrive {
        Redrive {
            store,
            pipeline,
            cluster,
            max_cuts,
        }
    }

    /// One sweep; how many turns it put back in line.
    pub async fn sweep(&self) -> usize {
        if self.max_cuts == 0 {
            return 0;
        }
        let threads = match self.store.redrive_threads(self.max_cuts).await {
            Ok(threads) => threads,
            Err(err) => {
                warn!(error = %err, "Could not look for turns to re-drive.");
                return 0;
            }
        };
        let mut started = 0;
        for thread in threads {
            let fence = match &self.cluster {
                None => None,
                Some(cluster) => match cluster.take(&thread).await {
                    Ok(Some(fence)) => Some(fence),
                    // A live peer holds it: it re-drives its own.
                    Ok(None) => continue,
                    Err(err) => {
                        warn!(thread_id = %thread, error = %err, "Could not take a thread to re-drive.");
                        continue;
                    }
                },
            };
            match self.pipeline.redrive(&thread, fence, self.max_cuts).await {
                Ok(n) => started += n,
                Err(err) => {
                    warn!(thread_id = %thread, error = %err, "Could not re-drive the thread's turns.")
                }
            }
        }
        if started > 0 {
            info!(
                turns = started,
                "Re-drove turns cut by a crash, a shutdown or a takeover."
            );
        }
        started
    }

    /// On a cluster, sweeps every `every` until `stop`.
    pub fn spawn(&self, tasks: &TaskTracker, every: Duration, stop: CancellationToken) {
        let sweep = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(every.max(Duration::from_millis(100)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => { sweep.sweep().await; }
                    _ = stop.cancelled() => break,
                }
            }
        });
    }
}
