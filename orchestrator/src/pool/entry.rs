//! A process as the pool sees it ([`Entry`]): the CLI process, the spec it was started from, and
//! the pool's bookkeeping on it (leases, turns, last use, whether it is let go); and where its
//! control requests go ([`Inboxes`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use claude_cli::CliProcess;
use tokio::sync::{mpsc, watch};

use plugin_contract::SessionStart;

use super::lease::{HostCall, Lease};
use super::Pool;
use crate::gateway::MeterSlot;
use crate::launch::{Fit, ProcessSpec, Switchable};
use crate::sync::lock;

/// A process as the pool sees it: the CLI process and the pool's bookkeeping around it.
pub(super) struct Entry {
    pub(super) process: Arc<CliProcess>,
    /// What the process was started from; its model may have changed since.
    pub(super) spec: ProcessSpec,
    /// Its folder's device and inode when it started ([`Entry::in_its_folder`]).
    folder: Option<(u64, u64)>,
    /// Its model, permission mode and external MCP servers now (`set_model`,
    /// `set_permission_mode`, `mcp_set_servers` change them in place).
    pub(super) now: Mutex<Switchable>,
    start: SessionStart,
    /// Checkouts whose lease has not ended. A leased process counts as busy: the pool must not
    /// push it out between checkout and turn.
    pub(super) leases: AtomicUsize,
    /// Let go by the pool while leased: killed when the last lease ends.
    pub(super) retired: AtomicBool,
    /// Started beyond the pool's capacity: let go as soon as its first lease ends.
    pub(super) one_turn: AtomicBool,
    pub(super) turns: AtomicU64,
    pub(super) last_used: Mutex<Instant>,
    /// Where the process's tool calls go while a turn runs.
    pub(super) calls: Arc<Inboxes>,
    /// How many of the process's transcript frames have been stored (or given up on).
    pub(super) transcript_stored: watch::Receiver<u64>,
    /// When a checkout started it: the steps of its start, for the turn's trace.
    pub(super) born: std::sync::OnceLock<Born>,
    /// Its walled tree (`None` without walls): limits, usage.
    pub(super) tree: Option<Arc<walls::Tree>>,
    /// Set when the walls stopped the process itself: why its turn ended.
    pub(super) stopped: std::sync::OnceLock<walls::Breach>,
    /// Its memory when last sampled ([`super::Pool::sample_memory`]).
    pub(super) sample: Mutex<super::status::Sample>,
    /// Where the turn that holds it puts its meter, shared with its token at the model gateway
    /// ([`crate::gateway::Pass`]), which counts its model requests through it.
    pub(super) meter: MeterSlot,
}

/// How a process started for a checkout: asked for at `asked`, given a slot at `slot`, ready at
/// `ready` (the turn's trace shows the slot wait and the spawn).
#[derive(Clone, Copy, Debug)]
pub struct Born {
    pub asked: std::time::SystemTime,
    pub slot: std::time::SystemTime,
    pub ready: std::time::SystemTime,
}

impl Entry {
    /// A process the pool starts keeping books on: unleased, no turn served, used now.
    pub(super) fn new(
        process: Arc<CliProcess>,
        spec: ProcessSpec,
        start: SessionStart,
        calls: Arc<Inboxes>,
        transcript_stored: watch::Receiver<u64>,
        tree: Option<Arc<walls::Tree>>,
        meter: MeterSlot,
    ) -> Entry {
        Entry {
            process,
            folder: folder_identity(&spec.workdir),
            now: Mutex::new(Switchable::of(&spec)),
            spec,
            start,
            leases: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            one_turn: AtomicBool::new(false),
            turns: AtomicU64::new(0),
            last_used: Mutex::new(Instant::now()),
            calls,
            transcript_stored,
            born: std::sync::OnceLock::new(),
            tree,
            stopped: std::sync::OnceLock::new(),
            sample: Mutex::default(),
            meter,
        }
    }

    /// Reads its memory now into its sample (blocking file reads).
    pub(super) fn take_sample(&self) {
        let pid = self.process.pid();
        let walls = match &self.tree {
            Some(tree) if tree.mechanism() == "cgroup" => tree.usage(),
            _ => walls::Usage::default(),
        };
        // The rollup's figures come from one read; `VmRSS` only when it cannot be read.
        let memory = super::status::memory(pid);
        let sample = super::status::Sample {
            rss_bytes: memory
                .map(|m| m.rss)
                .or_else(|| super::status::rss_bytes(pid)),
            memory,
            walls,
        };
        *lock(&self.sample) = sample;
    }

