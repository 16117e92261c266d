//! First run: a daemon whose `claude.bin` names no program finds the pinned CLI under
//! `<data_dir>/cli`, or installs it there with npm (`claude.install`, on by default), saying so
//! in the log; without npm, or with the install off, it refuses to start and says exactly what
//! to install. A `claude.bin` that exists is used as it is.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use tracing::info;

use orchestrator::config::Config;

/// The CLI this daemon speaks to (the protocol notes were verified against it).
pub const CLI_VERSION: &str = "2.1.332";
const NPM_PACKAGE: &str = "@anthropic-ai/claude-code";

/// Points `config.claude.bin` at a CLI that is there: as given, the one installed under the data
/// dir, or one installed there now.
pub fn ensure_cli(config: &mut Config) -> anyhow::Result<()> {
    if found(&config.claude.bin).is_some() {
        return Ok(());
    }
    let prefix = config.data_dir.join("cli");
    let installed = prefix.join("node_modules").join(".bin").join("claude");
    if installed.is_file() {
        info!(bin = %installed.display(), "Using the claude CLI installed under the data dir.");
        config.claude.bin = installed;
        return Ok(());
    }
    let spec = format!("{NPM_PACKAGE}@{CLI_VERSION}");
    let by_hand = format!(
        "install it (`npm install -g {spec}`) or set claude.bin (--claude-bin, HARNESS_CLAUDE_BIN) \
         to its path"
    );
    if !config.claude.install {
        bail!(
            "the claude CLI `{}` is not there, and claude.install is off: {by_hand}",
            config.claude.bin.display()
        );
    }
    if found(Path::new("npm")).is_none() {
        bail!(
            "the claude CLI `{}` is not there, and npm is not either, to install it: install \
             Node.js and npm (Debian: `apt-get install nodejs npm`) and start again, or {by_hand}",
            config.claude.bin.display()
        );
    }
    info!(%spec, prefix = %prefix.display(), "The claude CLI is not there; installing it with npm (claude.install = false turns this off).");
    std::fs::create_dir_all(&prefix).with_context(|| format!("creating {}", prefix.display()))?;
    let out = Command::new("npm")
        .arg("install")
        .arg("--prefix")
        .arg(&prefix)
        .args(["--no-save", "--no-audit", "--no-fund", &spec])
        .output()
        .context("running npm")?;
    if !out.status.success() || !installed.is_file() {
        bail!(
            "`npm install {spec}` into {} failed ({}); fix npm (network, registry, proxy) and start \
             again, or {by_hand}.\nnpm said: {}",
            prefix.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    info!(bin = %installed.display(), "The claude CLI is installed.");
    config.claude.bin = installed;
    Ok(())
}

/// `bin` as a file: itself when it has a `/`, else the first match on `PATH`.
fn found(bin: &Path) -> Option<PathBuf> {
    if bin.components().count() > 1 || bin.is_absolute() {
        return bin.is_file().then(|| bin.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(bin))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_by_path_or_on_path_and_a_missing_one_is_not() {
        assert!(found(Path::new("sh")).is_some(), "sh is on PATH");
        assert!(found(Path::new("/bin/sh")).is_some());
        assert!(found(Path::new("surely-no-such-program-here")).is_none());
        assert!(found(Path::new("/nonexistent/claude")).is_none());
    }
}
