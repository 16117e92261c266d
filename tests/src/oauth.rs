//! An OAuth 2.0 / OpenID Connect issuer nobody here wrote: npm `oauth2-mock-server` (pinned),
//! installed under `<target>/oauth-issuer/` when missing, run by `oauth/issuer.mjs` on a free
//! loopback port. It publishes discovery and an RS256 JWKS, runs the authorization code flow
//! with PKCE (approving at once: no person), and signs access tokens whose `aud` is the resource
//! the client asked for (RFC 8707) and whose `sub` and `tenant` name [`Issuer::start`]'s
//! subject. Also the script the official MCP Python SDK runs its OAuth client flow with.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cli::{lock_within, run_with_timeout, target_dir};

/// The issuer's package.
pub const ISSUER_SPEC: &str = "oauth2-mock-server@9.3.0";

const ISSUER_SCRIPT: &str = include_str!("oauth/issuer.mjs");

/// What the MCP Python SDK's OAuth client runs (see its docstring).
pub const PYTHON_OAUTH_CLIENT: &str = include_str!("oauth/python_oauth_client.py");

const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

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
        let stdout = child.stdout.take().context("the issuer's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("the issuer did not say where it listens within 30 s")??
            .context("the issuer exited before listening")?;
        let said: Value =
            serde_json::from_str(&first).with_context(|| format!("the issuer said {first:?}"))?;
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

/// `<target>/oauth-issuer`, with [`ISSUER_SPEC`] in its `node_modules`, installed once across
/// test processes (a lock file beside it). Blocking.
fn install() -> anyhow::Result<PathBuf> {
    let dir = target_dir().join("oauth-issuer");
    let marker = dir.join(format!("installed-{ISSUER_SPEC}"));
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
    ]);
    let out = run_with_timeout(&mut npm, INSTALL_TIMEOUT).context(
        "could not run npm to install the OAuth test issuer: install Node.js and npm (apt-get install nodejs npm)",
    )?;
    if !out.status.success() {
        bail!(
            "`npm install {ISSUER_SPEC}` failed ({}); fix npm (network, registry) and rerun:\n{}",
            out.status,
            out.stderr.trim()
        );
    }
    std::fs::write(&marker, "").with_context(|| format!("write {}", marker.display()))?;
    Ok(dir)
}
