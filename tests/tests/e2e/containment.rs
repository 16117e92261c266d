//! A thread's model stays inside its thread (issue #23), tried as an attacker would against the
//! real CLI: listing and messaging another thread's live process, and the CLI's own tools that
//! start turns later (crons, wake-ups, watchers, background agents and shells). Each attack ran
//! against the CLI as children were started before containment, and succeeded there; here each
//! must end as a tool error the model reads, and every reply must answer its own message.
//!
//! The first test holds containment's classification to the pinned CLI: every built-in tool its
//! binary lists is either contained or known to act within its turn.
//!
//! The last test drives a raw CLI process without containment: a turn the CLI starts by itself
//! is seen, and its result never becomes a reply.

use std::sync::Arc;
use std::time::Duration;

use claude_cli::{CliError, CliProcess, CliTurn, Launch, SpawnOptions, Step, TurnEvents};
use serde_json::{json, Value};
use tokio_util::task::TaskTracker;

use harness_tests::cli::{claude_bin, cli_env};
use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::{eventually, eventually_async};
use orchestrator::config::{ApprovalMode, Config, Profile};
use orchestrator::launch::{CONTAINED_TOOLS, IN_TURN_TOOLS};

/// The tools of the CLI that reach other sessions or start turns, as the API request lists them.
const CROSSING: &[&str] = &[
    "ListAgents",
    "SendMessage",
    "CronCreate",
    "ScheduleWakeup",
    "Monitor",
];

