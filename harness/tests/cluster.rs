//! Failover between real `harness` binaries (issue #14): two daemons, each a child process of
//! the test with its own data dir, on one real PostgreSQL database (`pg-test`), clustered with
//! `--advertise=auto` and a short lease (`--lease-ttl=2`), the real `claude` CLI against the mock
//! Messages API. The in-process version of these scenarios is `tests/tests/e2e/cluster.rs`; here
//! the owner dies by a real `kill -9`, so nothing of it runs any more.
//!
//! - A thread created on node A gets its message through node B, served by A's warm process (B
//!   starts no process for it). A is SIGKILLed mid-turn; its CLI dies with it. A message through
//!   B within the lease TTL plus a spawn is answered with the full history: B takes the lease
//!   (epoch 2), the turn A left hanging is `interrupted` and runs once on retry, and the thread
//!   shows every message exactly once.
//! - A restarts on the same data dir (a new node): its start-up alone writes nothing for the
//!   thread it lost; a message through it is forwarded to B (A starts no process) and the lease
//!   stays B's.
//! - A freezes (SIGSTOP) in the middle of a turn: a message forwarded to it through B ends with
//!   503 once A's lease expires, its retry takes the thread over on B; when A wakes (SIGCONT), its
//!   turn's writes are refused by the epoch, and A evicts its process: nothing of A lands.

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;
use serde_json::{json, Value};
use tempfile::TempDir;

use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::{eventually, eventually_async, process_exists};
use orchestrator::store::Store;
use plugin_contract::ThreadId;
use support::{log_field, start_hanging_turn, Harness, Launch};

/// `--lease-ttl`: how long a dead owner's lease keeps its thread.
const TTL: Duration = Duration::from_secs(2);

/// A generous bound for a takeover's spawn and resumed turn, on top of the TTL: it catches a
/// hang, it is no speed check.
const SPAWN_BOUND: Duration = Duration::from_secs(30);

/// The daemon's `idle_in_transaction_session_timeout`: how long a node frozen inside a write
/// holds the lease row against a takeover.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);

const HISTORY: &str = "the secret word is tangerine";
const HANGING: &str = "HANG-WHEN-THE-OWNER-IS-KILLED";
const HANGING_ID: &str = "hang-1";

/// Two nodes on a fresh database, and a thread that A created and answered once.
struct TwoNodes {
    mock: MockApi,
    url: String,
    /// The test's own connection to the nodes' database, to read the lease and the event log.
    store: Store,
    a_dir: TempDir,
    _b_dir: TempDir,
    a: Harness,
    b: Harness,
    thread: String,
}

impl TwoNodes {
    async fn start() -> TwoNodes {
        let url = pg_test::database_url().await.expect("a test PostgreSQL");
        let mock = MockApi::start().await;
        let (a_dir, b_dir) = (temp_dir(), temp_dir());
        let a = start_node(&a_dir, &mock, &url).await;
        let b = start_node(&b_dir, &mock, &url).await;
        let store = Store::open(&url).await.expect("the database opens");
        let thread = a.client.create_thread().await;
        assert_eq!(
            a.client.reply(&thread, HISTORY).await,
            format!("echo: {HISTORY}")
        );
        TwoNodes {
            mock,
            url,
            store,
            a_dir,
            _b_dir: b_dir,
            a,
            b,
            thread,
        }
    }

    /// SIGKILLs A while its turn on `HANGING` waits for the API; returns that message's id once
    /// A and its CLI are gone.
    async fn kill_a_mid_turn(&mut self) -> String {
        let hanging =
            start_hanging_turn(&self.a, &self.mock, &self.thread, HANGING, HANGING_ID).await;
        let clis = self.a.cli_pids().await;
        assert!(!clis.is_empty(), "A runs the turn");
        self.a.signal(Signal::SIGKILL);
        let status = self.a.wait_exit(Duration::from_secs(10)).await;
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        eventually(
            Duration::from_secs(5),
            "A's CLIs die with their daemon",
            || !clis.iter().any(|pid| process_exists(*pid)),
        )
        .await
        .expect("no CLI left of A");
        hanging
    }

    /// The lease of the thread: `(owner, owner URL, epoch)`.
    async fn lease(&self) -> (String, String, i64) {
        let lease = self
            .store
            .lease(&ThreadId::from_string(&self.thread))
            .await
            .expect("the lease reads")
            .expect("a lease row");
        (lease.owner, lease.owner_url, lease.epoch)
    }

