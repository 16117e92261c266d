//! Real headless Chromium for the web page's tests, driven over WebDriver (`fantoccini`).
//!
//! [`chromium`] finds Debian's `chromium` and `chromedriver` (or the binaries `HARNESS_TEST_CHROMIUM` and
//! `HARNESS_TEST_CHROMEDRIVER` name), installing both with `apt-get install -y chromium chromium-driver` when missing,
//! once per process and under a lock across processes, as [`crate::cli`] installs the CLI. [`Browser::start`] runs a
//! chromedriver of its own on a free port (its own process group, killed with the test) and opens one headless
//! session with the browser's console log enabled (`goog:loggingPrefs`), read by [`Browser::console`].

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Context};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

use crate::cli::{lock_within, run_with_timeout, target_dir};

/// Set to a Chromium binary to use instead of the one on PATH.
const CHROMIUM_ENV: &str = "HARNESS_TEST_CHROMIUM";
/// Set to a chromedriver binary to use instead of the one on PATH.
const DRIVER_ENV: &str = "HARNESS_TEST_CHROMEDRIVER";
/// How long `apt-get install` may take (Chromium is ~100 MB of packages).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(900);
/// How long chromedriver may take to answer `/status`.
const DRIVER_READY: Duration = Duration::from_secs(20);
/// Window size of every session: also the screenshot's size.
pub const WINDOW: (u32, u32) = (1280, 800);

/// The two binaries a session needs.
#[derive(Clone, Debug)]
pub struct Chromium {
    pub browser: PathBuf,
    pub driver: PathBuf,
}

