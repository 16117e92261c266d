//! A walled tree while it lives: its limits checked ([`Tree::check`]), its usage read, and what
//! is left of it killed when it is released.
//!
//! A process over a limit is stopped with a word first: a line appended to its standard error
//! (`/proc/<pid>/fd/2`), which a tool that ran it shows the model, then `SIGKILL` to it and
//! everything below it.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::cgroup::{kill, signal, Group};
use crate::Limits;

/// Which limit a tree reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    Memory,
    Processes,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Memory => "memory",
            Limit::Processes => "processes",
        }
    }
}

/// A limit reached, and what was stopped for it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Breach {
    pub limit: Limit,
    /// The limit: MiB for memory, tasks for processes.
    pub max: u64,
    /// The process stopped (with everything below it).
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// True when it was the tree's first process itself.
    pub root: bool,
    /// What the stopped process was told.
    pub message: String,
}

/// What a tree uses now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Its memory in bytes (the cgroup's, page cache included; else the sum of its processes'
    /// resident sets).
    pub memory_bytes: Option<u64>,
    /// Its tasks (with cgroups) or processes (without).
    pub processes: Option<u64>,
}

/// One walled tree.
#[derive(Debug)]
pub struct Tree {
    group: Option<Group>,
    limits: Limits,
    root: AtomicU32,
    /// `pids.events`' count of refused forks last seen.
    refused: AtomicU64,
    released: Mutex<bool>,
}

impl Tree {
    pub(crate) fn new(group: Option<Group>, limits: Limits) -> Tree {
        Tree {
            group,
            limits,
            root: AtomicU32::new(0),
            refused: AtomicU64::new(0),
            released: Mutex::new(false),
        }
    }

    /// The tree's first process is `pid`.
    pub fn started(&self, pid: u32) {
        self.root.store(pid, Ordering::SeqCst);
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// True once a `fork` in the tree was refused at its task limit (with cgroups): what made
    /// a first process that died meanwhile fail to start a thread of its own.
    pub fn refused_a_fork(&self) -> bool {
        // The count last seen is kept: once the tree is released its group is gone.
        self.refused.load(Ordering::SeqCst) > 0
            || self
                .group
                .as_ref()
                .is_some_and(|group| group.forks_refused() > 0)
    }

    /// `cgroup` when the kernel holds the limits, `watch` when [`Tree::check`] samples them.
    pub fn mechanism(&self) -> &'static str {
        if self.group.is_some() {
            "cgroup"
        } else {
            "watch"
        }
    }

    /// The tree's processes now: its cgroup's, else the first process and its descendants.
    fn procs(&self) -> Vec<u32> {
        match &self.group {
            Some(group) => group.procs(),
            None => {
                let root = self.root.load(Ordering::SeqCst);
                if root == 0 || !std::path::Path::new(&format!("/proc/{root}")).exists() {
                    return Vec::new();
                }
                let parents = parents_of(&all_pids());
                let mut tree = vec![root];
                tree.extend(descendants(root, &parents));
                tree
            }
        }
    }

    pub fn usage(&self) -> Usage {
        match &self.group {
            Some(group) => Usage {
                memory_bytes: group.memory(),
                processes: group.tasks(),
            },
            None => {
                let procs = self.procs();
                Usage {
                    memory_bytes: Some(procs.iter().map(|pid| resident(*pid)).sum()),
                    processes: Some(procs.len() as u64),
                }
            }
        }
    }

    /// Checks the limits once: a tree at its memory limit has its largest process but the first
    /// stopped (the first itself when it is alone); a
    /// tree that reached its task limit (a `fork` refused) has the command that forks stopped:
    /// the child of the first process with the most processes below it, and any process that
    /// left the first one's tree. Returns what was stopped.
    pub fn check(&self) -> Vec<Breach> {
        let root = self.root.load(Ordering::SeqCst);
        if root == 0 || *self.released.lock().unwrap_or_else(|e| e.into_inner()) {
            return Vec::new();
        }
        let mut breaches = Vec::new();
        if let Some(max_mb) = self.limits.memory_mb {
            let over = match &self.group {
                Some(group) => group.under_oom(),
                None => self.usage().memory_bytes.unwrap_or(0) > max_mb * 1024 * 1024,
            };
            if over {
                if let Some(breach) = self.stop_largest(root, max_mb) {
                    breaches.push(breach);
                }
            }
        }
        if let Some(max) = self.limits.processes {
            let over = match &self.group {
                Some(group) => {
                    let refused = group.forks_refused();
                    refused > self.refused.swap(refused, Ordering::SeqCst)
                }
                None => self.procs().len() as u64 > max,
            };
            if over {
                if let Some(breach) = self.stop_storm(root, max) {
                    breaches.push(breach);
                }
            }
        }
        breaches
    }

