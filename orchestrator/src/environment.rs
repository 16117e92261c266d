//! The daemon's environment as it was at start, with its secrets out of the live one.
//!
//! Any process that may trace the daemon reads its `/proc/<pid>/environ`: the block of
//! `NAME=value` strings it was started with, whatever `unsetenv` did since. So the binary, while
//! it is still one thread, [`capture`]s the environment into this module and [`scrub`]s the
//! secrets from the process: their values overwritten in that block, then unset. Everything in
//! the daemon that reads its environment (the children's `pass_env`, a profile's upstream, an
//! MCP server's `env:` secret) reads [`vars`] and [`var`]: the captured copy, or the live
//! environment when nothing was captured (the daemon as a library, in tests).

use std::ffi::{OsStr, OsString};
use std::sync::OnceLock;

/// What the daemon reads as secrets from its environment: the model's credentials, the
/// operator token, a database URL (which may hold a password), the cluster's token.
pub const SECRETS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "HARNESS_TOKEN",
    "HARNESS_DB",
    "HARNESS_CLUSTER_TOKEN",
];

static CAPTURED: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();

/// Keeps the environment as it is now; later calls keep the first copy. A secret given as a
/// file (`<NAME>_FILE`, a path: how systemd's `LoadCredential=` and container secrets hand them
/// over) is read into the copy as `<NAME>`, the file's text without its trailing newline.
pub fn capture() -> Result<(), String> {
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for name in SECRETS {
        let Some(path) = std::env::var_os(format!("{name}_FILE")) else {
            continue;
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|err| format!("{name}_FILE: cannot read {}: {err}", path.to_string_lossy()))?;
        vars.retain(|(k, _)| k != OsStr::new(name));
        vars.push((name.into(), text.trim_end_matches(['\n', '\r']).into()));
    }
    let _ = CAPTURED.set(vars);
    Ok(())
}

/// The environment: as captured, else the live one.
pub fn vars() -> Vec<(OsString, OsString)> {
    match CAPTURED.get() {
        Some(captured) => captured.clone(),
        None => std::env::vars_os().collect(),
    }
}

/// One variable of [`vars`], when it is there and valid UTF-8.
pub fn var(name: &str) -> Option<String> {
    match CAPTURED.get() {
        Some(captured) => captured
            .iter()
            .find(|(k, _)| k == OsStr::new(name))
            .and_then(|(_, v)| v.to_str().map(str::to_owned)),
        None => std::env::var(name).ok(),
    }
}

/// Keeps the daemon's secrets from everything it starts and everyone who may trace it:
/// [`capture`] (secret files read), then [`scrub`] of [`SECRETS`], their `_FILE` names and
/// `more` (the configuration's: `Config::secret_env_names`), then the process made not
/// dumpable (its `/proc/<pid>/` files are root's then, and tracing it takes `CAP_SYS_PTRACE`).
///
/// # Safety
/// As [`scrub`]: only while the process has one thread.
pub unsafe fn keep_secrets(more: &[String]) -> Result<(), String> {
    capture()?;
    let mut names: Vec<String> = SECRETS.iter().map(|name| (*name).to_owned()).collect();
    names.extend(SECRETS.iter().map(|name| format!("{name}_FILE")));
    names.extend(more.iter().cloned());
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    scrub(&names);
    nix::sys::prctl::set_dumpable(false)
        .map_err(|err| format!("cannot make the daemon not dumpable: {err}"))
}

/// Removes `names` from the process's environment: each value's bytes overwritten where the
/// process's environment block holds them (what `/proc/<pid>/environ` shows), then unset.
///
/// # Safety
/// Only while the process has one thread: nothing may read or change the environment meanwhile.
pub unsafe fn scrub(names: &[&str]) {
    let mut at = nix::libc::environ;
    while !at.is_null() && !(*at).is_null() {
        let entry = *at;
        let text = std::ffi::CStr::from_ptr(entry).to_bytes();
        if let Some(eq) = text.iter().position(|b| *b == b'=') {
            if names.iter().any(|name| name.as_bytes() == &text[..eq]) {
                // The value's bytes, not the terminating NUL: the entry reads `NAME=` now.
                let value = entry.add(eq + 1);
                std::ptr::write_bytes(value, 0, text.len() - eq - 1);
            }
        }
        at = at.add(1);
    }
    for name in names {
        std::env::remove_var(name);
    }
}

#[cfg(test)]
mod tests {
    /// Without a capture, the daemon reads the live environment.
    #[test]
    fn without_a_capture_the_live_environment_is_read() {
        let path = std::env::var("PATH").ok();
        assert_eq!(super::var("PATH"), path);
        assert!(super::vars().iter().any(|(k, _)| k == "PATH"));
    }
}
