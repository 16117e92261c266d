//! An OAuth 2.0 / OpenID Connect issuer nobody here wrote: npm `oauth2-mock-server` (pinned),
//! installed under `<target>/oauth-issuer/` when missing, run by `oauth/issuer.mjs` on a free
//! loopback port. It publishes discovery and an RS256 JWKS, runs the authorization code flow
//! with PKCE (approving at once: no person), and signs access tokens whose `aud` is the resource
//! the client asked for (RFC 8707) and whose `sub` and `tenant` name [`Issuer::start`]'s
//! subject. Also the scripts the official MCP SDKs (Python, and TypeScript from npm
//! `@modelcontextprotocol/sdk`, installed beside it) run their OAuth client flows with, and a
//! client's own metadata document served over https ([`ClientDocument`]).

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cli::{lock_within, run_with_timeout, target_dir};
use crate::mcp::last_json_line;

/// The issuer's package.
pub const ISSUER_SPEC: &str = "oauth2-mock-server@9.3.0";

const ISSUER_SCRIPT: &str = include_str!("oauth/issuer.mjs");

/// What the MCP Python SDK's OAuth client runs (see its docstring).
pub const PYTHON_OAUTH_CLIENT: &str = include_str!("oauth/python_oauth_client.py");

/// The MCP TypeScript SDK's OAuth client (see its header).
const TS_OAUTH_CLIENT: &str = include_str!("oauth/ts_oauth_client.mjs");

/// Serves a client metadata document over https (see its docstring).
const CLIENT_DOCUMENT_SERVER: &str = include_str!("oauth/cimd_server.py");

/// The TypeScript SDK, installed beside the issuer.
pub const TS_SDK_SPEC: &str = "@modelcontextprotocol/sdk@1.32.2";

const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// The PKCE S256 challenge of `verifier` (RFC 7636 §4.2), as a client computes it.
pub fn pkce_challenge(verifier: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier))
}

/// A running issuer; stopped when dropped.
pub struct Issuer {
    /// Its URL, as its tokens' `iss` and its metadata's `issuer` name it.
    pub url: String,
    _child: tokio::process::Child,
}

impl Issuer {
    /// Starts an issuer whose tokens name `subject` (as `sub` and `tenant`).
    pub async fn start(subject: &str) -> anyhow::Result<Issuer> {
        let install = tokio::task::spawn_blocking(install)
            .await
            .context("the installer task")??;
        // Beside its `node_modules`: an ES module finds its imports from where it is.
        let script = install.join(format!("issuer-{}.mjs", std::process::id()));
        std::fs::write(&script, ISSUER_SCRIPT)?;
        let mut child = tokio::process::Command::new("node")
            .arg(&script)
            .env("SUBJECT", subject)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("running node (install Node.js: apt-get install nodejs npm)")?;
        let said = first_json_line(&mut child, "the issuer").await?;
        let url = said["issuer"].as_str().context("no issuer URL")?.to_owned();
        Ok(Issuer { url, _child: child })
    }

    /// An access token from its token endpoint (client credentials) for `resource` with
    /// `scope`: what a client of another server would hold.
    pub async fn token_for(&self, resource: &str, scope: &str) -> anyhow::Result<String> {
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/token", self.url))
            .form(&[
                ("grant_type", "client_credentials"),
                ("client_id", "harness-tests"),
                ("resource", resource),
                ("scope", scope),
            ])
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(answer["access_token"]
            .as_str()
            .context("no access_token")?
            .to_owned())
    }
}

