//! Start-up failures as values (CLI 2.1.332's `startup_failure_reason`): each reason is an error
//! of its own kind (the caller's folder 409, the operator's file 500, a policy 403), counted in
//! `/metrics`, never retried in a loop; and the permission mode in effect when managed settings
//! narrow the one asked for.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::git::repository;
use harness_tests::mock::MockApi;
use harness_tests::util::eventually_async;
use nix::sys::signal::Signal;

use crate::metrics::{scrape, value};
use crate::support::{signal, stored_events};

/// `harness_cli_startup_failures_total` for `reason` (of `class`), 0 when absent.
async fn startup_failures(daemon: &TestDaemon, reason: &str, class: &str) -> f64 {
    let series =
        format!(r#"harness_cli_startup_failures_total{{reason="{reason}",class="{class}"}}"#);
    value(&scrape(daemon).await, &series).unwrap_or(0.0)
}

/// The CLI's global config file in `thread`'s own config dir, written by its first process.
fn global_config_of(daemon: &TestDaemon, thread: &str) -> PathBuf {
    let threads = daemon.config.claude_config_dir().join("threads");
    find_file(&threads, thread, ".claude.json").expect("the thread's .claude.json")
}

/// The file `name` in a folder (under `root`) whose path names `thread`.
fn find_file(root: &Path, thread: &str, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.to_string_lossy().contains(thread) && path.join(name).is_file() {
                return Some(path.join(name));
            }
            if let Some(found) = find_file(&path, thread, name) {
                return Some(found);
            }
        }
    }
    None
}

/// The thread's process killed and known gone to the pool.
async fn kill_process_of(daemon: &TestDaemon, thread: &str) {
    let pid = daemon.pid_of(thread).expect("a warm process");
    signal(pid, Signal::SIGKILL);
    eventually_async(Duration::from_secs(10), "the process is gone", || async {
        daemon.pid_of(thread).is_none()
    })
    .await
    .expect("the pool saw it exit");
}

/// A corrupted `.claude.json` refuses every start of the thread's processes
/// (`config_file_invalid`): the operator's 500, naming the file; one spawn, not a retry; and
/// the next message works once the file is mended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_config_file_is_the_operators_error_naming_the_file_and_is_not_retried() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "first").await;
    let config = global_config_of(&daemon, &thread);
    kill_process_of(&daemon, &thread).await;
    std::fs::write(&config, "{ not json").unwrap();
    let spawns = daemon.spawns();

    let (status, body) = daemon.send(&thread, "second").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["error"]["code"], "cli_misconfigured", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("config_file_invalid"), "{message}");
    assert!(
        message.contains(config.to_str().unwrap()),
        "the file is named: {message}"
    );
    assert_eq!(daemon.spawns(), spawns + 1, "one start, not retried");
    assert_eq!(
        startup_failures(&daemon, "config_file_invalid", "operator").await,
        1.0
    );

    std::fs::write(&config, "{}").unwrap();
    assert_eq!(daemon.reply(&thread, "third").await, "echo: third");
    daemon.stop().await;
}

