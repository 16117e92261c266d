//! The Managed Agents API (#48), driven by Anthropic's own Python SDK (`anthropic`, pinned in
//! [`SDK`], installed into `<target>/anthropic-python/venv` when missing) with only its base URL
//! changed, against the real CLI and the scripted Messages API: the quickstart (an agent, an
//! environment, a session, a message, its reply streamed, the idle), events listed a page at a
//! time and a stream resumed after it dropped, a tool that waits for a confirmation (allowed
//! once, denied once), an interrupt, and another tenant's key refused. `managed/python_sdk.py`
//! is the client; every event it reads is parsed by the SDK's own types.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{run_python_script, venv_with, PythonSdk};
use harness_tests::mock::{MockApi, Reply};
use orchestrator::config::Config;

/// The SDK the tests run, as it ships.
const SDK: &str = "anthropic==2.10.0";
const CLIENT: &str = include_str!("managed/python_sdk.py");

/// The venv's `python` with [`SDK`]; `None` (saying why) only when there is no `python3`.
async fn python(test: &str) -> Option<PathBuf> {
    let sdk = tokio::task::spawn_blocking(|| venv_with("anthropic-python", &[SDK]))
        .await
        .expect("installer task")
        .expect("the Anthropic Python SDK installs");
    match sdk {
        PythonSdk::Ready(python) => Some(python),
        PythonSdk::NoPython(why) => {
            eprintln!("SKIPPED {test}: python3 is not available ({why})");
            None
        }
    }
}

