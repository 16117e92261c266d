//! The `harness` binary as a child process of a test, shared by the crash-recovery, cluster
//! and profile tests (each test binary uses part of it, hence `dead_code` allowed): [`Harness::start`] runs `harness serve` on port 0 with its own data dir, the
//! real `claude` CLI pointed at the mock Messages API, and JSON logs in a file of that dir, so a
//! test can SIGKILL or SIGTERM it and read what it logged.
//!
//! Every item here is used by both test files (each compiles its own copy of this module, and
//! an item one of them does not use would be dead code there); helpers only one test needs live
//! in that test's file.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use harness_tests::cli::{claude_bin, cli_env, stray_cli_env};
use harness_tests::client::ApiClient;
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::{eventually, eventually_async};

/// What differs between the daemons the tests start.
pub struct Launch<'a> {
    /// `shutdown_grace`, in seconds.
    pub grace_secs: u64,
    /// `--db`: a `postgres://…` URL, or `None` for a SQLite file in the data dir.
    pub db: Option<&'a str>,
    /// More arguments to `harness serve` (`--advertise=auto`, `--lease-ttl=2`, …).
    pub args: &'a [&'a str],
    /// Added to the daemon's environment. A `HARNESS_TOKEN` here is sent as the bearer token on
    /// every request.
    pub env: &'a [(&'a str, &'a str)],
    /// More of the config file (TOML tables), after the tests' own.
    pub config: &'a str,
    /// The daemon's limit on open files (soft and hard), as `ulimit -n` would set it.
    pub open_files: Option<u64>,
    /// `--claude-bin`, instead of the CLI test support installed.
    pub claude_bin: Option<&'a str>,
}

impl Launch<'static> {
    /// A single daemon on SQLite with this grace period, no extra arguments or environment.
    pub fn with_grace(grace_secs: u64) -> Launch<'static> {
        Launch {
            grace_secs,
            db: None,
            args: &[],
            env: &[],
            config: "",
            open_files: None,
            claude_bin: None,
        }
    }
}

/// The `harness` binary as a child process (killed when dropped).
pub struct Harness {
    child: tokio::process::Child,
    /// Talks to the daemon at the address it logged, with its token when it has one.
    pub client: ApiClient,
    /// The daemon's stderr: JSON log lines.
    log: PathBuf,
}

impl Harness {
    /// Starts `harness serve` on port 0 with its data in `dir`, the CLI pointed at `mock`, and
    /// returns once it answers `/healthz`. Panics with its log when it does not get there.
    pub async fn start(dir: &Path, mock: &MockApi, launch: &Launch<'_>) -> Harness {
        let claude = tokio::task::spawn_blocking(claude_bin)
            .await
            .expect("installer task")
            .expect("the claude CLI is installed by test support");
        let config_path = write_config(dir, mock, launch.grace_secs, launch.config);
        // One log per start: a restart on the same directory writes a new one.
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let log = dir.join(format!(
            "harness-{}.log",
            STARTS.fetch_add(1, Ordering::SeqCst)
        ));
        let log_file = std::fs::File::create(&log).expect("log file");
        let db = match launch.db {
            Some(url) => url.to_owned(),
            None => dir.join("harness.db").display().to_string(),
        };
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness"));
        command
            .arg("serve")
            // Port 0: the daemon binds whatever is free and logs the address.
            .arg("--bind=127.0.0.1:0")
            .arg(format!("--db={db}"))
            .arg(format!("--data-dir={}", dir.display()))
            .arg(format!(
                "--claude-bin={}",
                launch
                    .claude_bin
                    .map_or_else(|| claude.display().to_string(), str::to_owned)
            ))
            .arg(format!("--config={}", config_path.display()))
            .arg("--log-format=json")
            .args(launch.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true);
        clean_env(&mut command);
        command.envs(launch.env.iter().copied());
        if let Some(limit) = launch.open_files {
            // SAFETY: between fork and exec only `setrlimit` runs, which is async-signal-safe.
            unsafe {
                command.pre_exec(move || {
                    use nix::sys::resource::{setrlimit, Resource};
                    setrlimit(Resource::RLIMIT_NOFILE, limit, limit).map_err(std::io::Error::from)
                });
            }
        }
        let child = command.spawn().expect("harness starts");
        let (child, addr) = wait_listening(child, &log).await;
        let base = format!("http://{addr}");
        let client = match launch.env.iter().find(|(k, _)| *k == "HARNESS_TOKEN") {
            Some((_, token)) => ApiClient::with_bearer_token(base, token),
            None => ApiClient::new(base),
        };
        let harness = Harness { child, client, log };
        let ready = eventually_async(Duration::from_secs(30), "the daemon answers", || async {
            harness
                .client
                .try_get("/healthz")
                .await
                .is_ok_and(|(status, _)| status == 200)
        })
        .await;
        if let Err(err) = ready {
            panic!("{err}\n{}", harness.log_text());
        }
        harness
    }

