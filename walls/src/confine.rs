//! What the child does between fork and exec: join its cgroups, give up its capabilities, and
//! restrict itself with Landlock. Everything that allocates or opens a path is done before the
//! fork, in [`Confinement::new`]; the child only makes system calls on what is ready.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::sync::{Arc, Mutex, PoisonError};

use caps::{CapSet, Capability};
use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use crate::{Connect, Walls};

/// The ABI every tree is walled with: files (with truncate, refer and device ioctls), TCP
/// connect, and the signal and abstract-socket scopes.
const ABI_NEEDED: ABI = ABI::V6;

/// One tree's walls, ready to be raised in its first process.
#[derive(Debug)]
pub struct Confinement {
    /// Files and scopes: the tree's own.
    files: RulesetCreated,
    /// TCP connect: shared by every tree with the same ports ([`NetRules`]), a second layer.
    net: Arc<RulesetCreated>,
    /// `cgroup.procs` of each of the tree's cgroups, open for writing.
    joins: Vec<OwnedFd>,
    /// The capabilities to drop from the bounding set.
    bounding: Vec<Capability>,
}

impl Confinement {
    pub(crate) fn new(
        walls: &Walls,
        net: Arc<RulesetCreated>,
        joins: Vec<OwnedFd>,
        bounding: Vec<Capability>,
    ) -> std::io::Result<Confinement> {
        let files = files_ruleset(walls).map_err(std::io::Error::other)?;
        Ok(Confinement {
            files,
            net,
            joins,
            bounding,
        })
    }

    /// Raises the walls in the process `cmd` starts, between its fork and its exec.
    pub fn apply(self: Arc<Self>, cmd: &mut std::process::Command) {
        // SAFETY: `enter` makes only system calls on what `new` prepared (no allocation on the
        // path that succeeds), as a `pre_exec` hook must.
        unsafe {
            cmd.pre_exec(move || self.enter());
        }
    }

    fn enter(&self) -> std::io::Result<()> {
        for fd in &self.joins {
            nix::unistd::write(fd, b"0")?;
        }
        for cap in &self.bounding {
            caps::drop(None, CapSet::Bounding, *cap).map_err(std::io::Error::other)?;
        }
        for layer in [&self.files, &*self.net] {
            let status = layer
                .try_clone()?
                .restrict_self()
                .map_err(std::io::Error::other)?;
            if status.ruleset != RulesetStatus::FullyEnforced {
                return Err(std::io::Error::other("Landlock did not enforce the walls"));
            }
        }
        for set in [
            CapSet::Ambient,
            CapSet::Inheritable,
            CapSet::Effective,
            CapSet::Permitted,
        ] {
            caps::clear(None, set).map_err(std::io::Error::other)?;
        }
        Ok(())
    }
}

/// The TCP rulesets made so far, by the ports they allow: every port but a few is some 65,000
/// rules (about 80 ms to make), made once and shared by every tree that allows the same.
#[derive(Debug, Default)]
pub(crate) struct NetRules {
    made: Mutex<HashMap<Connect, Arc<RulesetCreated>>>,
}

impl NetRules {
    pub(crate) fn of(&self, connect: &Connect) -> std::io::Result<Arc<RulesetCreated>> {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ruleset) = made.get(connect) {
            return Ok(ruleset.clone());
        }
        let ruleset = Arc::new(net_ruleset(connect).map_err(std::io::Error::other)?);
        made.insert(connect.clone(), ruleset.clone());
        Ok(ruleset)
    }
}

/// The Landlock ruleset of `walls`' files, with the signal and abstract-socket scopes.
fn files_ruleset(walls: &Walls) -> Result<RulesetCreated, landlock::RulesetError> {
    let abi = ABI_NEEDED;
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)?
        .create()?
        .add_rules(path_beneath_rules(
            &walls.read_only,
            AccessFs::from_read(abi),
        ))?
        .add_rules(path_beneath_rules(
            &walls.read_write,
            AccessFs::from_all(abi),
        ))
}

/// The Landlock ruleset of the TCP ports a tree may connect to.
fn net_ruleset(connect: &Connect) -> Result<RulesetCreated, landlock::RulesetError> {
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::ConnectTcp)?
        .create()?;
    let ports: Box<dyn Iterator<Item = u16>> = match connect {
        Connect::Only(ports) => Box::new(ports.iter().copied()),
        Connect::AllBut(closed) => Box::new((1..=u16::MAX).filter(|p| !closed.contains(p))),
    };
    for port in ports {
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }
    Ok(created)
}

/// The Landlock ABI every tree is walled with, when the kernel holds it; else why not.
pub(crate) fn probe_landlock() -> Result<i32, String> {
    files_ruleset(&Walls::default())
        .and_then(|_| net_ruleset(&Connect::default()))
        .map_err(|err| format!("Landlock ABI {} is needed: {err}", ABI_NEEDED as i32))?;
    Ok(ABI_NEEDED as i32)
}

/// The capabilities in this process's bounding set (every one, for root; none to drop where
/// the process may not change it).
pub(crate) fn bounding_set() -> Vec<Capability> {
    let Ok(held) = caps::read(None, CapSet::Bounding) else {
        return Vec::new();
    };
    let may_drop = caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false);
    if !may_drop {
        return Vec::new();
    }
    let mut held: Vec<Capability> = held.into_iter().collect();
    held.sort_by_key(|cap| cap.index());
    held
}
