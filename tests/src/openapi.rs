//! Requests generated from the daemon's own OpenAPI document: `send_generated.py` runs
//! Schemathesis (PyPI `schemathesis`, pinned, in a venv of its own under
//! `<target>/openapi-python/venv`, installed with pip when missing) over a [`Plan`] and reports
//! every answer that is not a success, so a test can hold the daemon to what its document allows.
//!
//! A venv of its own: Schemathesis pins its own `hypothesis`, `jsonschema_rs` and `requests`,
//! which need not agree with the MCP SDK's venv.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::mcp::{run_python_script, venv_with, PythonSdk};

/// The release that generates the requests: its generator decides what "schema-valid" draws, so
/// it is pinned, and a new one is a change someone reviews.
pub const SCHEMATHESIS_SPEC: &str = "schemathesis==4.32.5";

/// The script (see its docstring).
const SEND_GENERATED: &str = include_str!("openapi/send_generated.py");

/// The venv's `python` with [`SCHEMATHESIS_SPEC`] installed. Blocking: call from
/// `spawn_blocking`. Installs once across test processes (a lock file beside the venv).
pub fn schemathesis_python() -> anyhow::Result<PythonSdk> {
    venv_with("openapi-python", &[SCHEMATHESIS_SPEC])
}

/// The venv's `python` for test `test`, installing Schemathesis when missing; `None` (and a
/// `SKIPPED` line saying why) only when there is no `python3`.
pub async fn schemathesis_or_skip(test: &str) -> Option<PathBuf> {
    let installed = tokio::task::spawn_blocking(schemathesis_python)
        .await
        .expect("installer task")
        .expect("Schemathesis installs");
    match installed {
        PythonSdk::Ready(python) => Some(python),
        PythonSdk::NoPython(why) => {
            eprintln!("SKIPPED {test}: python3 is not available ({why})");
            None
        }
    }
}

/// What to send: operations in order, each with its count of requests.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Plan {
    pub operations: Vec<Operation>,
}

/// One operation of the document, and what the requests to it keep fixed.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// Upper case, as the report names it.
    pub method: String,
    /// As the document writes it (`/api/threads/{id}`).
    pub path: String,
    /// How many requests (Hypothesis's `max_examples`: fewer when the schema allows fewer).
    pub examples: u32,
    /// Path parameters that name a real resource; the others are generated.
    pub path_parameters: Map<String, Value>,
    /// Query parameters never sent (values only the daemon gives out, such as cursors).
    pub omit_query: Vec<String>,
    /// Headers sent as they are (an `Accept` the document cannot declare: OpenAPI ignores a
    /// header parameter by that name).
    pub headers: Map<String, Value>,
}

impl Operation {
    /// `METHOD /path`, as the report names it.
    pub fn label(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// What came back.
#[derive(Clone, Debug, Deserialize)]
pub struct Report {
    /// Requests sent per operation (`METHOD /path`).
    pub sent: std::collections::BTreeMap<String, u32>,
    /// Every answer but a 2xx, 3xx, 404 or 409.
    pub answers: Vec<Answer>,
}

/// One answer that was not a success, with the request that got it.
#[derive(Clone, Debug, Deserialize)]
pub struct Answer {
    pub operation: String,
    pub status: u16,
    /// The JSON body, or its first bytes as text.
    pub answer: Value,
    pub request: Value,
}

impl Answer {
    /// `error.code` of an `ErrorBody`; `""` for anything else.
    pub fn code(&self) -> &str {
        self.answer["error"]["code"].as_str().unwrap_or_default()
    }

    /// `error.message` of an `ErrorBody`; `""` for anything else.
    pub fn message(&self) -> &str {
        self.answer["error"]["message"].as_str().unwrap_or_default()
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} answered {} {} to {}",
            self.operation, self.status, self.answer, self.request
        )
    }
}

/// Runs [`Plan`] against the daemon at `base` (with `token`, when it wants one).
pub async fn send_generated(
    python: PathBuf,
    base: &str,
    token: Option<&str>,
    plan: &Plan,
) -> anyhow::Result<Report> {
    let config = json!({"base": base, "token": token, "operations": plan.operations});
    let report = run_python_script(python, "send_generated.py", SEND_GENERATED, config).await?;
    Ok(serde_json::from_value(report)?)
}
