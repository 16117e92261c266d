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
    pub rss_bytes: Option<u64>,
    /// Crons and background tasks the CLI reported pending at its last turn's end
    /// (`claude.scheduling_tools`): while any are, the process is never evicted.
    pub pending_work: usize,
}

impl Pool {
    /// Every live process, for the status API.
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
            .map(|(e, spare)| ProcessInfo {
                thread_id: e.spec.thread.clone(),
                model: lock(&e.now).model.clone(),
                pid: e.process.pid(),
                age_ms: millis(e.process.age()),
                idle_ms: millis(e.idle_for()),
                turns_served: e.turns.load(Ordering::Relaxed),
                busy: e.is_busy(),
                retired: e.is_retired(),
                spare: *spare,
                session_id: e.process.session_id().map(CliSessionId::from_string),
                rss_bytes: rss_bytes(e.process.pid()),
                pending_work: e.calls.pending_work.load(Ordering::SeqCst),
            })
            .collect();
        list.sort_by_key(|p| p.pid);
        list
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
}
