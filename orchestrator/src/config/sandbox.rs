//! `[sandbox]`: the walls around every thread's process tree (see `crate::launch::walls` and the
//! `walls` crate). On by default; a profile may set its own limits, network and `auto_allow` in
//! `[profiles.NAME.sandbox]`.

use std::path::PathBuf;

use serde::Deserialize;

/// `[sandbox]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Off: children run with no walls, and the daemon says so in a warning at every start.
    /// On (the default) where the kernel cannot raise them, the daemon refuses to start.
    pub enabled: bool,
    /// Limits held by cgroups (v1 memory, pids and cpu) where the daemon may make them; off, or
    /// where it may not, a watch samples each tree instead.
    pub cgroups: bool,
    /// Paths every thread may read (and execute), beside the system's and the CLI's.
    pub read_only: Vec<PathBuf>,
    /// Paths every thread may read and write, beside its own folders.
    pub read_write: Vec<PathBuf>,
    /// Most memory a thread's process tree may use, in MiB (page cache included).
    pub memory_max_mb: u64,
    /// Most tasks (processes and their threads) a thread's tree may run at once.
    pub max_processes: u64,
    /// Its share of the CPU against other threads: 100 is an equal share (1 to 10000); unset,
    /// threads' processes are scheduled as any others (with cgroup v1 a weighted tree competes
    /// as one task against the daemon's own, so it is put in a cpu group only when asked).
    pub cpu_weight: Option<u64>,
    /// What it may connect to outside the machine.
    pub network: Network,
    /// TCP ports it may connect to besides (a profile's own servers).
    pub ports: Vec<u16>,
    /// Commands and file edits run without asking: the walls hold them. Deny rules still apply.
    pub auto_allow: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            enabled: true,
            cgroups: true,
            read_only: Vec::new(),
            read_write: Vec::new(),
            memory_max_mb: 4096,
            max_processes: 512,
            cpu_weight: None,
            network: Network::Web,
            ports: Vec::new(),
            auto_allow: false,
        }
    }
}

/// What a profile sets of its threads' walls (`[profiles.NAME.sandbox]`); unset: `[sandbox]`'s.
/// [`SandboxConfig::of`] gives a profile's whole walls, every field set.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ProfileSandbox {
    /// Most memory a thread's process tree may use, in MiB (page cache included).
    pub memory_max_mb: Option<u64>,
    /// Most tasks (processes and their threads) a thread's tree may run at once.
    pub max_processes: Option<u64>,
    /// Its share of the CPU against other threads: 100 is an equal share (1 to 10000).
    pub cpu_weight: Option<u64>,
    /// What it may connect to outside the machine.
    pub network: Option<Network>,
    /// TCP ports it may connect to besides (a profile's own servers).
    pub ports: Vec<u16>,
    /// Commands and file edits run without asking: the walls hold them. Deny rules still apply.
    pub auto_allow: Option<bool>,
}

/// A thread's TCP connections beyond the model gateway's. Landlock allows ports, not addresses:
/// a port allowed is allowed on every address, this machine's included (SECURITY.md).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// The gateway only.
    None,
    /// Ports 80 and 443 (web pages, package registries, git over https).
    Web,
    /// Every port but the daemon's own (its API, the gateway's other uses, its database).
    Open,
}

impl SandboxConfig {
    /// A profile's walls: its own settings over the daemon's, every field set.
    pub fn of(&self, own: &ProfileSandbox) -> ProfileSandbox {
        let ports = if own.ports.is_empty() {
            self.ports.clone()
        } else {
            own.ports.clone()
        };
        ProfileSandbox {
            memory_max_mb: own.memory_max_mb.or(Some(self.memory_max_mb)),
            max_processes: own.max_processes.or(Some(self.max_processes)),
            cpu_weight: own.cpu_weight.or(self.cpu_weight),
            network: own.network.or(Some(self.network)),
            ports,
            auto_allow: own.auto_allow.or(Some(self.auto_allow)),
        }
    }

    pub(super) fn check(&self, profiles: &[(&str, &ProfileSandbox)]) -> Result<(), String> {
        let defaults = self.of(&ProfileSandbox::default());
        let all = std::iter::once(("sandbox", &defaults)).chain(profiles.iter().copied());
        for (name, walls) in all {
            if walls.memory_max_mb == Some(0) || walls.max_processes == Some(0) {
                return Err(format!(
                    "{name}: memory_max_mb and max_processes must be at least 1"
                ));
            }
            if walls.cpu_weight.is_some_and(|w| !(1..=10_000).contains(&w)) {
                return Err(format!("{name}: cpu_weight must be from 1 to 10000"));
            }
            if walls.ports.contains(&0) {
                return Err(format!("{name}: port 0 is not a port to connect to"));
            }
        }
        Ok(())
    }
}