/// Managed settings that forbid side-loaded plugins (`disableSideloadFlags`, delivered in
/// `initialize` by `claude.managed_settings`) refuse a profile that ships `plugin_dirs`: a 403
/// naming the policy, one start each time; the daemon's other profiles run as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_refusal_is_a_403_and_other_profiles_still_run() {
    let plugin = tempfile::tempdir().unwrap();
    let root = plugin.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join(".claude-plugin")).unwrap();
    std::fs::write(
        root.join(".claude-plugin/plugin.json"),
        r#"{"name": "helpers", "version": "1.0.0"}"#,
    )
    .unwrap();
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, move |c| {
        let policy = json!({"disableSideloadFlags": true});
        c.claude.managed_settings = policy.as_object().cloned();
        c.profiles.insert(
            "plugged".into(),
            orchestrator::config::ProfileConfig {
                plugin_dirs: vec![root],
                ..Default::default()
            },
        );
    })
    .await;
    let (_, plugged) = daemon
        .post("/api/threads", json!({"profile": "plugged"}))
        .await;
    let plugged = plugged["id"].as_str().unwrap().to_owned();
    for attempt in 1..=2 {
        let spawns = daemon.spawns();
        let (status, body) = daemon.send(&plugged, "hello").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["error"]["code"], "cli_policy_refused", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("sideload_flags_disabled"), "{message}");
        assert!(message.contains("disableSideloadFlags"), "{message}");
        assert_eq!(daemon.spawns(), spawns + 1, "one start per message");
        assert_eq!(
            startup_failures(&daemon, "sideload_flags_disabled", "policy").await,
            f64::from(attempt)
        );
    }
    let plain = daemon.create_thread().await;
    assert_eq!(daemon.reply(&plain, "still fine").await, "echo: still fine");
    daemon.stop().await;
}

/// A spare the CLI refuses to start (`bypassPermissions` as root: `bypass_root`) is not started
/// again every `SPARE_RETRY`: spares are held, `/api/pool` says why, and a message gets the 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_that_cannot_start_is_held_not_respawned() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the e2e tests run as root (their support installs packages); bypass_root needs it"
    );
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.pool.spares = 1;
        c.claude.permission_mode = Some("bypassPermissions".into());
    })
    .await;
    let held = eventually_async(Duration::from_secs(30), "spares held", || async {
        let (_, pool) = daemon.get("/api/pool").await;
        pool["sparesHeld"].is_string()
    })
    .await;
    held.expect("the failed spare holds the others back");
    let (_, pool) = daemon.get("/api/pool").await;
    let why = pool["sparesHeld"].as_str().unwrap();
    assert!(why.contains("bypass_root"), "{why}");
    assert_eq!(
        startup_failures(&daemon, "bypass_root", "policy").await,
        1.0
    );
    let spawns = daemon.spawns();
    assert_eq!(spawns, 1, "one spare started, none after it");

    let thread = daemon.create_thread().await;
    let (status, body) = daemon.send(&thread, "hi").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "cli_policy_refused", "{body}");
    assert_eq!(
        daemon.spawns(),
        spawns + 1,
        "the message's start, no spare's"
    );
    let (_, pool) = daemon.get("/api/pool").await;
    assert!(pool["sparesHeld"].is_string(), "{pool}");
    daemon.stop().await;
}

