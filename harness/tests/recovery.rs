//! Crash recovery with the real `harness` binary (a child process of the test, so it can be
//! SIGKILLed), the real `claude` CLI and the mock Messages API from `harness-tests`.
//!
//! - SIGKILL mid-turn: the CLI child dies with the daemon (parent-death signal), the SQLite file
//!   passes `PRAGMA integrity_check`, and after a restart on the same database the turn is
//!   `interrupted` with a reason, nothing is lost, and the thread goes on with its history.
//! - SIGTERM mid-turn: the daemon waits out the grace period, kills the CLI, marks the turn
//!   `interrupted`, and exits 0; no CLI process remains.

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use harness_tests::mock::MockApi;
use harness_tests::util::{eventually, eventually_async, process_exists};
use orchestrator::store::Store;
use support::{start_hanging_turn, Harness, Launch};

/// The turn of `message` ended once, for `cause`: one outcome, and the `turn_failed` it names.
async fn assert_ended_once(store: &Store, thread: &str, message: &str, cause: &str) {
    let id = orchestrator::store::MessageId::from_string(message);
    let outcomes = store.outcomes_of(&id).await.expect("outcomes readable");
    let causes: Vec<&str> = outcomes.iter().map(|o| o.cause.as_str()).collect();
    assert_eq!(causes, [cause], "{outcomes:?}");
    let thread = plugin_contract::ThreadId::from_string(thread);
    let events = store
        .events_after(&thread, 0, 1000)
        .await
        .expect("events readable");
    let ends: Vec<_> = events
        .iter()
        .filter(|e| e.message_id.as_ref() == Some(&id))
        .filter(|e| e.kind == "turn_failed" || e.kind == "turn_finished")
        .collect();
    assert_eq!(ends.len(), 1, "{events:?}");
    assert_eq!(ends[0].id, outcomes[0].event_id);
    assert_eq!(ends[0].data["cause"], cause, "{:?}", ends[0]);
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

    let hanging = start_hanging_turn(daemon, mock, &thread, "HANG-DURING-CRASH", "hang-1").await;
    let pids = daemon.cli_pids().await;
    assert_eq!(pids.len(), 1, "{pids:?}");
    (thread, hanging, pids[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_turn_recovers_on_restart() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut daemon = Harness::start(dir.path(), &mock, &Launch::with_grace(5)).await;
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

    let daemon = Harness::start(dir.path(), &mock, &Launch::with_grace(5)).await;
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
    // Ended at the start, like any turn: its outcome and its `turn_failed`.
    let store = Store::open(&db.to_string_lossy())
        .await
        .expect("the database opens");
    assert_ended_once(&store, &thread, &hanging, "crash").await;
    store.close().await;

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
    assert_eq!(daemon.cli_pids().await.len(), 1);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_turn_exits_0_within_the_grace_period_and_leaves_no_cli() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let grace = 2;
    let mut daemon = Harness::start(dir.path(), &mock, &Launch::with_grace(grace)).await;
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
    assert_ended_once(&store, &thread, &hanging, "shutdown").await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_at_once_without_waiting_out_the_grace_period() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    // A grace period no test would wait for.
    let mut daemon = Harness::start(dir.path(), &mock, &Launch::with_grace(3600)).await;
    let (thread, hanging, cli) = thread_with_a_hanging_turn(&daemon, &mock).await;

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
    assert_ended_once(&store, &thread, &hanging, "shutdown").await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_and_unrelated_secrets_never_reach_a_cli_child() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let token = "t0ken-from-the-environment";
    let env = [
        ("HARNESS_TOKEN", token),
        ("DATABASE_PASSWORD", "hunter2"),
        ("LC_ALL", "C.UTF-8"),
    ];
    let launch = Launch {
        env: &env,
        ..Launch::with_grace(5)
    };
    let mut daemon = Harness::start(dir.path(), &mock, &launch).await;

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

/// Creates a thread whose cut turns run again (`onInterrupt: "retry"`).
async fn retry_thread(daemon: &Harness) -> String {
    let (status, created) = daemon
        .client
        .post("/api/threads", json!({"onInterrupt": "retry"}))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["onInterrupt"], "retry");
    created["id"].as_str().expect("an id").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_threads_turn_killed_mid_way_completes_after_restart_with_no_new_request() {
    let mock = MockApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut daemon = Harness::start(dir.path(), &mock, &Launch::with_grace(5)).await;
    let thread = retry_thread(&daemon).await;
    assert_eq!(
        daemon
            .client
            .reply(&thread, "remember the word quince")
            .await,
        "echo: remember the word quince"
    );
    let hanging = start_hanging_turn(&daemon, &mock, &thread, "HANG-THEN-REDRIVE", "hang-1").await;
    // A message waiting behind it, and a thread of the default policy with a turn cut too.
    let (status, queued) = daemon
        .client
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": "QUEUED-BEHIND-IT"}),
        )
        .await;
    assert_eq!(status, 202, "{queued}");
    let queued = queued["messageId"].as_str().expect("an id").to_owned();
    let marked = daemon.client.create_thread().await;
    let marked_hanging =
        start_hanging_turn(&daemon, &mock, &marked, "HANG-AND-STAY-CUT", "hang-2").await;

    daemon.signal(Signal::SIGKILL);
    daemon.wait_exit(Duration::from_secs(10)).await;
    let daemon = Harness::start(dir.path(), &mock, &Launch::with_grace(5)).await;

    // Nobody sends anything: the cut turn runs again, then the one behind it, in that order.
    let db = dir.path().join("harness.db");
    let store = Store::open(&db.to_string_lossy())
        .await
        .expect("the database opens");
    let status_of = |id: &str| {
        let (store, id) = (&store, orchestrator::store::MessageId::from_string(id));
        async move {
            let row = store.get_message(&id).await.expect("readable");
            row.map(|m| m.status.as_str().to_owned())
                .unwrap_or_default()
        }
    };
    eventually_async(Duration::from_secs(60), "both turns finish", || async {
        status_of(&hanging).await == "done" && status_of(&queued).await == "done"
    })
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", daemon.log_text()));
    let messages = daemon.messages(&thread).await;
    let contents: Vec<&str> = messages
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(contents.len(), 6, "{contents:?}");
    assert_eq!(contents[2], "HANG-THEN-REDRIVE", "the message as sent");
    assert_eq!(contents[3], "QUEUED-BEHIND-IT");
    let redriven = contents[4];
    assert!(
        redriven.starts_with("echo: [Harness: your previous attempt")
            && redriven.contains("stopped unexpectedly")
            && redriven.ends_with("HANG-THEN-REDRIVE"),
        "the model was told, and got the message: {redriven}"
    );
    assert_eq!(contents[5], "echo: QUEUED-BEHIND-IT", "in order");
    assert_eq!(messages[4]["replyTo"], hanging.as_str());

    // Each run is on record: cut by the crash, then done; and the events say so.
    let id = orchestrator::store::MessageId::from_string(&hanging);
    let causes: Vec<&str> = store
        .outcomes_of(&id)
        .await
        .unwrap()
        .iter()
        .map(|o| o.cause.as_str())
        .collect();
    assert_eq!(causes, ["crash", "done"]);
    let events = store
        .events_after(&plugin_contract::ThreadId::from_string(&thread), 0, 1000)
        .await
        .unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .filter(|e| e.message_id.as_ref() == Some(&id))
        .map(|e| e.kind.as_str())
        .filter(|k| k.starts_with("turn_"))
        .collect();
    assert_eq!(
        kinds,
        [
            "turn_started",
            "turn_failed",
            "turn_redriven",
            "turn_started",
            "turn_finished"
        ]
    );
    let redrive = events.iter().find(|e| e.kind == "turn_redriven").unwrap();
    assert_eq!(redrive.data["attempt"], 2);
    assert_eq!(redrive.data["cause"], "crash");
    let (status, outcomes) = daemon
        .client
        .get(&format!(
            "/api/threads/{thread}/messages/{hanging}/outcomes"
        ))
        .await;
    assert_eq!(status, 200, "{outcomes}");
    assert_eq!(outcomes["outcomes"][0]["cause"], "crash");
    assert_eq!(outcomes["outcomes"][1]["cause"], "done");

    // The default thread's turn stays cut, for its client to send again.
    let marked_id = orchestrator::store::MessageId::from_string(&marked_hanging);
    let left = store.get_message(&marked_id).await.unwrap().expect("kept");
    assert_eq!(left.status.as_str(), "interrupted");
    assert_ended_once(&store, &marked, &marked_hanging, "crash").await;
    store.close().await;
    daemon.stop().await;
}
