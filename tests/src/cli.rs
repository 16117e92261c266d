//! The real `claude` CLI for end-to-end tests: find it, or install the pinned version under the target directory.
//!
//! [`claude_bin`] honours `HARNESS_TEST_CLAUDE_BIN`; otherwise it uses `<target>/claude-cli/node_modules/.bin/claude`
//! (`<target>` is `CARGO_TARGET_DIR`, or `target/` at the workspace root), running `npm install` there when the binary
//! is missing or reports another version. Test binaries run in parallel, so the install happens once per process
//! (`OnceLock`) and once across processes (a lock file); it goes to a temporary directory that is renamed into place
//! only after its binary answered `--version`, so a half-done install never looks finished.
//!
//! [`cli_env`] is the environment that points the CLI at the mock and keeps it off the network;
//! [`builtin_tools`] reads the CLI's table of built-in tools from its binary.

use std::ffi::OsStr;
use std::fs::{self, File, TryLockError};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

pub mod builtin_tools;

/// The CLI version the protocol notes were measured against; the daemon is built for exactly this one.
pub const CLI_VERSION: &str = "2.1.332";

/// The npm package that ships the CLI (a native binary since 2.x).
const NPM_PACKAGE: &str = "@anthropic-ai/claude-code";

/// Set to a `claude` binary to skip the install (it is still used as is, whatever its version).
const BIN_ENV: &str = "HARNESS_TEST_CLAUDE_BIN";

/// How long one process waits for another's install (the lock), and how long `npm install` may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// How long `claude --version` may take (the first exec maps a ~380 MB binary).
const VERSION_TIMEOUT: Duration = Duration::from_secs(60);

/// The `claude` binary to run. Blocks while installing (about 8 s with a warm npm cache), so call it before
/// starting async work or from `spawn_blocking`. The outcome, success or error, is computed once per process.
pub fn claude_bin() -> anyhow::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| locate_or_install().map_err(|err| format!("{err:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

/// The environment for a CLI child that talks to the mock at `api_url`: endpoint, a dummy key, and no telemetry or
/// other traffic. Also remove [`stray_cli_env`] from the child, or the developer's own settings leak in.
pub fn cli_env(api_url: &str) -> Vec<(String, String)> {
    [
        ("ANTHROPIC_BASE_URL", api_url),
        ("ANTHROPIC_API_KEY", "sk-test"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_TELEMETRY", "1"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect()
}

/// Names of variables in this process's environment that would steer a CLI child away from the mock or change its
/// behaviour: everything starting with `ANTHROPIC_` or `CLAUDE` (`CLAUDECODE` is set when the tests themselves run
/// inside Claude Code, and the SDKs remove it too). Call `env_remove` with each before applying [`cli_env`].
pub fn stray_cli_env() -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(key, _)| key.into_string().ok())
        .filter(|key| key.starts_with("ANTHROPIC_") || key.starts_with("CLAUDE"))
        .collect()
}

fn locate_or_install() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os(BIN_ENV) {
        let bin = PathBuf::from(bin);
        if !bin.is_file() {
            bail!("{BIN_ENV}={} is not a file", bin.display());
        }
        return Ok(bin);
    }
    let target = target_dir();
    let install_dir = target.join("claude-cli");
    let bin = bin_in(&install_dir);
    if has_pinned_version(&bin) {
        return Ok(bin);
    }
    fs::create_dir_all(&target).with_context(|| format!("create {}", target.display()))?;
    let lock_path = target.join("claude-cli.lock");
    let lock =
        File::create(&lock_path).with_context(|| format!("create {}", lock_path.display()))?;
    lock_within(&lock, &lock_path, INSTALL_TIMEOUT)?;
    // Another process may have finished the install while we waited for the lock.
    if has_pinned_version(&bin) {
        return Ok(bin);
    }
    install(&target, &install_dir)?;
    drop(lock); // closing the file releases the lock
    Ok(bin)
}

/// `CARGO_TARGET_DIR` (relative paths taken from the workspace root, as cargo run from there would), else
/// `<workspace root>/target`.
pub(crate) fn target_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")))
        .to_path_buf();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace.join(dir),
        _ => workspace.join("target"),
    }
}

fn bin_in(install_dir: &Path) -> PathBuf {
    install_dir.join("node_modules").join(".bin").join("claude")
}

fn has_pinned_version(bin: &Path) -> bool {
    bin.is_file() && version_of(bin).is_ok_and(|version| version.starts_with(CLI_VERSION))
}

