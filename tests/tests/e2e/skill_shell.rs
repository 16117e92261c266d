//! A skill's shell commands go through the approvals (issue #50): the real CLI (2.1.332) asks
//! the daemon about each `` !`cmd` `` of a skill with its `PreSkillShellCommand` hook, and the
//! daemon decides it as a `Bash` call of that command, with the same rules, mode, people and
//! audit. The skills come from a profile's `plugin_dirs`; the mock's model loads them with the
//! CLI's `Skill` tool.

use std::path::{Path, PathBuf};

use reqwest::StatusCode;
use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use orchestrator::config::{ApprovalMode, ApprovalRule, Config, ProfileConfig, RuleDecision};

use crate::approvals::{all_permissions, decisions, pending_one, send_in_background};

/// A plugin folder `helpers` with one skill per `(name, body)`.
fn plugin_with(root: &Path, skills: &[(&str, &str)]) -> PathBuf {
    let written = "the plugin folder can be written";
    let root = root.canonicalize().expect(written);
    std::fs::create_dir_all(root.join(".claude-plugin")).expect(written);
    std::fs::write(
        root.join(".claude-plugin/plugin.json"),
        r#"{"name": "helpers", "version": "1.0.0", "description": "test helpers"}"#,
    )
    .expect(written);
    for (name, body) in skills {
        let dir = root.join("skills").join(name);
        std::fs::create_dir_all(&dir).expect(written);
        let text = format!("---\nname: {name}\ndescription: Shows a marker\n---\n{body}\n");
        std::fs::write(dir.join("SKILL.md"), text).expect(written);
    }
    root
}

/// A daemon whose profile `skilled` loads `plugin` and offers `Bash` and `Skill`, with the
/// walls on; the approvals as `tweak` sets them.
async fn skilled_daemon(
    mock: &MockApi,
    plugin: PathBuf,
    tweak: impl FnOnce(&mut Config),
) -> TestDaemon {
    TestDaemon::start(mock, move |c| {
        c.sandbox.enabled = true;
        c.profiles.insert(
            "skilled".into(),
            ProfileConfig {
                plugin_dirs: vec![plugin],
                builtin_tools: Some("Bash,Skill".into()),
                ..Default::default()
            },
        );
        tweak(c);
    })
    .await
}

/// The model loads the skill `helpers:NAME` when the prompt contains `trigger`.
fn skill_on(mock: &MockApi, trigger: &str, name: &str) {
    mock.once_when_prompt_contains(
        trigger,
        Reply::tool_use("Skill", json!({"skill": format!("helpers:{name}")})),
    );
}

/// The skill's text as the model read it: the last user text that holds `heading`.
fn skill_text(mock: &MockApi, heading: &str) -> String {
    mock.message_requests()
        .iter()
        .map(|r| r.last_user_text())
        .rfind(|text| text.contains(heading))
        .unwrap_or_else(|| panic!("no request held the skill's text `{heading}`"))
}

fn rule(tool: &str, decision: RuleDecision) -> ApprovalRule {
    ApprovalRule {
        tool: tool.into(),
        decision,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skills_shell_command_is_denied_by_a_deny_rule_and_run_by_an_allow_rule() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin_with(
        dir.path(),
        &[
            ("show-allowed", "Allowed says: !`echo allowed-marker`"),
            ("show-denied", "Denied says: !`echo rm denied-marker`"),
        ],
    );
    let mock = MockApi::start().await;
    // `mode = deny`: only the rules let a command run. The CLI reads `Bash(rm:*)` as a prefix, so
    // it lets `echo rm …` through to the daemon, whose deny rule sees the word `rm` anywhere.
    let daemon = skilled_daemon(&mock, plugin, |c| {
        c.approvals.rules = vec![
            rule("Bash(echo allowed-marker)", RuleDecision::Allow),
            rule("Bash(rm:*)", RuleDecision::Deny),
        ];
    })
    .await;
    let (status, thread) = daemon
        .post("/api/threads", json!({"profile": "skilled"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{thread}");
    let thread = thread["id"].as_str().unwrap().to_owned();

    skill_on(&mock, "use the allowed skill", "show-allowed");
    daemon.reply(&thread, "use the allowed skill").await;
    let text = skill_text(&mock, "Allowed says:");
    assert!(
        text.contains("Allowed says: allowed-marker"),
        "the allowed command ran and its output took its place: {text}"
    );

    skill_on(&mock, "use the denied skill", "show-denied");
    daemon.reply(&thread, "use the denied skill").await;
    let text = skill_text(&mock, "Denied says:");
    assert!(
        text.contains("Denied says: [not run: blocked by hook:") && text.contains("Bash(rm:*)"),
        "the denied command did not run, and the model reads the rule: {text}"
    );
    assert!(!text.contains("rm denied-marker\n"), "{text}");

    // Both decisions are stored as a `Bash` call's are, with the skill they came from.
    let all = all_permissions(&daemon, &thread).await;
    let decided: Vec<_> = all
        .iter()
        .map(|p| {
            (
                p["toolName"].clone(),
                p["input"]["command"].clone(),
                p["input"]["skill"].clone(),
                p["status"].clone(),
                p["decidedBy"].clone(),
            )
        })
        .collect();
    assert_eq!(
        decided,
        [
            (
                json!("Bash"),
                json!("echo allowed-marker"),
                json!("helpers:show-allowed"),
                json!("allowed"),
                json!("rule")
            ),
            (
                json!("Bash"),
                json!("echo rm denied-marker"),
                json!("helpers:show-denied"),
                json!("denied"),
                json!("rule")
            ),
        ],
        "{all:?}"
    );
    for p in &all {
        assert!(p["toolUseId"].is_string(), "the command's id: {p}");
    }
    assert_eq!(decisions(&daemon, "allow", "rule").await, 1);
    assert_eq!(decisions(&daemon, "deny", "rule").await, 1);
    // The commands ran inside the thread's walls: the CLI's whole process tree is walled.
    let (_, pool) = daemon.get("/api/pool").await;
    let processes = pool["processes"].as_array().expect("processes");
    assert!(!processes.is_empty(), "{pool}");
    for process in processes {
        assert_eq!(process["walls"]["limitsHeldBy"], "cgroup", "{pool}");
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_ask_mode_a_person_decides_a_skills_shell_command() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin_with(
        dir.path(),
        &[("show-asked", "Asked says: !`echo asked-marker`")],
    );
    let mock = MockApi::start().await;
    let daemon = skilled_daemon(&mock, plugin, |c| c.approvals.mode = ApprovalMode::Ask).await;
    let (_, thread) = daemon
        .post("/api/threads", json!({"profile": "skilled"}))
        .await;
    let thread = thread["id"].as_str().unwrap().to_owned();
    skill_on(&mock, "use the asked skill", "show-asked");
    let turn = send_in_background(&daemon, &thread, "use the asked skill");
    let pending = pending_one(&daemon, &thread).await;
    assert_eq!(pending["toolName"], "Bash", "{pending}");
    assert_eq!(
        pending["input"],
        json!({"command": "echo asked-marker", "skill": "helpers:show-asked"})
    );
    crate::support::wait_for_event(
        &daemon,
        &thread,
        "permission_requested",
        0,
        std::time::Duration::from_secs(5),
    )
    .await;
    let id = pending["requestId"].as_str().unwrap();
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/permissions/{id}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["decidedBy"], "person");
    let (status, body) = turn.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let text = skill_text(&mock, "Asked says:");
    assert!(text.contains("Asked says: asked-marker"), "{text}");
    assert_eq!(decisions(&daemon, "allow", "person").await, 1);
    daemon.stop().await;
}
