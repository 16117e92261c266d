//! The warm pool: keyed by thread, reused across turns, bounded, and it never leaks a process.

use std::time::Duration;

use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::{eventually, process_exists};

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_turns_on_one_thread_use_one_process_and_carry_history() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;

    assert_eq!(
        daemon.reply(&thread, "first question").await,
        "echo: first question"
    );
    let pid = daemon.pid_of(&thread).expect("a live process after turn 1");
    assert_eq!(
        daemon.reply(&thread, "second question").await,
        "echo: second question"
    );

    assert_eq!(daemon.spawns(), 1, "turn 2 must reuse turn 1's process");
    assert_eq!(daemon.pid_of(&thread), Some(pid));
    let requests = mock.message_requests();
    let last = requests.last().expect("the mock saw requests");
    assert!(
        last.all_text().contains("first question"),
        "turn 2 carries turn 1: {}",
        last.all_text()
    );
    assert!(last.all_text().contains("echo: first question"));
    daemon.stop().await;
    assert!(!process_exists(pid), "shutdown kills and reaps the process");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_then_first_message_spawns_nothing_new() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;

    let (status, body) = daemon
        .post("/api/prewarm", json!({"threadId": thread}))
        .await;
    assert_eq!(status, 202, "{body}");
    eventually(
        Duration::from_secs(30),
        "the prewarmed process is live",
        || daemon.pid_of(&thread).is_some(),
    )
    .await
    .unwrap();
    let pid = daemon.pid_of(&thread).unwrap();
    assert!(mock.message_requests().is_empty(), "prewarm sends no turn");

    assert_eq!(
        daemon.reply(&thread, "hello after prewarm").await,
        "echo: hello after prewarm"
    );
    assert_eq!(daemon.spawns(), 1);
    assert_eq!(
        daemon.pid_of(&thread),
        Some(pid),
        "the turn ran on the prewarmed process"
    );
    assert_eq!(daemon.counts().prewarms, 1);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_racing_the_first_message_starts_one_process() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let (prewarm, reply) = tokio::join!(
        daemon.post("/api/prewarm", json!({"threadId": thread})),
        daemon.reply(&thread, "race")
    );
    assert_eq!(prewarm.0, 202);
    assert_eq!(reply, "echo: race");
    assert_eq!(daemon.spawns(), 1, "single-flight creation");
    assert_eq!(daemon.live_pids().len(), 1);
    // The prewarm runs on in the background after its 202, and a stray second spawn would come
    // from it. Nothing observable says "this prewarm is done" (a prewarm that waited on the
    // turn's spawn counts neither a hit nor a miss), but a graceful stop waits for every
    // background task, the prewarm's included: once it returns, the counts are final.
    let pool = daemon.daemon().pool.clone();
    tokio::time::timeout(Duration::from_secs(30), daemon.stop())
        .await
        .expect("the daemon stops");
    let counts = pool.counts();
    assert_eq!(counts.prewarms, 1, "the prewarm ran");
    assert_eq!(
        counts.spawns, 1,
        "single-flight creation, the prewarm done too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_threads_get_two_processes() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let a = daemon.create_thread().await;
    let b = daemon.create_thread().await;
    let (ra, rb) = tokio::join!(daemon.reply(&a, "to a"), daemon.reply(&b, "to b"));
    assert_eq!((ra.as_str(), rb.as_str()), ("echo: to a", "echo: to b"));
    let (pa, pb) = (daemon.pid_of(&a).unwrap(), daemon.pid_of(&b).unwrap());
    assert_ne!(pa, pb);
    assert_eq!(daemon.spawns(), 2);
    daemon.stop().await;
    assert!(!process_exists(pa) && !process_exists(pb));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_cli_session_id_still_hits_the_warm_process() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "one").await;
    // The CLI's session id is data, not a key: even if it changes, the thread's process is reused.
    let id = plugin_contract::ThreadId::from_string(&thread);
    let other = plugin_contract::CliSessionId::from_string(uuid::Uuid::new_v4().to_string());
    daemon
        .daemon()
        .store
        .set_cli_session(&id, Some(&other))
        .await
        .unwrap();
    daemon.reply(&thread, "two").await;
    assert_eq!(daemon.spawns(), 1);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_expiry_kills_the_process() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.pool.idle_ttl = Duration::from_secs(2)).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "short lived").await;
    let pid = daemon.pid_of(&thread).unwrap();
    eventually(
        Duration::from_secs(20),
        "the idle process is killed",
        || !process_exists(pid),
    )
    .await
    .unwrap();
    assert!(daemon.counts().evictions.expired >= 1);
    // The thread still works: a new process resumes the session.
    assert_eq!(
        daemon.reply(&thread, "after expiry").await,
        "echo: after expiry"
    );
    assert!(mock
        .message_requests()
        .last()
        .unwrap()
        .all_text()
        .contains("short lived"));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_pushes_out_the_idle_process_to_make_room() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.pool.max_capacity = 1).await;
    let first = daemon.create_thread().await;
    daemon.reply(&first, "first thread").await;
    let first_pid = daemon.pid_of(&first).unwrap();
    let second = daemon.create_thread().await;
    daemon.reply(&second, "second thread").await;
    assert!(
        !process_exists(first_pid),
        "the first process was pushed out and reaped"
    );
    assert_eq!(daemon.live_pids().len(), 1, "capacity 1 holds");
    assert_eq!(daemon.counts().evictions.capacity, 1);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_change_switches_the_warm_process_in_place() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "on the default model").await;
    let pid = daemon.pid_of(&thread).unwrap();
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/messages"),
            json!({"content": "on another", "model": "claude-other-1"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(daemon.pid_of(&thread), Some(pid), "the same process");
    assert_eq!(daemon.spawns(), 1);
    assert_eq!(daemon.counts().model_switches, 1);
    let turn = mock
        .message_requests()
        .into_iter()
        .rfind(|r| r.last_user_text().contains("on another"))
        .expect("the turn reached the API");
    assert_eq!(turn.model(), Some("claude-other-1"));
    assert!(
        turn.all_text().contains("on the default model"),
        "the session goes on: {}",
        turn.all_text()
    );
    let (_, pool) = daemon.get("/api/pool").await;
    assert_eq!(pool["processes"][0]["model"], "claude-other-1", "{pool}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_the_cli_refuses_to_switch_to_gets_a_new_process() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "on the default model").await;
    let old = daemon.pid_of(&thread).unwrap();
    // `set_model` first sends the new model a one-token "Hi"; a 404 makes the CLI refuse.
    mock.once_when_prompt_contains("Hi", Reply::error(404));
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/messages"),
            json!({"content": "on a refused model", "model": "claude-refused-404"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !process_exists(old),
        "the old process is killed before the new one starts"
    );
    let new = daemon.pid_of(&thread).unwrap();
    assert_ne!(old, new);
    assert_eq!(daemon.counts().model_switches, 0);
    assert_eq!(daemon.counts().evictions.replaced, 1);
    let last = mock.message_requests().last().unwrap().clone();
    assert_eq!(last.model(), Some("claude-refused-404"));
    assert!(
        last.all_text().contains("on the default model"),
        "history survives the switch (resume)"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_commands_are_sent_as_text() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "remember me").await;
    let (_, first) = daemon.get(&format!("/api/threads/{thread}")).await;
    let session = first["cliSessionId"].clone();
    assert_eq!(
        daemon.reply(&thread, "/clear").await,
        "echo: /clear",
        "the model got /clear as text"
    );
    let (_, after) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(
        after["cliSessionId"], session,
        "the CLI session did not switch"
    );
    assert!(
        mock.message_requests()
            .last()
            .unwrap()
            .all_text()
            .contains("remember me"),
        "history kept"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lean_profile_starts_the_cli_without_its_optional_features() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.profile = orchestrator::config::Profile::Lean;
        c.claude.builtin_tools = None;
    })
    .await;
    let thread = daemon.create_thread().await;
    assert_eq!(daemon.reply(&thread, "lean turn").await, "echo: lean turn");
    let pid = daemon.pid_of(&thread).expect("a process");

    let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
        .expect("the process's argv")
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert!(
        !argv.iter().any(|a| a == "--include-partial-messages"),
        "{argv:?}"
    );
    assert!(
        argv.iter().any(|a| a == "--tools="),
        "no built-in tools: {argv:?}"
    );
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("the process's env");
    let environ = String::from_utf8_lossy(&environ);
    for switch in orchestrator::launch::LEAN_SWITCHES {
        assert!(
            environ.split('\0').any(|kv| kv == format!("{switch}=1")),
            "{switch} is not set"
        );
    }

    // Whole messages only: the reply is there, token deltas are not.
    let kinds: Vec<String> = support::stored_events(&daemon, &thread)
        .await
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.iter().any(|k| k == "assistant_text"), "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "text_delta"), "{kinds:?}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_every_task_of_every_process() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "one turn").await;
    // The process stays in the pool's cache: its tasks must end with it all the same.
    assert!(
        daemon.daemon().pool.shutdown().await,
        "a task of a killed process was still running"
    );
    daemon.stop().await;
}

/// `set_permission_mode` on the warm process for one turn, and back for the next: the CLI says
/// so to the model ("Plan mode is active", then "Exited Plan Mode").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_mode_switches_the_warm_process_in_place_and_back() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let path = format!("/api/threads/{thread}/messages");
    daemon.reply(&thread, "as usual").await;
    let pid = daemon.pid_of(&thread).unwrap();
    let (status, body) = daemon
        .post(
            &path,
            json!({"content": "only plan this", "permissionMode": "plan"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    daemon.reply(&thread, "back to work").await;
    assert_eq!(daemon.pid_of(&thread), Some(pid), "the same process");
    assert_eq!(daemon.spawns(), 1);
    let turn = |said: &str| {
        mock.message_requests()
            .into_iter()
            .rfind(|r| r.last_user_text().contains(said))
            .expect("the turn reached the API")
            .all_text()
    };
    assert!(!turn("as usual").contains("Plan mode is active"));
    let planned = turn("only plan this");
    assert!(planned.contains("Plan mode is active"), "{planned}");
    let back = turn("back to work");
    assert!(back.contains("Exited Plan Mode"), "{back}");

    // Narrower only: the default profile runs in `default`.
    for (mode, says) in [
        ("bypassPermissions", "would let the model do more"),
        ("acceptEdits", "would let the model do more"),
        ("yolo", "is not a permission mode"),
    ] {
        let (status, body) = daemon
            .post(&path, json!({"content": "x", "permissionMode": mode}))
            .await;
        assert_eq!(status, 422, "{mode}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{mode}: {message}");
    }
    daemon.stop().await;
}

/// `pool.max_memory_mb` bounds the processes by their private memory: with room for one, a
/// second thread's process pushes out the first thread's idle one (counted as `memory`), though
/// `max_capacity` has slots to spare; the first thread's next turn takes its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_memory_bounds_the_pool_when_set() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |config| {
        config.pool.max_capacity = 8;
        // Less than any one process holds: one process at a time, and one always may start.
        config.pool.max_memory_mb = Some(1);
    })
    .await;
    let first = daemon.create_thread().await;
    daemon.reply(&first, "one").await;
    let first_pid = daemon.pid_of(&first).expect("the first thread's process");
    let second = daemon.create_thread().await;
    daemon.reply(&second, "two").await;
    assert!(daemon.pid_of(&second).is_some());
    eventually(Duration::from_secs(10), "the first process gone", || {
        !process_exists(first_pid)
    })
    .await
    .unwrap();
    assert_eq!(daemon.pid_of(&first), None);
    assert_eq!(daemon.live_pids().len(), 1);
    let metrics = crate::metrics::scrape(&daemon).await;
    let by_memory = r#"harness_pool_evictions_total{cause="memory"}"#;
    assert_eq!(
        crate::metrics::value(&metrics, by_memory),
        Some(1.0),
        "{metrics}"
    );
    let by_capacity = r#"harness_pool_evictions_total{cause="capacity"}"#;
    assert_eq!(crate::metrics::value(&metrics, by_capacity), Some(0.0));
    // The first thread comes back (its session resumed) and pushes the second out in turn.
    assert_eq!(daemon.reply(&first, "again").await, "echo: again");
    assert_eq!(daemon.live_pids().len(), 1);
    daemon.stop().await;
}