/// A thread's workspace deleted under its warm process: no turn runs in a folder that is gone.
/// The caller hears 409 `workspace_unavailable` and nothing is started; once the folder is made
/// again, the old process (still in the deleted folder) is let go and a new one, in the folder
/// as it is now, goes on with the thread's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_deleted_under_a_warm_process_is_the_callers_409() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let project = root.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mock = MockApi::start().await;
    let roots = vec![root.clone()];
    let daemon = TestDaemon::start(&mock, move |c| c.workspaces.roots = roots).await;
    let (status, thread) = daemon
        .post("/api/threads", json!({"workspace": {"path": project}}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{thread}");
    let thread = thread["id"].as_str().unwrap().to_owned();
    daemon.reply(&thread, "remember the word heron").await;
    let old = daemon.pid_of(&thread).expect("a warm process");

    std::fs::remove_dir_all(&project).unwrap();
    let spawns = daemon.spawns();
    let (status, body) = daemon.send(&thread, "and now?").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "workspace_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(project.to_str().unwrap()), "{message}");
    assert_eq!(daemon.spawns(), spawns, "nothing started, nothing retried");

    std::fs::create_dir_all(&project).unwrap();
    assert_eq!(daemon.reply(&thread, "back").await, "echo: back");
    let new = daemon.pid_of(&thread).expect("a process");
    assert_ne!(new, old, "not the process in the deleted folder");
    let cwd = std::fs::read_link(format!("/proc/{new}/cwd")).unwrap();
    assert_eq!(cwd, project);
    let request = mock.message_requests().last().cloned().unwrap();
    assert!(
        request.all_text().contains("remember the word heron"),
        "the history came along"
    );
    daemon.stop().await;
}

/// A worktree spare whose parked folder was deleted is discarded when a thread comes for it
/// (`folder_gone`): the thread gets a worktree of its own and its turn runs there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_spare_whose_folder_was_deleted_is_not_taken() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap().join("root");
    let repo = repository(&root.join("app"));
    let mock = MockApi::start().await;
    let roots = vec![root.clone()];
    let daemon = TestDaemon::start(&mock, move |c| {
        c.workspaces.roots = roots;
        c.pool.workspace_spares = 1;
    })
    .await;
    let on_repo = json!({"workspace": {"repo": repo, "worktree": true}});
    let (status, first) = daemon.post("/api/threads", on_repo.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let spare = eventually_async(Duration::from_secs(60), "a spare parked", || async {
        parked_spare(&daemon).await.is_some()
    })
    .await;
    spare.expect("a worktree spare is parked");
    let spare_id = parked_spare(&daemon).await.unwrap();
    let parked = daemon.config.worktrees_dir().join(&spare_id);
    std::fs::remove_dir_all(&parked).unwrap();

    let (status, second) = daemon.post("/api/threads", on_repo).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_ne!(second["id"], spare_id.as_str(), "not the spare's: {second}");
    let thread = second["id"].as_str().unwrap();
    assert!(Path::new(second["workspace"]["path"].as_str().unwrap()).is_dir());
    assert_eq!(daemon.reply(thread, "works").await, "echo: works");
    let metrics = scrape(&daemon).await;
    let gone = r#"harness_pool_spare_failures_total{reason="folder_gone"}"#;
    assert_eq!(value(&metrics, gone), Some(1.0), "{metrics}");
    daemon.stop().await;
}

/// The id of the parked spare, if one is.
async fn parked_spare(daemon: &TestDaemon) -> Option<String> {
    let parked = crate::spares::spares(daemon).await;
    parked.first()?["threadId"].as_str().map(str::to_owned)
}

/// Managed settings that turn `auto` off (`disableAutoMode`) narrow a daemon asking for it: the
/// CLI runs its turns in `default`. The turn says so (`permission_mode_narrowed`, both modes),
/// and `/api/pool` shows the mode in effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_narrowed_permission_mode_is_reported_as_in_effect() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.permission_mode = Some("auto".into());
        let policy = json!({"disableAutoMode": "disable"});
        c.claude.managed_settings = policy.as_object().cloned();
    })
    .await;
    let thread = daemon.create_thread().await;
    assert_eq!(daemon.reply(&thread, "hello").await, "echo: hello");
    let events = stored_events(&daemon, &thread).await;
    let narrowed: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == "permission_mode_narrowed")
        .map(|e| &e.data)
        .collect();
    assert_eq!(
        narrowed,
        vec![&json!({"asked": "auto", "inEffect": "default"})],
        "{events:?}"
    );
    let (_, pool) = daemon.get("/api/pool").await;
    let process = &pool["processes"][0];
    assert_eq!(process["permissionMode"], "default", "{pool}");

    // Without the policy, the mode asked for is the mode in effect, and nothing is said.
    let plain = TestDaemon::start(&mock, |c| c.claude.permission_mode = Some("auto".into())).await;
    let other = plain.create_thread().await;
    plain.reply(&other, "hello").await;
    let events = stored_events(&plain, &other).await;
    assert!(
        !events.iter().any(|e| e.kind == "permission_mode_narrowed"),
        "{events:?}"
    );
    let (_, pool) = plain.get("/api/pool").await;
    assert_eq!(pool["processes"][0]["permissionMode"], "auto", "{pool}");
    plain.stop().await;
    daemon.stop().await;
}
