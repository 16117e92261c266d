//! Crash recovery with the real `harness` binary (a child process of the test, so it can be
//! SIGKILLed), the real `claude` CLI and the mock Messages API from `harness-tests`.
//!
//! - SIGKILL mid-turn: the CLI child dies with the daemon (parent-death signal), the SQLite file
//!   passes `PRAGMA integrity_check`, and after a restart on the same database the turn is
//!   `interrupted` with a reason, nothing is lost, and the thread goes on with its history.
//! - SIGTERM mid-turn: the daemon waits out the grace period, kills the CLI, marks the turn
//!   `interrupted`, and exits 0; no CLI process remains.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use harness_tests::cli::{claude_bin, cli_env, stray_cli_env};
use harness_tests::client::ApiClient;
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::{eventually, eventually_async, process_exists};
use orchestrator::store::Store;

/// The `harness` binary as a child process.
struct Harness {
    child: tokio::process::Child,
    /// Talks to the daemon at the address it logged, with its token when it has one.
    client: ApiClient,
    /// The daemon's stderr: JSON log lines.
    log: PathBuf,
}

impl Harness {
    /// Starts `harness serve` on port 0 with its data in `dir`, the CLI pointed at `mock`.
    async fn start(dir: &Path, mock: &MockApi, grace_secs: u64) -> Harness {
        Self::start_with_env(dir, mock, grace_secs, &[]).await
    }

