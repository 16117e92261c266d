//! A thread's model stays inside its thread (issue #23), tried as an attacker would against the
//! real CLI: listing and messaging another thread's live process, and the CLI's own tools that
//! start turns later (crons, wake-ups, watchers, background agents and shells). Each attack ran
//! against the CLI as children were started before containment, and succeeded there; here each
//! must end as a tool error the model reads, and every reply must answer its own message.
//!
//! The last test drives a raw CLI process without containment: a turn the CLI starts by itself
//! is seen, and its result never becomes a reply.

use std::sync::Arc;
use std::time::Duration;

use claude_cli::{CliError, CliProcess, Launch, SpawnOptions, Step};
use serde_json::{json, Value};
use tokio_util::task::TaskTracker;

use harness_tests::cli::{claude_bin, cli_env};
use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use orchestrator::config::{ApprovalMode, Config, Profile};
use orchestrator::launch::CONTAINED_TOOLS;

/// The tools of the CLI that reach other sessions or start turns, as the API request lists them.
const CROSSING: &[&str] = &[
    "ListAgents",
    "SendMessage",
    "CronCreate",
    "ScheduleWakeup",
    "Monitor",
];

/// The standard profile with the CLI's built-in tools on, as the daemon's defaults run it.
fn standard(config: &mut Config) {
    config.claude.builtin_tools = None;
}

/// The lean profile, with the built-in tools an operator may give it back.
fn lean_with_tools(config: &mut Config) {
    config.claude.profile = Profile::Lean;
    config.claude.builtin_tools = Some("default".into());
}

/// The lean profile as it comes: no built-in tools at all.
fn lean(config: &mut Config) {
    config.claude.profile = Profile::Lean;
    config.claude.builtin_tools = None;
}

/// Thread A's model lists the live sessions and messages thread B's; B's next reply must answer
/// B's own message, and nothing A wrote may reach B's model.
async fn a_thread_cannot_reach_another(tweak: fn(&mut Config)) {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, tweak).await;
    let victim = daemon.create_thread().await;
    let first = daemon.reply(&victim, "victim warms up").await;
    assert!(first.contains("victim warms up"), "{first}");
    let attacker = daemon.create_thread().await;

    mock.once_when_prompt_contains("list the peers", Reply::tool_use("ListAgents", json!({})));
    let listed = daemon.reply(&attacker, "list the peers").await;
    assert!(
        listed.contains("No such tool available: ListAgents"),
        "the attacker must not see other sessions: {listed}"
    );
    let injected = "INJECTED-BY-A-7731";
    for to in ["victim", "*", "main"] {
        let trigger = format!("message the peer {to}");
        mock.once_when_prompt_contains(
            &trigger,
            Reply::tool_use("SendMessage", json!({"to": to, "message": injected})),
        );
        let sent = daemon.reply(&attacker, &trigger).await;
        assert!(
            sent.contains("No such tool available: SendMessage"),
            "the attacker must not message another session: {sent}"
        );
    }

    // The victim's next message gets its own answer, and its model never saw A's text.
    let second = daemon.reply(&victim, "victim asks again").await;
    assert!(second.contains("victim asks again"), "{second}");
    for request in mock.message_requests() {
        assert!(
            !request.last_user_text().contains(injected),
            "A's text reached a model: {}",
            request.last_user_text()
        );
        let tools = request.tool_names();
        for tool in CROSSING.iter().chain(CONTAINED_TOOLS) {
            assert!(
                !tools.iter().any(|t| t == tool),
                "{tool} offered: {tools:?}"
            );
        }
    }
    assert_replies_pair(&daemon, &victim).await;
    assert_replies_pair(&daemon, &attacker).await;
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_defaults_a_thread_cannot_list_or_message_another() {
    a_thread_cannot_reach_another(standard).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_lean_profile_a_thread_cannot_list_or_message_another() {
    a_thread_cannot_reach_another(lean_with_tools).await;
    a_thread_cannot_reach_another(lean).await;
}

/// Every assistant message of `thread` answers the user message right before it.
async fn assert_replies_pair(daemon: &TestDaemon, thread: &str) {
    let (_, stored) = daemon.get(&format!("/api/threads/{thread}")).await;
    let messages = stored["messages"].as_array().expect("messages");
    assert_eq!(messages.len() % 2, 0, "{stored}");
    for pair in messages.chunks(2) {
        assert_eq!(pair[0]["role"], "user", "{stored}");
        assert_eq!(pair[1]["role"], "assistant", "{stored}");
        assert_eq!(pair[1]["replyTo"], pair[0]["id"], "{stored}");
    }
}

/// The CLI's tools that make it start a turn later, with approvals that allow everything: each is
/// a tool error (or, for a background agent, a foreground one), no turn starts by itself, and the
/// next message gets its own reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_starts_no_turn_of_its_own() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |config| {
        standard(config);
        config.approvals.mode = ApprovalMode::Allow;
    })
    .await;
    let thread = daemon.create_thread().await;
    let attempts: [(&str, Value, &str); 6] = [
        (
            "CronCreate",
            json!({"cron": "* * * * *", "prompt": "CRON-FIRED", "recurring": true}),
            "No such tool available: CronCreate",
        ),
        (
            "CronCreate",
            json!({"cron": "* * * * *", "prompt": "CRON-FIRED", "recurring": true, "durable": true}),
            "No such tool available: CronCreate",
        ),
        (
            "ScheduleWakeup",
            json!({"delaySeconds": 60, "prompt": "WOKE-UP", "reason": "later"}),
            "No such tool available: ScheduleWakeup",
        ),
        (
            "Monitor",
            json!({"command": "echo watched", "description": "watch"}),
            "No such tool available: Monitor",
        ),
        (
            "Bash",
            json!({"command": "echo BG-SHELL-DONE", "run_in_background": true, "description": "bg"}),
            "run_in_background",
        ),
        (
            "Agent",
            json!({"description": "bg", "prompt": "BG-AGENT-WORK", "subagent_type": "general-purpose", "run_in_background": true}),
            "BG-AGENT-WORK",
        ),
    ];
    for (i, (tool, input, expect)) in attempts.iter().enumerate() {
        let trigger = format!("attempt {i} with {tool}");
        mock.once_when_prompt_contains(&trigger, Reply::tool_use(*tool, input.clone()));
        let reply = daemon.reply(&thread, &trigger).await;
        assert!(reply.contains(expect), "{tool}: {reply}");
        assert!(
            !reply.contains("launched") && !reply.contains("running in background"),
            "{tool} went to the background: {reply}"
        );
        let next = format!("plain message {i}");
        let answer = daemon.reply(&thread, &next).await;
        assert!(
            answer.contains(&next),
            "{tool}: the next reply is not its own: {answer}"
        );
    }
    // The background agent ran inside its turn: its request came before that turn's reply.
    let agent_at = mock
        .message_requests()
        .iter()
        .position(|r| r.all_text().contains("BG-AGENT-WORK"))
        .expect("the agent ran");
    let last_plain = mock
        .message_requests()
        .iter()
        .position(|r| r.last_user_text().contains("plain message 5"))
        .expect("the last message ran");
    assert!(agent_at < last_plain);
    // Nothing was scheduled into the thread's folder.
    let folder = orchestrator::launch::thread_workdir(
        &daemon.config.claude_workdir(),
        &plugin_contract::ThreadId::from_string(&thread),
    );
    assert!(
        !folder.join(".claude/scheduled_tasks.json").exists(),
        "a durable cron was written"
    );
    assert_replies_pair(&daemon, &thread).await;
    // One process served every turn: none was replaced for running a turn of its own.
    assert_eq!(daemon.spawns(), 1);
    daemon.stop().await;
}

