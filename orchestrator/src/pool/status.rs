//! What the status API shows of the pool's processes ([`ProcessInfo`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use plugin_contract::{CliSessionId, ThreadId};

use super::entry::Entry;
use super::Pool;
use crate::sync::lock;

/// One live process, for `/api/pool`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    pub model: Option<String>,
    /// The permission mode the CLI last said is in effect (at its latest turn's start, or after
    /// a switch); it can be narrower than the one asked for. `None` before it said.
    pub permission_mode: Option<String>,
    pub pid: u32,
    pub age_ms: u64,
    pub idle_ms: u64,
    pub turns_served: u64,
    pub busy: bool,
    /// Let go by the pool; killed when its lease ends.
    pub retired: bool,
    /// A parked spare: its `threadId` is the one reserved for the next thread created.
    pub spare: bool,
    #[schema(value_type = Option<String>)]
    pub session_id: Option<CliSessionId>,
    /// Resident memory (`VmRSS` from `/proc/<pid>/status`), in bytes; `None` when unreadable.
    /// It counts the pages every `claude` process shares (the CLI's binary) in full, in each.
    pub rss_bytes: Option<u64>,
    /// Proportional set size (`Pss` from `/proc/<pid>/smaps_rollup`): resident memory with each
    /// shared page divided among the processes sharing it; the processes' sum is what they
    /// take together. In bytes; `None` when unreadable.
    pub pss_bytes: Option<u64>,
    /// Memory no other process shares (`Private_Clean` + `Private_Dirty`): what one more warm
    /// process costs. In bytes; `None` when unreadable.
    pub private_bytes: Option<u64>,
    /// Crons and background tasks the CLI reported pending at its last turn's end
    /// (`claude.scheduling_tools`): while any are, the process is never evicted.
    pub pending_work: usize,
    /// Its tree's walls (`[sandbox]`); `None` when they are off.
    pub walls: Option<WallsInfo>,
}

/// What a process's tree may touch and use, and what it uses now.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WallsInfo {
    /// Most memory of the tree, in MiB.
    pub memory_max_mb: Option<u64>,
    /// Most tasks (processes and their threads) of the tree at once.
    pub max_processes: Option<u64>,
    /// Its CPU weight against other trees (100: an equal share).
    pub cpu_weight: Option<u64>,
    /// `cgroup` when the kernel holds the limits, `watch` when the daemon samples them.
    pub limits_held_by: String,
    /// The TCP ports it may connect to; `null` when it may connect to every port but
    /// `closedPorts`.
    pub connect_ports: Option<Vec<u16>>,
    /// With every other port open: the ports still closed (the daemon's own).
    pub closed_ports: Option<Vec<u16>>,
    /// What it reads and writes: its folders and the devices.
    pub read_write: Vec<String>,
    /// Its memory now, in bytes (the cgroup's, page cache included); only with cgroups.
    pub memory_bytes: Option<u64>,
    /// Its tasks now; only with cgroups.
    pub processes: Option<u64>,
}

impl WallsInfo {
    fn of(walls: &walls::Walls, tree: &walls::Tree, usage: walls::Usage) -> WallsInfo {
        let (connect_ports, closed_ports) = match &walls.connect {
            walls::Connect::Only(ports) => (Some(ports.iter().copied().collect()), None),
            walls::Connect::AllBut(closed) => (None, Some(closed.iter().copied().collect())),
        };
        WallsInfo {
            memory_max_mb: walls.limits.memory_mb,
            max_processes: walls.limits.processes,
            cpu_weight: walls.limits.cpu_weight,
            limits_held_by: tree.mechanism().to_owned(),
            connect_ports,
            closed_ports,
            read_write: walls
                .read_write
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            memory_bytes: usage.memory_bytes,
            processes: usage.processes,
        }
    }
}

impl Pool {
    /// Every live process, for the status API: no file is read here, the memory figures are
    /// the last sample's ([`Pool::sample_memory`]).
    pub fn snapshot(&self) -> Vec<ProcessInfo> {
        let state = self.inner.state.lock();
        let live: Vec<(Arc<Entry>, bool)> = state
            .live()
            .into_iter()
            .map(|e| {
                let spare = state.is_spare(e.process.pid());
                (e, spare)
            })
            .collect();
        drop(state);
        let mut list: Vec<ProcessInfo> = live
            .iter()
            .filter(|(e, _)| !e.process.has_exited())
            .map(|(e, spare)| {
                let sample = *lock(&e.sample);
                ProcessInfo {
                    thread_id: e.spec.thread.clone(),
                    model: lock(&e.now).model.clone(),
                    permission_mode: e.process.permission_mode(),
                    pid: e.process.pid(),
                    age_ms: millis(e.process.age()),
                    idle_ms: millis(e.idle_for()),
                    turns_served: e.turns.load(Ordering::Relaxed),
                    busy: e.is_busy(),
                    retired: e.is_retired(),
                    spare: *spare,
                    session_id: e.process.session_id().map(CliSessionId::from_string),
                    rss_bytes: sample.rss_bytes,
                    pss_bytes: sample.memory.map(|m| m.pss),
                    private_bytes: sample.memory.map(|m| m.private),
                    pending_work: e.calls.pending_work.load(Ordering::SeqCst),
                    walls: e
                        .spec
                        .walls
                        .as_ref()
                        .zip(e.tree.as_deref())
                        .map(|(walls, tree)| WallsInfo::of(walls, tree, sample.walls)),
                }
            })
            .collect();
        list.sort_by_key(|p| p.pid);
        list
    }

