//! Workspaces with the real `git` and the real CLI: a thread on a worktree of a repository
//! writes there through an allowed `Write`, its diff shows exactly that, the main checkout stays
//! as it was; a second thread gets a worktree and branch of its own; a path outside
//! `workspaces.roots` is refused; two threads on one `path` share the folder but not their CLI
//! project; a thread whose folder is gone is refused rather than run elsewhere.

use std::path::{Path, PathBuf};

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::git::{git, repository};
use harness_tests::mock::{MockApi, Reply};
use orchestrator::config::{ApprovalRule, RuleDecision};

/// A root with a repository `app` (one commit) and an empty folder `shared`.
struct Repos {
    _dir: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
}

fn repos() -> Repos {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let root = dir.path().canonicalize().expect("it resolves").join("root");
    let repo = repository(&root.join("app"));
    std::fs::create_dir_all(root.join("shared")).expect("a shared folder");
    Repos {
        _dir: dir,
        root,
        repo,
    }
}

/// A daemon with workspaces under `root`, the built-in `Write`, and a rule that allows it.
async fn daemon(mock: &MockApi, root: &Path) -> TestDaemon {
    let root = root.to_path_buf();
    TestDaemon::start(mock, move |c| {
        c.workspaces.roots = vec![root];
        c.claude.builtin_tools = Some("Write".into());
        c.approvals.rules = vec![ApprovalRule {
            tool: "Write".into(),
            decision: RuleDecision::Allow,
        }];
    })
    .await
}

async fn create(daemon: &TestDaemon, workspace: Value) -> (StatusCode, Value) {
    daemon
        .post("/api/threads", json!({"workspace": workspace}))
        .await
}

/// `GET …/diff` as the patch text.
async fn patch(daemon: &TestDaemon, thread: &str) -> (StatusCode, String) {
    let url = format!("{}/api/threads/{thread}/diff", daemon.client().base());
    let response = reqwest::get(url).await.expect("test set-up");
    let status = response.status();
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("test set-up")
        .to_owned();
    let text = response.text().await.expect("test set-up");
    if status == StatusCode::OK {
        assert!(content_type.starts_with("text/x-diff"), "{content_type}");
    }
    (status, text)
}