/// The first line `child` prints, as JSON: where a server it started listens.
async fn first_json_line(child: &mut tokio::process::Child, what: &str) -> anyhow::Result<Value> {
    let stdout = child
        .stdout
        .take()
        .with_context(|| format!("{what}'s stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .with_context(|| format!("{what} did not say where it listens within 30 s"))??
        .with_context(|| format!("{what} exited before listening"))?;
    serde_json::from_str(&first).with_context(|| format!("{what} said {first:?}"))
}

/// `<target>/oauth-issuer`, with [`ISSUER_SPEC`] in its `node_modules`, installed once across
/// test processes (a lock file beside it). Blocking.
fn install() -> anyhow::Result<PathBuf> {
    let dir = target_dir().join("oauth-issuer");
    let marker = dir.join(format!("installed-{ISSUER_SPEC}-{TS_SDK_SPEC}").replace('/', "_"));
    if marker.is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let lock_path = dir.join("install.lock");
    let lock =
        File::create(&lock_path).with_context(|| format!("create {}", lock_path.display()))?;
    lock_within(&lock, &lock_path, INSTALL_TIMEOUT)?;
    if marker.is_file() {
        return Ok(dir);
    }
    let mut npm = Command::new("npm");
    npm.arg("install").arg("--prefix").arg(&dir).args([
        "--no-save",
        "--no-audit",
        "--no-fund",
        ISSUER_SPEC,
        TS_SDK_SPEC,
    ]);
    let out = run_with_timeout(&mut npm, INSTALL_TIMEOUT).context(
        "could not run npm to install the OAuth test issuer: install Node.js and npm (apt-get install nodejs npm)",
    )?;
    if !out.status.success() {
        bail!(
            "`npm install {ISSUER_SPEC} {TS_SDK_SPEC}` failed ({}); fix npm (network, registry) and rerun:\n{}",
            out.status,
            out.stderr.trim()
        );
    }
    std::fs::write(&marker, "").with_context(|| format!("write {}", marker.display()))?;
    Ok(dir)
}

/// Runs the official MCP TypeScript SDK's OAuth client (`oauth/ts_oauth_client.mjs`) with
/// `config`; returns the JSON line it printed.
pub async fn run_typescript_client(config: Value) -> anyhow::Result<Value> {
    let install = tokio::task::spawn_blocking(install)
        .await
        .context("the installer task")??;
    let script = install.join(format!("ts-client-{}.mjs", std::process::id()));
    std::fs::write(&script, TS_OAUTH_CLIENT)?;
    let out = tokio::task::spawn_blocking(move || {
        let mut node = Command::new("node");
        node.arg(&script).arg(config.to_string());
        run_with_timeout(&mut node, Duration::from_secs(120))
    })
    .await??;
    if !out.status.success() {
        bail!(
            "the TypeScript client failed ({}):\n{}\n{}",
            out.status,
            out.stdout.trim(),
            out.stderr.trim()
        );
    }
    last_json_line(&out.stdout, "the TypeScript client")
}

/// A client's own metadata document, served over https by `oauth/cimd_server.py` (the venv's
/// Python) with a certificate of a CA made for it; stopped when dropped.
pub struct ClientDocument {
    /// The document's URL: the client's `client_id`.
    pub url: String,
    /// The CA's certificate (PEM): give it to the daemon as `oauth.client_ca_file`.
    pub ca: PathBuf,
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl ClientDocument {
    /// Serves the document of client `name` with `redirect_uris`, using `python` (which has the
    /// `cryptography` package: the MCP SDK's venv does).
    pub async fn start(
        python: &std::path::Path,
        name: &str,
        redirect_uris: &[&str],
    ) -> anyhow::Result<ClientDocument> {
        let dir = tempfile::tempdir()?;
        let script = dir.path().join("cimd_server.py");
        std::fs::write(&script, CLIENT_DOCUMENT_SERVER)?;
        let ca = dir.path().join("ca.pem");
        let config = serde_json::json!({
            "caPath": ca, "name": name, "redirectUris": redirect_uris,
        });
        let mut child = tokio::process::Command::new(python)
            .arg(&script)
            .arg(config.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("running the client document server")?;
        let said = first_json_line(&mut child, "the document server").await?;
        let url = said["url"].as_str().context("no URL")?.to_owned();
        Ok(ClientDocument {
            url,
            ca,
            _child: child,
            _dir: dir,
        })
    }
}