/// What `bin --version` prints (`2.1.332 (Claude Code)`).
fn version_of(bin: &Path) -> anyhow::Result<String> {
    let out = run_with_timeout(Command::new(bin).arg("--version"), VERSION_TIMEOUT)?;
    if !out.status.success() {
        bail!(
            "`{} --version` failed ({}): {}",
            bin.display(),
            out.status,
            out.stderr.trim()
        );
    }
    Ok(out.stdout.trim().to_owned())
}

/// Takes the exclusive lock, polling so a stuck holder cannot block this process forever.
pub(crate) fn lock_within(lock: &File, path: &Path, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(TryLockError::WouldBlock) => bail!(
                "waited {timeout:?} for another test process to finish an install (lock {}); \
                 if none is running, delete the lock file",
                path.display()
            ),
            Err(TryLockError::Error(err)) => {
                return Err(err).with_context(|| format!("lock {}", path.display()));
            }
        }
    }
}

/// Installs into a fresh `claude-cli.tmp-<pid>` beside `install_dir`, checks it, then swaps it in. Runs under the lock.
fn install(target: &Path, install_dir: &Path) -> anyhow::Result<()> {
    remove_leftovers(target)?;
    let staging = target.join(format!("claude-cli.tmp-{}", std::process::id()));
    fs::create_dir_all(&staging).with_context(|| format!("create {}", staging.display()))?;
    let spec = format!("{NPM_PACKAGE}@{CLI_VERSION}");
    let manual = format!(
        "npm install --prefix {} --no-save {spec}",
        install_dir.display()
    );
    let mut npm = Command::new("npm");
    npm.arg("install").arg("--prefix").arg(&staging).args([
        "--no-save",
        "--no-audit",
        "--no-fund",
        &spec,
    ]);
    let out = match run_with_timeout(&mut npm, INSTALL_TIMEOUT) {
        Ok(out) => out,
        Err(err) => {
            let _ = fs::remove_dir_all(&staging);
            return Err(err.context(format!(
                "could not run npm to install the claude CLI: install Node.js and npm (e.g. `apt-get install nodejs npm`) \
                 and rerun, or run `{manual}` yourself, or set {BIN_ENV}=/path/to/claude (version {CLI_VERSION})"
            )));
        }
    };
    if !out.status.success() {
        let _ = fs::remove_dir_all(&staging);
        bail!(
            "`npm install {spec}` failed ({}). Fix npm (network, registry, proxy) and rerun, or run `{manual}` \
             yourself, or set {BIN_ENV}=/path/to/claude (version {CLI_VERSION}).\nnpm stderr:\n{}",
            out.status,
            out.stderr.trim()
        );
    }
    let staged_bin = bin_in(&staging);
    let version = version_of(&staged_bin);
    match version {
        Ok(version) if version.starts_with(CLI_VERSION) => {}
        other => {
            let _ = fs::remove_dir_all(&staging);
            bail!(
                "npm installed {spec} but {} does not report version {CLI_VERSION}: {other:?}\nnpm stderr:\n{}",
                staged_bin.display(),
                out.stderr.trim()
            );
        }
    }
    if install_dir.exists() {
        // A broken or outdated install: move it aside first, so the rename below cannot fail on a non-empty dir.
        let old = target.join(format!("claude-cli.old-{}", std::process::id()));
        fs::rename(install_dir, &old)
            .with_context(|| format!("move aside {}", install_dir.display()))?;
        let _ = fs::remove_dir_all(&old);
    }
    fs::rename(&staging, install_dir)
        .with_context(|| format!("rename {} to {}", staging.display(), install_dir.display()))?;
    Ok(())
}

/// Removes staging and moved-aside directories of installs that died half-way. Only called under the lock.
fn remove_leftovers(target: &Path) -> anyhow::Result<()> {
    for entry in fs::read_dir(target).with_context(|| format!("read {}", target.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("claude-cli.tmp-") || name.starts_with("claude-cli.old-") {
            fs::remove_dir_all(entry.path())
                .with_context(|| format!("remove leftover {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Output of a finished child.
pub(crate) struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` with piped output, killing it after `timeout`. The pipes are drained by threads so a chatty child
/// cannot block on a full pipe while we poll.
pub(crate) fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> anyhow::Result<Finished> {
    let program = cmd.get_program().to_os_string();
    let name = Path::new(&program)
        .file_name()
        .unwrap_or(OsStr::new("?"))
        .to_string_lossy()
        .into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawn `{}`", Path::new(&program).display()))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .with_context(|| format!("wait for `{name}`"))?
        {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`{name}` did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(Finished {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

#[cfg(test)]
mod tests;