    /// Stops the daemon with SIGTERM: it exits 0 and leaves no CLI.
    pub async fn stop(mut self) {
        let clis = self.cli_pids().await;
        self.signal(Signal::SIGTERM);
        let status = self.wait_exit(Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(0), "{}", self.log_text());
        for cli in clis {
            assert!(
                !harness_tests::util::process_exists(cli),
                "CLI {cli} outlived its daemon"
            );
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("the daemon is running")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path`, which must answer 200 with a JSON body.
    pub async fn get_ok(&self, path: &str) -> Value {
        let (status, body) = self.client.get(path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        assert!(!body.is_null(), "GET {path}: not a JSON body");
        body
    }

    /// The thread's messages, as `GET /api/threads/{id}` lists them.
    pub async fn messages(&self, thread: &str) -> Vec<Value> {
        self.get_ok(&format!("/api/threads/{thread}")).await["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The pids of the CLI processes in the daemon's pool (`GET /api/pool`).
    pub async fn cli_pids(&self) -> Vec<u32> {
        self.get_ok("/api/pool").await["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["pid"].as_u64())
            .map(|pid| pid as u32)
            .collect()
    }

    pub fn signal(&self, signal: Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), signal)
            .expect("signal the daemon");
    }

    /// Waits for the daemon to exit and returns its status.
    pub async fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.expect("wait for the daemon"),
            Err(_) => panic!(
                "the daemon did not exit within {timeout:?}\n{}",
                self.log_text()
            ),
        }
    }
}

/// The config file in `dir`: the grace period, no spare processes, no built-in tools, and the
/// CLI's environment pointing at `mock`.
fn write_config(dir: &Path, mock: &MockApi, grace_secs: u64, more: &str) -> PathBuf {
    let env: toml::Table = cli_env(&mock.url())
        .into_iter()
        .map(|(k, v)| (k, toml::Value::String(v)))
        .collect();
    let config = format!(
        "shutdown_grace = {grace_secs}\n\n[pool]\nspares = 0\n\n[claude]\nbuiltin_tools = \"\"\nenv = {}\n\n{more}\n",
        toml::Value::Table(env)
    );
    let path = dir.join("harness.toml");
    std::fs::write(&path, config).expect("write the config");
    path
}

/// Waits for the address the daemon bound, from its log; panics with the log when it exits or
/// takes too long before that.
async fn wait_listening(
    mut child: tokio::process::Child,
    log: &Path,
) -> (tokio::process::Child, SocketAddr) {
    let log_text = || std::fs::read_to_string(log).unwrap_or_default();
    let (mut addr, mut exited) = (None, None);
    let logged = eventually(
        Duration::from_secs(30),
        "the daemon logs the address it listens on",
        || {
            addr = log_field(&log_text(), "Harness listening.", "addr")
                .and_then(|addr| addr.parse().ok());
            if addr.is_none() {
                exited = child.try_wait().ok().flatten();
            }
            addr.is_some() || exited.is_some()
        },
    )
    .await;
    match (logged, addr) {
        (Ok(()), Some(addr)) => (child, addr),
        (Ok(()), None) => panic!("the daemon exited ({exited:?})\n{}", log_text()),
        (Err(err), _) => panic!("{err}\n{}", log_text()),
    }
}

/// `harness keys ARGS…` on the database of a daemon whose data is in `dir` (as
/// [`Harness::start`] lays it out); it must succeed.
pub async fn keys(dir: &Path, args: &[&str]) -> std::process::Output {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("keys")
        .args(args)
        .arg(format!("--db={}", dir.join("harness.db").display()))
        .arg(format!("--data-dir={}", dir.display()))
        .output()
        .await
        .expect("harness runs");
    assert!(
        output.status.success(),
        "harness keys {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Takes out of `command`'s environment what the tests' own may carry: the CLI's variables
/// (`stray_cli_env`) and every `HARNESS_*` setting.
pub fn clean_env(command: &mut tokio::process::Command) {
    for key in stray_cli_env() {
        command.env_remove(key);
    }
    for (key, _) in std::env::vars() {
        if key.starts_with("HARNESS_") {
            command.env_remove(key);
        }
    }
}

/// The string field `field` of the first JSON log line whose message is `message`, once the
/// daemon has logged it (`"Harness listening."` → `addr`, `"Clustering on."` → `node`).
pub fn log_field(log: &str, message: &str, field: &str) -> Option<String> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["fields"]["message"] == message)
        .and_then(|line| Some(line["fields"][field].as_str()?.to_owned()))
}

/// Posts `content` to the thread with `?wait=false` under `client_message_id`, the mock set to
/// hang on it, and returns the message's id once its API request reached the mock: a turn that
/// stays running until its daemon stops.
pub async fn start_hanging_turn(
    daemon: &Harness,
    mock: &MockApi,
    thread: &str,
    content: &str,
    client_message_id: &str,
) -> String {
    let requests = mock.message_requests().len();
    mock.once_when_prompt_contains(content, Reply::Hang);
    let (status, accepted) = daemon
        .client
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": content, "clientMessageId": client_message_id}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    mock.wait_for_requests(requests + 1, Duration::from_secs(30))
        .await
        .expect("the hanging request reached the API");
    accepted["messageId"]
        .as_str()
        .expect("messageId")
        .to_owned()
}
