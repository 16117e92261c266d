//! Walls, not prompts (issue #45): with `approvals.mode = "allow"`, the real CLI and a scripted
//! Messages API, a thread's model runs `Bash` as an attacker would. Each attack below went
//! through on `main` before the walls (another thread's folder, the database, the daemon's API,
//! the operator's home, the shared `/tmp`, other processes); each must fail now, while ordinary
//! work in the thread's folder still runs. A command past its memory or process limit is
//! stopped, the model reads why, the event is on the thread, and other threads go on.

use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use orchestrator::config::{ApprovalMode, Config};

use crate::support;

/// Built-in `Bash`, every call allowed: only the walls stand.
fn bash_allowed(config: &mut Config) {
    config.sandbox.enabled = true;
    config.claude.builtin_tools = Some("Bash".into());
    config.approvals.mode = ApprovalMode::Allow;
}

/// Where an attacker's commands run: in its own thread, or in a child its thread delegates to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Thread,
    Delegated,
}

/// The tool result of `command`, run by `thread`'s model with `Bash` (the mock's reply reports
/// it); each command ends by printing `EXIT=<its status>`.
async fn bash(mock: &MockApi, daemon: &TestDaemon, thread: &str, command: &str) -> String {
    bash_via(Via::Thread, mock, daemon, thread, command).await
}

/// [`bash`], run `via` the thread itself or a child it delegates to (whose reply, the tool
/// result, comes back to the thread as its own tool result).
async fn bash_via(
    via: Via,
    mock: &MockApi,
    daemon: &TestDaemon,
    thread: &str,
    command: &str,
) -> String {
    let trigger = format!("run {:x}", rand_id());
    mock.once_when_prompt_contains(
        &trigger,
        Reply::tool_use(
            "Bash",
            json!({"command": format!("{command}; echo EXIT=$?"), "description": "d"}),
        ),
    );
    match via {
        Via::Thread => daemon.reply(thread, &trigger).await,
        Via::Delegated => {
            let delegate = format!("delegate {:x}", rand_id());
            mock.once_when_prompt_contains(
                &delegate,
                Reply::tool_use(
                    "mcp__harness__delegation__delegate",
                    json!({"prompt": trigger}),
                ),
            );
            daemon.reply(thread, &delegate).await
        }
    }
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    N.fetch_add(1, Ordering::SeqCst) * 0x9e37_79b9 + u64::from(std::process::id())
}