/// Without containment (a raw process with the CLI's defaults), a background agent makes the CLI
/// start a turn of its own after ours ended. The process notices (`pairs` turns false), and a
/// turn that meets that turn's `result` fails as `Unpaired` rather than take it for its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_never_takes_a_result_that_answers_another_message() {
    let mock = MockApi::start().await;
    let bin = tokio::task::spawn_blocking(claude_bin)
        .await
        .expect("join")
        .expect("the claude CLI");
    let dir = tempfile::tempdir().expect("temp dir");
    let workdir = dir.path().join("work");
    std::fs::create_dir_all(&workdir).expect("workdir");
    let mut env = cli_env(&mock.url());
    env.push(("PATH".into(), std::env::var("PATH").unwrap_or_default()));
    let launch = Launch {
        bin,
        config_dir: dir.path().join("config"),
        workdir,
        env,
        ready_timeout: Duration::from_secs(60),
        sdk_mcp_servers: Vec::new(),
    };
    let options = SpawnOptions {
        permission_prompt_tool: Some("stdio".into()),
        ..Default::default()
    };
    let tasks = TaskTracker::new();
    let started = CliProcess::spawn(&launch, &options, None, &tasks)
        .await
        .expect("spawn");
    let process: Arc<CliProcess> = started.process;
    // Allow whatever the CLI asks about, as a host with no approvals would.
    let mut requests = started.requests;
    tokio::spawn(async move {
        while let Some(request) = requests.recv().await {
            let input = request.request["input"].clone();
            request.respond(Ok(json!({"behavior": "allow", "updatedInput": input})));
        }
    });
    mock.once_when_prompt_contains(
        "start the background agent",
        Reply::tool_use(
            "Agent",
            json!({"description": "bg", "prompt": "LATE-WORK", "subagent_type": "general-purpose", "run_in_background": true}),
        ),
    );
    let first = run_turn(&process, "start the background agent").await;
    let first = first.expect("our own turn pairs");
    assert!(first.contains("tool said"), "{first}");
    assert!(process.pairs());

    // The agent's completion makes the CLI start a turn nobody sent; a turn of ours sent now
    // either meets that turn's result (and fails as unpaired) or runs after it with its own.
    let second = run_turn(&process, "our second message").await;
    match &second {
        Ok(text) => assert!(
            text.contains("our second message"),
            "took another's reply: {text}"
        ),
        Err(CliError::Unpaired { got }) => {
            assert!(
                got.is_empty(),
                "the CLI's own turn names no message: {got:?}"
            )
        }
        Err(other) => panic!("{other}"),
    }
    tokio::time::timeout(Duration::from_secs(60), process.wait_unpaired())
        .await
        .expect("the CLI's own turn is noticed");
    assert!(!process.pairs());
    process.kill();
    tasks.close();
}

/// Runs one turn to its result: the reply text, or why there is none.
async fn run_turn(process: &CliProcess, prompt: &str) -> Result<String, CliError> {
    let mut turn = process.turn(prompt).await?;
    loop {
        match tokio::time::timeout(Duration::from_secs(60), turn.next())
            .await
            .expect("the turn ends")?
        {
            Step::Done(result) => return Ok(result.text.unwrap_or_default()),
            Step::Event(_) | Step::Alive => {}
        }
    }
}
