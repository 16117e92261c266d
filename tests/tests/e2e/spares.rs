//! Parked spares (`pool.spares`): a new thread takes one as its process instead of spawning at its
//! first turn, a replacement is parked, the session takes the thread's model and lives in the
//! thread's folder, a spare that does not answer is dropped, and shutdown kills them and removes
//! their folders. Worktree spares (`pool.workspace_spares`): a new worktree thread of a profile
//! on a repository takes the spare parked in a worktree there, on its base only.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::git::{git, repository};
use harness_tests::mock::MockApi;
use harness_tests::util::{eventually, eventually_async, process_exists};

/// The parked spares, from `/api/pool`.
pub(crate) async fn spares(daemon: &TestDaemon) -> Vec<Value> {
    let (status, pool) = daemon.get("/api/pool").await;
    assert_eq!(status, StatusCode::OK, "{pool}");
    let processes = pool["processes"].as_array().into_iter().flatten();
    processes.filter(|p| p["spare"] == true).cloned().collect()
}

/// The pids of the parked spares.
async fn spare_pids(daemon: &TestDaemon) -> Vec<u64> {
    let parked = spares(daemon).await;
    parked.iter().filter_map(|p| p["pid"].as_u64()).collect()
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

    // The session lives in the thread's own project folder, in its own config dir.
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    let session = body["cliSessionId"].as_str().expect("a session").to_owned();
    let projects = daemon
        .config
        .claude_config_dir()
        .join("threads")
        .join(&thread)
        .join("projects");
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

/// The one parked spare once it is parked and none other is: its reserved thread id and pid.
async fn the_spare(daemon: &TestDaemon, not: Option<u64>) -> (String, u64) {
    let one_new = |parked: &[Value]| match parked {
        [one] if one["pid"].as_u64() != not => Some((
            one["threadId"].as_str().expect("an id").to_owned(),
            one["pid"].as_u64().expect("a pid"),
        )),
        _ => None,
    };
    eventually_async(
        Duration::from_secs(60),
        "one new spare is parked",
        || async { one_new(&spares(daemon).await).is_some() },
    )
    .await
    .expect("a spare is parked");
    one_new(&spares(daemon).await).expect("a spare")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_thread_takes_the_spare_parked_on_its_repository_and_base() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let root = dir.path().canonicalize().expect("it resolves").join("root");
    let repo = repository(&root.join("app"));
    let mock = MockApi::start().await;
    let roots = vec![root.clone()];
    let daemon = TestDaemon::start(&mock, move |c| {
        c.workspaces.roots = roots;
        c.pool.workspace_spares = 1;
        c.profiles.insert("reviewer".into(), Default::default());
    })
    .await;
    let on_repo = json!({"workspace": {"repo": repo, "worktree": true}});
    let (status, first) = daemon.post("/api/threads", on_repo.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");

    // The pair (standard, app) now keeps a spare, in a worktree at HEAD on the branch its
    // thread will have.
    let (spare_id, spare_pid) = the_spare(&daemon, None).await;
    let parked = daemon.config.worktrees_dir().join(&spare_id);
    assert_eq!(
        git(&parked, &["rev-parse", "HEAD"]),
        git(&repo, &["rev-parse", "HEAD"])
    );
    let branches = git(&repo, &["branch", "--list", "harness/*"]);
    assert_eq!(
        branches.lines().count(),
        2,
        "the first thread's and the spare's: {branches}"
    );

    // The next thread of the pair does: its id, its worktree, its branch.
    let (status, second) = daemon.post("/api/threads", on_repo.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(second["id"], spare_id.as_str(), "{second}");
    assert_eq!(second["workspace"]["path"], parked.to_str().unwrap());
    let branch = format!("harness/{spare_id}");
    assert_eq!(second["workspace"]["branch"], branch.as_str());
    assert_eq!(
        git(&parked, &["symbolic-ref", "--short", "HEAD"]).trim(),
        branch
    );
    assert_eq!(
        daemon.reply(&spare_id, "first turn on the spare").await,
        "echo: first turn on the spare"
    );
    assert_eq!(
        daemon.pid_of(&spare_id),
        Some(spare_pid as u32),
        "a warm first turn"
    );
    let cwd = std::fs::read_link(format!("/proc/{spare_pid}/cwd")).unwrap();
    assert_eq!(cwd, parked);
    let context = mock
        .message_requests()
        .last()
        .expect("a request")
        .all_text();
    assert!(
        context.contains(&format!("Current branch: {branch}")),
        "the model sees the thread's branch: {context}"
    );

    // A thread that names its own branch makes its worktree: the spare's branch is not its.
    let (_, replacement) = the_spare(&daemon, Some(spare_pid)).await;
    let (status, named) = daemon
        .post(
            "/api/threads",
            json!({"workspace": {"repo": repo, "worktree": true, "branch": "fix/login"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{named}");
    assert_eq!(named["workspace"]["branch"], "fix/login");
    assert_eq!(spare_pids(&daemon).await, vec![replacement], "still parked");

    // The repository moves on: the spare parked meanwhile is on the old commit and fits no
    // thread; the next thread gets a worktree of its own, and the pair a spare on the new base.
    std::fs::write(repo.join("CHANGES.md"), "more\n").unwrap();
    git(&repo, &["add", "CHANGES.md"]);
    git(&repo, &["commit", "--quiet", "-m", "second"]);
    let (status, third) = daemon.post("/api/threads", on_repo).await;
    assert_eq!(status, StatusCode::CREATED, "{third}");
    let third_path = PathBuf::from(third["workspace"]["path"].as_str().unwrap());
    assert!(third_path.join("CHANGES.md").is_file(), "on the new base");
    eventually(Duration::from_secs(10), "the stale spare is killed", || {
        !process_exists(replacement as u32)
    })
    .await
    .unwrap();
    let (fresh_id, fresh_pid) = the_spare(&daemon, Some(replacement)).await;
    let fresh = daemon.config.worktrees_dir().join(&fresh_id);
    assert!(
        fresh.join("CHANGES.md").is_file(),
        "the new spare is on the new base"
    );

    // Another profile's thread on the repository does not take it; with one pair kept
    // (`workspace_spares = 1`), the new pair's spare replaces the old pair's.
    let (status, other) = daemon
        .post(
            "/api/threads",
            json!({"profile": "reviewer", "workspace": {"repo": repo, "worktree": true}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{other}");
    assert_ne!(other["id"], fresh_id.as_str());
    let (reviewers_id, _) = the_spare(&daemon, Some(fresh_pid)).await;
    assert!(!process_exists(fresh_pid as u32));
    let reviewers = daemon.config.worktrees_dir().join(&reviewers_id);
    daemon.stop().await;
    assert!(
        !fresh.exists() && !reviewers.exists(),
        "an unused spare's worktree is removed"
    );
    let listed = git(&repo, &["worktree", "list", "--porcelain"]);
    assert!(!listed.contains(&reviewers_id), "and its record: {listed}");
    let branches = git(&repo, &["branch", "--list", "harness/*"]);
    assert!(
        !branches.contains(&reviewers_id),
        "and its branch: {branches}"
    );
}

/// Spares follow demand: after a burst of four new threads at once (one spare parked), four are
/// parked for the next burst, which takes them all, each thread's first turn then on a process
/// that was already running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_new_threads_leaves_a_spare_for_each_next_time() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.pool.spares = 1;
        c.pool.max_capacity = 16;
    })
    .await;
    eventually(Duration::from_secs(60), "one spare parked", || {
        daemon.counts().spares_parked == 1
    })
    .await
    .unwrap();
    let burst = || futures::future::join_all((0..4).map(|_| daemon.create_thread()));
    let first = burst().await;
    assert_eq!(first.len(), 4);
    eventually(Duration::from_secs(90), "four spares parked", || {
        daemon.counts().spares_parked == 4
    })
    .await
    .unwrap();
    let parked = spare_pids(&daemon).await;
    let second = burst().await;
    for thread in &second {
        assert_eq!(daemon.reply(thread, "hi").await, "echo: hi");
    }
    let taken: Vec<u64> = second
        .iter()
        .filter_map(|t| daemon.pid_of(t).map(u64::from))
        .collect();
    // Each first turn ran on a process parked before the burst: none spawned one.
    assert_eq!(taken.len(), 4);
    assert!(
        taken.iter().all(|pid| parked.contains(pid)),
        "{taken:?} from {parked:?}"
    );
    daemon.stop().await;
}