    /// Reads each live process's memory (`/proc/<pid>/status`, `smaps_rollup`, its tree's
    /// cgroup) into its sample, which `/api/pool` and `/metrics` show: blocking file reads, run
    /// off the request path ([`MEMORY_SAMPLE_EVERY`], and once when a process is ready), so no
    /// read of either slows another request.
    pub fn sample_memory(&self) {
        let live = self.inner.state.lock().live();
        for entry in live.iter().filter(|e| !e.process.has_exited()) {
            entry.take_sample();
        }
        self.inner.metrics.memory_sampled();
    }

    /// The live processes' sampled memory into the `harness_pool_pss_bytes` and
    /// `harness_pool_private_bytes` gauges: `/metrics` calls it before each scrape.
    pub fn measure_memory(&self) {
        let live = self.inner.state.lock().live();
        let sampled: Vec<Memory> = live
            .iter()
            .filter(|e| !e.process.has_exited())
            .filter_map(|e| lock(&e.sample).memory)
            .collect();
        let pss = sampled.iter().map(|m| m.pss).sum();
        let private = sampled.iter().map(|m| m.private).sum();
        self.inner.metrics.memory(pss, private);
    }

    /// The memory of each live process whose `smaps_rollup` could be read.
    pub(super) fn live_memory(&self) -> Vec<Memory> {
        self.live_pids().into_iter().filter_map(memory).collect()
    }

    /// Pids of live processes.
    pub fn live_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .inner
            .state
            .lock()
            .live()
            .iter()
            .filter(|e| !e.process.has_exited())
            .map(|e| e.process.pid())
            .collect();
        pids.sort_unstable();
        pids
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `VmRSS` of `pid` in bytes, from `/proc/<pid>/status` (Linux); `None` when the process is gone
/// or the line is missing.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

/// How often [`Pool::sample_memory`] runs.
pub const MEMORY_SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// What a live process used when last sampled.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Sample {
    pub rss_bytes: Option<u64>,
    pub memory: Option<Memory>,
    /// Its tree's, with cgroups.
    pub walls: walls::Usage,
}

/// A process's memory as `/proc/<pid>/smaps_rollup` sums it, in bytes: its figures from one
/// read, so that `private <= pss <= rss` holds among them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    /// Resident memory (`Rss`).
    pub rss: u64,
    pub pss: u64,
    /// `Private_Clean` + `Private_Dirty`.
    pub private: u64,
}

/// The memory of `pid` (Linux); `None` when the process is gone or the file unreadable.
pub fn memory(pid: u32) -> Option<Memory> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    parse_rollup(&rollup)
}

fn parse_rollup(rollup: &str) -> Option<Memory> {
    let field = |name: &str| -> Option<u64> {
        let line = rollup.lines().find(|l| l.starts_with(name))?;
        let mut fields = line[name.len()..].split_whitespace();
        let value: u64 = fields.next()?.parse().ok()?;
        (fields.next() == Some("kB")).then_some(value * 1024)
    };
    Some(Memory {
        rss: field("Rss:")?,
        pss: field("Pss:")?,
        private: field("Private_Clean:")? + field("Private_Dirty:")?,
    })
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut fields = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") | None => Some(value * 1024),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tclaude\nVmPeak:\t  300 kB\nVmRSS:\t  223456 kB\nThreads:\t12\n";
        assert_eq!(parse_vm_rss(status), Some(223_456 * 1024));
        assert_eq!(parse_vm_rss("Name:\tkthreadd\n"), None);
        assert!(rss_bytes(std::process::id()).is_some_and(|b| b > 0));
        assert_eq!(rss_bytes(u32::MAX), None);
    }

    #[test]
    fn pss_and_private_memory_are_read_from_the_rollup() {
        let rollup = "559ae5dfb000-7ffcd9110000 ---p 00000000 00:00 0  [rollup]\n\
                      Rss:                1708 kB\nPss:                 812 kB\n\
                      Pss_Dirty:           112 kB\nShared_Clean:       1404 kB\n\
                      Private_Clean:       192 kB\nPrivate_Dirty:       112 kB\n";
        assert_eq!(
            parse_rollup(rollup),
            Some(Memory {
                rss: 1708 * 1024,
                pss: 812 * 1024,
                private: (192 + 112) * 1024
            })
        );
        assert_eq!(parse_rollup("Rss: 1 kB\n"), None);
        assert_eq!(
            parse_rollup("Pss: 1 kB\nPrivate_Clean: 1 kB\nPrivate_Dirty: 0 kB\n"),
            None
        );
        let own = memory(std::process::id()).expect("this process's rollup");
        let rss = rss_bytes(std::process::id()).expect("this process's RSS");
        assert!(own.private > 0 && own.private <= own.pss, "{own:?}");
        assert!(own.pss <= rss + 1024 * 1024, "{own:?} vs RSS {rss}");
        assert_eq!(memory(u32::MAX), None);
    }
}