    /// Everything stored for the thread: the thread with its messages (read through B), its
    /// event log, and its lease without the expiry the owner's heartbeat moves.
    async fn stored_rows(&self) -> Value {
        let events = self
            .store
            .events_after(&ThreadId::from_string(&self.thread), 0, 100_000)
            .await
            .expect("the events read");
        let events: Vec<Value> = events
            .into_iter()
            .map(|e| json!({"id": e.id, "kind": e.kind, "messageId": e.message_id, "data": e.data}))
            .collect();
        json!({
            "thread": self.b.get_ok(&format!("/api/threads/{}", self.thread)).await,
            "events": events,
            "lease": self.lease().await,
        })
    }
}

fn temp_dir() -> TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// A clustered node on the database at `url`, advertising the address it bound.
async fn start_node(dir: &TempDir, mock: &MockApi, url: &str) -> Harness {
    let ttl = format!("--lease-ttl={}", TTL.as_secs());
    let args = ["--advertise=auto", ttl.as_str()];
    let launch = Launch {
        db: Some(url),
        args: &args,
        ..Launch::with_grace(5)
    };
    Harness::start(dir.path(), mock, &launch).await
}

/// The node's id (`node_…`), from its `Clustering on.` log line.
fn node_id(daemon: &Harness) -> String {
    log_field(&daemon.log_text(), "Clustering on.", "node")
        .unwrap_or_else(|| panic!("no node id logged\n{}", daemon.log_text()))
}

/// `harness_pool_spawns_total` from the node's `/metrics`: the CLI processes it started.
async fn spawns(daemon: &Harness) -> u64 {
    let url = format!("{}/metrics", daemon.client.base());
    let response = reqwest::get(&url).await.expect("GET /metrics");
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("the metrics");
    text.lines()
        .find_map(|line| line.strip_prefix("harness_pool_spawns_total "))
        .unwrap_or_else(|| panic!("no spawn counter in\n{text}"))
        .trim()
        .parse()
        .expect("a count")
}

/// Sends `text` through `daemon` and asserts the reply is its echo.
async fn assert_echoed(daemon: &Harness, thread: &str, text: &str) {
    let (status, reply) = daemon.client.send(thread, text).await;
    assert_eq!(status, 200, "{reply}\n{}", daemon.log_text());
    assert_eq!(reply["message"]["content"], format!("echo: {text}"));
}

/// Asserts the thread holds each of `sent` exactly once as a user message, and no other; a
/// `done` one has exactly one reply (its echo), any other none. Returns the statuses, in the
/// order of `sent`.
fn assert_each_once(messages: &[Value], sent: &[&str]) -> Vec<String> {
    let users: Vec<&Value> = messages.iter().filter(|m| m["role"] == "user").collect();
    let replies = messages.iter().filter(|m| m["role"] == "assistant");
    let mut stored: Vec<&str> = users.iter().filter_map(|m| m["content"].as_str()).collect();
    let mut expected = sent.to_vec();
    stored.sort_unstable();
    expected.sort_unstable();
    assert_eq!(
        stored, expected,
        "every message exactly once: {messages:#?}"
    );
    let mut statuses = Vec::new();
    for text in sent {
        let user = users
            .iter()
            .find(|m| m["content"] == *text)
            .expect("stored");
        let answers: Vec<&Value> = replies
            .clone()
            .filter(|r| r["replyTo"] == user["id"])
            .collect();
        let status = user["status"].as_str().unwrap_or_default().to_owned();
        let expected_answers = usize::from(status == "done");
        assert_eq!(answers.len(), expected_answers, "replies to {user}");
        for answer in answers {
            assert_eq!(answer["content"], format!("echo: {text}"));
        }
        statuses.push(status);
    }
    assert_eq!(
        replies.count(),
        statuses.iter().filter(|s| *s == "done").count(),
        "no reply to anything else: {messages:#?}"
    );
    statuses
}

/// Stops the node with SIGTERM: it exits 0 and leaves no CLI.
async fn stop(daemon: Harness) {
    daemon.stop().await;
}