/// Every attack fails from `attacker` (or the child it delegates to) against `victim`, and
/// ordinary work goes on.
async fn attacks_fail(via: Via, mock: &MockApi, daemon: &TestDaemon, attacker: &str, victim: &str) {
    const SECRET: &str = "VICTIM-SECRET-5521";
    let written = bash(mock, daemon, victim, &format!("echo {SECRET} > notes.txt")).await;
    assert!(written.contains("EXIT=0"), "{written}");
    // The victim's message is in the database too.
    daemon.reply(victim, &format!("remember {SECRET}")).await;

    let victim_folder = daemon.thread_folder(victim);
    let data_dir = daemon.data_dir();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let api = daemon.client().base().to_owned();
    let planted = format!("/tmp/harness-walls-{:x}", rand_id());
    let daemon_pid = std::process::id();
    let fetch = |url: &str| {
        format!("python3 -c 'import urllib.request; print(urllib.request.urlopen(\"{url}\", timeout=3).read())'")
    };
    let attacks = [
        (
            "another thread's file",
            format!("cat {}/notes.txt", victim_folder.display()),
        ),
        (
            "another thread's folder",
            format!("ls {}", victim_folder.display()),
        ),
        (
            "the data dir",
            format!("grep -ra {SECRET} {}", data_dir.display()),
        ),
        ("the daemon's API", fetch(&format!("{api}/api/threads"))),
        ("the operator's home", format!("ls -a {home}")),
        ("the shared /tmp", format!("echo x > {planted}")),
        ("a signal to the daemon", format!("kill -0 {daemon_pid}")),
        (
            "the daemon's environment",
            format!("cat /proc/{daemon_pid}/environ"),
        ),
        (
            "the daemon's memory map",
            format!("head -1 /proc/{daemon_pid}/maps"),
        ),
    ];
    for (what, command) in attacks {
        let out = bash_via(via, mock, daemon, attacker, &command).await;
        assert!(!out.contains("EXIT=0"), "{what} went through: {out}");
        assert!(!out.contains(SECRET), "{what} leaked: {out}");
        assert!(!out.contains("threadId"), "{what} reached the API: {out}");
    }
    assert!(!std::path::Path::new(&planted).exists());

    // Ordinary work in its own folder.
    let work = bash_via(
        via,
        mock,
        daemon,
        attacker,
        "echo mine > own.txt && cat own.txt && python3 -c 'print(6*7)' && git init -q repo && git -C repo status --short && echo ok",
    )
    .await;
    assert!(work.contains("mine") && work.contains("42"), "{work}");
    assert!(work.contains("EXIT=0"), "{work}");
    if via == Via::Delegated {
        // The commands ran in the child, not the attacker's own thread.
        assert!(work.contains("tool said: tool said:"), "{work}");
        assert!(!daemon.thread_folder(attacker).join("own.txt").exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_commands_stay_inside_its_walls() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, bash_allowed).await;
    let victim = daemon.create_thread().await;
    let attacker = daemon.create_thread().await;
    attacks_fail(Via::Thread, &mock, &daemon, &attacker, &victim).await;

    // `/api/pool` shows each process's walls.
    let (_, pool) = daemon.get("/api/pool").await;
    let processes = pool["processes"].as_array().expect("processes");
    assert!(!processes.is_empty(), "{pool}");
    for process in processes {
        let walls = &process["walls"];
        assert_eq!(walls["memoryMaxMb"], 4096, "{pool}");
        assert_eq!(walls["limitsHeldBy"], "cgroup", "{pool}");
        let ports = walls["connectPorts"].as_array().expect("ports");
        assert!(ports.contains(&json!(443)), "{pool}");
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_that_became_a_thread_is_walled_for_it() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        bash_allowed(c);
        c.pool.spares = 1;
    })
    .await;
    let victim = daemon.create_thread().await;
    // The next thread takes the spare parked for it.
    harness_tests::util::eventually(
        std::time::Duration::from_secs(60),
        "a spare is parked",
        || daemon.counts().spares_parked == 1,
    )
    .await
    .expect("a spare is parked");
    let attacker = daemon.create_thread().await;
    attacks_fail(Via::Thread, &mock, &daemon, &attacker, &victim).await;
    assert!(daemon.counts().spares_claimed >= 1, "{:?}", daemon.counts());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegated_child_is_walled_like_any_thread() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, bash_allowed).await;
    let victim = daemon.create_thread().await;
    let attacker = daemon.create_thread().await;
    attacks_fail(Via::Delegated, &mock, &daemon, &attacker, &victim).await;
    daemon.stop().await;
}

/// The stored `limit_reached` events of `thread`.
async fn limits_reached(daemon: &TestDaemon, thread: &str) -> Vec<serde_json::Value> {
    support::stored_events(daemon, thread)
        .await
        .into_iter()
        .filter(|e| e.kind == "limit_reached")
        .map(|e| e.data)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_the_memory_limit_is_stopped_and_others_go_on() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        bash_allowed(c);
        c.sandbox.memory_max_mb = 512;
    })
    .await;
    let hog = daemon.create_thread().await;
    let neighbour = daemon.create_thread().await;
    daemon.reply(&neighbour, "neighbour warms up").await;

    let started = std::time::Instant::now();
    let (out, neighbours) = tokio::join!(
        bash(
            &mock,
            &daemon,
            &hog,
            "python3 -c 'b = bytearray(3 * 1024 ** 3); print(\"ALLOC\" + \"ATED\")'"
        ),
        daemon.reply(&neighbour, "neighbour during the hog")
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert!(!out.contains("ALLOCATED"), "{out}");
    assert!(
        out.contains("memory limit of 512 MiB"),
        "the model reads why: {out:?}"
    );
    assert!(
        neighbours.contains("neighbour during the hog"),
        "{neighbours}"
    );

    let events = limits_reached(&daemon, &hog).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["limit"], "memory");
    assert_eq!(events[0]["max"], 512);
    assert_eq!(events[0]["processStopped"], false);
    assert!(limits_reached(&daemon, &neighbour).await.is_empty());
    // The thread stays usable, on the same process.
    let pid = daemon.pid_of(&hog);
    let next = daemon.reply(&hog, "after the hog").await;
    assert!(next.contains("after the hog"), "{next}");
    assert_eq!(daemon.pid_of(&hog), pid);
    let metrics = crate::metrics::scrape(&daemon).await;
    assert!(
        metrics.contains("harness_wall_breaches_total{limit=\"memory\"} 1"),
        "{metrics}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_storm_stops_at_the_process_limit() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        bash_allowed(c);
        c.sandbox.max_processes = 128;
    })
    .await;
    let thread = daemon.create_thread().await;
    let trigger = "storm away";
    mock.once_when_prompt_contains(
        trigger,
        Reply::tool_use(
            "Bash",
            json!({"command": "i=0; while [ $i -lt 400 ]; do sleep 60 & i=$((i+1)); done; wait", "description": "d"}),
        ),
    );
    let (status, body) = daemon.send(&thread, trigger).await;
    // The tasks the storm takes are the CLI's too: the model reads the limit, or, when the CLI
    // could not start a thread meanwhile, the turn ends saying so.
    let said = match status.as_u16() {
        200 => body["message"]["content"].to_string(),
        _ => {
            assert_eq!(body["error"]["code"], "wall_limit", "{body}");
            body["error"]["message"].to_string()
        }
    };
    assert!(said.contains("limit of 128 processes"), "{said}");
    harness_tests::util::eventually_async(
        std::time::Duration::from_secs(10),
        "the stop is recorded",
        || async { !limits_reached(&daemon, &thread).await.is_empty() },
    )
    .await
    .expect("recorded");
    let events = limits_reached(&daemon, &thread).await;
    assert_eq!(events[0]["limit"], "processes");
    let next = daemon.reply(&thread, "after the storm").await;
    assert!(next.contains("after the storm"), "{next}");
    daemon.stop().await;
}