#[tokio::test]
async fn a_thread_on_a_worktree_writes_there_and_its_diff_shows_exactly_that() {
    let repos = repos();
    let mock = MockApi::start().await;
    let daemon = daemon(&mock, &repos.root).await;
    let (status, thread) = create(
        &daemon,
        json!({"repo": repos.repo, "worktree": true, "baseRef": "main"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{thread}");
    let id = thread["id"].as_str().unwrap().to_owned();
    let workspace = &thread["workspace"];
    assert_eq!(workspace["kind"], "worktree", "{thread}");
    assert_eq!(workspace["branch"], format!("harness/{id}"));
    assert_eq!(workspace["baseRef"], "main");
    let folder = PathBuf::from(workspace["path"].as_str().unwrap());
    assert!(
        folder.starts_with(daemon.config.worktrees_dir()),
        "{folder:?}"
    );

    let target = folder.join("notes/hello.txt");
    mock.once_when_prompt_contains(
        "write the note",
        Reply::write(&target, "hello from the thread\n"),
    );
    let reply = daemon.reply(&id, "write the note").await;
    assert!(!reply.is_empty());
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "hello from the thread\n"
    );
    let pid = daemon.pid_of(&id).expect("a live process");
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    assert_eq!(cwd, folder, "the process works in the worktree");
    // The main checkout is as it was.
    assert_eq!(git(&repos.repo, &["status", "--porcelain"]), "");
    assert!(!repos.repo.join("notes").exists());

    let (status, text) = patch(&daemon, &id).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("+++ b/notes/hello.txt"), "{text}");
    assert!(text.contains("+hello from the thread"), "{text}");
    assert_eq!(
        text.matches("diff --git").count(),
        1,
        "exactly one file: {text}"
    );
    let (status, summary) = daemon
        .get(&format!("/api/threads/{id}/diff?format=json"))
        .await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    assert_eq!(
        summary["files"],
        json!([{"path": "notes/hello.txt", "status": "added", "additions": 1, "deletions": 0}])
    );
    assert_eq!(
        summary["base"],
        git(&repos.repo, &["rev-parse", "main"]).trim()
    );

    // A second thread on the same repository: its own worktree and branch, nothing changed.
    let (status, second) = create(&daemon, json!({"repo": repos.repo, "worktree": true})).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    let second_id = second["id"].as_str().unwrap();
    assert_ne!(second["workspace"]["path"], workspace["path"]);
    assert_eq!(
        second["workspace"]["branch"],
        format!("harness/{second_id}")
    );
    let (_, empty) = daemon
        .get(&format!("/api/threads/{second_id}/diff?format=json"))
        .await;
    assert_eq!(empty["files"], json!([]), "{empty}");
    let branches = git(&repos.repo, &["branch", "--list", "harness/*"]);
    assert_eq!(branches.lines().count(), 2, "{branches}");

    // Its branch is taken now.
    let (status, taken) = create(
        &daemon,
        json!({"repo": repos.repo, "worktree": true, "branch": format!("harness/{id}")}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{taken}");
    assert_eq!(taken["error"]["code"], "branch_exists");
    daemon.stop().await;
}

#[tokio::test]
async fn workspaces_outside_the_roots_are_refused_with_the_reason() {
    let repos = repos();
    let outside = tempfile::tempdir().unwrap();
    let outside = outside.path().canonicalize().unwrap();
    std::os::unix::fs::symlink(&outside, repos.root.join("link")).unwrap();
    let mock = MockApi::start().await;
    let daemon = daemon(&mock, &repos.root).await;
    for (workspace, says) in [
        (json!({"path": outside}), "outside workspaces.roots"),
        (
            json!({"path": repos.root.join("link")}),
            &*format!("leads to {}", outside.display()),
        ),
        (json!({"path": "relative"}), "absolute"),
        (json!({"repo": repos.repo}), "worktree"),
        (
            json!({"repo": repos.repo, "worktree": true, "baseRef": "nope"}),
            "names no commit",
        ),
    ] {
        let (status, body) = create(&daemon, workspace.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{workspace}: {body}"
        );
        assert_eq!(body["error"]["code"], "invalid_workspace", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{workspace}: {message}");
    }
    let (status, body) = create(&daemon, json!({"path": repos.repo, "extra": 1})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (_, threads) = daemon.get("/api/threads").await;
    assert_eq!(threads["threads"], json!([]), "no thread was made");
    daemon.stop().await;
}

#[tokio::test]
async fn two_threads_on_one_path_share_the_folder_but_not_their_cli_project() {
    let repos = repos();
    let shared = repos.root.join("shared");
    let mock = MockApi::start().await;
    let daemon = daemon(&mock, &repos.root).await;
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let (status, thread) = create(&daemon, json!({"path": shared})).await;
        assert_eq!(status, StatusCode::CREATED, "{thread}");
        assert_eq!(thread["workspace"], json!({"kind": "path", "path": shared}));
        let id = thread["id"].as_str().unwrap().to_owned();
        assert_eq!(daemon.reply(&id, "hello").await, "echo: hello");
        let (_, got) = daemon.get(&format!("/api/threads/{id}")).await;
        let session = got["cliSessionId"].as_str().unwrap().to_owned();
        sessions.push((id, session));
    }
    // Each thread's transcript is in its own config dir, and only there.
    let threads_config = daemon.config.claude_config_dir().join("threads");
    for (id, session) in &sessions {
        let file = format!("{session}.jsonl");
        let found: Vec<PathBuf> = walk(&daemon.config.claude_config_dir())
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == file.as_str()))
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with(threads_config.join(id)), "{found:?}");
    }
    daemon.stop().await;
}

#[tokio::test]
async fn a_thread_whose_folder_is_gone_is_refused_not_run_elsewhere() {
    let repos = repos();
    let doomed = repos.root.join("doomed");
    std::fs::create_dir_all(&doomed).unwrap();
    let mock = MockApi::start().await;
    let daemon = daemon(&mock, &repos.root).await;
    let (_, thread) = create(&daemon, json!({"path": doomed})).await;
    let id = thread["id"].as_str().unwrap().to_owned();
    std::fs::remove_dir(&doomed).unwrap();
    let (status, body) = daemon.send(&id, "are you there?").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "workspace_unavailable", "{body}");
    assert!(
        mock.message_requests().is_empty(),
        "no turn reached the model"
    );

    // A worktree removed by hand is made again from its branch.
    let (_, thread) = create(&daemon, json!({"repo": repos.repo, "worktree": true})).await;
    let id = thread["id"].as_str().unwrap().to_owned();
    let folder = PathBuf::from(thread["workspace"]["path"].as_str().unwrap());
    std::fs::remove_dir_all(&folder).unwrap();
    assert_eq!(daemon.reply(&id, "again").await, "echo: again");
    assert!(folder.join("README.md").is_file());
    daemon.stop().await;
}

