//! Walls: an OS sandbox for one process tree, raised between fork and exec of its first process,
//! so that everything the process starts inherits it and nothing inside can lift it.
//!
//! A [`Walls`] value says what a tree may read and write, which TCP ports it may connect to, and
//! its limits. [`Sandbox::probe`] checks once what the kernel can hold (Landlock ABI 6,
//! cgroups) and refuses when it cannot hold the walls; [`Sandbox::wall`] turns one tree's walls
//! into a [`Confinement`] (applied to the command) and a [`Tree`] (its limits, watched while it
//! lives: [`Tree::check`]; released when it is gone: [`Tree::release`] kills what is left).
//!
//! In the child, in order ([`Confinement::apply`]):
//! 1. it joins its tree's cgroups (memory, pids, cpu), when the daemon may make them;
//! 2. it drops every capability from its bounding set (a root daemon's children are root without
//!    powers: an `execve` grants them none);
//! 3. `no_new_privs`, then Landlock in two layers, the tree's own and one shared by every tree
//!    that allows the same ports: files (read-only system, read-write own folders, nothing
//!    else), TCP connect by port, signals and abstract Unix sockets scoped to its own tree (and,
//!    by Landlock's design, no ptrace or `/proc/<pid>/{environ,mem,fd,…}` of processes outside
//!    it);
//! 4. it clears its remaining capability sets.
//!
//! Limits: with cgroups, the kernel holds memory (the OOM killer is off in the group, so a tree
//! at its limit waits for [`Tree::check`] to pick the process to stop and tell it why) and the
//! number of tasks (a `fork` past it fails); without, [`Tree::check`] samples the tree's memory
//! and processes and stops what is over. What the walls do not cover is in SECURITY.md.

use std::collections::BTreeSet;
use std::path::PathBuf;

mod cgroup;
mod confine;
mod tree;

pub use confine::Confinement;
pub use tree::{Breach, Limit, Tree, Usage};

use cgroup::Cgroups;

/// What one process tree may touch, and its limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walls {
    /// Read, written, created and executed, with everything below.
    pub read_write: BTreeSet<PathBuf>,
    /// Read and executed, with everything below. A path that is not there is left out.
    pub read_only: BTreeSet<PathBuf>,
    /// The TCP ports the tree may connect to.
    pub connect: Connect,
    pub limits: Limits,
}

/// The TCP ports a tree may connect to, on any address (Landlock knows ports, not addresses).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Connect {
    /// These ports only.
    Only(BTreeSet<u16>),
    /// Every port but these.
    AllBut(BTreeSet<u16>),
}

impl Default for Connect {
    fn default() -> Self {
        Connect::Only(BTreeSet::new())
    }
}

/// A tree's limits; `None`: unbounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// The tree's memory, in MiB.
    pub memory_mb: Option<u64>,
    /// The tree's tasks (processes and their threads) at once.
    pub processes: Option<u64>,
    /// Its share of the CPU against other trees (cgroup v2's weight: 100 is an equal share,
    /// 1 to 10000); only with cgroups.
    pub cpu_weight: Option<u64>,
}

/// Why the walls cannot be raised on this machine.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("the kernel cannot hold the walls: {0}")]
    Landlock(String),
}

/// How the walls hold on this machine: probed once, shared by every tree.
#[derive(Debug)]
pub struct Sandbox {
    /// The Landlock ABI version trees are walled with.
    abi: i32,
    /// The capabilities this process holds in its bounding set, dropped from every child's.
    bounding: Vec<caps::Capability>,
    cgroups: Option<Cgroups>,
    /// Why there are no cgroups, when there are none.
    no_cgroups: Option<String>,
    net: confine::NetRules,
}

/// What [`Sandbox::status`] says of the mechanisms in use.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The Landlock ABI version trees are walled with.
    pub landlock_abi: i32,
    /// `cgroup-v1` when limits are the kernel's, `watch` when they are sampled.
    pub limits: &'static str,
    /// Why limits are sampled, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits_note: Option<String>,
}

impl Sandbox {
    /// Checks that the kernel can hold walls (Landlock ABI 6: files, TCP connect, signal and
    /// abstract-socket scopes) and finds the cgroup controllers this process may use, under a
    /// folder `harness/<name>` of each (made now, gone with [`Sandbox`]); with `cgroups` false,
    /// or where there are none to use, limits are watched instead. Folders that a process no
    /// longer alive left behind are emptied and removed.
    pub fn probe(name: &str, cgroups: bool) -> Result<Sandbox, Unavailable> {
        let abi = confine::probe_landlock().map_err(Unavailable::Landlock)?;
        let bounding = confine::bounding_set();
        let found = if cgroups {
            Cgroups::probe(name)
        } else {
            Err("cgroups are off in the configuration".to_owned())
        };
        let (cgroups, no_cgroups) = match found {
            Ok(cgroups) => (Some(cgroups), None),
            Err(why) => (None, Some(why)),
        };
        Ok(Sandbox {
            abi,
            bounding,
            cgroups,
            no_cgroups,
            net: confine::NetRules::default(),
        })
    }

    pub fn status(&self) -> Status {
        Status {
            landlock_abi: self.abi,
            limits: if self.cgroups.is_some() {
                "cgroup-v1"
            } else {
                "watch"
            },
            limits_note: self.no_cgroups.clone(),
        }
    }

    /// The walls of one tree, `name` unique among the live ones: what to apply to its command,
    /// and the tree's limits to watch. Makes its cgroups.
    pub fn wall(&self, name: &str, walls: &Walls) -> std::io::Result<(Confinement, Tree)> {
        let group = match &self.cgroups {
            Some(cgroups) => Some(cgroups.make(name, &walls.limits)?),
            None => None,
        };
        let joins = match &group {
            Some(group) => group.join_fds()?,
            None => Vec::new(),
        };
        let net = self.net.of(&walls.connect)?;
        let confinement = Confinement::new(walls, net, joins, self.bounding.clone())?;
        Ok((confinement, Tree::new(group, walls.limits)))
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Some(cgroups) = &self.cgroups {
            cgroups.remove();
        }
    }
}

#[cfg(test)]
mod tests;
