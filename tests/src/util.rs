//! Small helpers every end-to-end test needs: poll-until-true inside a timeout (never sleep-then-assert), process
//! inspection through `/proc`, and tracing output that the test harness captures.

use std::future::Future;
use std::sync::Once;
use std::time::Duration;

/// How often [`eventually`] and [`eventually_async`] re-check their condition.
const POLL_EVERY: Duration = Duration::from_millis(25);

/// Polls `condition` every 25 ms until it returns true; fails after `timeout` with an error naming `what`.
pub async fn eventually<F: FnMut() -> bool>(
    timeout: Duration,
    what: &str,
    mut condition: F,
) -> anyhow::Result<()> {
    eventually_async(timeout, what, move || std::future::ready(condition())).await
}

/// [`eventually`] for conditions that need to await (an HTTP call, a database query). A check that itself never
/// finishes is cut off at the deadline too.
pub async fn eventually_async<F, Fut>(
    timeout: Duration,
    what: &str,
    mut condition: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let polling = async {
        loop {
            if condition().await {
                return;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    };
    tokio::time::timeout(timeout, polling)
        .await
        .map_err(|_| anyhow::anyhow!("timed out after {timeout:?} waiting for: {what}"))
}

/// The state letter from `/proc/PID/stat` (`R`, `S`, `D`, `Z` zombie, `T`, …), or `None` when no such process exists
/// (it exited and was reaped, or never existed). Linux only.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (comm) S …": comm may contain spaces and parentheses, so look after the last ')'.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.trim_start().chars().next()
}

/// True while the process is alive. A zombie (exited, not yet reaped by its parent) counts as gone here; to check
/// that it was also reaped, assert `process_state(pid).is_none()`.
pub fn process_exists(pid: u32) -> bool {
    matches!(process_state(pid), Some(state) if state != 'Z')
}

/// Installs a `tracing` subscriber once per test binary: filter from `RUST_LOG` (default `warn`), output through the
/// test writer so `cargo test` captures it per test.
pub fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        // Another subscriber may already be installed (a test set its own): keep it.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// An `outputSchema` with a string `depth` levels deep in `not`, `allOf` and `items`, in the
/// order `turn` picks, under property `name`: a distinct shape for each distinct argument, to
/// measure what schemas cost the daemon.
pub fn nested_schema(depth: usize, turn: usize, name: &str) -> serde_json::Value {
    use serde_json::json;
    let mut schema = json!({"type": "string"});
    for level in 0..depth {
        schema = match (level + turn) % 3 {
            0 => json!({ "not": schema }),
            1 => json!({ "allOf": [schema] }),
            _ => json!({ "items": schema }),
        };
    }
    json!({"type": "object", "properties": { name: schema }})
}

/// Starts `command` (a helper script that prints the port it listens on, then serves) with its
/// stdout piped: the child and that port.
pub fn spawn_listening(
    command: &mut std::process::Command,
    what: &str,
) -> (std::process::Child, u16) {
    use std::io::BufRead;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap_or_else(|err| panic!("{what} starts: {err}"));
    let stdout = child.stdout.take().expect("its stdout");
    let mut port = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut port)
        .unwrap_or_else(|err| panic!("{what} prints its port: {err}"));
    let port = port
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{what} printed {port:?}, not a port"));
    (child, port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn eventually_returns_once_true_and_names_what_it_waited_for() {
        let mut calls = 0;
        eventually(Duration::from_secs(5), "third call", || {
            calls += 1;
            calls >= 3
        })
        .await
        .unwrap();
        assert_eq!(calls, 3);

        let err = eventually(Duration::from_millis(60), "the impossible", || false)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("the impossible"), "{err}");
    }

    #[tokio::test]
    async fn eventually_async_cuts_off_a_check_that_never_finishes() {
        let calls = AtomicU32::new(0);
        eventually_async(Duration::from_secs(5), "async check", || async {
            calls.fetch_add(1, Ordering::SeqCst) >= 1
        })
        .await
        .unwrap();
        let err = eventually_async(Duration::from_millis(60), "a stuck check", || {
            std::future::pending::<bool>()
        })
        .await
        .unwrap_err();
        assert!(err.to_string().contains("a stuck check"), "{err}");
    }

    #[tokio::test]
    async fn process_states_alive_zombie_reaped() {
        assert!(process_exists(std::process::id()));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(process_exists(pid));
        child.kill().unwrap();
        // Killed but not waited for: a zombie, which does not count as existing.
        eventually(
            Duration::from_secs(5),
            "the killed child to become a zombie",
            || process_state(pid) == Some('Z'),
        )
        .await
        .unwrap();
        assert!(!process_exists(pid));
        child.wait().unwrap();
        assert_eq!(process_state(pid), None);
        init_tracing();
        init_tracing();
    }
}