/// Milliseconds since the epoch, the clock the lease's expiry is written with.
fn now_millis() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since.as_millis()).expect("in range")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owners_thread_moves_to_a_peer_with_its_history_once() {
    let mut nodes = TwoNodes::start().await;
    let (a_node, thread) = (node_id(&nodes.a), nodes.thread.clone());
    let a_clis = nodes.a.cli_pids().await;
    assert_eq!(a_clis.len(), 1, "{a_clis:?}");

    // Through B, served by A's warm process: B starts none.
    assert_echoed(&nodes.b, &thread, "through B").await;
    assert!(nodes.b.cli_pids().await.is_empty(), "B has no process");
    assert_eq!(spawns(&nodes.b).await, 0, "B started no process");
    assert_eq!(spawns(&nodes.a).await, 1);
    assert_eq!(nodes.a.cli_pids().await, a_clis, "the same process");
    let a_url = nodes.a.client.base().to_owned();
    assert_eq!(nodes.lease().await, (a_node.clone(), a_url, 1));

    let hanging = nodes.kill_a_mid_turn().await;

    // B forwards, finds A gone, takes the lease once it expired, and resumes the thread.
    let asked = Instant::now();
    assert_echoed(&nodes.b, &thread, "what was the word?").await;
    let took = asked.elapsed();
    assert!(took < TTL + SPAWN_BOUND, "answered after {took:?}");
    let last = nodes
        .mock
        .message_requests()
        .last()
        .cloned()
        .expect("a request");
    for earlier in [HISTORY, "through B"] {
        assert!(
            last.all_text().contains(earlier),
            "the history reached the model without {earlier:?}: {}",
            last.all_text()
        );
    }
    assert_eq!(spawns(&nodes.b).await, 1, "{}", nodes.b.log_text());
    assert_eq!(nodes.b.cli_pids().await.len(), 1);
    let (owner, owner_url, epoch) = nodes.lease().await;
    assert_ne!(owner, a_node);
    assert_eq!(
        (owner, owner_url, epoch),
        (node_id(&nodes.b), nodes.b.client.base().to_owned(), 2)
    );

    // The turn A left hanging ended at the takeover; each message is there once.
    let sent = [HISTORY, "through B", HANGING, "what was the word?"];
    let messages = nodes.b.messages(&thread).await;
    assert_eq!(
        assert_each_once(&messages, &sent),
        ["done", "done", "interrupted", "done"]
    );
    let cut = messages.iter().find(|m| m["id"] == hanging.as_str());
    assert!(
        cut.is_some_and(|m| m["error"]
            .as_str()
            .is_some_and(|e| e.contains("took the thread over"))),
        "{cut:?}"
    );

    // The client retries it through B under the same id: it runs now, once.
    let (status, retried) = nodes
        .b
        .client
        .post(
            &format!("/api/threads/{thread}/messages"),
            json!({"content": HANGING, "clientMessageId": HANGING_ID}),
        )
        .await;
    assert_eq!(status, 200, "{retried}\n{}", nodes.b.log_text());
    assert_eq!(
        retried["userMessageId"],
        hanging.as_str(),
        "the same message"
    );
    assert_eq!(retried["message"]["content"], format!("echo: {HANGING}"));
    let messages = nodes.b.messages(&thread).await;
    assert_eq!(assert_each_once(&messages, &sent), ["done"; 4]);
    assert_eq!(spawns(&nodes.b).await, 1, "B's process served the retry");

    stop(nodes.b).await;
    nodes.store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_owner_writes_nothing_to_the_thread_it_lost_and_forwards_to_the_new_one() {
    let mut nodes = TwoNodes::start().await;
    let thread = nodes.thread.clone();
    nodes.kill_a_mid_turn().await;
    assert_echoed(&nodes.b, &thread, "what was the word?").await;
    let b_clis = nodes.b.cli_pids().await;
    assert_eq!(b_clis.len(), 1, "B took the thread over");
    let before = nodes.stored_rows().await;
    assert_eq!(before["lease"][2], 2, "{before}");

    // A again on the same data dir: a new process, a new node.
    let a = start_node(&nodes.a_dir, &nodes.mock, &nodes.url).await;
    assert_ne!(node_id(&a), node_id(&nodes.a));
    let up = now_millis();
    // Let the nodes' heartbeats run a full period after A's start: B's renewal moves the
    // lease's expiry past `up` + TTL + a third of it (the heartbeat period).
    let period = TTL / 3;
    let renewed_after = up + i64::try_from((TTL + period).as_millis()).expect("in range");
    eventually_async(
        Duration::from_secs(10),
        "B renews its lease a heartbeat period after A's start",
        || async {
            let lease = nodes
                .store
                .lease(&ThreadId::from_string(&thread))
                .await
                .unwrap()
                .expect("a lease row");
            lease.expires_at.timestamp_millis() > renewed_after
        },
    )
    .await
    .unwrap();
    assert_eq!(
        nodes.stored_rows().await,
        before,
        "A's start wrote to the thread"
    );
    assert!(a.cli_pids().await.is_empty());
    assert_eq!(spawns(&a).await, 0);

    // Through A, served by B's process.
    assert_echoed(&a, &thread, "and now?").await;
    assert!(a.cli_pids().await.is_empty(), "A has no process");
    assert_eq!(spawns(&a).await, 0, "A started no process");
    assert_eq!(
        nodes.b.cli_pids().await,
        b_clis,
        "B's warm process served it"
    );
    assert_eq!(spawns(&nodes.b).await, 1);
    assert_eq!(
        nodes.stored_rows().await["lease"],
        before["lease"],
        "still B's"
    );
    let messages = nodes.b.messages(&thread).await;
    assert_eq!(
        assert_each_once(
            &messages,
            &[HISTORY, HANGING, "what was the word?", "and now?"]
        ),
        ["done", "interrupted", "done", "done"]
    );

    stop(a).await;
    stop(nodes.b).await;
    nodes.store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_owner_loses_the_thread_and_writes_nothing_when_it_wakes() {
    const SLOW: &str = "A FREEZES DURING THIS TURN";
    let nodes = TwoNodes::start().await;
    let thread = nodes.thread.clone();
    nodes.mock.once_when_prompt_contains(
        SLOW,
        Reply::slow_text(["echo: ", "a slow ", "turn"], Duration::from_secs(6)),
    );
    let path = format!("/api/threads/{thread}/messages");
    let (status, accepted) = nodes
        .a
        .client
        .post(
            &format!("{path}?wait=false"),
            json!({"content": SLOW, "clientMessageId": "slow-1"}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    nodes
        .mock
        .wait_for_requests(2, Duration::from_secs(30))
        .await
        .expect("A's turn reached the API");
    let a_clis = nodes.a.cli_pids().await;
    nodes.a.signal(Signal::SIGSTOP);

    // Two answers are right, depending on where A froze:
    // - between two writes: B forwards to A, which never answers, and the wait ends once A's
    //   lease has expired (503 `not_owner`); the retry then takes the thread over;
    // - inside a fenced write, holding the lease row `FOR SHARE`: B's claim waits until
    //   PostgreSQL ends A's idle transaction (5 s), by when A's lease has expired, and B takes
    //   the thread over at once (200).
    let body = json!({"content": "while A sleeps", "clientMessageId": "sleep-1"});
    let asked = Instant::now();
    let (mut status, mut reply) = nodes.b.client.post(&path, body.clone()).await;
    let waited = asked.elapsed();
    assert!(
        waited < TTL + IDLE_IN_TRANSACTION + SPAWN_BOUND,
        "answered after {waited:?}"
    );
    if status == 503 {
        assert_eq!(reply["error"]["code"], "not_owner", "{reply}");
        // The retry takes the thread over on B, which ends A's turn.
        (status, reply) = nodes.b.client.post(&path, body).await;
    }
    assert_eq!(status, 200, "{reply}\n{}", nodes.b.log_text());
    assert_eq!(reply["message"]["content"], "echo: while A sleeps");
    let sent = [HISTORY, SLOW, "while A sleeps"];
    let messages = nodes.b.messages(&thread).await;
    assert_eq!(
        assert_each_once(&messages, &sent),
        ["done", "interrupted", "done"]
    );
    assert_eq!(nodes.lease().await.2, 2);
    let before = nodes.stored_rows().await;

    // A wakes: its turn goes on, and every write of it is refused; A drops its process.
    nodes.a.signal(Signal::SIGCONT);
    eventually(Duration::from_secs(30), "A's late write is refused", || {
        nodes.a.log_text().contains("lost the lease on thread")
    })
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", nodes.a.log_text()));
    eventually_async(Duration::from_secs(30), "A evicts its process", || async {
        nodes.a.cli_pids().await.is_empty() && a_clis.iter().all(|pid| !process_exists(*pid))
    })
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", nodes.a.log_text()));
    assert_eq!(nodes.stored_rows().await, before, "A wrote nothing");
    stop(nodes.a).await;
    stop(nodes.b).await;
    nodes.store.close().await;
}

/// `harness serve` as a node on the database at `url` with `token`; whether it refused to start,
/// and what it said. It gets 20 s, and is killed if it came up.
async fn refused_node(url: &str, token: Option<&str>) -> (bool, String) {
    let dir = temp_dir();
    let claude = tokio::task::spawn_blocking(harness_tests::cli::claude_bin)
        .await
        .expect("installer task")
        .expect("the claude CLI");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness"));
    command
        .arg("serve")
        .arg("--bind=127.0.0.1:0")
        .arg("--advertise=auto")
        .arg(format!("--db={url}"))
        .arg(format!("--data-dir={}", dir.path().display()))
        .arg(format!("--claude-bin={}", claude.display()))
        .env_remove("HARNESS_TOKEN")
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if let Some(token) = token {
        command.env("HARNESS_TOKEN", token);
    }
    let child = command.spawn().expect("harness runs");
    match tokio::time::timeout(Duration::from_secs(20), child.wait_with_output()).await {
        Ok(out) => {
            let out = out.expect("its output");
            (
                !out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
        Err(_) => (false, "it started".into()),
    }
}

/// A node whose token is not the cluster's refuses to start. Once, a node started without the
/// token joined, served every thread without asking for one, and was sent the cluster's token
/// with every request its peers forwarded to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_clusters_token_refuses_to_join() {
    let url = pg_test::database_url().await.expect("a test PostgreSQL");
    let mock = MockApi::start().await;
    let args = ["--advertise=auto", "--lease-ttl=2"];
    let with_token = |dir: &TempDir| {
        let launch = Launch {
            db: Some(&url),
            args: &args,
            env: &[("HARNESS_TOKEN", "the-cluster-secret")],
            ..Launch::with_grace(5)
        };
        let (dir, mock) = (dir.path().to_owned(), &mock);
        async move { Harness::start(&dir, mock, &launch).await }
    };
    let a_dir = temp_dir();
    let a = with_token(&a_dir).await;
    for token in [None, Some("another-secret")] {
        let (refused, said) = refused_node(&url, token).await;
        assert!(refused, "{token:?}: {said}");
        assert!(
            said.contains("not the one the cluster's nodes share"),
            "{token:?}: {said}"
        );
    }
    let b_dir = temp_dir();
    let b = with_token(&b_dir).await;
    let thread = a.client.create_thread().await;
    assert_echoed(&b, &thread, "through the peer").await;
    stop(a).await;
    stop(b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_threads_turn_cut_by_a_killed_owner_completes_on_the_peer_unasked() {
    let mut nodes = TwoNodes::start().await;
    let (status, created) = nodes
        .a
        .client
        .post("/api/threads", json!({"onInterrupt": "retry"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let thread = created["id"].as_str().expect("an id").to_owned();
    nodes.thread = thread.clone();
    assert_eq!(
        nodes.a.client.reply(&thread, HISTORY).await,
        format!("echo: {HISTORY}")
    );
    let hanging = nodes.kill_a_mid_turn().await;

    // Nobody asks B anything: its sweep finds the turn under A's expired lease, takes the
    // thread over (ending the turn as a takeover) and runs it again.
    let id = orchestrator::store::MessageId::from_string(&hanging);
    let store = &nodes.store;
    eventually_async(TTL + SPAWN_BOUND, "the cut turn completes on B", || async {
        store
            .get_message(&id)
            .await
            .ok()
            .flatten()
            .is_some_and(|m| m.status.as_str() == "done")
    })
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", nodes.b.log_text()));
    let causes: Vec<&str> = store
        .outcomes_of(&id)
        .await
        .unwrap()
        .iter()
        .map(|o| o.cause.as_str())
        .collect();
    assert_eq!(causes, ["takeover", "done"]);
    let (owner, _, epoch) = nodes.lease().await;
    assert_eq!((owner, epoch), (node_id(&nodes.b), 2));
    let messages = nodes.b.messages(&thread).await;
    let reply = messages
        .iter()
        .find(|m| m["replyTo"] == hanging.as_str())
        .expect("a reply");
    let text = reply["content"].as_str().unwrap_or_default();
    assert!(
        text.contains("another took the thread over") && text.ends_with(HANGING),
        "{text}"
    );
    let request = nodes
        .mock
        .message_requests()
        .last()
        .cloned()
        .expect("a request");
    assert!(
        request.all_text().contains(HISTORY),
        "the history reached the model on B: {}",
        request.all_text()
    );
    assert_eq!(messages.len(), 4, "each message once");

    stop(nodes.b).await;
    nodes.store.close().await;
}

/// The runs of schedule `id`, oldest first, read through `daemon`.
async fn schedule_runs(daemon: &Harness, id: &str) -> Vec<Value> {
    let mut runs = daemon
        .get_ok(&format!("/api/schedules/{id}/runs?limit=1000"))
        .await["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    runs.reverse();
    runs
}

/// Two real nodes share every tick of a schedule that makes a fresh thread per run, so either
/// may claim any tick: in a minute of ticks every 2 s, each runs once, none is missed, and every
/// run's turn ends. Paused, it runs no more; a manual run still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_every_two_seconds_runs_each_tick_once_on_two_nodes() {
    let nodes = TwoNodes::start().await;
    let (a, b) = (&nodes.a, &nodes.b);
    // `queue`: a run still going does not make the next tick skip.
    let (status, schedule) = a
        .client
        .post(
            "/api/schedules",
            json!({"cron": "*/2 * * * * *", "thread": {}, "prompt": "tick", "overlap": "queue"}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_str().expect("an id").to_owned();
    eventually_async(Duration::from_secs(90), "a minute of ticks", || async {
        schedule_runs(b, &id).await.len() >= 30
    })
    .await
    .unwrap();
    let (status, paused) = b
        .client
        .post(&format!("/api/schedules/{id}/pause"), json!(null))
        .await;
    assert_eq!(
        (status.as_u16(), paused["enabled"].clone()),
        (200, json!(false))
    );
    // A tick claimed just before the pause names its thread a moment after its claim.
    eventually_async(
        Duration::from_secs(30),
        "every run names its thread",
        || async {
            let runs = schedule_runs(a, &id).await;
            runs.iter().all(|r| r["threadId"].is_string())
        },
    )
    .await
    .unwrap();
    let runs = schedule_runs(a, &id).await;
    let ticks: Vec<chrono::DateTime<chrono::Utc>> = runs
        .iter()
        .map(|r| r["dueAt"].as_str().expect("dueAt").parse().expect("a time"))
        .collect();
    for pair in ticks.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            chrono::Duration::seconds(2),
            "each tick once, none missed: {runs:#?}"
        );
    }
    assert!(
        runs.iter()
            .all(|r| r["trigger"] == "cron" && r["status"] == "started"),
        "{runs:#?}"
    );
    let mut threads: Vec<&str> = runs.iter().filter_map(|r| r["threadId"].as_str()).collect();
    threads.sort_unstable();
    threads.dedup();
    assert_eq!(threads.len(), runs.len(), "a thread per run: {runs:#?}");
    let nodes_ids = [node_id(a), node_id(b)];
    assert!(runs
        .iter()
        .all(|r| nodes_ids.iter().any(|n| r["node"] == n.as_str())));
    eventually_async(Duration::from_secs(60), "every run's turn ends", || async {
        schedule_runs(a, &id)
            .await
            .iter()
            .all(|r| r["outcome"] == "done")
    })
    .await
    .unwrap();

    // Paused: ticks' times pass with no run (absence needs the time to pass); a manual run
    // through either node still runs.
    let count = schedule_runs(a, &id).await.len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        schedule_runs(a, &id).await.len(),
        count,
        "no run while paused"
    );
    let (status, started) = b
        .client
        .post(&format!("/api/schedules/{id}/run"), json!(null))
        .await;
    assert_eq!(status, 202, "{started}");
    let runs = schedule_runs(a, &id).await;
    assert_eq!(runs.len(), count + 1);
    assert_eq!(runs[count]["trigger"], "manual");
    assert_eq!(runs[count]["node"], node_id(b).as_str());
    nodes.store.close().await;
}
