//! A webhook receiver nobody here wrote the checks of: `webhook_receiver.py` verifies every
//! delivery with the Standard Webhooks reference library (PyPI `standardwebhooks`, in the
//! tests' Python venv, installed when missing) and fails a share of them on purpose.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::Value;

/// A running receiver; killed on drop.
pub struct Receiver {
    /// Where deliveries go.
    pub url: String,
    out: PathBuf,
    child: Child,
}

impl Receiver {
    /// Starts a receiver with `python` (the venv's, from `crate::mcp::python_or_skip`) for
    /// `secret`, answering 500 to about `fail_rate` of the requests (seeded, so a run repeats),
    /// and to every one while `fail_while` exists. Writes its log under `dir`.
    pub fn start(
        python: &Path,
        dir: &Path,
        secret: &str,
        fail_rate: f64,
        fail_while: Option<&Path>,
    ) -> Receiver {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/webhook_receiver.py");
        let out = dir.join("received.jsonl");
        let mut command = Command::new(python);
        command
            .arg(script)
            .arg(secret)
            .arg(&out)
            .arg(fail_rate.to_string())
            .arg("7");
        if let Some(file) = fail_while {
            command.arg(file);
        }
        let (child, port) = crate::util::spawn_listening(&mut command, "the webhook receiver");
        Receiver {
            url: format!("http://127.0.0.1:{port}/hooks"),
            out,
            child,
        }
    }

    /// Every request so far, in order: `{id, type, data, path, payload, verified, answered}`.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The requests answered 2xx.
    pub fn accepted(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| {
                r["answered"]
                    .as_u64()
                    .is_some_and(|a| (200..300).contains(&a))
            })
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