/// Every name in the pinned CLI's own table of built-in tools is in exactly one of
/// `CONTAINED_TOOLS` and `IN_TURN_TOOLS`, and neither names a tool the CLI no longer has: a new
/// CLI's new tool fails here, named, before any thread can call it uncontained.
#[tokio::test]
async fn every_builtin_tool_of_the_pinned_cli_is_classified() {
    let table = tokio::task::spawn_blocking(|| {
        let bin = claude_bin()?;
        harness_tests::cli::builtin_tools::read(&bin)
    })
    .await
    .expect("the scan does not panic")
    .expect("the pinned CLI's table of built-in tools");
    let mut problems = Vec::new();
    for tool in &table.names {
        let contained = CONTAINED_TOOLS.contains(&tool.as_str());
        let in_turn = IN_TURN_TOOLS.contains(&tool.as_str());
        match (contained, in_turn) {
            (true, false) | (false, true) => {}
            (false, false) => problems.push(format!(
                "`{tool}` is a built-in tool of the CLI that containment does not classify: read \
                 what it reaches (docs/cli-upgrades.md, step 3) and add it to \
                 orchestrator::launch::CONTAINED_TOOLS (another session, a later turn, a channel \
                 out of the thread) or IN_TURN_TOOLS (only within its turn)"
            )),
            (true, true) => problems.push(format!(
                "`{tool}` is in both CONTAINED_TOOLS and IN_TURN_TOOLS: keep it in one"
            )),
        }
    }
    for tool in CONTAINED_TOOLS.iter().chain(IN_TURN_TOOLS) {
        if !table.names.contains(*tool) {
            problems.push(format!(
                "`{tool}` is classified but the CLI has no built-in tool of that name (any more): \
                 remove it, or map it if it was renamed (aliases: {:?})",
                table.aliases
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the pinned CLI's {} built-in tools and containment disagree:\n{}",
        table.names.len(),
        problems.join("\n")
    );
}

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
    let folder = daemon.thread_folder(&thread);
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
/// start a turn of its own after ours ended. That turn's lines come out as a [`CliTurn`], never
/// in a turn of ours, whose reply stays its own; with nobody taking such turns, the process
/// stops pairing and must take no further turn.
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
        external_mcp_servers: None,
        agents: None,
        hooks: claude_cli::Hooks::default(),
        confine: None,
        managed_settings: None,
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
    let mut cli_turns = started.cli_turns;
    // Allow whatever the CLI asks about, as a host with no approvals would.
    let mut requests = started.requests;
    tokio::spawn(async move {
        while let Some(request) = requests.recv().await {
            let input = request.request["input"].clone();
            request.respond(Ok(json!({"behavior": "allow", "updatedInput": input})));
        }
    });
    let background = |prompt: &str| {
        Reply::tool_use(
            "Agent",
            json!({"description": "bg", "prompt": prompt, "subagent_type": "general-purpose", "run_in_background": true}),
        )
    };
    mock.once_when_prompt_contains("start the background agent", background("LATE-WORK-1"));
    let first = run_turn(&process, "start the background agent")
        .await
        .expect("our own turn pairs");
    assert!(first.contains("tool said"), "{first}");

    // A turn of ours sent now waits in the CLI's queue behind the CLI-started turn, or runs
    // before it: either way its reply is its own, and the CLI's turn comes out on its own.
    let second = run_turn(&process, "our second message")
        .await
        .expect("our second turn pairs");
    assert!(
        second.contains("our second message"),
        "took another's reply: {second}"
    );
    let own: CliTurn = tokio::time::timeout(Duration::from_secs(60), cli_turns.recv())
        .await
        .expect("the CLI-started turn")
        .expect("a turn");
    assert_eq!(own.source, "task_notification");
    drain(own.events).await.expect("the CLI-started turn ends");
    assert!(process.pairs());

    // Nobody takes such turns any more: the next one leaves the process unpaired.
    drop(cli_turns);
    mock.once_when_prompt_contains("another background agent", background("LATE-WORK-2"));
    run_turn(&process, "another background agent")
        .await
        .expect("our turn pairs");
    tokio::time::timeout(Duration::from_secs(60), process.wait_unpaired())
        .await
        .expect("the unclaimed turn is noticed");
    assert!(!process.pairs());
    process.kill();
    tasks.close();
}

/// Reads a turn to its result: the reply text.
async fn drain(mut turn: TurnEvents) -> Result<String, CliError> {
    loop {
        match tokio::time::timeout(Duration::from_secs(60), turn.next())
            .await
            .expect("the turn ends")?
        {
            Step::Done(result) => return Ok(result.text.unwrap_or_default()),
            Step::Event(_) | Step::ModelCall(_) | Step::Alive => {}
        }
    }
}

/// Runs one turn of ours to its result: the reply text, or why there is none.
async fn run_turn(process: &CliProcess, prompt: &str) -> Result<String, CliError> {
    drain(process.turn(&prompt.into()).await?).await
}

/// The scheduling tools turned on, as an operator may: every turn the CLI starts by itself.
fn scheduling(config: &mut Config) {
    standard(config);
    config.claude.scheduling_tools = true;
    config.approvals.mode = ApprovalMode::Allow;
}

/// The thread's messages, oldest first.
async fn messages_of(daemon: &TestDaemon, thread: &str) -> Vec<Value> {
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// Waits for a finished turn of `thread` that the CLI started by itself for `source` (the
/// message that starts it names it), and returns that message and its reply.
async fn cli_turn_from(
    daemon: &TestDaemon,
    thread: &str,
    source: &str,
    within: Duration,
) -> (Value, Value) {
    let found = std::sync::Mutex::new(None);
    let what = format!("a CLI turn from {source}");
    let polled = eventually_async(within, &what, || async {
        let messages = messages_of(daemon, thread).await;
        let started = messages.iter().find(|m| {
            m["role"] == "user"
                && m["origin"] == "cli"
                && m["content"].as_str().is_some_and(|c| c.contains(source))
        });
        let reply = started.and_then(|s| messages.iter().find(|m| m["replyTo"] == s["id"]));
        let pair = started.zip(reply).map(|(s, r)| (s.clone(), r.clone()));
        let done = pair.is_some();
        *found.lock().expect("not poisoned") = pair;
        done
    })
    .await;
    if let Err(err) = polled {
        panic!("{err:#}");
    }
    let pair = found.lock().expect("not poisoned").take();
    pair.expect("found")
}

/// With `claude.scheduling_tools`, a background agent, a cron and a wake-up each make the CLI
/// start a turn of its own: each is recorded in the thread (origin `cli`, its source, its reply
/// with usage, `turn_started` … `turn_finished`), and the user's messages still get their own
/// replies. The peers stay out of reach. While a cron waits, the process is not pushed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_scheduling_tools_the_clis_own_turns_are_recorded_and_metered() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |config| {
        scheduling(config);
        config.pool.max_capacity = 1;
        config.pool.prewarm_evicts_after = Duration::ZERO;
        // Far below the wait for the cron: the process must not expire while its CLI holds
        // the cron and the wake-up.
        config.pool.idle_ttl = Duration::from_secs(4);
    })
    .await;
    let thread = daemon.create_thread().await;

    // A background agent: its notice starts a turn once ours is over.
    mock.once_when_prompt_contains(
        "start the background agent",
        Reply::tool_use(
            "Agent",
            json!({"description": "bg", "prompt": "LATE-AGENT-WORK", "subagent_type": "general-purpose", "run_in_background": true}),
        ),
    );
    let launched = daemon.reply(&thread, "start the background agent").await;
    assert!(launched.contains("launched"), "{launched}");
    let (notice, notice_reply) = cli_turn_from(
        &daemon,
        &thread,
        "task_notification",
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(notice["origin"], "cli");
    assert_eq!(notice["role"], "user");
    assert_eq!(notice["status"], "done");
    assert!(
        notice["content"]
            .as_str()
            .unwrap_or("")
            .contains("task_notification"),
        "{notice}"
    );
    assert!(
        notice_reply["usage"]["costUsd"]
            .as_f64()
            .is_some_and(|c| c > 0.0),
        "{notice_reply}"
    );
    let after = daemon.reply(&thread, "plain after the agent").await;
    assert!(after.contains("plain after the agent"), "{after}");

    // A one-shot cron for the next minute and a wake-up a minute on, pending together.
    for (trigger, tool, input) in [
        (
            "schedule a cron",
            "CronCreate",
            json!({"cron": "* * * * *", "prompt": "CRON-PROMPT-31", "recurring": false}),
        ),
        (
            "schedule a wake-up",
            "ScheduleWakeup",
            json!({"delaySeconds": 60, "prompt": "WAKE-PROMPT-32", "reason": "later"}),
        ),
    ] {
        mock.once_when_prompt_contains(trigger, Reply::tool_use(tool, input));
        let reply = daemon.reply(&thread, trigger).await;
        assert!(!reply.contains("No such tool"), "{reply}");
    }
    // The CLI reports the cron pending: the process is never pushed out for another thread.
    let (_, pool) = daemon.get("/api/pool").await;
    let ours = pool["processes"]
        .as_array()
        .and_then(|list| list.iter().find(|p| p["threadId"] == thread.as_str()))
        .cloned()
        .unwrap_or_default();
    assert!(
        ours["pendingWork"].as_u64().is_some_and(|n| n > 0),
        "{pool}"
    );
    let pid = daemon.pid_of(&thread).expect("the thread's process");
    let other = daemon.create_thread().await;
    let (status, body) = daemon
        .post("/api/prewarm", json!({"threadId": other}))
        .await;
    assert_eq!(status, 202, "{body}");
    eventually(Duration::from_secs(10), "the prewarm is skipped", || {
        daemon.counts().prewarms_skipped == 1
    })
    .await
    .unwrap();
    assert_eq!(
        daemon.pid_of(&thread),
        Some(pid),
        "the process with a cron stays"
    );

    let (cron, cron_reply) =
        cli_turn_from(&daemon, &thread, "schedule_wakeup", Duration::from_secs(75)).await;
    assert!(
        cron["content"]
            .as_str()
            .unwrap_or("")
            .contains("schedule_wakeup"),
        "{cron}"
    );
    assert!(
        cron_reply["usage"]["costUsd"].as_f64().is_some(),
        "{cron_reply}"
    );
    let (wake, _) = cli_turn_from(&daemon, &thread, "loop_wakeup", Duration::from_secs(150)).await;
    // One process served all of it, idle for far longer than `pool.idle_ttl` in between.
    assert_eq!(daemon.spawns(), 1);
    // Each ran its own prompt.
    for prompt in ["CRON-PROMPT-31", "WAKE-PROMPT-32"] {
        assert!(
            mock.message_requests()
                .iter()
                .any(|r| r.all_text().contains(prompt)),
            "{prompt} never reached the model"
        );
    }
    assert!(
        wake["content"]
            .as_str()
            .unwrap_or("")
            .contains("loop_wakeup"),
        "{wake}"
    );

    // Every turn on the event stream: a `turn_started` with origin `cli` and its source, ended.
    let events = crate::support::stored_events(&daemon, &thread).await;
    for started in [&notice, &cron, &wake] {
        let id = &started["id"];
        let begun = events
            .iter()
            .find(|e| e.kind == "turn_started" && &e.data["messageId"] == id)
            .expect("turn_started");
        assert_eq!(begun.data["origin"], "cli");
        assert!(begun.data["source"].is_string());
        assert!(events
            .iter()
            .any(|e| e.kind == "turn_finished" && &e.data["messageId"] == id));
    }
    let last = daemon.reply(&thread, "plain at the end").await;
    assert!(last.contains("plain at the end"), "{last}");
    assert_replies_pair(&daemon, &thread).await;
    // The peers stay out of reach.
    mock.once_when_prompt_contains("list the peers", Reply::tool_use("ListAgents", json!({})));
    let listed = daemon.reply(&thread, "list the peers").await;
    assert!(
        listed.contains("No such tool available: ListAgents"),
        "{listed}"
    );
    daemon.stop().await;
}

/// A thread over its budget has the CLI-started turn stopped as it starts: recorded as refused,
/// with what it spent metered. The model gateway refuses every model request of the spent
/// thread, so the CLI-started turn never reaches the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_over_budget_has_the_clis_own_turn_refused() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, scheduling).await;
    let thread = daemon.create_thread().await;
    mock.once_when_prompt_contains(
        "start the background agent",
        Reply::tool_use(
            "Agent",
            json!({"description": "bg", "prompt": "OVER-BUDGET-WORK", "subagent_type": "general-purpose", "run_in_background": true}),
        ),
    );
    // The agent works for a while: long enough for the budget to be spent meanwhile.
    mock.once_when_prompt_contains(
        "OVER-BUDGET-WORK",
        Reply::slow_text(["agent ", "done"], Duration::from_millis(1500)),
    );
    daemon.reply(&thread, "start the background agent").await;
    let (status, body) = daemon
        .patch(
            &format!("/api/threads/{thread}"),
            json!({"maxBudgetUsd": 0.000001}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let refused = std::sync::Mutex::new(Value::Null);
    eventually_async(
        Duration::from_secs(60),
        "the CLI-started turn refused",
        || async {
            let messages = messages_of(&daemon, &thread).await;
            let found = messages
                .iter()
                .find(|m| m["origin"] == "cli" && m["role"] == "user" && m["status"] != "pending")
                .cloned();
            let done = found.is_some();
            if let Some(found) = found {
                *refused.lock().unwrap() = found;
            }
            done
        },
    )
    .await
    .unwrap();
    let refused = refused.lock().unwrap().clone();
    assert_eq!(refused["status"], "refused", "{refused}");
    // The turn's end is stored just after its message.
    let failed = std::sync::Mutex::new(None);
    eventually_async(Duration::from_secs(10), "its turn_failed", || async {
        let events = crate::support::stored_events(&daemon, &thread).await;
        *failed.lock().unwrap() = events
            .into_iter()
            .find(|e| e.kind == "turn_failed" && e.data["messageId"] == refused["id"]);
        failed.lock().unwrap().is_some()
    })
    .await
    .unwrap();
    let failed = failed.lock().unwrap().take().expect("turn_failed");
    assert_eq!(failed.data["status"], "refused");
    assert_eq!(failed.data["budget"]["budget"], "thread");
    // No reply was stored for it, and its process is gone with what would start the next one.
    let messages = messages_of(&daemon, &thread).await;
    assert!(!messages.iter().any(|m| m["replyTo"] == refused["id"]));
    eventually(Duration::from_secs(10), "the process let go", || {
        daemon.pid_of(&thread).is_none()
    })
    .await
    .expect("the process is let go");
    // The user's turn and the agent reached the model; the CLI-started turn did not.
    let asked: Vec<String> = mock
        .message_requests()
        .iter()
        .map(|r| r.last_user_text())
        .collect();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert!(
        asked.iter().any(|t| t.contains("OVER-BUDGET-WORK")),
        "{asked:?}"
    );
    daemon.stop().await;
}
