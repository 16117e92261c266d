//! Node.js packages from npm for the tests that drive the daemon with a JavaScript client:
//! installed (pinned) under `<target>/<folder>/node_modules` once across test processes, and ES
//! module scripts run beside them (an ES module finds its imports from where it is).
//!
//! Like the other Node-based tests ([`crate::oauth`], [`crate::cli`]), a missing `node` or
//! `npm` is a failure that says what to install, not a skip.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;

use crate::cli::{lock_within, run_with_timeout, stray_cli_env, target_dir};
use crate::mcp::last_json_line;

const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// How long one script may run.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

const INSTALL_HINT: &str = "install Node.js and npm (e.g. `apt-get install nodejs npm`)";

/// Where pinned npm packages are installed, and the `node` that runs scripts with them.
#[derive(Debug, Clone)]
pub struct NodePackages {
    /// The `node` binary (found on `PATH`).
    pub node: PathBuf,
    /// The folder whose `node_modules` holds the packages: run scripts from here.
    pub dir: PathBuf,
}

impl NodePackages {
    /// `<dir>/node_modules/<package>`: an installed package's own files.
    pub fn package(&self, package: &str) -> PathBuf {
        self.dir.join("node_modules").join(package)
    }

    /// Runs the ES module `source` (saved in [`NodePackages::dir`] as `<stem>-<pid>-<n>.mjs`, so
    /// concurrent runs do not share a file) with `config` as its one argument; returns the last
    /// JSON line it printed. Blocking: call from `spawn_blocking`.
    pub fn run_script(&self, stem: &str, source: &str, config: &Value) -> anyhow::Result<Value> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let script = self
            .dir
            .join(format!("{stem}-{}-{n}.mjs", std::process::id()));
        std::fs::write(&script, source).with_context(|| format!("write {}", script.display()))?;
        let mut cmd = Command::new(&self.node);
        cmd.arg(&script)
            .arg(config.to_string())
            .current_dir(&self.dir);
        for key in stray_cli_env() {
            cmd.env_remove(key);
        }
        let out = run_with_timeout(&mut cmd, RUN_TIMEOUT);
        let _ = std::fs::remove_file(&script);
        let out = out.with_context(|| format!("running {}", self.node.display()))?;
        if !out.status.success() {
            bail!(
                "the script {stem} failed ({}):\n{}\n{}",
                out.status,
                out.stdout.trim(),
                out.stderr.trim()
            );
        }
        last_json_line(&out.stdout, stem)
    }
}

/// `<target>/<folder>` with the pinned npm `specs` in its `node_modules`, installed when missing:
/// once across test processes (a lock file beside it), a marker naming the specs saying it is
/// done. Blocking: call from `spawn_blocking`. Fails saying what to install when `node` or `npm`
/// is missing.
pub fn npm_with(folder: &str, specs: &[&str]) -> anyhow::Result<NodePackages> {
    let node = on_path("node").with_context(|| format!("no `node` on PATH: {INSTALL_HINT}"))?;
    let dir = target_dir().join(folder);
    let marker = dir.join(format!("installed-{}", specs.join("-")).replace('/', "_"));
    let ready = NodePackages {
        node,
        dir: dir.clone(),
    };
    if marker.is_file() {
        return Ok(ready);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let lock_path = dir.join("install.lock");
    let lock =
        File::create(&lock_path).with_context(|| format!("create {}", lock_path.display()))?;
    lock_within(&lock, &lock_path, INSTALL_TIMEOUT)?;
    if marker.is_file() {
        return Ok(ready);
    }
    let mut npm = Command::new("npm");
    npm.arg("install")
        .arg("--prefix")
        .arg(&dir)
        .args(["--no-save", "--no-audit", "--no-fund"])
        .args(specs);
    let out = run_with_timeout(&mut npm, INSTALL_TIMEOUT).with_context(|| {
        format!(
            "could not run npm to install {}: {INSTALL_HINT}",
            specs.join(" ")
        )
    })?;
    if !out.status.success() {
        bail!(
            "`npm install {}` failed ({}); fix npm (network, registry, proxy) and rerun:\n{}",
            specs.join(" "),
            out.status,
            out.stderr.trim()
        );
    }
    std::fs::write(&marker, "").with_context(|| format!("write {}", marker.display()))?;
    Ok(ready)
}

/// `name` in a folder of `PATH`, as the shell would find it.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