/// Runs the client's `scenario` with `fields` against `daemon` as `key`.
async fn run(
    python: &std::path::Path,
    daemon: &TestDaemon,
    key: &str,
    scenario: &str,
    fields: Value,
) -> Value {
    let mut config = json!({"base": daemon.base, "key": key, "scenario": scenario});
    if let (Some(config), Some(fields)) = (config.as_object_mut(), fields.as_object()) {
        config.extend(fields.clone());
    }
    run_python_script(python.to_path_buf(), "python_sdk.py", CLIENT, config)
        .await
        .unwrap_or_else(|err| panic!("the {scenario} scenario: {err:#}"))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Every event the client read parsed as a type of its own, not a fallback.
fn assert_typed(report: &Value, key: &str) {
    for class in strings(&report[key]) {
        assert!(
            class.starts_with("BetaManagedAgents") && !class.contains("Unknown"),
            "an event parsed as {class}: {report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_runs_the_quickstart_pages_events_and_resumes_a_stream() {
    let Some(python) = python("managed::quickstart").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.when_prompt_contains("say hello", Reply::text("Hello from Harness."));
    mock.when_prompt_contains(
        "count slowly",
        Reply::slow_text(["one ", "two ", "three."], Duration::from_millis(300)),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let fields = json!({"prompt": "say hello", "second_prompt": "count slowly", "page_size": 2});
    let report = run(&python, &daemon, "any-key", "quickstart", fields).await;
    assert_eq!(report["status_before"], "idle", "{report}");
    // The message sent comes back on the stream too, then the turn.
    assert_eq!(
        strings(&report["events"]),
        [
            "user.message",
            "session.status_running",
            "agent.message",
            "session.status_idle"
        ],
        "{report}"
    );
    assert_eq!(strings(&report["messages"]), ["Hello from Harness."]);
    assert_eq!(report["stop_reason"], "end_turn");
    assert_eq!(report["status_after"], "idle");
    assert!(report["usage_output_tokens"].as_i64() > Some(0), "{report}");
    assert_typed(&report, "classes");
    assert_typed(&report, "listed_classes");
    // Listed a page of two at a time: the message sent, then what the stream showed.
    assert_eq!(
        strings(&report["listed"]),
        [
            "user.message",
            "session.status_running",
            "agent.message",
            "session.status_idle"
        ],
        "{report}"
    );
    let ids = strings(&report["listed_ids"]);
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(
        ids.len(),
        unique.len(),
        "each event once across pages: {ids:?}"
    );
    assert_eq!(
        (report["first_page"].as_i64(), report["has_next"].as_bool()),
        (Some(2), Some(true))
    );
    assert_eq!(strings(&report["only_messages"]), ["agent.message"]);
    // The second turn, read on a stream that dropped after one event and was resumed.
    assert_eq!(report["dropped_after"], "user.message", "{report}");
    assert_eq!(
        strings(&report["resumed_messages"]),
        ["one two three."],
        "{report}"
    );
    let resumed = strings(&report["resumed"]);
    assert_eq!(
        resumed.first().map(String::as_str),
        Some("user.message"),
        "{resumed:?}"
    );
    assert_eq!(
        resumed.last().map(String::as_str),
        Some("session.status_idle")
    );
    assert_eq!(report["archived"], "terminated");
    // The session is a thread of the daemon's own API, with both turns.
    let session = report["session"].as_str().expect("a session id");
    let thread = session.replacen("sesn_", "thr_", 1);
    let messages = crate::support::messages(&daemon, &thread).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
}

/// `Bash` asks (`always_ask`): the first call is allowed by the client's confirmation and runs;
/// the second is denied and does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_asks_waits_for_the_clients_confirmation() {
    let Some(python) = python("managed::confirmations").await else {
        return;
    };
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c: &mut Config| {
        c.claude.builtin_tools = Some("Bash".into());
    })
    .await;
    // In the session's own folder, where its walls let it write.
    for (trigger, file) in [
        ("touch allowed", "allowed.txt"),
        ("touch denied", "denied.txt"),
    ] {
        mock.once_when_prompt_contains(
            trigger,
            Reply::tool_use(
                "Bash",
                json!({"command": format!("touch {file}"), "description": "d"}),
            ),
        );
    }
    let fields = json!({"allow_prompt": "touch allowed", "deny_prompt": "touch denied"});
    let report = run(&python, &daemon, "any-key", "confirmations", fields).await;
    let outcomes = report["outcomes"].as_array().expect("two outcomes");
    for outcome in outcomes {
        assert_eq!(
            outcome["asked"],
            json!([{"name": "Bash", "permission": "ask"}]),
            "{report}"
        );
        assert_eq!(outcome["stop"], "end_turn", "{report}");
    }
    let thread = report["session"]
        .as_str()
        .unwrap()
        .replacen("sesn_", "thr_", 1);
    let folder = orchestrator::launch::thread_workdir(
        &daemon.config.claude_workdir(),
        &plugin_contract::ThreadId::from_string(thread),
    );
    assert!(
        folder.join("allowed.txt").exists(),
        "the allowed command ran: {report}"
    );
    assert!(
        !folder.join("denied.txt").exists(),
        "the denied command did not: {report}"
    );
    let messages = strings(&report["messages"]);
    assert!(
        messages[1].contains("not this one"),
        "the model read the refusal: {messages:?}"
    );
    assert_typed(&report, "classes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_the_running_turn() {
    let Some(python) = python("managed::interrupt").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.when_prompt_contains("talk forever", Reply::Hang);
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let report = run(
        &python,
        &daemon,
        "any-key",
        "interrupt",
        json!({"prompt": "talk forever"}),
    )
    .await;
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    let thread = report["session"]
        .as_str()
        .unwrap()
        .replacen("sesn_", "thr_", 1);
    let messages = crate::support::messages(&daemon, &thread).await;
    assert_eq!(messages[0]["status"], "interrupted", "{messages:?}");
}

/// A session made before a restart takes its next message after it: the daemon makes the
/// profile of its agent's version again when it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_goes_on_after_a_restart() {
    let Some(python) = python("managed::restart").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.when_prompt_contains("after the restart", Reply::text("Still here."));
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let made = run(&python, &daemon, "any-key", "made", json!({})).await;
    let daemon = daemon.restart().await;
    // Through the daemon's own API first: the profile was made at the start, not by the door.
    let thread = made["session"]
        .as_str()
        .unwrap()
        .replacen("sesn_", "thr_", 1);
    let (status, reply) = daemon.send(&thread, "after the restart, by /api").await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["message"]["content"], "Still here.", "{reply}");
    let fields = json!({"session": made["session"], "prompt": "after the restart"});
    let report = run(&python, &daemon, "any-key", "say", fields).await;
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    assert_eq!(strings(&report["messages"]), ["Still here."], "{report}");
}

/// A file uploaded with the SDK starts a session in its folder, where the agent reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_starts_with_an_uploaded_file() {
    let Some(python) = python("managed::file").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.once_when_prompt_contains(
        "read the data",
        Reply::tool_use(
            "Bash",
            json!({"command": "cat data/input.csv", "description": "d"}),
        ),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let fields = json!({"csv": "city,visits\nOslo,3\n", "prompt": "read the data"});
    let report = run(&python, &daemon, "any-key", "file", fields).await;
    assert_eq!(report["file"]["mime_type"], "text/csv", "{report}");
    assert_eq!(report["file"]["size"], 20, "{report}");
    assert_eq!(report["file"]["filename"], "input.csv", "{report}");
    let id = report["file"]["id"].clone();
    assert_eq!(
        report["resources"],
        json!([["file", id, "/data/input.csv"]]),
        "{report}"
    );
    // The model's Bash read it: the mock answers with the tool's result.
    let messages = strings(&report["messages"]);
    assert!(messages[0].contains("Oslo,3"), "{messages:?}");
}

/// A key's tenant owns what it makes: another tenant's key gets `not_found_error` for it, as
/// for what does not exist, and lists none of it; an unknown key is an authentication error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_key_finds_nothing() {
    let Some(python) = python("managed::tenants").await else {
        return;
    };
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c: &mut Config| {
        c.auth_token = Some(crate::tenants::OPERATOR.into());
    })
    .await;
    let scopes = &["threads:read", "threads:write"];
    let (acme, _) = crate::tenants::make_key(&daemon.base, "acme", scopes, json!({})).await;
    let (globex, _) = crate::tenants::make_key(&daemon.base, "globex", scopes, json!({})).await;
    let made = run(&python, &daemon, &acme, "made", json!({})).await;
    let fields = json!({"other_key": globex, "agent": made["agent"], "session": made["session"]});
    let report = run(&python, &daemon, &acme, "refused", fields).await;
    for name in ["agent", "session", "events"] {
        assert_eq!(report[name], "not_found:error", "{name}: {report}");
    }
    assert_eq!(report["listed_agents"], json!([]), "{report}");
    assert_eq!(report["bad_key"], "authentication_error");
    // The owner's key sees its own, through the daemon's API too.
    let (status, body, _) = crate::support::call(
        &daemon.base,
        Some(&acme),
        Method::GET,
        format!("/v1/agents/{}", made["agent"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["type"], "agent");
}