    /// [`Harness::start`] with `env` added to the daemon's environment. A `HARNESS_TOKEN` there
    /// is sent as the bearer token on every request.
    async fn start_with_env(
        dir: &Path,
        mock: &MockApi,
        grace_secs: u64,
        extra_env: &[(&str, &str)],
    ) -> Harness {
        let claude = tokio::task::spawn_blocking(claude_bin)
            .await
            .expect("installer task")
            .expect("the claude CLI is installed by test support");
        let env: toml::Table = cli_env(&mock.url())
            .into_iter()
            .map(|(k, v)| (k, toml::Value::String(v)))
            .collect();
        let config = format!(
            "shutdown_grace = {grace_secs}\n\n[pool]\nspares = 0\n\n[claude]\nbuiltin_tools = \"\"\nenv = {}\n",
            toml::Value::Table(env)
        );
        let config_path = dir.join("harness.toml");
        std::fs::write(&config_path, config).expect("write the config");
        // One log per start: a restart on the same directory writes a new one.
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let log = dir.join(format!(
            "harness-{}.log",
            STARTS.fetch_add(1, Ordering::SeqCst)
        ));
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness"));
        command
            .arg("serve")
            // Port 0: the daemon binds whatever is free and logs the address.
            .arg("--bind=127.0.0.1:0")
            .arg(format!("--db={}", dir.join("harness.db").display()))
            .arg(format!("--data-dir={}", dir.display()))
            .arg(format!("--claude-bin={}", claude.display()))
            .arg(format!("--config={}", config_path.display()))
            .arg("--log-format=json")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true);
        for key in stray_cli_env() {
            command.env_remove(key);
        }
        for (key, _) in std::env::vars() {
            if key.starts_with("HARNESS_") {
                command.env_remove(key);
            }
        }
        command.envs(extra_env.iter().copied());
        let mut child = command.spawn().expect("harness starts");
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        // The address it bound, from its log; or its exit status, if it exited before that.
        let (mut addr, mut exited) = (None, None);
        let logged = eventually(
            Duration::from_secs(30),
            "the daemon logs the address it listens on",
            || {
                addr = listening_addr(&log_text());
                if addr.is_none() {
                    exited = child.try_wait().ok().flatten();
                }
                addr.is_some() || exited.is_some()
            },
        )
        .await;
        let addr = match (logged, addr) {
            (Ok(()), Some(addr)) => addr,
            (Ok(()), None) => panic!("the daemon exited ({exited:?})\n{}", log_text()),
            (Err(err), _) => panic!("{err}\n{}", log_text()),
        };
        let base = format!("http://{addr}");
        let client = match extra_env.iter().find(|(k, _)| *k == "HARNESS_TOKEN") {
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

    fn pid(&self) -> u32 {
        self.child.id().expect("the daemon is running")
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path`, which must answer 200 with a JSON body.
    async fn get_ok(&self, path: &str) -> Value {
        let (status, body) = self.client.get(path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        assert!(!body.is_null(), "GET {path}: not a JSON body");
        body
    }

    async fn messages(&self, thread: &str) -> Vec<Value> {
        self.get_ok(&format!("/api/threads/{thread}")).await["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    async fn cli_pids(&self) -> Vec<u32> {
        self.get_ok("/api/pool").await["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["pid"].as_u64())
            .map(|pid| pid as u32)
            .collect()
    }

    fn signal(&self, signal: Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), signal)
            .expect("signal the daemon");
    }

    /// Waits for the daemon to exit and returns its status.
    async fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.expect("wait for the daemon"),
            Err(_) => panic!(
                "the daemon did not exit within {timeout:?}\n{}",
                self.log_text()
            ),
        }
    }
}

/// The address in the daemon's `Harness listening.` log line, once it is there.
fn listening_addr(log: &str) -> Option<SocketAddr> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["fields"]["message"] == "Harness listening.")
        .and_then(|line| line["fields"]["addr"].as_str()?.parse().ok())
}

/// A thread with one finished exchange and a second message whose API request hangs; returns the
/// thread id, the hanging message's id and the CLI's pid.
async fn thread_with_a_hanging_turn(daemon: &Harness, mock: &MockApi) -> (String, String, u32) {
    let thread = daemon.client.create_thread().await;
    let path = format!("/api/threads/{thread}/messages");
    let (status, reply) = daemon
        .client
        .post(&path, json!({"content": "remember the word quince"}))
        .await;
    assert_eq!(status, 200, "{reply}\n{}", daemon.log_text());
    assert_eq!(
        reply["message"]["content"],
        "echo: remember the word quince"
    );

    mock.once_when_prompt_contains("HANG-DURING-CRASH", Reply::Hang);
    let (status, accepted) = daemon
        .client
        .post(
            &format!("{path}?wait=false"),
            json!({"content": "HANG-DURING-CRASH", "clientMessageId": "hang-1"}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let hanging = accepted["messageId"]
        .as_str()
        .expect("messageId")
        .to_owned();
    mock.wait_for_requests(2, Duration::from_secs(30))
        .await
        .expect("the hanging request reached the API");
    let pids = daemon.cli_pids().await;
    assert_eq!(pids.len(), 1, "{pids:?}");
    (thread, hanging, pids[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_turn_recovers_on_restart() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut daemon = Harness::start(dir.path(), &mock, 5).await;
    let (thread, hanging, cli) = thread_with_a_hanging_turn(&daemon, &mock).await;

    daemon.signal(Signal::SIGKILL);
    let status = daemon.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    eventually(
        Duration::from_secs(5),
        "the CLI dies with its daemon",
        || !process_exists(cli),
    )
    .await
    .unwrap();

    // The file survived the kill: intact, and the turn is still `pending` in it.
    let db = dir.path().join("harness.db");
    let store = Store::open(&db.to_string_lossy())
        .await
        .expect("the database opens");
    assert!(
        store.integrity_ok().await.unwrap(),
        "PRAGMA integrity_check"
    );
    let id = orchestrator::store::MessageId::from_string(&hanging);
    let left = store.get_message(&id).await.unwrap().expect("kept");
    assert_eq!(left.status.as_str(), "pending");
    store.close().await;

    let mut daemon = Harness::start(dir.path(), &mock, 5).await;
    let messages = daemon.messages(&thread).await;
    let summary: Vec<(String, String)> = messages
        .iter()
        .map(|m| {
            (
                m["content"].as_str().unwrap_or_default().to_owned(),
                m["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("remember the word quince".into(), "done".into()),
            ("echo: remember the word quince".into(), "done".into()),
            ("HANG-DURING-CRASH".into(), "interrupted".into()),
        ],
        "nothing lost"
    );
    assert_eq!(
        messages[2]["error"], "the daemon stopped before this turn finished",
        "the reason is stored"
    );

    // The client retries under the same id: the interrupted message runs now.
    let (status, retried) = daemon
        .client
        .post(
            &format!("/api/threads/{thread}/messages"),
            json!({"content": "HANG-DURING-CRASH", "clientMessageId": "hang-1"}),
        )
        .await;
    assert_eq!(status, 200, "{retried}\n{}", daemon.log_text());
    assert_eq!(
        retried["userMessageId"],
        hanging.as_str(),
        "the same message"
    );
    assert_eq!(retried["message"]["content"], "echo: HANG-DURING-CRASH");

    let (status, reply) = daemon.client.send(&thread, "what was the word?").await;
    assert_eq!(status, 200, "{reply}\n{}", daemon.log_text());
    let text = reply["message"]["content"].as_str().unwrap_or_default();
    assert!(text.ends_with("what was the word?"), "{text}");
    assert_eq!(daemon.messages(&thread).await.len(), 6, "each message once");
    let last = mock.message_requests().last().cloned().expect("a request");
    assert!(
        last.all_text().contains("remember the word quince"),
        "the thread continues with its history: {}",
        last.all_text()
    );

    // An orderly stop of an idle daemon: exit 0, no CLI left.
    let clis = daemon.cli_pids().await;
    assert_eq!(clis.len(), 1);
    daemon.signal(Signal::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", daemon.log_text());
    assert!(!process_exists(clis[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_turn_exits_0_within_the_grace_period_and_leaves_no_cli() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let grace = 2;
    let mut daemon = Harness::start(dir.path(), &mock, grace).await;
    let (thread, hanging, cli) = thread_with_a_hanging_turn(&daemon, &mock).await;

    let asked = Instant::now();
    daemon.signal(Signal::SIGTERM);
    // A bound for a hung daemon, not a speed check: the exit code and the log say how it ended.
    let status = daemon.wait_exit(Duration::from_secs(grace + 10)).await;
    let took = asked.elapsed();
    assert_eq!(status.code(), Some(0), "{}", daemon.log_text());
    assert!(
        took >= Duration::from_secs(grace),
        "stopped after {took:?}, before its {grace} s grace period was out"
    );
    assert!(!process_exists(cli), "the CLI was killed");

    let store = Store::open(&dir.path().join("harness.db").to_string_lossy())
        .await
        .expect("the database opens");
    assert!(store.integrity_ok().await.unwrap());
    let id = orchestrator::store::MessageId::from_string(&hanging);
    let cut = store.get_message(&id).await.unwrap().expect("kept");
    assert_eq!(cut.status.as_str(), "interrupted");
    assert!(
        cut.error.as_deref().unwrap_or_default().contains("shut"),
        "{:?}",
        cut.error
    );
    assert_eq!(
        store
            .list_messages(&plugin_contract::ThreadId::from_string(&thread))
            .await
            .unwrap()
            .len(),
        3
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_at_once_without_waiting_out_the_grace_period() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    // A grace period no test would wait for.
    let mut daemon = Harness::start(dir.path(), &mock, 3600).await;
    let (_thread, hanging, cli) = thread_with_a_hanging_turn(&daemon, &mock).await;

    daemon.signal(Signal::SIGTERM);
    eventually(
        Duration::from_secs(30),
        "the daemon begins its graceful stop",
        || daemon.log_text().contains("Shutting down."),
    )
    .await
    .unwrap();
    daemon.signal(Signal::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(1), "{}", daemon.log_text());
    assert!(
        daemon.log_text().contains("Second signal"),
        "{}",
        daemon.log_text()
    );
    assert!(!process_exists(cli), "the CLI was killed");
    let store = Store::open(&dir.path().join("harness.db").to_string_lossy())
        .await
        .expect("the database opens");
    let id = orchestrator::store::MessageId::from_string(&hanging);
    let cut = store.get_message(&id).await.unwrap().expect("kept");
    assert_eq!(
        cut.status.as_str(),
        "interrupted",
        "nothing lost, retryable"
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_and_unrelated_secrets_never_reach_a_cli_child() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let token = "t0ken-from-the-environment";
    let mut daemon = Harness::start_with_env(
        dir.path(),
        &mock,
        5,
        &[
            ("HARNESS_TOKEN", token),
            ("DATABASE_PASSWORD", "hunter2"),
            ("LC_ALL", "C.UTF-8"),
        ],
    )
    .await;

    // The token from the environment guards the API, whatever the scheme's case.
    let url = format!("{}/api/threads", daemon.client.base());
    let plain = reqwest::Client::new();
    assert_eq!(plain.get(&url).send().await.unwrap().status(), 401);
    let lower = plain
        .get(&url)
        .header("authorization", format!("bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(lower.status(), 200);

    let thread = daemon.client.create_thread().await;
    let (status, reply) = daemon.client.send(&thread, "hello").await;
    assert_eq!(status, 200, "{reply}\n{}", daemon.log_text());
    let pids = daemon.cli_pids().await;
    assert_eq!(pids.len(), 1);
    let environ =
        std::fs::read(format!("/proc/{}/environ", pids[0])).expect("the CLI's environment");
    let names: Vec<String> = environ
        .split(|b| *b == 0)
        .filter_map(|entry| std::str::from_utf8(entry).ok())
        .filter_map(|entry| entry.split('=').next())
        .map(str::to_owned)
        .collect();
    for secret in ["HARNESS_TOKEN", "DATABASE_PASSWORD", "RUST_LOG"] {
        assert!(
            !names.iter().any(|n| n == secret),
            "{secret} reached the CLI: {names:?}"
        );
    }
    for needed in ["PATH", "LC_ALL", "ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR"] {
        assert!(
            names.iter().any(|n| n == needed),
            "{needed} is missing: {names:?}"
        );
    }
    assert!(
        !names.iter().any(|n| n.starts_with("HARNESS_")),
        "{names:?}"
    );
    daemon.signal(Signal::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "{}", daemon.log_text());
}
