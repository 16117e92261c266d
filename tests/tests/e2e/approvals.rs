//! Tool approvals against the real CLI: children run with `--permission-prompt-tool stdio`, so
//! every permission the CLI would ask a person for is decided by the daemon: the default refuses
//! (and nothing touches the disk), rules decide without asking, and in `ask` mode a person
//! answers over the API (allow, deny, or nobody within `approvals.timeout`).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use orchestrator::config::{ApprovalMode, ApprovalRule, Config, RuleDecision};

use crate::metrics::{scrape, value};

/// Built-in `Bash` and `Write` (the test config has none), approvals as `tweak` sets them.
async fn daemon_with_tools(mock: &MockApi, tweak: impl FnOnce(&mut Config)) -> TestDaemon {
    TestDaemon::start(mock, |c| {
        c.claude.builtin_tools = Some("Bash,Write".into());
        tweak(c);
    })
    .await
}

/// The model asks for `Bash` with `command` when the prompt contains `trigger`.
fn bash_on(mock: &MockApi, trigger: &str, command: &str) {
    mock.once_when_prompt_contains(
        trigger,
        Reply::tool_use("Bash", json!({"command": command, "description": "d"})),
    );
}

/// Polls until the thread has a pending permission; returns the first.
pub(crate) async fn pending_one(daemon: &TestDaemon, thread: &str) -> Value {
    let path = format!("/api/threads/{thread}/permissions");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = daemon.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if let Some(first) = body["permissions"].as_array().and_then(|p| p.first()) {
            return first.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pending permission within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Sends `text` in a task of its own: the turn waits for a person.
pub(crate) fn send_in_background(
    daemon: &TestDaemon,
    thread: &str,
    text: &'static str,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let (client, thread) = (daemon.client().clone(), thread.to_owned());
    tokio::spawn(async move { client.send(&thread, text).await })
}

/// Every permission of the thread, decided ones too.
pub(crate) async fn all_permissions(daemon: &TestDaemon, thread: &str) -> Vec<Value> {
    let (status, body) = daemon
        .get(&format!("/api/threads/{thread}/permissions?all=true"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["permissions"].as_array().cloned().unwrap_or_default()
}

pub(crate) async fn decisions(daemon: &TestDaemon, decision: &str, by: &str) -> u64 {
    let text = scrape(daemon).await;
    let name = format!(r#"harness_permission_decisions_total{{decision="{decision}",by="{by}"}}"#);
    value(&text, &name).unwrap_or(0.0) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_bash_and_write_are_refused_and_nothing_touches_the_disk() {
    let mock = MockApi::start().await;
    let daemon = daemon_with_tools(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let dir = daemon.thread_folder(&thread);
    let touched = dir.join("touched.txt");
    let written = dir.join("written.txt");
    bash_on(&mock, "touch it", &format!("touch {}", touched.display()));
    let reply = daemon.reply(&thread, "touch it").await;
    assert!(
        reply.contains("Harness refused `Bash`"),
        "the model read the refusal: {reply}"
    );
    mock.once_when_prompt_contains("write it", Reply::write(&written, "x"));
    let reply = daemon.reply(&thread, "write it").await;
    assert!(reply.contains("Harness refused `Write`"), "{reply}");
    assert!(!touched.exists(), "the refused touch ran");
    assert!(!written.exists(), "the refused Write ran");
    let all = all_permissions(&daemon, &thread).await;
    let tools: Vec<_> = all.iter().map(|p| p["toolName"].clone()).collect();
    assert_eq!(tools, [json!("Bash"), json!("Write")], "{all:?}");
    for p in &all {
        assert_eq!(p["status"], "denied", "{p}");
        assert_eq!(p["decidedBy"], "policy", "{p}");
        assert!(
            p["toolUseId"].is_string(),
            "recorded beside its tool call: {p}"
        );
    }
    assert_eq!(decisions(&daemon, "deny", "policy").await, 2);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_allow_and_deny_without_asking() {
    let mock = MockApi::start().await;
    let daemon = daemon_with_tools(&mock, |c| {
        c.approvals.mode = ApprovalMode::Ask;
        c.approvals.rules = vec![
            ApprovalRule {
                tool: "Bash(touch:*)".into(),
                decision: RuleDecision::Allow,
            },
            ApprovalRule {
                tool: "Write".into(),
                decision: RuleDecision::Deny,
            },
        ];
    })
    .await;
    let thread = daemon.create_thread().await;
    let dir = daemon.thread_folder(&thread);
    let touched = dir.join("ruled.txt");
    bash_on(
        &mock,
        "touch by rule",
        &format!("touch {}", touched.display()),
    );
    daemon.reply(&thread, "touch by rule").await;
    assert!(touched.exists(), "the rule allowed the touch");
    let written = dir.join("never.txt");
    mock.once_when_prompt_contains("write by rule", Reply::write(&written, "x"));
    let reply = daemon.reply(&thread, "write by rule").await;
    // A deny rule reaches the CLI's own settings too, where a bare tool name takes the tool
    // away (as in the CLI): the model reads that, and the CLI never asks the daemon.
    assert!(
        reply.contains("No such tool available: Write"),
        "the model read the refusal: {reply}"
    );
    assert!(!written.exists());
    let all = all_permissions(&daemon, &thread).await;
    let decided: Vec<_> = all
        .iter()
        .map(|p| (p["status"].clone(), p["decidedBy"].clone()))
        .collect();
    assert_eq!(
        decided,
        [(json!("allowed"), json!("rule"))],
        "nobody was asked: {all:?}"
    );
    let events = crate::support::stored_events(&daemon, &thread).await;
    assert!(!events.iter().any(|e| e.kind == "permission_requested"));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_then_allow_runs_the_command_then_deny_reaches_the_model() {
    let mock = MockApi::start().await;
    // Long enough that the command and the next request fit in it on a loaded 2-core machine
    // (3 s did not, while builds ran beside the suite); the person below takes longer still.
    let idle = Duration::from_secs(5);
    let daemon = daemon_with_tools(&mock, |c| {
        c.approvals.mode = ApprovalMode::Ask;
        c.turn.idle_timeout = idle;
    })
    .await;
    let thread = daemon.create_thread().await;
    let dir = daemon.thread_folder(&thread);
    let made = dir.join("made.txt");
    bash_on(
        &mock,
        "please touch",
        &format!("touch {} && echo created-it", made.display()),
    );
    let turn = send_in_background(&daemon, &thread, "please touch");
    let pending = pending_one(&daemon, &thread).await;
    assert_eq!(pending["toolName"], "Bash");
    assert_eq!(pending["status"], "pending");
    assert!(pending["input"]["command"]
        .as_str()
        .unwrap()
        .contains("made.txt"));
    let id = pending["requestId"].as_str().unwrap().to_owned();
    crate::support::wait_for_event(
        &daemon,
        &thread,
        "permission_requested",
        0,
        Duration::from_secs(5),
    )
    .await;
    assert!(!made.exists(), "nothing ran before the answer");
    // Longer than the idle timeout: a person deciding is not an idle CLI.
    tokio::time::sleep(idle + Duration::from_secs(1)).await;
    assert!(!turn.is_finished(), "the turn waits for the person");
    let answer = format!("/api/threads/{thread}/permissions/{id}");
    let (status, body) = daemon.post(&answer, json!({"decision": "allow"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "allowed");
    assert_eq!(body["decidedBy"], "person");
    assert_eq!(body["answeredBy"], "operator", "who answered is kept");
    let (status, body) = turn.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let reply = body["message"]["content"].as_str().unwrap();
    assert!(
        reply.contains("created-it"),
        "the model saw the output: {reply}"
    );
    assert!(made.exists(), "the allowed command ran");
    // A second answer is refused; an unknown id is not found.
    let (status, body) = daemon.post(&answer, json!({"decision": "deny"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "permission_already_decided");
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/permissions/nope"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = daemon.post(&answer, json!({"decision": "maybe"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");

    // Deny: the model reads the person's message; nothing runs.
    let other = dir.join("denied.txt");
    bash_on(&mock, "touch again", &format!("touch {}", other.display()));
    let turn = send_in_background(&daemon, &thread, "touch again");
    let pending = pending_one(&daemon, &thread).await;
    let id = pending["requestId"].as_str().unwrap();
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/permissions/{id}"),
            json!({"decision": "deny", "message": "not today, says the operator"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = turn.await.unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "a refusal does not fail the turn: {body}"
    );
    let reply = body["message"]["content"].as_str().unwrap();
    assert!(reply.contains("not today, says the operator"), "{reply}");
    assert!(!other.exists());
    assert_eq!(decisions(&daemon, "allow", "person").await, 1);
    assert_eq!(decisions(&daemon, "deny", "person").await, 1);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_unanswered_times_out_and_an_interrupt_denies_what_waits() {
    let mock = MockApi::start().await;
    let daemon = daemon_with_tools(&mock, |c| {
        c.approvals.mode = ApprovalMode::Ask;
        c.approvals.timeout = Duration::from_secs(1);
    })
    .await;
    let thread = daemon.create_thread().await;
    let dir = daemon.thread_folder(&thread);
    let late = dir.join("late.txt");
    bash_on(
        &mock,
        "nobody answers",
        &format!("touch {}", late.display()),
    );
    let reply = daemon.reply(&thread, "nobody answers").await;
    assert!(
        reply.contains("Nobody approved `Bash` within 1 s"),
        "{reply}"
    );
    assert!(!late.exists());
    let all = all_permissions(&daemon, &thread).await;
    assert_eq!(all[0]["decidedBy"], "timeout", "{all:?}");
    assert_eq!(all[0].get("answeredBy"), None, "nobody answered: {all:?}");
    assert_eq!(decisions(&daemon, "deny", "timeout").await, 1);
    daemon.stop().await;

    let mock = MockApi::start().await;
    let daemon = daemon_with_tools(&mock, |c| c.approvals.mode = ApprovalMode::Ask).await;
    let thread = daemon.create_thread().await;
    bash_on(
        &mock,
        "then stop",
        &format!(
            "touch {}",
            daemon.thread_folder(&thread).join("x").display()
        ),
    );
    let turn = send_in_background(&daemon, &thread, "then stop");
    pending_one(&daemon, &thread).await;
    let (status, body) = daemon
        .post(&format!("/api/threads/{thread}/interrupt"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = tokio::time::timeout(Duration::from_secs(60), turn)
        .await
        .expect("the turn ends")
        .unwrap();
    assert!(
        status == StatusCode::CONFLICT || status == StatusCode::OK,
        "{status} {body}"
    );
    let all = all_permissions(&daemon, &thread).await;
    assert_eq!(all[0]["status"], "denied", "{all:?}");
    assert_eq!(all[0]["decidedBy"], "interrupt", "{all:?}");
    daemon.stop().await;
}

/// The bypasses measured against string-matched rules, replayed with the real CLI: a prefix rule
/// never allows a compound command, a redirection or a substitution; a deny rule holds for the
/// command however it is written, in `allow` mode too; a path rule's `*` stays in one folder.
/// Each attack would leave a file behind (or delete one); none may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_hold_against_the_measured_bypasses() {
    let mock = MockApi::start().await;
    let rule = |tool: &str, decision| ApprovalRule {
        tool: tool.into(),
        decision,
    };
    // `deny` mode, the allow rule of `docs/approvals.md`'s example, and a `*` rule over the
    // thread folders.
    let daemon = daemon_with_tools(&mock, |c| {
        let work = c.claude_workdir().to_string_lossy().into_owned();
        c.approvals.rules = vec![
            rule("Bash(git status:*)", RuleDecision::Allow),
            rule("Bash(echo:*)", RuleDecision::Allow),
            rule(&format!("Write(/{work}/*)"), RuleDecision::Allow),
        ];
    })
    .await;
    let thread = daemon.create_thread().await;
    let other = daemon.create_thread().await;
    let here = daemon.thread_folder(&thread);
    let attacks = [
        "git status || touch made-by-or",
        "git status\ntouch made-by-newline",
        "git status; touch made-by-semicolon",
        "git status | touch made-by-pipe",
        "git status & touch made-by-background",
        "git status $(touch made-by-substitution)",
        "git status `touch made-by-backticks`",
        "echo x > made-by-redirect",
    ];
    for (i, command) in attacks.iter().enumerate() {
        let trigger = format!("prefix attack {i}");
        bash_on(&mock, &trigger, command);
        daemon.reply(&thread, &trigger).await;
    }
    let made: Vec<String> = std::fs::read_dir(&here)
        .expect("the thread's folder")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("made-by"))
        .collect();
    assert!(made.is_empty(), "a prefix rule let these through: {made:?}");
    // `work/<thread>/../<other>/CLAUDE.md` is not in `work/*`.
    let escape = here.join("..").join(&other).join("CLAUDE.md");
    mock.once_when_prompt_contains(
        "write next door",
        Reply::tool_use("Write", json!({"file_path": escape, "content": "planted"})),
    );
    daemon.reply(&thread, "write next door").await;
    assert!(!daemon.thread_folder(&other).join("CLAUDE.md").exists());
    daemon.stop().await;

    // `allow` mode with a deny rule on `rm`: no form of it deletes the file.
    let daemon = daemon_with_tools(&mock, |c| {
        c.approvals.mode = ApprovalMode::Allow;
        c.approvals.rules = vec![rule("Bash(rm:*)", RuleDecision::Deny)];
    })
    .await;
    let thread = daemon.create_thread().await;
    let here = daemon.thread_folder(&thread);
    let forms = [
        "/bin/rm victim",
        " rm victim",
        "true && rm victim",
        "command rm victim",
        "\\rm victim",
        "env rm victim",
        "find . -name victim -delete",
        "unlink victim",
    ];
    daemon.reply(&thread, "warm up").await;
    for (i, command) in forms.iter().enumerate() {
        std::fs::write(here.join("victim"), "keep me").expect("the victim file");
        let trigger = format!("delete attack {i}");
        bash_on(&mock, &trigger, command);
        daemon.reply(&thread, &trigger).await;
        assert!(here.join("victim").exists(), "{command:?} deleted the file");
    }
    // The same rule allows other commands in `allow` mode: the test can tell a refusal apart.
    bash_on(&mock, "plain touch", "touch allowed-file");
    daemon.reply(&thread, "plain touch").await;
    assert!(here.join("allowed-file").exists());
    daemon.stop().await;
}

/// A deny rule on reads holds for the reads the CLI runs without asking (a file in the thread's
/// own folder): it reaches the CLI's own matcher through the children's settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_holds_for_reads_the_cli_never_asks_about() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Read".into());
        c.approvals.mode = ApprovalMode::Allow;
        c.approvals.rules = vec![ApprovalRule {
            tool: "Read(./secret.txt)".into(),
            decision: RuleDecision::Deny,
        }];
    })
    .await;
    let thread = daemon.create_thread().await;
    let here = daemon.thread_folder(&thread);
    daemon.reply(&thread, "warm up").await;
    let secret = "SECRET-CONTENT-5531";
    std::fs::write(here.join("secret.txt"), secret).expect("secret");
    std::fs::write(here.join("open.txt"), "OPEN-CONTENT-5532").expect("open");
    for (trigger, file) in [
        ("read the secret", "secret.txt"),
        ("read the open", "open.txt"),
    ] {
        mock.once_when_prompt_contains(
            trigger,
            Reply::tool_use("Read", json!({"file_path": here.join(file)})),
        );
        daemon.reply(&thread, trigger).await;
    }
    let seen: String = mock
        .message_requests()
        .iter()
        .map(|r| r.all_text())
        .collect();
    assert!(!seen.contains(secret), "the denied file reached the model");
    assert!(seen.contains("OPEN-CONTENT-5532"), "the other read ran");
    daemon.stop().await;
}

/// A profile's own approvals decide for its threads, and only for them: its allow rule lets a
/// command run that the daemon's default refuses, and its deny rule reaches its processes'
/// own settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_approvals_decide_for_its_threads_only() {
    let mock = MockApi::start().await;
    let daemon = daemon_with_tools(&mock, |c| {
        c.profiles.insert(
            "builder".into(),
            orchestrator::config::ProfileConfig {
                approvals: orchestrator::config::ProfileApprovals {
                    mode: Some(ApprovalMode::Deny),
                    rules: Some(vec![
                        ApprovalRule {
                            tool: "Bash(touch:*)".into(),
                            decision: RuleDecision::Allow,
                        },
                        ApprovalRule {
                            tool: "Write".into(),
                            decision: RuleDecision::Deny,
                        },
                    ]),
                },
                ..Default::default()
            },
        );
    })
    .await;
    let (_, builder) = daemon
        .post("/api/threads", json!({"profile": "builder"}))
        .await;
    let builder = builder["id"].as_str().unwrap().to_owned();
    let plain = daemon.create_thread().await;
    for (thread, allowed) in [(&builder, true), (&plain, false)] {
        let touched = daemon.thread_folder(thread).join("made.txt");
        let trigger = format!("touch for {thread}");
        bash_on(&mock, &trigger, &format!("touch {}", touched.display()));
        daemon.reply(thread, &trigger).await;
        assert_eq!(touched.exists(), allowed, "{thread}");
        let all = all_permissions(&daemon, thread).await;
        let by = if allowed { "rule" } else { "policy" };
        assert_eq!(all[0]["decidedBy"], by, "{all:?}");
    }
    // The profile's deny rule is in its processes' settings: the CLI takes `Write` away.
    let written = daemon.thread_folder(&builder).join("never.txt");
    mock.once_when_prompt_contains("write as builder", Reply::write(&written, "x"));
    let reply = daemon.reply(&builder, "write as builder").await;
    assert!(reply.contains("No such tool available: Write"), "{reply}");
    assert!(!written.exists());
    daemon.stop().await;
}

/// Answers the thread's one pending request with `body`; the decided request.
async fn answer_pending(daemon: &TestDaemon, thread: &str, body: Value) -> Value {
    let pending = pending_one(daemon, thread).await;
    let id = pending["requestId"].as_str().expect("a request id");
    let path = format!("/api/threads/{thread}/permissions/{id}");
    let (status, decided) = daemon.post(&path, body).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    decided
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowing_always_adds_a_rule_for_this_thread_only_until_it_is_deleted() {
    let mock = MockApi::start().await;
    let daemon = daemon_with_tools(&mock, |c| c.approvals.mode = ApprovalMode::Ask).await;
    let thread = daemon.create_thread().await;
    // Not a read-only command: the CLI runs those without asking.
    let made = daemon.thread_folder(&thread).join("always.txt");
    let command = format!("touch {}", made.display());
    let command = command.as_str();

    // `always` goes with an allow of the request as asked.
    bash_on(&mock, "first ask", command);
    let turn = send_in_background(&daemon, &thread, "first ask");
    let pending = pending_one(&daemon, &thread).await;
    let path = format!(
        "/api/threads/{thread}/permissions/{}",
        pending["requestId"].as_str().unwrap()
    );
    for bad in [
        json!({"decision": "deny", "always": true}),
        json!({"decision": "allow", "always": true, "updatedInput": {"command": "true"}}),
    ] {
        let (status, body) = daemon.post(&path, bad).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("always"),
            "{body}"
        );
    }
    let decided = answer_pending(
        &daemon,
        &thread,
        json!({"decision": "allow", "always": true}),
    )
    .await;
    assert!(
        decided["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("allowed always on this thread: Bash({command})")),
        "{decided}"
    );
    assert_eq!(turn.await.unwrap().0, StatusCode::OK);
    let (status, listed) = daemon.get(&format!("/api/threads/{thread}/rules")).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let rules = listed["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{listed}");
    assert_eq!(rules[0]["rule"], format!("Bash({command})"));
    assert_eq!(rules[0]["addedBy"], "operator");
    assert_eq!(rules[0]["requestId"], pending["requestId"]);

    // The same command again on this thread runs without a person.
    std::fs::remove_file(&made).expect("the first run made it");
    bash_on(&mock, "second run", command);
    daemon.reply(&thread, "second run").await;
    assert!(made.exists(), "the rule let it run");
    let last = all_permissions(&daemon, &thread).await.pop().unwrap();
    assert_eq!(
        (last["status"].as_str(), last["decidedBy"].as_str()),
        (Some("allowed"), Some("rule"))
    );
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .contains("allowed it always on this thread"),
        "{last}"
    );

    // Another thread, and another command on this one, are still asked.
    let other = daemon.create_thread().await;
    bash_on(&mock, "elsewhere", command);
    let turn = send_in_background(&daemon, &other, "elsewhere");
    answer_pending(&daemon, &other, json!({"decision": "deny"})).await;
    assert_eq!(turn.await.unwrap().0, StatusCode::OK);
    let neighbour = format!("{command} {}", made.with_extension("more").display());
    bash_on(&mock, "a neighbour", &neighbour);
    let turn = send_in_background(&daemon, &thread, "a neighbour");
    answer_pending(&daemon, &thread, json!({"decision": "deny"})).await;
    assert_eq!(turn.await.unwrap().0, StatusCode::OK);

    // A command no rule names exactly is allowed once, and asked again.
    let out = made.with_file_name("out.txt");
    let redirect = format!("echo x > {}", out.display());
    bash_on(&mock, "redirect it", &redirect);
    let turn = send_in_background(&daemon, &thread, "redirect it");
    let decided = answer_pending(
        &daemon,
        &thread,
        json!({"decision": "allow", "always": true}),
    )
    .await;
    assert!(
        decided["reason"].as_str().unwrap().contains("allowed once"),
        "{decided}"
    );
    assert_eq!(turn.await.unwrap().0, StatusCode::OK);
    assert!(out.exists());
    let (_, listed) = daemon.get(&format!("/api/threads/{thread}/rules")).await;
    assert_eq!(listed["rules"].as_array().unwrap().len(), 1, "{listed}");

    // Deleted, the rule allows nothing more: the command is asked again.
    let rule = format!(
        "/api/threads/{thread}/rules/{}",
        rules[0]["id"].as_str().unwrap()
    );
    let (status, body) = daemon.delete(&rule).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = daemon.delete(&rule).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "rule_not_found");
    bash_on(&mock, "after delete", command);
    let turn = send_in_background(&daemon, &thread, "after delete");
    let decided = answer_pending(&daemon, &thread, json!({"decision": "deny"})).await;
    assert_eq!(decided["decidedBy"], "person");
    assert_eq!(turn.await.unwrap().0, StatusCode::OK);
    daemon.stop().await;
}
