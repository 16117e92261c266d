//! The official A2A Python SDK (PyPI `a2a-sdk`, pinned) in a venv under `<target>/a2a-python/venv`,
//! installed with pip when missing, and the script it runs against the daemon's A2A door
//! (`a2a/python_client.py`: discovery, send, stream, input-required, push notifications, cancel).

use std::path::PathBuf;

use serde_json::Value;

use crate::mcp::{run_python_script, venv_with, PythonSdk};

/// The SDK release the tests speak with.
pub const A2A_SDK_SPEC: &str = "a2a-sdk==1.3.0";

/// The script the SDK runs (see its docstring).
const PYTHON_CLIENT: &str = include_str!("a2a/python_client.py");

/// The venv's `python` for test `test`, installing the SDK when missing; `None` (and a
/// `SKIPPED` line saying why) only when there is no `python3`.
pub async fn python_or_skip(test: &str) -> Option<PathBuf> {
    let sdk = tokio::task::spawn_blocking(|| venv_with("a2a-python", &[A2A_SDK_SPEC]))
        .await
        .expect("installer task")
        .expect("the A2A Python SDK installs");
    match sdk {
        PythonSdk::Ready(python) => Some(python),
        PythonSdk::NoPython(why) => {
            eprintln!("SKIPPED {test}: python3 is not available ({why})");
            None
        }
    }
}

/// Runs `python_client.py` with `config` (`base`, `token`, `pushTokens`); its JSON report.
pub async fn run_client(python: PathBuf, config: Value) -> anyhow::Result<Value> {
    run_python_script(python, "a2a_client.py", PYTHON_CLIENT, config).await
}
