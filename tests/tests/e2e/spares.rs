//! Parked spares (`pool.spares`): a new thread takes one as its process instead of spawning at its
//! first turn, a replacement is parked, the session takes the thread's model and lives in the
//! thread's folder, a spare that does not answer is dropped, and shutdown kills them and removes
//! their folders.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::{eventually, eventually_async, process_exists};

/// The pids of the parked spares, from `/api/pool`.
async fn spare_pids(daemon: &TestDaemon) -> Vec<u64> {
    let (status, pool) = daemon.get("/api/pool").await;
    assert_eq!(status, StatusCode::OK, "{pool}");
    pool["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["spare"] == true)
        .filter_map(|p| p["pid"].as_u64())
        .collect()
}

async fn one_parked_spare(daemon: &TestDaemon) -> u64 {
    eventually_async(Duration::from_secs(60), "a spare is parked", || async {
        spare_pids(daemon).await.len() == 1
    })
    .await
    .expect("a spare is parked");
    assert_eq!(daemon.counts().spares_parked, 1);
    spare_pids(daemon).await[0]
}

async fn with_spares(mock: &MockApi) -> TestDaemon {
    TestDaemon::start(mock, |c| c.pool.spares = 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_threads_first_turn_runs_on_the_parked_spare_and_a_new_one_is_parked() {
    let mock = MockApi::start().await;
    let daemon = with_spares(&mock).await;
    let spare = one_parked_spare(&daemon).await;

    let thread = daemon.create_thread().await;
    assert_eq!(
        daemon.reply(&thread, "first of the thread").await,
        "echo: first of the thread"
    );
    assert_eq!(
        daemon.pid_of(&thread),
        Some(spare as u32),
        "the turn ran on the spare"
    );
    assert_eq!(daemon.counts().spares_claimed, 1);

    // A replacement is parked, and the thread stays on its process.
    eventually_async(Duration::from_secs(60), "a new spare is parked", || async {
        spare_pids(&daemon).await.iter().any(|pid| *pid != spare)
    })
    .await
    .unwrap();
    let reply = daemon.reply(&thread, "second of the thread").await;
    assert!(reply.ends_with("second of the thread"), "{reply}");
    assert_eq!(daemon.pid_of(&thread), Some(spare as u32));
    let second = mock.message_requests().last().cloned().expect("a request");
    assert!(
        second.all_text().contains("first of the thread"),
        "one session"
    );

    // The session lives in the thread's own project folder.
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    let session = body["cliSessionId"].as_str().expect("a session").to_owned();
    let projects = daemon.config.claude_config_dir().join("projects");
    let project = std::fs::read_dir(&projects)
        .expect("projects")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|dir| dir.join(format!("{session}.jsonl")).exists())
        .expect("the transcript");
    let key = project.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        key.ends_with(&thread.replace('_', "-")),
        "the transcript is under the thread's folder's key: {key}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_on_another_model_leaves_the_spare_parked() {
    // `set_model` on a fresh process sends the model a probe (a paid request): a spare runs the
    // default model, and a thread created with another one starts its own process instead.
    let mock = MockApi::start().await;
    let daemon = with_spares(&mock).await;
    let spare = one_parked_spare(&daemon).await;
    let (status, created) = daemon
        .post("/api/threads", json!({"model": "claude-spare-model"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let thread = created["id"].as_str().unwrap().to_owned();
    daemon.reply(&thread, "on the thread's model").await;
    assert_ne!(daemon.pid_of(&thread), Some(spare as u32));
    assert_eq!(
        spare_pids(&daemon).await,
        vec![spare],
        "the spare is still parked"
    );
    let requests = mock.message_requests();
    assert_eq!(
        requests.len(),
        1,
        "no probe of the model: {:?}",
        requests
            .iter()
            .map(|r| r.last_user_text())
            .collect::<Vec<_>>()
    );
    assert_eq!(requests[0].model(), Some("claude-spare-model"));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spares_are_killed_on_shutdown() {
    let mock = MockApi::start().await;
    let daemon = with_spares(&mock).await;
    let spare = one_parked_spare(&daemon).await;
    let (_, pool) = daemon.get("/api/pool").await;
    let parked: Vec<Value> = pool["processes"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        parked.len(),
        1,
        "the spare counts as a live process: {pool}"
    );
    let folder = daemon.config.claude_workdir().join(
        parked[0]["threadId"]
            .as_str()
            .expect("a reserved thread id"),
    );
    assert!(folder.is_dir(), "the spare works in its thread's folder");
    daemon.stop().await;
    assert!(
        !process_exists(spare as u32),
        "the spare outlived the daemon"
    );
    assert!(!folder.exists(), "the unused spare's folder is removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_that_does_not_answer_is_dropped_and_the_turn_starts_cold() {
    let mock = MockApi::start().await;
    let daemon = with_spares(&mock).await;
    let spare = one_parked_spare(&daemon).await;
    // Frozen: it will never answer.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spare as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .expect("stop the spare");
    let thread = daemon.create_thread().await;
    assert_eq!(
        daemon.reply(&thread, "served all the same").await,
        "echo: served all the same"
    );
    let pid = daemon.pid_of(&thread).expect("a process");
    assert_ne!(u64::from(pid), spare, "a process of its own");
    eventually(
        Duration::from_secs(10),
        "the frozen spare is killed",
        || !process_exists(spare as u32),
    )
    .await
    .unwrap();
    let counts = daemon.counts();
    // The thread started its own process, or took a replacement spare parked in the meantime.
    assert_eq!(counts.spare_failures, 1);
    let metrics = reqwest::get(format!("{}/metrics", daemon.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = r#"harness_pool_spare_failures_total{reason="no_answer"} 1"#;
    assert!(metrics.lines().any(|l| l == series), "{metrics}");
    daemon.stop().await;
}
