//! `contrib/harness.service`: systemd accepts it (`systemd-analyze verify`, when the tool is
//! there), and it keeps the promises `docs/operations.md` makes for it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn unit() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contrib/harness.service");
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// The value of `key=` in the unit (the last one, as systemd reads it).
fn setting<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .rev()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn systemd_accepts_the_unit() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze is not installed (Debian: apt-get install systemd); skipped");
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let token = dir.path().join("token");
    std::fs::write(&token, "t").expect("a token file");
    // The unit as installed, with the binary and the token where this build has them.
    let unit = unit()
        .replace("/usr/local/bin/harness", env!("CARGO_BIN_EXE_harness"))
        .replace("/etc/harness/token", &token.to_string_lossy());
    let path = dir.path().join("harness.service");
    std::fs::write(&path, unit).expect("the unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // A setting systemd cannot parse is only a warning: any output counts as a failure.
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn the_unit_stops_gracefully_hardened_and_without_secrets_in_argv() {
    let unit = unit();
    let grace = orchestrator::config::Config::default().shutdown_grace;
    let stop: u64 = setting(&unit, "TimeoutStopSec")
        .and_then(|v| v.parse().ok())
        .expect("TimeoutStopSec in seconds");
    assert!(
        Duration::from_secs(stop) > grace,
        "systemd must wait longer than the shutdown grace ({grace:?})"
    );
    // SIGTERM to the daemon alone: it stops its children itself.
    assert_eq!(setting(&unit, "KillMode"), Some("mixed"));
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("DynamicUser", "yes"),
        ("StateDirectory", "harness"),
        ("Environment", "HARNESS_TOKEN_FILE=%d/token"),
    ] {
        assert!(
            unit.lines().any(|l| l == format!("{key}={value}")),
            "{key}={value} missing"
        );
    }
    let exec = setting(&unit, "ExecStart").expect("ExecStart");
    assert!(
        !exec.contains("--token"),
        "a token in argv shows in ps: {exec}"
    );
}