/// #46: a workspace folder swapped for a symlink out of the roots was refused for turns but
/// followed by downloads (`/etc/passwd` came back). Both refuse it now.
#[tokio::test]
async fn a_workspace_swapped_for_a_symlink_out_of_the_roots_serves_nothing() {
    let repos = repos();
    let project = repos.root.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("notes.txt"), "mine\n").unwrap();
    let mock = MockApi::start().await;
    let daemon = daemon(&mock, &repos.root).await;
    let (_, thread) = create(&daemon, json!({"path": project})).await;
    let id = thread["id"].as_str().unwrap().to_owned();
    let file = |path: &str| {
        let (client, url) = (
            daemon.client().clone(),
            format!("/api/threads/{id}/files/{path}"),
        );
        async move { client.get_bytes(&url).await }
    };
    let (status, _, bytes) = file("notes.txt").await;
    assert_eq!((status, bytes.as_slice()), (StatusCode::OK, &b"mine\n"[..]));

    std::fs::rename(&project, repos.root.join("project.moved")).unwrap();
    std::os::unix::fs::symlink("/etc", &project).unwrap();
    let (status, _, body) = file("passwd").await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("workspace_unavailable"), "{body}");
    let (status, listing) = daemon.get(&format!("/api/threads/{id}/files")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{listing}");
    let (status, refused) = daemon.send(&id, "look around").await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(mock.message_requests().is_empty(), "no turn ran");
    daemon.stop().await;
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[tokio::test]
async fn archiving_follows_the_worktree_lifecycle_and_closes_the_thread() {
    let repos = repos();
    let mock = MockApi::start().await;
    let daemon = daemon(&mock, &repos.root).await;
    let worktree = json!({"repo": repos.repo, "worktree": true});

    // Uncommitted work: under the default `remove-if-clean` the worktree stays.
    let (_, dirty) = create(&daemon, worktree.clone()).await;
    let dirty_id = dirty["id"].as_str().unwrap().to_owned();
    let dirty_folder = PathBuf::from(dirty["workspace"]["path"].as_str().unwrap());
    let draft = dirty_folder.join("draft.txt");
    mock.once_when_prompt_contains("draft it", Reply::write(&draft, "half done\n"));
    daemon.reply(&dirty_id, "draft it").await;
    assert!(daemon.pid_of(&dirty_id).is_some());
    let (status, archived) = daemon
        .post(&format!("/api/threads/{dirty_id}/archive"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{archived}");
    assert!(archived["thread"]["archivedAt"].is_string(), "{archived}");
    assert_eq!(
        archived["worktree"],
        json!({"removed": false, "keptDirty": true, "branchDeleted": false})
    );
    assert!(draft.is_file(), "the work is kept");
    assert!(daemon.pid_of(&dirty_id).is_none(), "its process is let go");
    let (status, refused) = daemon.send(&dirty_id, "more?").await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "thread_archived");
    // Again: nothing changes.
    let (status, again) = daemon
        .post(&format!("/api/threads/{dirty_id}/archive"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        again["thread"]["archivedAt"],
        archived["thread"]["archivedAt"]
    );
    assert_eq!(again.get("worktree"), None, "{again}");

    // Clean: worktree and branch go; the messages stay.
    let (_, clean) = create(&daemon, worktree).await;
    let clean_id = clean["id"].as_str().unwrap().to_owned();
    let clean_folder = PathBuf::from(clean["workspace"]["path"].as_str().unwrap());
    assert_eq!(
        daemon.reply(&clean_id, "just talk").await,
        "echo: just talk"
    );
    let (status, archived) = daemon
        .post(&format!("/api/threads/{clean_id}/archive"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{archived}");
    assert_eq!(
        archived["worktree"],
        json!({"removed": true, "keptDirty": false, "branchDeleted": true})
    );
    assert!(!clean_folder.exists());
    let branches = git(
        &repos.repo,
        &["branch", "--list", "--format=%(refname:short)", "harness/*"],
    );
    assert_eq!(branches.trim(), format!("harness/{dirty_id}"));
    let (_, got) = daemon.get(&format!("/api/threads/{clean_id}")).await;
    assert_eq!(got["messages"].as_array().map(Vec::len), Some(2), "{got}");
    daemon.stop().await;
}

/// A profile's workspace is its threads' when they name none, and its budget is their default
/// and their ceiling.
#[tokio::test]
async fn a_profiles_workspace_and_budget_are_its_threads_defaults() {
    let repos = repos();
    let mock = MockApi::start().await;
    let repo = repos.repo.display().to_string();
    let root = repos.root.clone();
    let daemon = TestDaemon::start(&mock, move |c| {
        c.workspaces.roots = vec![root];
        c.profiles.insert(
            "fixer".into(),
            orchestrator::config::ProfileConfig {
                workspace: Some(orchestrator::config::WorkspaceRequest {
                    repo: Some(repo),
                    worktree: Some(true),
                    ..Default::default()
                }),
                max_budget_usd: Some(2.0),
                ..Default::default()
            },
        );
    })
    .await;
    let (status, thread) = daemon
        .post("/api/threads", json!({"profile": "fixer"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{thread}");
    assert_eq!(thread["workspace"]["kind"], "worktree", "{thread}");
    assert_eq!(thread["maxBudgetUsd"], 2.0);
    let id = thread["id"].as_str().unwrap();

    let (status, body) = daemon
        .post(
            "/api/threads",
            json!({"profile": "fixer", "maxBudgetUsd": 5.0}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let patch = |usd: Value| {
        let url = format!("{}/api/threads/{id}", daemon.client().base());
        async move {
            let response = reqwest::Client::new()
                .patch(url)
                .json(&json!({"maxBudgetUsd": usd}))
                .send()
                .await
                .unwrap();
            response.status()
        }
    };
    assert_eq!(patch(json!(3.0)).await, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(patch(Value::Null).await, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(patch(json!(1.0)).await, StatusCode::OK);
    let (_, got) = daemon.get(&format!("/api/threads/{id}")).await;
    assert_eq!(got["maxBudgetUsd"], 1.0);
    daemon.stop().await;
}
