//! cgroup v1 groups for trees: `/sys/fs/cgroup/{memory,pids,cpu}/harness/<daemon>/<tree>`.
//!
//! memory: `memory.limit_in_bytes` (and the same for memory plus swap, where swap is counted),
//! with the OOM killer off (`memory.oom_control`), so a tree at its limit waits until
//! [`crate::Tree::check`] stops a process of it, with a word to it first; pids: `pids.max`, a
//! `fork` past it fails and `pids.events` counts it; cpu: `cpu.shares`.

use std::fs;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::Limits;

const ROOT: &str = "/sys/fs/cgroup";
const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// This daemon's folder under each controller.
#[derive(Debug)]
pub(crate) struct Cgroups {
    dirs: Vec<PathBuf>,
}

impl Cgroups {
    /// The daemon's folders, `harness/<name>` under each controller, made now; why not, when a
    /// controller is missing or not ours to write.
    pub(crate) fn probe(name: &str) -> Result<Cgroups, String> {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut made = Cgroups { dirs: Vec::new() };
        for controller in CONTROLLERS {
            let root = Path::new(ROOT).join(controller);
            let mounted = mounts.lines().any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() > 3
                    && fields[2] == "cgroup"
                    && Path::new(fields[1]) == root.canonicalize().unwrap_or(root.clone())
                    && fields[3].split(',').any(|option| option == controller)
            });
            if !mounted {
                made.remove();
                return Err(format!(
                    "no cgroup v1 {controller} controller mounted at {}",
                    root.display()
                ));
            }
            let parent = root.join("harness");
            let dir = parent.join(name);
            let marker = match controller {
                "memory" => "memory.limit_in_bytes",
                "pids" => "pids.max",
                _ => "cpu.shares",
            };
            let ready = fs::create_dir_all(&dir)
                .map_err(|err| format!("cannot make {}: {err}", dir.display()));
            made.dirs.push(dir.clone());
            if let Err(why) = ready {
                made.remove();
                return Err(why);
            }
            if !dir.join(marker).exists() {
                made.remove();
                return Err(format!("{} has no {marker}", dir.display()));
            }
            sweep(&parent);
        }
        Ok(made)
    }

    /// A tree's groups, `name` under each controller, with `limits` written. No cpu group
    /// without a CPU weight: in cgroup v1 a group competes as one task against those outside
    /// it (the daemon's own), so a tree is put in one only when asked.
    pub(crate) fn make(&self, name: &str, limits: &Limits) -> std::io::Result<Group> {
        let dirs: Vec<(&'static str, PathBuf)> = CONTROLLERS
            .iter()
            .zip(&self.dirs)
            .filter(|(controller, _)| **controller != "cpu" || limits.cpu_weight.is_some())
            .map(|(controller, dir)| (*controller, dir.join(name)))
            .collect();
        for (_, dir) in &dirs {
            match fs::create_dir(dir) {
                Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => return Err(err),
                _ => {}
            }
        }
        let group = Group { dirs };
        if let Some(mb) = limits.memory_mb {
            let bytes = (mb * 1024 * 1024).to_string();
            group.write("memory", "memory.limit_in_bytes", &bytes)?;
            if group.file("memory", "memory.memsw.limit_in_bytes").exists() {
                group.write("memory", "memory.memsw.limit_in_bytes", &bytes)?;
            }
            group.write("memory", "memory.oom_control", "1")?;
        }
        if let Some(max) = limits.processes {
            group.write("pids", "pids.max", &max.to_string())?;
        }
        if let Some(weight) = limits.cpu_weight {
            // cgroup v2's weight 100 is v1's 1024 shares.
            let shares = (weight.clamp(1, 10_000) * 1024 / 100).max(2);
            group.write("cpu", "cpu.shares", &shares.to_string())?;
        }
        Ok(group)
    }

    /// Empties and removes the daemon's folders.
    pub(crate) fn remove(&self) {
        for dir in &self.dirs {
            if let Ok(entries) = fs::read_dir(dir) {
                for entry in entries.flatten() {
                    if entry.path().is_dir() {
                        empty_and_remove(&entry.path());
                    }
                }
            }
            let _ = fs::remove_dir(dir);
        }
    }
}

/// Folders under `parent` left by daemons that are gone (named `<pid>-…` for a pid that is not
/// alive): their processes killed, the folders removed.
fn sweep(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            if let Ok(trees) = fs::read_dir(entry.path()) {
                for tree in trees.flatten() {
                    if tree.path().is_dir() {
                        empty_and_remove(&tree.path());
                    }
                }
            }
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// Kills what is left in the group at `dir` and removes it.
fn empty_and_remove(dir: &Path) {
    for _ in 0..50 {
        let pids = procs_at(dir);
        if pids.is_empty() && fs::remove_dir(dir).is_ok() {
            return;
        }
        for pid in pids {
            kill(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `SIGKILL` to `pid`; one that is gone already is fine.
pub(crate) fn kill(pid: u32) {
    signal(pid, nix::sys::signal::Signal::SIGKILL);
}

/// `signal` to `pid`; one that is gone already is fine.
pub(crate) fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
}

fn procs_at(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// One tree's groups, one per controller it uses.
#[derive(Debug)]
pub(crate) struct Group {
    dirs: Vec<(&'static str, PathBuf)>,
}

impl Group {
    fn file(&self, controller: &str, name: &str) -> PathBuf {
        self.dirs
            .iter()
            .find(|(c, _)| *c == controller)
            .map(|(_, dir)| dir.join(name))
            .unwrap_or_default()
    }

    fn write(&self, controller: &str, name: &str, value: &str) -> std::io::Result<()> {
        let path = self.file(controller, name);
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut file| file.write_all(value.as_bytes()))
            .map_err(|err| std::io::Error::new(err.kind(), format!("{}: {err}", path.display())))
    }

    fn read(&self, controller: &str, name: &str) -> String {
        fs::read_to_string(self.file(controller, name)).unwrap_or_default()
    }

    /// `cgroup.procs` of each group, open for writing: what the child writes `0` to, to join.
    pub(crate) fn join_fds(&self) -> std::io::Result<Vec<OwnedFd>> {
        self.dirs
            .iter()
            .map(|(_, dir)| {
                fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))
                    .map(OwnedFd::from)
            })
            .collect()
    }

    /// The processes in the tree.
    pub(crate) fn procs(&self) -> Vec<u32> {
        procs_at(&self.file("pids", ""))
    }

    /// True while the tree waits at its memory limit.
    pub(crate) fn under_oom(&self) -> bool {
        self.read("memory", "memory.oom_control")
            .lines()
            .any(|line| line.trim() == "under_oom 1")
    }

    /// How many times a `fork` failed at the tree's task limit.
    pub(crate) fn forks_refused(&self) -> u64 {
        self.read("pids", "pids.events")
            .lines()
            .find_map(|line| line.strip_prefix("max "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The tree's memory, in bytes (page cache included).
    pub(crate) fn memory(&self) -> Option<u64> {
        self.read("memory", "memory.usage_in_bytes")
            .trim()
            .parse()
            .ok()
    }

    /// The tree's tasks now.
    pub(crate) fn tasks(&self) -> Option<u64> {
        self.read("pids", "pids.current").trim().parse().ok()
    }

    /// Kills what is left and removes the groups.
    pub(crate) fn remove(&self) {
        for (_, dir) in &self.dirs {
            empty_and_remove(dir);
        }
    }
}