    /// Stops the largest process of the tree but its first: what a command started is what
    /// the limit is for; the first process itself only when nothing else is there.
    fn stop_largest(&self, root: u32, max_mb: u64) -> Option<Breach> {
        let procs = self.procs();
        let victim = procs
            .iter()
            .copied()
            .filter(|pid| *pid != root)
            .max_by_key(|pid| resident(*pid))
            .or_else(|| procs.contains(&root).then_some(root))?;
        let used = resident(victim) / (1024 * 1024);
        let message = format!(
            "stopped by the thread's walls: its memory limit of {max_mb} MiB was reached (this process used {used} MiB)"
        );
        Some(self.stop(Limit::Memory, max_mb, root, victim, message))
    }

    fn stop_storm(&self, root: u32, max: u64) -> Option<Breach> {
        let procs = self.procs();
        let parents = parents_of(&procs);
        let below_root = descendants(root, &parents);
        // The child of the first process with the most processes below it.
        let storm = procs
            .iter()
            .copied()
            .filter(|pid| parents.get(pid) == Some(&root))
            .max_by_key(|child| descendants(*child, &parents).len());
        // What left the first process's tree (an orphan adopted elsewhere) goes too.
        let orphans: Vec<u32> = procs
            .iter()
            .copied()
            .filter(|pid| *pid != root && !below_root.contains(pid))
            .collect();
        let victim = storm.or_else(|| orphans.first().copied())?;
        let message =
            format!("stopped by the thread's walls: its limit of {max} processes was reached");
        let breach = self.stop(Limit::Processes, max, root, victim, message);
        for orphan in orphans {
            self.freeze_and_kill(orphan);
        }
        Some(breach)
    }

    /// Tells `victim` why on its standard error, then stops it and everything below it.
    fn stop(&self, limit: Limit, max: u64, root: u32, victim: u32, message: String) -> Breach {
        let command = fs::read_to_string(format!("/proc/{victim}/comm"))
            .unwrap_or_default()
            .trim()
            .to_owned();
        if victim == root {
            // The whole process group of the tree's first process.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(root as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        } else {
            tell(victim, &message);
        }
        self.freeze_and_kill(victim);
        Breach {
            limit,
            max,
            pid: victim,
            command,
            root: victim == root,
            message,
        }
    }

    /// Stops `pid` and everything below it (`SIGSTOP`, again for what they forked meanwhile,
    /// until nothing new appears), then kills them all: a storm cannot outrun it.
    fn freeze_and_kill(&self, pid: u32) {
        let mut frozen: Vec<u32> = Vec::new();
        for _ in 0..100 {
            let procs = self.procs();
            let parents = parents_of(&procs);
            let mut subtree = vec![pid];
            subtree.extend(descendants(pid, &parents));
            let new: Vec<u32> = subtree
                .into_iter()
                .filter(|p| !frozen.contains(p))
                .collect();
            if new.is_empty() {
                break;
            }
            for p in &new {
                signal(*p, nix::sys::signal::Signal::SIGSTOP);
            }
            frozen.extend(new);
        }
        for p in frozen {
            kill(p);
        }
    }

    /// Kills what is left of the tree and removes its cgroups; checks stop.
    pub fn release(&self) {
        let mut released = self.released.lock().unwrap_or_else(|e| e.into_inner());
        if *released {
            return;
        }
        *released = true;
        if let Some(group) = &self.group {
            // What [`Tree::refused_a_fork`] says after the group is gone.
            self.refused
                .fetch_max(group.forks_refused(), Ordering::SeqCst);
            group.remove();
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.release();
    }
}

/// Appends `message` to `pid`'s standard error, without waiting on a full pipe.
fn tell(pid: u32, message: &str) {
    let opened = fs::OpenOptions::new()
        .append(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(format!("/proc/{pid}/fd/2"));
    if let Ok(mut stderr) = opened {
        let _ = stderr.write_all(format!("\n[harness] {message}\n").as_bytes());
    }
}

/// A process's resident memory (`VmRSS`), in bytes.
fn resident(pid: u32) -> u64 {
    let kib: u64 = fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0);
    kib * 1024
}

fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Each of `pids`' parent.
fn parents_of(pids: &[u32]) -> HashMap<u32, u32> {
    pids.iter()
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid …`: the command may hold spaces and parentheses.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid = after.split_whitespace().nth(1)?.parse().ok()?;
            Some((*pid, ppid))
        })
        .collect()
}

/// Every process below `pid`, by `parents`.
fn descendants(pid: u32, parents: &HashMap<u32, u32>) -> Vec<u32> {
    let mut found = vec![pid];
    let mut at = 0;
    while at < found.len() {
        let parent = found[at];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| **p == parent)
                .map(|(child, _)| *child),
        );
        at += 1;
    }
    found.remove(0);
    found
}