/// Finds (or installs) Chromium and chromedriver. Blocks while installing; the outcome is computed once per process.
pub fn chromium() -> anyhow::Result<Chromium> {
    static FOUND: OnceLock<Result<Chromium, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| locate_or_install().map_err(|err| format!("{err:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn locate_or_install() -> anyhow::Result<Chromium> {
    if let Some(found) = locate()? {
        return Ok(found);
    }
    let target = target_dir();
    std::fs::create_dir_all(&target).with_context(|| format!("create {}", target.display()))?;
    let lock_path = target.join("chromium-install.lock");
    let lock =
        File::create(&lock_path).with_context(|| format!("create {}", lock_path.display()))?;
    lock_within(&lock, &lock_path, INSTALL_TIMEOUT)?;
    if let Some(found) = locate()? {
        return Ok(found);
    }
    let manual = "apt-get install -y chromium chromium-driver";
    let out = run_with_timeout(
        Command::new("apt-get")
            .args(["install", "-y", "chromium", "chromium-driver"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
        INSTALL_TIMEOUT,
    )
    .with_context(|| {
        format!(
            "Chromium and chromedriver are missing and apt-get could not be run: run `{manual}` as root, or set \
             {CHROMIUM_ENV} and {DRIVER_ENV}"
        )
    })?;
    if !out.status.success() {
        bail!(
            "Chromium and chromedriver are missing and `{manual}` failed ({}); run it as root (apt-get update first if \
             the package lists are old), or set {CHROMIUM_ENV} and {DRIVER_ENV}.\napt-get stderr:\n{}",
            out.status,
            out.stderr.trim()
        );
    }
    drop(lock);
    locate()?.with_context(|| {
        format!("`{manual}` succeeded but chromium or chromedriver is still not on PATH")
    })
}

/// Both binaries from the environment or PATH; `None` when either is missing.
fn locate() -> anyhow::Result<Option<Chromium>> {
    let from_env = |name: &str| -> anyhow::Result<Option<PathBuf>> {
        match std::env::var_os(name) {
            Some(path) if Path::new(&path).is_file() => Ok(Some(PathBuf::from(path))),
            Some(path) => bail!("{name}={} is not a file", Path::new(&path).display()),
            None => Ok(None),
        }
    };
    // Debian's /usr/bin/chromium is a shell wrapper; the browser itself is under /usr/lib.
    let browser = match from_env(CHROMIUM_ENV)? {
        Some(path) => Some(path),
        None => Some(PathBuf::from("/usr/lib/chromium/chromium"))
            .filter(|p| p.is_file())
            .or_else(|| on_path("chromium"))
            .or_else(|| on_path("chromium-browser")),
    };
    let driver = match from_env(DRIVER_ENV)? {
        Some(path) => Some(path),
        None => on_path("chromedriver"),
    };
    Ok(browser
        .zip(driver)
        .map(|(browser, driver)| Chromium { browser, driver }))
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// One browser level entry of the console log.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct ConsoleEntry {
    pub level: String,
    pub message: String,
    /// `javascript`, `network`, `console-api`, … (Chromium's log source); may be absent.
    #[serde(default)]
    pub source: Option<String>,
}

/// A headless Chromium session and the chromedriver serving it. Dropping it kills both.
pub struct Browser {
    pub client: Client,
    /// Killed (with its group: Chromium too) when the browser is dropped.
    _driver: DriverGuard,
    driver_url: String,
    session: String,
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless session.
    pub async fn start() -> anyhow::Result<Browser> {
        let found = tokio::task::spawn_blocking(chromium)
            .await
            .context("installer task")??;
        let (driver, driver_url) = start_driver(&found.driver).await?;
        let driver = DriverGuard(Some(driver));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": found.browser,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-extensions",
                    "--no-first-run",
                    "--disable-background-networking",
                    format!("--window-size={},{}", WINDOW.0, WINDOW.1),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("a JSON object literal")
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&driver_url)
            .await
            .with_context(|| format!("open a Chromium session ({})", found.browser.display()))?;
        let session = client
            .session_id()
            .await?
            .context("chromedriver gave no session id")?;
        Ok(Browser {
            client,
            _driver: driver,
            driver_url,
            session,
        })
    }

    /// Console entries logged since the last call (chromedriver hands each out once).
    pub async fn console(&self) -> anyhow::Result<Vec<ConsoleEntry>> {
        let url = format!("{}/session/{}/se/log", self.driver_url, self.session);
        let answer: Value = reqwest::Client::new()
            .post(&url)
            .json(&json!({"type": "browser"}))
            .send()
            .await
            .with_context(|| format!("POST {url}"))?
            .json()
            .await?;
        serde_json::from_value(answer["value"].clone())
            .with_context(|| format!("browser log entries: {answer}"))
    }

    /// Fails when the console holds an error or warning. `allow_network` lets failed requests pass (tests that cut
    /// the connection or answer 401 on purpose), not script errors.
    pub async fn assert_console_clean(&self, allow_network: bool) -> anyhow::Result<()> {
        let bad: Vec<ConsoleEntry> = self
            .console()
            .await?
            .into_iter()
            .filter(|e| matches!(e.level.as_str(), "SEVERE" | "WARNING"))
            .filter(|e| !(allow_network && e.source.as_deref() == Some("network")))
            .collect();
        if !bad.is_empty() {
            bail!("the browser console has errors: {bad:#?}");
        }
        Ok(())
    }

    /// Runs `script` (a function body; `return` a value) every 50 ms until it returns something truthy, and returns
    /// that; fails after `timeout` naming `what` and the last value.
    pub async fn eventually_js(
        &self,
        timeout: Duration,
        what: &str,
        script: &str,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let value = self.client.execute(script, Vec::new()).await?;
            if truthy(&value) {
                return Ok(value);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("timed out after {timeout:?} waiting for: {what} (last value: {value})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The element with `data-testid="id"`.
    pub async fn hook(&self, id: &str) -> anyhow::Result<fantoccini::elements::Element> {
        self.client
            .find(Locator::Css(&format!("[data-testid=\"{id}\"]")))
            .await
            .with_context(|| format!("find [data-testid={id:?}]"))
    }

    /// Ends the session (Chromium quits) and stops chromedriver.
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.close()).await;
    }
}

/// Kills chromedriver's process group on drop.
struct DriverGuard(Option<Child>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            kill_group(child);
        }
    }
}

fn kill_group(child: &mut Child) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = child.wait();
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// Spawns chromedriver on a free port (a few tries: the port is free when picked, not reserved) and waits until it
/// answers `/status`.
async fn start_driver(bin: &Path) -> anyhow::Result<(Child, String)> {
    let mut last_error = None;
    for _ in 0..3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                        .map_err(std::io::Error::from)
                });
            }
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let url = format!("http://127.0.0.1:{port}");
        match wait_ready(&url, &mut child).await {
            Ok(()) => return Ok((child, url)),
            Err(err) => {
                kill_group(&mut child);
                last_error = Some(err);
            }
        }
    }
    Err(last_error
        .expect("three tries")
        .context("chromedriver did not start"))
}

async fn wait_ready(url: &str, child: &mut Child) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + DRIVER_READY;
    let client = reqwest::Client::new();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("chromedriver exited at start ({status})");
        }
        let ready = client
            .get(format!("{url}/status"))
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if let Ok(response) = ready {
            let body: Value = response.json().await.unwrap_or(Value::Null);
            if body["value"]["ready"] == true {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("chromedriver at {url} not ready within {DRIVER_READY:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