    /// Why the process went away mid-turn: its walls' limit when they stopped it, or when its
    /// tree was at its process limit (the CLI itself could not start a thread then).
    pub(super) fn died(&self, err: claude_cli::CliError) -> crate::turn_error::TurnError {
        use crate::turn_error::TurnError;
        if let Some(breach) = self.stopped.get() {
            return TurnError::WallLimit(breach.message.clone());
        }
        match &self.tree {
            Some(tree) if tree.refused_a_fork() => {
                let max = tree.limits().processes.unwrap_or_default();
                TurnError::WallLimit(format!(
                    "stopped by the thread's walls: its limit of {max} processes was reached ({err})"
                ))
            }
            _ => err.into(),
        }
    }

    /// Whether a turn asking for `spec` can run on this process as it is.
    pub(super) fn fits(&self, spec: &ProcessSpec) -> Fit {
        self.spec.fit(&lock(&self.now), spec)
    }

    pub(super) fn is_busy(&self) -> bool {
        self.leases.load(Ordering::SeqCst) > 0 || self.process.in_turn()
    }

    pub(super) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }

    /// The CLI holds crons or background tasks of the thread (its last `Stop` report): pushing
    /// the process out would drop them, so it is never chosen for eviction.
    pub(super) fn has_pending_work(&self) -> bool {
        self.calls.pending_work.load(Ordering::SeqCst) > 0
    }

    /// Fit for another turn: running, not let go, and its results still answer our messages
    /// ([`CliProcess::pairs`]).
    pub(super) fn usable(&self) -> bool {
        !self.is_retired() && !self.process.has_exited() && self.process.pairs()
    }

    /// Whether its folder is still the one it started in: not deleted, nor deleted and made
    /// again (the process would still work in the deleted one, writing where nobody reads).
    pub(super) fn in_its_folder(&self) -> bool {
        self.folder.is_some() && folder_identity(&self.spec.workdir) == self.folder
    }

    pub(super) fn idle_for(&self) -> Duration {
        if self.is_busy() {
            Duration::ZERO
        } else {
            lock(&self.last_used).elapsed()
        }
    }

    pub(super) fn session_start(&self) -> SessionStart {
        if self.turns.load(Ordering::Relaxed) > 0 {
            SessionStart::Warm
        } else {
            self.start
        }
    }

    /// Lets go of the process: killed now if unleased, or when its last lease ends.
    pub(super) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.kill_if_retired_and_unused();
    }

    pub(super) fn kill_if_retired_and_unused(&self) {
        if self.is_retired() && self.leases.load(Ordering::SeqCst) == 0 {
            self.process.kill();
        }
    }

    /// Takes a lease, or `None` when the pool already let go of the process (or it exited).
    pub(super) fn lease(self: &Arc<Self>, pool: &Pool) -> Option<Lease> {
        // Increment, then look: `retire` stores, then looks. With SeqCst at least one of the two
        // sees the other, so a process is never killed under a live lease.
        self.leases.fetch_add(1, Ordering::SeqCst);
        let lease = Lease::new(self.clone(), pool.clone());
        if !self.usable() {
            return None;
        }
        Some(lease)
    }
}

/// Where a process's control requests go: the turn of ours that runs, or the turn the CLI
/// started by itself (the CLI runs one at a time, and says which with each request).
#[derive(Default)]
pub(super) struct Inboxes {
    pub(super) ours: Mutex<Option<mpsc::UnboundedSender<HostCall>>>,
    pub(super) own: Mutex<Option<mpsc::UnboundedSender<HostCall>>>,
    /// Crons and background tasks the CLI reported pending at its last turn's end (`Stop`
    /// hook): a process with any is not evicted, since its thread's work is in it.
    pub(super) pending_work: AtomicUsize,
}

impl Inboxes {
    pub(super) fn slot(&self, own: bool) -> &Mutex<Option<mpsc::UnboundedSender<HostCall>>> {
        if own {
            &self.own
        } else {
            &self.ours
        }
    }
}

/// A folder's identity on disk (device and inode), `None` when it is not there.
fn folder_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    meta.is_dir().then(|| (meta.dev(), meta.ino()))
}