/// A thread on a worktree commits there (git writes the repository's objects and refs), but
/// cannot change what its repository runs: its `.git/config` and hooks are read-only to it, and
/// the main checkout is out of reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_thread_commits_but_cannot_change_its_repository() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let root = dir.path().canonicalize().expect("it resolves").join("root");
    let repo = harness_tests::git::repository(&root.join("app"));
    let mock = MockApi::start().await;
    let roots = root.clone();
    let daemon = TestDaemon::start(&mock, move |c| {
        bash_allowed(c);
        c.workspaces.roots = vec![roots];
    })
    .await;
    let (status, created) = daemon
        .post(
            "/api/threads",
            json!({"workspace": {"repo": repo, "worktree": true}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let thread = created["id"].as_str().expect("an id").to_owned();

    let committed = bash(
        &mock,
        &daemon,
        &thread,
        "echo work > work.txt && git add work.txt && git -c user.email=t@t -c user.name=t commit -qm work && git log --oneline | head -1",
    )
    .await;
    assert!(
        committed.contains("EXIT=0") && committed.contains("work"),
        "{committed}"
    );
    let git_dir = repo.join(".git");
    for (what, command) in [
        (
            "the repository's config",
            format!(
                "git config --file {}/config core.fsmonitor /tmp/x",
                git_dir.display()
            ),
        ),
        (
            "a hook",
            format!(
                "echo 'touch /tmp/pwned' > {}/hooks/post-checkout",
                git_dir.display()
            ),
        ),
        (
            "the main checkout",
            format!("echo x >> {}/README.md", repo.display()),
        ),
    ] {
        let out = bash(&mock, &daemon, &thread, &command).await;
        assert!(!out.contains("EXIT=0"), "{what} was changed: {out}");
    }
    let config = std::fs::read_to_string(git_dir.join("config")).expect("the config");
    assert!(!config.contains("fsmonitor"), "{config}");
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).expect("README"),
        "hello\n"
    );
    daemon.stop().await;
}

/// With `sandbox.auto_allow`, the walled tools run without asking under `approvals.mode =
/// "deny"`, while a deny rule still refuses; without it, the same command is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_allow_lets_walled_tools_run_and_deny_rules_still_hold() {
    use orchestrator::config::{ApprovalRule, RuleDecision};
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Deny;
        c.approvals.rules = vec![ApprovalRule {
            tool: "Bash(rm:*)".into(),
            decision: RuleDecision::Deny,
        }];
        let mut builder = orchestrator::config::ProfileConfig::default();
        builder.sandbox.auto_allow = Some(true);
        c.profiles.insert("builder".into(), builder);
    })
    .await;
    let (status, created) = daemon
        .post("/api/threads", json!({"profile": "builder"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let builder = created["id"].as_str().expect("an id").to_owned();
    let plain = daemon.create_thread().await;

    let wrote = bash(
        &mock,
        &daemon,
        &builder,
        "echo built > out.txt && cat out.txt",
    )
    .await;
    assert!(
        wrote.contains("EXIT=0") && wrote.contains("built"),
        "{wrote}"
    );
    // Refused by the rule, by the CLI's own copy of it or by the daemon.
    let removed = bash(&mock, &daemon, &builder, "rm out.txt").await;
    assert!(!removed.contains("EXIT=0"), "{removed}");
    assert!(daemon.thread_folder(&builder).join("out.txt").exists());
    let refused = bash(&mock, &daemon, &plain, "echo built > out.txt").await;
    assert!(refused.contains("Harness refused"), "{refused}");
    daemon.stop().await;
}
