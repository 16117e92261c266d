//! The Managed Agents API (#48), driven by Anthropic's own SDKs with only their base URL
//! changed, against the real CLI and the scripted Messages API: the Python SDK (`anthropic`,
//! pinned in [`SDK`], installed into `<target>/anthropic-python/venv` when missing) and the
//! TypeScript SDK (npm `@anthropic-ai/sdk`, pinned in [`TS_SDK`], installed into
//! `<target>/anthropic-node/` when missing). Each runs the quickstart (an agent, an environment,
//! a session, a message, its reply streamed with its model request's spans and their usage, the
//! idle), lists events a page at a time and resumes a stream after it dropped, a tool that waits
//! for a confirmation (allowed once, denied once), an interrupt, a session that starts with an
//! uploaded file, sessions archived and deleted under an open stream, a custom tool the client
//! answers, an agent's MCP server (another daemon's `/mcp`) whose tool the model calls, allowed
//! or confirmed, and another tenant's key refused.
//! `managed/python_sdk.py` and `managed/ts_sdk.mjs` are the clients. Every event the Python SDK
//! reads is parsed by its own types; the TypeScript SDK does not check at run time, so each
//! event's `type` and fields (and the objects it reads) are checked against what the installed
//! package's `.d.ts` declares.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{run_python_script, venv_with, PythonSdk};
use harness_tests::mock::{MockApi, MockUsage, Reply};
use harness_tests::node::{npm_with, NodePackages};
use orchestrator::config::Config;

/// The SDK the tests run, as it ships.
const SDK: &str = "anthropic==2.10.0";
const CLIENT: &str = include_str!("managed/python_sdk.py");

/// The TypeScript SDK the tests run, as it ships.
const TS_SDK: &str = "@anthropic-ai/sdk@1.10.0";
const TS_CLIENT: &str = include_str!("managed/ts_sdk.mjs");

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

/// `node` and the folder with [`TS_SDK`] installed (failing, saying what to install, without
/// Node.js and npm, as the other Node-based tests do).
async fn typescript() -> NodePackages {
    tokio::task::spawn_blocking(|| npm_with("anthropic-node", &[TS_SDK]))
        .await
        .expect("installer task")
        .expect("the Anthropic TypeScript SDK installs")
}

/// A client's argument: `scenario` against `daemon` as `key`, with `fields`.
fn config(daemon: &TestDaemon, key: &str, scenario: &str, fields: Value) -> Value {
    let mut config = json!({"base": daemon.base, "key": key, "scenario": scenario});
    if let (Some(config), Some(fields)) = (config.as_object_mut(), fields.as_object()) {
        config.extend(fields.clone());
    }
    config
}

/// Runs the Python client's `scenario` with `fields` against `daemon` as `key`.
async fn run(
    python: &std::path::Path,
    daemon: &TestDaemon,
    key: &str,
    scenario: &str,
    fields: Value,
) -> Value {
    let config = config(daemon, key, scenario, fields);
    run_python_script(python.to_path_buf(), "python_sdk.py", CLIENT, config)
        .await
        .unwrap_or_else(|err| panic!("the {scenario} scenario: {err:#}"))
}

/// Runs the TypeScript client's `scenario` with `fields` against `daemon` as `key`.
async fn run_ts(
    sdk: &NodePackages,
    daemon: &TestDaemon,
    key: &str,
    scenario: &str,
    fields: Value,
) -> Value {
    let config = config(daemon, key, scenario, fields);
    let sdk = sdk.clone();
    tokio::task::spawn_blocking(move || sdk.run_script("ts_sdk", TS_CLIENT, &config))
        .await
        .expect("the client's task")
        .unwrap_or_else(|err| panic!("the TypeScript {scenario} scenario: {err:#}"))
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

/// The installed TypeScript SDK's declarations (`.d.ts`) in `files`, under its
/// `resources/beta/`, as one text.
fn declarations(sdk: &NodePackages, files: &[&str]) -> String {
    let dir = sdk.package("@anthropic-ai/sdk").join("resources/beta");
    files
        .iter()
        .map(|file| {
            std::fs::read_to_string(dir.join(file))
                .unwrap_or_else(|err| panic!("{}: {err}", dir.join(file).display()))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The own fields of interface `name` in `source`, as declared (`id: string;`, `name?: ...`):
/// four spaces in; what is deeper belongs to nested types.
fn interface_fields<'a>(source: &'a str, name: &str) -> Vec<&'a str> {
    let body = source
        .split_once(&format!("export interface {name} {{\n"))
        .and_then(|(_, rest)| rest.split("\n}\n").next())
        .unwrap_or_else(|| panic!("the SDK does not declare interface {name}"));
    body.lines()
        .filter_map(|line| line.strip_prefix("    "))
        .filter(|line| line.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
        .collect()
}

/// The names of the fields among `fields` that are required (not marked `?`).
fn required(fields: &[&str]) -> Vec<String> {
    fields
        .iter()
        .filter_map(|f| f.split_once(": ").map(|(field, _)| field))
        .filter(|field| !field.ends_with('?'))
        .map(str::to_owned)
        .collect()
}

/// The events the installed TypeScript SDK declares in the union type `union` (in
/// `resources/beta/sessions/`): each member interface's `type` literal, with the fields it
/// requires.
fn declared_events(sdk: &NodePackages, union: &str) -> BTreeMap<String, Vec<String>> {
    let source = declarations(sdk, &["sessions/events.d.ts", "sessions/sessions.d.ts"]);
    let members = source
        .split_once(&format!("export type {union} = "))
        .and_then(|(_, rest)| rest.split(';').next())
        .unwrap_or_else(|| panic!("the SDK declares no {union}"));
    let mut declared = BTreeMap::new();
    for member in members.split('|').map(str::trim) {
        let name = member.rsplit('.').next().unwrap_or(member);
        let fields = interface_fields(&source, name);
        let kind = fields
            .iter()
            .find_map(|f| f.strip_prefix("type: '")?.strip_suffix("';"))
            .unwrap_or_else(|| panic!("{name} declares no `type` literal"));
        declared.insert(kind.to_owned(), required(&fields));
    }
    declared
}

/// The quickstart's objects: the agent, environment and session, each with the `.d.ts` (under
/// `resources/beta/`) and the interface the SDK declares it by.
const QUICKSTART_OBJECTS: &[(&str, &str, &str)] = &[
    ("agent", "agents/agents.d.ts", "BetaManagedAgentsAgent"),
    (
        "environment",
        "environments/environments.d.ts",
        "BetaEnvironment",
    ),
    (
        "session",
        "sessions/sessions.d.ts",
        "BetaManagedAgentsSession",
    ),
];

/// The usage of a `span.model_request_end` the quickstart listed.
const SPAN_OBJECTS: &[(&str, &str, &str)] = &[(
    "model_usage",
    "sessions/events.d.ts",
    "BetaManagedAgentsSpanModelUsage",
)];

/// The file scenario's objects: the file uploaded, the session's file resource, the session.
const FILE_OBJECTS: &[(&str, &str, &str)] = &[
    ("file", "files.d.ts", "BetaFileMetadata"),
    (
        "resource",
        "sessions/resources.d.ts",
        "BetaManagedAgentsFileResource",
    ),
    (
        "session",
        "sessions/sessions.d.ts",
        "BetaManagedAgentsSession",
    ),
];

/// The `objects` the client read (`report["objects"]`, the fields of each) have every field the
/// SDK's types for them require.
fn assert_objects_declared(sdk: &NodePackages, report: &Value, objects: &[(&str, &str, &str)]) {
    let mut gaps = BTreeMap::new();
    for &(object, file, interface) in objects {
        let source = declarations(sdk, &[file]);
        let fields = strings(&report["objects"][object]);
        assert!(!fields.is_empty(), "no {object} read: {report}");
        let missing: Vec<String> = required(&interface_fields(&source, interface))
            .into_iter()
            .filter(|f| !fields.contains(f))
            .collect();
        if !missing.is_empty() {
            gaps.insert(interface, missing);
        }
    }
    assert!(
        gaps.is_empty(),
        "fields the SDK's types require, missing: {gaps:?}"
    );
}

/// Every event in `report[key]` (a `{type, fields}` each) is one `union` declares, with every
/// field the SDK's type requires.
fn assert_declared(sdk: &NodePackages, union: &str, report: &Value, key: &str) {
    let declared = declared_events(sdk, union);
    let shapes = report[key].as_array().expect("the events' shapes");
    assert!(!shapes.is_empty(), "no events in {key}: {report}");
    let mut gaps = BTreeMap::new();
    for shape in shapes {
        let kind = shape["type"].as_str().unwrap_or_default();
        let required = declared.get(kind).unwrap_or_else(|| {
            panic!("{kind:?} is not an event type {union} declares: {declared:?}")
        });
        let fields = strings(&shape["fields"]);
        let missing: Vec<&String> = required.iter().filter(|f| !fields.contains(f)).collect();
        if !missing.is_empty() {
            gaps.insert(kind.to_owned(), missing);
        }
    }
    assert!(
        gaps.is_empty(),
        "fields the SDK's types require, missing from events: {gaps:?}"
    );
}

/// What the quickstart's model reports for every request.
const QUICKSTART_USAGE: MockUsage = MockUsage {
    input_tokens: 1234,
    output_tokens: 56,
    cache_read_input_tokens: 78,
    cache_creation_input_tokens: 9,
};

/// The quickstart's daemon: a reply to "say hello", a slow one to "count slowly", each request
/// reporting [`QUICKSTART_USAGE`].
async fn quickstart_daemon() -> (MockApi, TestDaemon) {
    let mock = MockApi::start().await;
    mock.report_usage(QUICKSTART_USAGE);
    mock.when_prompt_contains("say hello", Reply::text("Hello from Harness."));
    mock.when_prompt_contains(
        "count slowly",
        Reply::slow_text(["one ", "two ", "three."], Duration::from_millis(300)),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    (mock, daemon)
}

/// The event types of `value` without the model requests' spans, whose place among the others
/// is not fixed (a request's end and the message it brought are told by two processes).
fn without_spans(value: &Value) -> Vec<String> {
    let mut types = strings(value);
    types.retain(|t| !t.starts_with("span.model_request"));
    types
}

/// The first turn's model requests, listed: each start before its end, which names it, is no
/// error and carries the usage the model reported; the first starts before the message.
fn assert_spans(report: &Value) {
    let spans = report["listed_spans"].as_array().expect("the spans listed");
    let position = |id: &Value| spans.iter().position(|s| &s["id"] == id);
    let ends: Vec<&Value> = (spans.iter())
        .filter(|s| s["type"] == "span.model_request_end")
        .collect();
    assert!(!ends.is_empty(), "a request's end: {report}");
    assert_eq!(ends.len() * 2, spans.len(), "a start per end: {report}");
    let u = QUICKSTART_USAGE;
    let reported = json!([
        u.input_tokens,
        u.output_tokens,
        u.cache_read_input_tokens,
        u.cache_creation_input_tokens
    ]);
    for end in ends {
        let start = position(&end["start"]).expect("its start is listed");
        assert_eq!(spans[start]["type"], "span.model_request_start", "{report}");
        assert!(start < position(&end["id"]).unwrap_or(0), "{report}");
        assert_eq!(end["is_error"], false, "{report}");
        assert_eq!(end["usage"], reported, "{report}");
    }
    let listed = strings(&report["listed"]);
    let first = |kind: &str| listed.iter().position(|t| t == kind);
    let start = first("span.model_request_start");
    assert!(
        start.is_some_and(|start| Some(start) < first("agent.message")),
        "{listed:?}"
    );
    let streamed = strings(&report["events"]);
    assert!(
        streamed.iter().any(|t| t == "span.model_request_start"),
        "the stream shows the request: {streamed:?}"
    );
}

/// What either SDK saw of the quickstart's first turn and its events listed two at a time.
fn assert_quickstart(report: &Value) {
    let turn = [
        "user.message",
        "session.status_running",
        "agent.message",
        "session.status_idle",
    ];
    assert_eq!(report["status_before"], "idle", "{report}");
    // The message sent comes back on the stream too, then the turn.
    assert_eq!(without_spans(&report["events"]), turn, "{report}");
    assert_eq!(strings(&report["messages"]), ["Hello from Harness."]);
    assert_eq!(report["stop_reason"], "end_turn");
    assert_eq!(report["status_after"], "idle");
    assert!(report["usage_output_tokens"].as_i64() > Some(0), "{report}");
    // Listed a page of two at a time: the message sent, then what the stream showed.
    assert_eq!(without_spans(&report["listed"]), turn, "{report}");
    let ids = strings(&report["listed_ids"]);
    let mut unique = ids.clone();
    unique.sort();
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
    assert_eq!(report["archived"], "terminated");
    assert_spans(report);
}

/// The second turn, read on a stream that dropped after one event and was resumed: the history
/// listed, then the stream with what the history held skipped.
fn assert_resumed(report: &Value) {
    assert_eq!(report["dropped_after"], "user.message", "{report}");
    assert_eq!(
        strings(&report["resumed_messages"]),
        ["one two three."],
        "{report}"
    );
    let resumed = without_spans(&report["resumed"]);
    assert_eq!(
        resumed.first().map(String::as_str),
        Some("user.message"),
        "{resumed:?}"
    );
    assert_eq!(
        resumed.last().map(String::as_str),
        Some("session.status_idle")
    );
}

/// The quickstart's fields for either client: a first turn, a second read on a dropped stream.
fn quickstart_fields() -> Value {
    json!({"prompt": "say hello", "second_prompt": "count slowly", "page_size": 2})
}

/// The thread behind the report's session.
fn thread_of(report: &Value) -> String {
    report["session"]
        .as_str()
        .expect("a session id")
        .replacen("sesn_", "thr_", 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_runs_the_quickstart_pages_events_and_resumes_a_stream() {
    let Some(python) = python("managed::quickstart").await else {
        return;
    };
    let (_mock, daemon) = quickstart_daemon().await;
    let fields = quickstart_fields();
    let report = run(&python, &daemon, "any-key", "quickstart", fields).await;
    assert_quickstart(&report);
    assert_typed(&report, "classes");
    assert_typed(&report, "listed_classes");
    assert_resumed(&report);
    // The session is a thread of the daemon's own API, with both turns.
    let messages = crate::support::messages(&daemon, &thread_of(&report)).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_runs_the_quickstart_pages_events_and_resumes_a_stream() {
    let sdk = typescript().await;
    let (_mock, daemon) = quickstart_daemon().await;
    let report = run_ts(&sdk, &daemon, "any-key", "quickstart", quickstart_fields()).await;
    assert_quickstart(&report);
    assert_resumed(&report);
    assert_declared(
        &sdk,
        "BetaManagedAgentsStreamSessionEvents",
        &report,
        "shapes",
    );
    assert_declared(
        &sdk,
        "BetaManagedAgentsSessionEvent",
        &report,
        "listed_shapes",
    );
    assert_objects_declared(&sdk, &report, QUICKSTART_OBJECTS);
    assert_objects_declared(&sdk, &report, SPAN_OBJECTS);
    // The session is a thread of the daemon's own API, with both turns.
    let messages = crate::support::messages(&daemon, &thread_of(&report)).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
}

/// A daemon whose CLI has `Bash`, and a model that runs `touch allowed.txt` for "touch allowed"
/// and `touch denied.txt` for "touch denied", once each.
async fn bash_daemon() -> (MockApi, TestDaemon) {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c: &mut Config| {
        c.claude.builtin_tools = Some("Bash".into());
    })
    .await;
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
    (mock, daemon)
}

/// The confirmations scenario's prompts, for [`bash_daemon`]'s model.
fn confirmation_prompts() -> Value {
    json!({"allow_prompt": "touch allowed", "deny_prompt": "touch denied"})
}

/// Both calls asked; the allowed one ran in the session's own folder, the denied one did not
/// and the model read why.
fn assert_confirmations(daemon: &TestDaemon, report: &Value) {
    let outcomes = report["outcomes"].as_array().expect("two outcomes");
    assert_eq!(outcomes.len(), 2, "{report}");
    for outcome in outcomes {
        assert_eq!(
            outcome["asked"],
            json!([{"name": "Bash", "permission": "ask"}]),
            "{report}"
        );
        assert_eq!(outcome["stop"], "end_turn", "{report}");
    }
    let folder = daemon.thread_folder(&thread_of(report));
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
}

/// `Bash` asks (`always_ask`): the first call is allowed by the client's confirmation and runs;
/// the second is denied and does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_asks_waits_for_the_clients_confirmation() {
    let Some(python) = python("managed::confirmations").await else {
        return;
    };
    let (_mock, daemon) = bash_daemon().await;
    let fields = confirmation_prompts();
    let report = run(&python, &daemon, "any-key", "confirmations", fields).await;
    assert_confirmations(&daemon, &report);
    assert_typed(&report, "classes");
}

/// As [`a_tool_that_asks_waits_for_the_clients_confirmation`], with the TypeScript SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_runs_the_confirmations() {
    let sdk = typescript().await;
    let (_mock, daemon) = bash_daemon().await;
    let fields = confirmation_prompts();
    let report = run_ts(&sdk, &daemon, "any-key", "confirmations", fields).await;
    assert_confirmations(&daemon, &report);
    assert_declared(
        &sdk,
        "BetaManagedAgentsStreamSessionEvents",
        &report,
        "shapes",
    );
}

/// A daemon whose model never answers "talk forever".
async fn hanging_daemon() -> (MockApi, TestDaemon) {
    let mock = MockApi::start().await;
    mock.when_prompt_contains("talk forever", Reply::Hang);
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    (mock, daemon)
}

/// The turn ended with the interrupt, and the thread says so.
async fn assert_interrupted(daemon: &TestDaemon, report: &Value) {
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    let messages = crate::support::messages(daemon, &thread_of(report)).await;
    assert_eq!(messages[0]["status"], "interrupted", "{messages:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_the_running_turn() {
    let Some(python) = python("managed::interrupt").await else {
        return;
    };
    let (_mock, daemon) = hanging_daemon().await;
    let fields = json!({"prompt": "talk forever"});
    let report = run(&python, &daemon, "any-key", "interrupt", fields).await;
    assert_interrupted(&daemon, &report).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_runs_the_interrupt() {
    let sdk = typescript().await;
    let (_mock, daemon) = hanging_daemon().await;
    let fields = json!({"prompt": "talk forever"});
    let report = run_ts(&sdk, &daemon, "any-key", "interrupt", fields).await;
    assert_interrupted(&daemon, &report).await;
    assert_declared(
        &sdk,
        "BetaManagedAgentsStreamSessionEvents",
        &report,
        "shapes",
    );
}

/// A daemon with tenants, and keys of two: acme's, then globex's.
async fn tenants_daemon() -> (MockApi, TestDaemon, String, String) {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c: &mut Config| {
        c.auth_token = Some(crate::tenants::OPERATOR.into());
    })
    .await;
    let scopes = &["threads:read", "threads:write"];
    let (acme, _) = crate::tenants::make_key(&daemon.base, "acme", scopes, json!({})).await;
    let (globex, _) = crate::tenants::make_key(&daemon.base, "globex", scopes, json!({})).await;
    (mock, daemon, acme, globex)
}

/// Both keys' changes are in the audit log as `/api`'s are, the other tenant's refusal too,
/// naming the session's thread.
async fn assert_audited(daemon: &TestDaemon, made: &Value) {
    let (status, audit, _) = crate::support::call(
        &daemon.base,
        Some(crate::tenants::OPERATOR),
        Method::GET,
        "/api/audit",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    let thread = thread_of(made);
    let entries = crate::audit::summary(audit["entries"].as_array().expect("entries"));
    for expected in [
        ("POST /v1/agents".to_owned(), 200, Value::Null),
        ("POST /v1/sessions".to_owned(), 200, Value::Null),
        (
            "POST /v1/sessions/{session_id}/events".to_owned(),
            404,
            json!(thread),
        ),
    ] {
        assert!(entries.contains(&expected), "{expected:?} in {entries:?}");
    }
}

/// The owner's key sees its own agent, through the daemon's API too.
async fn assert_owner_sees(daemon: &TestDaemon, key: &str, agent: &Value) {
    let (status, body, _) = crate::support::call(
        &daemon.base,
        Some(key),
        Method::GET,
        format!("/v1/agents/{}", agent.as_str().expect("an agent id")),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["type"], "agent");
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
    let thread = thread_of(&made);
    let (status, reply) = daemon.send(&thread, "after the restart, by /api").await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["message"]["content"], "Still here.", "{reply}");
    let fields = json!({"session": made["session"], "prompt": "after the restart"});
    let report = run(&python, &daemon, "any-key", "say", fields).await;
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    assert_eq!(strings(&report["messages"]), ["Still here."], "{report}");
}

/// A daemon whose model runs `cat data/input.csv` for "read the data", once.
async fn file_daemon() -> (MockApi, TestDaemon) {
    let mock = MockApi::start().await;
    mock.once_when_prompt_contains(
        "read the data",
        Reply::tool_use(
            "Bash",
            json!({"command": "cat data/input.csv", "description": "d"}),
        ),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    (mock, daemon)
}

/// The file scenario's fields: the CSV to upload, and the prompt that reads it.
fn file_fields() -> Value {
    json!({"csv": "city,visits\nOslo,3\n", "prompt": "read the data"})
}

/// The file as uploaded, the session's resource naming it, and the agent's reply with what its
/// Bash read (the mock answers with the tool's result).
fn assert_file(report: &Value) {
    assert_eq!(report["file"]["mime_type"], "text/csv", "{report}");
    assert_eq!(report["file"]["size"], 19, "{report}");
    assert_eq!(report["file"]["filename"], "input.csv", "{report}");
    let id = report["file"]["id"].clone();
    assert_eq!(
        report["resources"],
        json!([["file", id, "/data/input.csv"]]),
        "{report}"
    );
    let messages = strings(&report["messages"]);
    assert!(
        messages.first().is_some_and(|m| m.contains("Oslo,3")),
        "{messages:?}"
    );
}

/// A file uploaded with the SDK starts a session in its folder, where the agent reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_starts_with_an_uploaded_file() {
    let Some(python) = python("managed::file").await else {
        return;
    };
    let (_mock, daemon) = file_daemon().await;
    let report = run(&python, &daemon, "any-key", "file", file_fields()).await;
    assert_file(&report);
    assert_typed(&report, "classes");
}

/// As [`a_session_starts_with_an_uploaded_file`], with the TypeScript SDK's `toFile`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_starts_a_session_with_an_uploaded_file() {
    let sdk = typescript().await;
    let (_mock, daemon) = file_daemon().await;
    let report = run_ts(&sdk, &daemon, "any-key", "file", file_fields()).await;
    assert_file(&report);
    assert_objects_declared(&sdk, &report, FILE_OBJECTS);
    assert_declared(
        &sdk,
        "BetaManagedAgentsStreamSessionEvents",
        &report,
        "shapes",
    );
}

/// With `event_deltas[]=agent.message`, a message streamed in pieces is previewed under the id
/// of the message that completes it (the one the list shows), and the SDK's accumulator folds
/// the pieces into its text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_previews_a_message_in_pieces() {
    let Some(python) = python("managed::previews").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.when_prompt_contains(
        "in pieces",
        Reply::slow_text(["one ", "two ", "three"], Duration::from_millis(100)),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let report = run(
        &python,
        &daemon,
        "any-key",
        "previews",
        json!({"prompt": "in pieces"}),
    )
    .await;
    let kinds = strings(&report["kinds"]);
    let deltas = kinds.iter().filter(|k| *k == "event_delta").count();
    assert!(deltas >= 2, "the pieces were previewed: {kinds:?}");
    let start = kinds
        .iter()
        .position(|k| k == "event_start")
        .expect("an event_start");
    let message = kinds
        .iter()
        .position(|k| k == "agent.message")
        .expect("the message");
    assert!(start < message, "{kinds:?}");
    let span = kinds.iter().position(|k| k == "span.model_request_start");
    assert!(
        span.is_some_and(|span| span < start),
        "the request starts before its message's preview: {kinds:?}"
    );
    let id = report["message"]["id"].clone();
    assert_eq!(report["started"], json!([id]), "{report}");
    assert_eq!(report["message"]["text"], "one two three");
    let snapshots = strings(&report["snapshots"]);
    assert_eq!(
        snapshots.last().map(String::as_str),
        Some("one two three"),
        "{snapshots:?}"
    );
    assert_eq!(
        report["listed_ids"],
        json!([id]),
        "the list names it the same: {report}"
    );
    assert_typed(&report, "classes");
}

/// A daemon for the terminated scenario: no message is sent.
async fn terminated_daemon() -> (MockApi, TestDaemon) {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    (mock, daemon)
}

/// Each session's open stream ended with `session.status_terminated`; the archived one says
/// `terminated` and lists it last.
fn assert_terminated(report: &Value) {
    assert_eq!(report["archive"], "session.status_terminated", "{report}");
    assert_eq!(report["delete"], "session.status_terminated", "{report}");
    assert_eq!(report["status"], "terminated", "{report}");
    assert_eq!(
        report["listed_last"],
        json!(["session.status_terminated"]),
        "{report}"
    );
}

/// A session archived while a stream is open on it, and another deleted, each end the stream
/// with `session.status_terminated`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archived_or_deleted_session_says_it_terminated() {
    let Some(python) = python("managed::terminated").await else {
        return;
    };
    let (_mock, daemon) = terminated_daemon().await;
    let report = run(&python, &daemon, "any-key", "terminated", json!({})).await;
    assert_terminated(&report);
    assert_typed(&report, "classes");
}

/// As [`an_archived_or_deleted_session_says_it_terminated`], with the TypeScript SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_sees_sessions_terminate() {
    let sdk = typescript().await;
    let (_mock, daemon) = terminated_daemon().await;
    let report = run_ts(&sdk, &daemon, "any-key", "terminated", json!({})).await;
    assert_terminated(&report);
    assert_declared(
        &sdk,
        "BetaManagedAgentsStreamSessionEvents",
        &report,
        "shapes",
    );
}

/// On two nodes, a message to a session through the node that does not own its thread runs on
/// the owner's warm process, and the stream on the other node shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_message_through_another_node_runs_on_the_owner() {
    let Some(python) = python("managed::cluster").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.when_prompt_contains("first on A", Reply::text("A answered."));
    mock.when_prompt_contains("then through B", Reply::text("A answered again."));
    let (a, b) = crate::cluster::two_nodes(&mock, Duration::from_secs(15)).await;
    let made = run(&python, &a, "any-key", "made", json!({})).await;
    let session = made["session"].clone();
    let first = run(
        &python,
        &a,
        "any-key",
        "say",
        json!({"session": session, "prompt": "first on A"}),
    )
    .await;
    assert_eq!(strings(&first["messages"]), ["A answered."], "{first}");
    let spawned = a.spawns();
    let report = run(
        &python,
        &b,
        "any-key",
        "say",
        json!({"session": session, "prompt": "then through B"}),
    )
    .await;
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    assert_eq!(
        strings(&report["messages"]),
        ["A answered again."],
        "{report}"
    );
    assert_eq!(b.spawns(), 0, "B started no process for A's session");
    assert_eq!(a.spawns(), spawned, "A's warm process served both turns");
    a.stop().await;
    b.stop().await;
}

/// A key's tenant owns what it makes: another tenant's key gets `not_found_error` for it, as
/// for what does not exist, and lists none of it; an unknown key is an authentication error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_key_finds_nothing() {
    let Some(python) = python("managed::tenants").await else {
        return;
    };
    let (_mock, daemon, acme, globex) = tenants_daemon().await;
    let made = run(&python, &daemon, &acme, "made", json!({})).await;
    let fields = json!({"other_key": globex, "agent": made["agent"], "session": made["session"]});
    let report = run(&python, &daemon, &acme, "refused", fields).await;
    for name in ["agent", "session", "events"] {
        assert_eq!(report[name], "not_found:error", "{name}: {report}");
    }
    assert_eq!(report["listed_agents"], json!([]), "{report}");
    assert_eq!(report["bad_key"], "authentication_error");
    assert_audited(&daemon, &made).await;
    assert_owner_sees(&daemon, &acme, &made["agent"]).await;
}

/// As [`another_tenants_key_finds_nothing`], with the TypeScript SDK: its `NotFoundError`
/// carries the body (`type: "error"`) and the error's own type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_runs_the_tenants() {
    let sdk = typescript().await;
    let (_mock, daemon, acme, globex) = tenants_daemon().await;
    let made = run_ts(&sdk, &daemon, &acme, "made", json!({})).await;
    let fields = json!({"other_key": globex, "agent": made["agent"], "session": made["session"]});
    let report = run_ts(&sdk, &daemon, &acme, "refused", fields).await;
    for name in ["agent", "session", "events"] {
        assert_eq!(
            report[name], "not_found:error:not_found_error",
            "{name}: {report}"
        );
    }
    assert_eq!(report["listed_agents"], json!([]), "{report}");
    assert_eq!(report["bad_key"], "authentication_error");
    assert_audited(&daemon, &made).await;
    assert_owner_sees(&daemon, &acme, &made["agent"]).await;
}

/// A daemon whose model does the work twice, and whose grader finds the first try wanting and
/// the second good.
async fn outcome_daemon() -> (MockApi, TestDaemon) {
    let mock = MockApi::start().await;
    mock.when_prompt_contains(
        "your work is graded against this rubric",
        Reply::text("fib.py is written."),
    );
    mock.when_prompt_contains("found it needs revision", Reply::text("fib.py is fixed."));
    mock.once_when_prompt_contains(
        "You are grading work",
        Reply::tool_use(
            "StructuredOutput",
            json!({"result": "needs_revision", "explanation": "fib(10) returns 89, not 55"}),
        ),
    );
    mock.when_prompt_contains(
        "You are grading work",
        Reply::tool_use(
            "StructuredOutput",
            json!({"result": "satisfied", "explanation": "every criterion holds"}),
        ),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    (mock, daemon)
}

const OUTCOME: &str = "Write fib.py with fib(n)";
const RUBRIC: &str = "- fib(10) is 55";

fn outcome_fields() -> Value {
    json!({"description": OUTCOME, "rubric": RUBRIC})
}

/// Each grader graded in a context of its own (one user message: the task, the rubric and the
/// agent's last word, no conversation), answering in the verdict's schema; the revision was
/// asked with the first grader's explanation; the graders are children of the session's
/// thread.
async fn assert_graded_apart(mock: &MockApi, daemon: &TestDaemon, thread: &str) {
    let requests = mock.message_requests();
    let graders: Vec<_> = requests
        .iter()
        .filter(|r| r.last_user_text().contains("You are grading work"))
        .collect();
    assert_eq!(graders.len(), 2, "two gradings");
    for grader in &graders {
        assert_eq!(grader.messages().len(), 1, "a fresh context");
        let text = grader.last_user_text();
        assert!(text.contains(OUTCOME) && text.contains(RUBRIC), "{text}");
        let offered = grader
            .tool("StructuredOutput")
            .expect("the verdict's schema");
        assert_eq!(
            offered["input_schema"]["required"],
            json!(["result", "explanation"])
        );
    }
    assert!(graders[0].last_user_text().contains("fib.py is written."));
    let revision = requests
        .iter()
        .find(|r| r.last_user_text().contains("found it needs revision"))
        .expect("a revision was asked");
    assert!(revision
        .last_user_text()
        .contains("fib(10) returns 89, not 55"));
    let graders = children_of(daemon, thread).await;
    let titles: Vec<&str> = graders.iter().filter_map(|t| t["title"].as_str()).collect();
    assert_eq!(titles.len(), 2, "{graders:?}");
    assert!(
        titles.iter().all(|t| t.starts_with("grader of outc_")),
        "{titles:?}"
    );
}

/// The threads whose parent is `thread` (its graders), as `/api` lists them.
async fn children_of(daemon: &TestDaemon, thread: &str) -> Vec<Value> {
    let (status, threads) = daemon.get("/api/threads?limit=100").await;
    assert_eq!(status, StatusCode::OK, "{threads}");
    let all = threads["threads"].as_array().cloned().unwrap_or_default();
    all.into_iter()
        .filter(|t| t["parentId"] == thread)
        .collect()
}

/// An outcome (`user.define_outcome`) is worked on and graded, revised with the grader's word,
/// and graded again until satisfied: the stream shows both evaluations and one idle at the end;
/// the session lists the outcome satisfied at iteration 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_is_graded_over_two_iterations() {
    let Some(python) = python("managed::outcome").await else {
        return;
    };
    let (mock, daemon) = outcome_daemon().await;
    let report = run(&python, &daemon, "any-key", "outcome", outcome_fields()).await;
    let outcome = report["sent"]["outcome_id"]
        .as_str()
        .expect("an outcome id");
    assert!(outcome.starts_with("outc_"), "{report}");
    assert_eq!(report["sent"]["id"], format!("sevt_{outcome}"));
    let iteration = [
        "session.status_running",
        "agent.message",
        "span.outcome_evaluation_start",
        "span.outcome_evaluation_end",
    ];
    let mut expected = vec!["user.define_outcome"];
    expected.extend(iteration);
    expected.extend(iteration);
    expected.push("session.status_idle");
    assert_eq!(without_spans(&report["events"]), expected, "{report}");
    assert_eq!(
        report["listed"], report["events"],
        "the list and the stream agree"
    );
    assert_eq!(
        strings(&report["messages"]),
        ["fib.py is written.", "fib.py is fixed."]
    );
    let ends = report["ends"].as_array().expect("ends");
    let starts = report["starts"].as_array().expect("starts");
    assert_eq!(
        ends.iter()
            .map(|e| (e["iteration"].as_i64(), e["result"].as_str()))
            .collect::<Vec<_>>(),
        [
            (Some(0), Some("needs_revision")),
            (Some(1), Some("satisfied"))
        ],
        "{report}"
    );
    for (end, start) in ends.iter().zip(starts) {
        assert_eq!(end["start"], start["id"], "{report}");
        assert_eq!(end["outcome_id"], outcome);
        assert!(end["output_tokens"].as_i64() > Some(0), "{report}");
    }
    assert_eq!(ends[0]["explanation"], "fib(10) returns 89, not 55");
    assert_eq!(report["stop_reason"], "end_turn");
    assert_eq!(report["status_after"], "idle");
    assert_eq!(
        report["outcome_evaluations"],
        json!([{"outcome_id": outcome, "result": "satisfied", "iteration": 1,
                "explanation": "every criterion holds", "completed": true}])
    );
    assert_typed(&report, "classes");
    assert_typed(&report, "listed_classes");
    assert_graded_apart(&mock, &daemon, &thread_of(&report)).await;
}

/// As [`an_outcome_is_graded_over_two_iterations`], with the TypeScript SDK and the rubric an
/// uploaded file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_grades_an_outcome_over_two_iterations() {
    let sdk = typescript().await;
    let (mock, daemon) = outcome_daemon().await;
    let report = run_ts(&sdk, &daemon, "any-key", "outcome", outcome_fields()).await;
    assert_eq!(
        report["ends"],
        json!([
            {"iteration": 0, "result": "needs_revision", "start": format!("sevt_{}_start_0", report["sent"]["outcome_id"].as_str().unwrap_or_default())},
            {"iteration": 1, "result": "satisfied", "start": format!("sevt_{}_start_1", report["sent"]["outcome_id"].as_str().unwrap_or_default())},
        ]),
        "{report}"
    );
    assert_eq!(report["stop_reason"], "end_turn");
    assert_eq!(
        report["outcome_evaluations"],
        json!([{"outcome_id": report["sent"]["outcome_id"], "result": "satisfied", "iteration": 1}])
    );
    assert_declared(
        &sdk,
        "BetaManagedAgentsStreamSessionEvents",
        &report,
        "shapes",
    );
    assert_objects_declared(
        &sdk,
        &report,
        &[(
            "outcome_evaluation",
            "sessions/sessions.d.ts",
            "BetaManagedAgentsOutcomeEvaluationResource",
        )],
    );
    assert_graded_apart(&mock, &daemon, &thread_of(&report)).await;
}

/// An interrupt while the grader grades stops the grader: the evaluation ends `interrupted`,
/// naming its start, the session is idle, and the outcome's result is `interrupted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_interrupted_while_graded_ends_interrupted() {
    let Some(python) = python("managed::outcome_interrupted").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.when_prompt_contains(
        "your work is graded against this rubric",
        Reply::text("fib.py is written."),
    );
    mock.when_prompt_contains("You are grading work", Reply::Hang);
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let report = run(
        &python,
        &daemon,
        "any-key",
        "outcome_interrupted",
        outcome_fields(),
    )
    .await;
    assert_eq!(
        report["end"],
        json!({"result": "interrupted", "start": report["start"]}),
        "{report}"
    );
    assert_eq!(report["stop_reason"], "end_turn");
    assert_eq!(report["outcome_evaluations"], json!(["interrupted"]));
    // The grader's turn was cut.
    let graders = children_of(&daemon, &thread_of(&report)).await;
    let grader = graders[0]["id"]
        .as_str()
        .expect("a grader thread")
        .to_owned();
    // Interrupted once it ran, withdrawn while it waited in line.
    let stopped = |status: &Value| status == "interrupted" || status == "withdrawn";
    let (daemon, grader) = (&daemon, &grader);
    harness_tests::util::eventually_async(
        Duration::from_secs(10),
        "the grading stopped",
        || async {
            let messages = crate::support::messages(daemon, grader).await;
            stopped(&messages[0]["status"])
        },
    )
    .await
    .unwrap();
}

/// A daemon stopped while an outcome is graded takes the outcome up again at its next start: a
/// new grader grades the same iteration, and the outcome ends satisfied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_goes_on_after_a_restart() {
    let Some(python) = python("managed::outcome_restart").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.when_prompt_contains(
        "your work is graded against this rubric",
        Reply::text("fib.py is written."),
    );
    mock.once_when_prompt_contains("You are grading work", Reply::Hang);
    mock.when_prompt_contains(
        "You are grading work",
        Reply::tool_use(
            "StructuredOutput",
            json!({"result": "satisfied", "explanation": "every criterion holds"}),
        ),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let left = run(
        &python,
        &daemon,
        "any-key",
        "outcome_left",
        outcome_fields(),
    )
    .await;
    assert_eq!(left["status"], "evaluating", "{left}");
    let daemon = daemon.restart().await;
    let fields = json!({"session": left["session"]});
    let report = run(&python, &daemon, "any-key", "outcome_awaited", fields).await;
    assert_eq!(
        report["outcome_evaluations"],
        json!([["satisfied", 0]]),
        "{report}"
    );
    let listed = strings(&report["listed"]);
    let graded: Vec<&str> = listed
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("span.outcome_evaluation"))
        .collect();
    // The cut grading's start, then the new grading's start and end.
    assert_eq!(
        graded,
        [
            "span.outcome_evaluation_start",
            "span.outcome_evaluation_start",
            "span.outcome_evaluation_end"
        ],
        "{listed:?}"
    );
    assert_eq!(
        listed.last().map(String::as_str),
        Some("session.status_idle")
    );
    assert_typed(&report, "listed_classes");
    // The thread worked once: its one turn was not run again.
    let messages = crate::support::messages(&daemon, &thread_of(&left)).await;
    assert_eq!(messages.len(), 2, "{messages:?}");
}

/// A reply the model thought before (extended thinking) shows its thinking as an
/// `agent.thinking` before its `agent.message`, on the stream and in the list; the thread keeps
/// the thinking's text (`assistant_thinking`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_thinking_is_an_agent_thinking_event() {
    let Some(python) = python("managed::thinking").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.when_prompt_contains(
        "think first",
        Reply::thinking("The user wants a number; 42 it is.", "42."),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let made = run(&python, &daemon, "any-key", "made", json!({})).await;
    let fields = json!({"session": made["session"], "prompt": "think first"});
    let report = run(&python, &daemon, "any-key", "say", fields).await;
    let events = without_spans(&report["events"]);
    assert_eq!(
        events,
        [
            "user.message",
            "session.status_running",
            "agent.thinking",
            "agent.message",
            "session.status_idle"
        ],
        "{report}"
    );
    assert_eq!(strings(&report["messages"]), ["42."]);
    assert_typed(&report, "classes");
    assert_eq!(
        strings(&report["listed_classes"]),
        ["BetaManagedAgentsAgentThinkingEvent"],
        "{report}"
    );
    let stored = crate::support::stored_events(&daemon, &thread_of(&made)).await;
    let thinking: Vec<_> = stored
        .iter()
        .filter(|e| e.kind == "assistant_thinking")
        .map(|e| e.data["thinking"].clone())
        .collect();
    assert_eq!(thinking, [json!("The user wants a number; 42 it is.")]);
}

/// A daemon whose model calls the custom tool `get_weather` for "weather in Paris", once.
async fn weather_daemon() -> (MockApi, TestDaemon) {
    let mock = MockApi::start().await;
    mock.once_when_prompt_contains(
        "weather in Paris",
        Reply::tool_use("mcp__custom__get_weather", json!({"city": "Paris"})),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    (mock, daemon)
}

fn weather_fields() -> Value {
    json!({"prompt": "what is the weather in Paris?", "result": "sunny, 21C"})
}

/// The model called the tool once; the session waited for the client (the
/// `agent.custom_tool_use`, then an idle requiring action on it); the client's result, echoed
/// under the id its sending gave, is what the model's next request carries as the tool's
/// result; the turn ended; the list shows the answer as the result's record; an answer to what
/// no longer waits, or to no tool use, is a 400.
fn assert_custom_tool(mock: &MockApi, report: &Value) {
    assert_eq!(report["agent_tools"][0]["type"], "custom", "{report}");
    assert_eq!(report["agent_tools"][0]["name"], "get_weather", "{report}");
    let uses = report["uses"].as_array().expect("the uses");
    assert_eq!(uses.len(), 1, "{report}");
    assert_eq!(uses[0]["name"], "get_weather");
    assert_eq!(uses[0]["input"], json!({"city": "Paris"}));
    let use_id = uses[0]["id"].as_str().expect("an id").to_owned();
    assert_eq!(report["waited"], json!([[use_id]]), "{report}");
    assert_eq!(report["sent"][0]["type"], "user.custom_tool_result");
    let echoed = &report["echoed"][0];
    assert_eq!(echoed["id"], report["sent"][0]["id"], "{report}");
    assert_eq!(echoed["custom_tool_use_id"], json!(use_id));
    assert_eq!(echoed["text"], "sunny, 21C");
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    // The CLI may append a reminder of its own to a tool's result.
    let messages = strings(&report["messages"]);
    assert_eq!(messages.len(), 1, "{report}");
    assert!(
        messages[0].starts_with("tool said: sunny, 21C"),
        "the model read the client's result: {report}"
    );

    // The model's request after the call carries the client's result as the tool's.
    let requests = mock.message_requests();
    let answered = requests
        .iter()
        .find(|r| !r.tool_results().is_empty())
        .expect("a request with the tool's result");
    let results = answered.tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].text.starts_with("sunny, 21C"), "{results:?}");
    assert!(!results[0].is_error);
    assert!(
        use_id.ends_with(&results[0].tool_use_id),
        "{use_id} names the model's call {}",
        results[0].tool_use_id
    );
    let offered = requests[0]
        .tool("mcp__custom__get_weather")
        .expect("offered");
    assert_eq!(offered["input_schema"]["required"], json!(["city"]));

    let listed = strings(&report["listed"]);
    let at = |kind: &str| listed.iter().position(|k| k == kind);
    let order = [
        "user.message",
        "agent.custom_tool_use",
        "user.custom_tool_result",
        "agent.message",
    ]
    .map(|kind| at(kind).unwrap_or_else(|| panic!("{kind} is listed: {listed:?}")));
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{listed:?}");
    assert!(
        !listed.iter().any(|k| k == "agent.tool_result"),
        "the client's answer is the result's record: {listed:?}"
    );

    let refusals = report["refusals"].as_array().expect("refusals");
    assert_eq!(refusals.len(), 2, "{report}");
    for refusal in refusals {
        assert_eq!(refusal["status"], 400, "{report}");
        assert_eq!(refusal["type"], "invalid_request_error", "{report}");
    }
    let said = |i: usize| {
        refusals[i]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(said(0).contains("waits for a result"), "{}", said(0));
    assert!(said(1).contains("is not a custom tool use"), "{}", said(1));
}

/// An agent with a custom tool: the model calls it (`mcp__custom__get_weather`, the name the CLI
/// gives a tool of the server `custom`), the session waits for the client's
/// `user.custom_tool_result`, and the turn goes on with it ([`assert_custom_tool`]). Every
/// event, on the stream and listed, is parsed by the SDK's own types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_tool_waits_for_the_clients_result() {
    let Some(python) = python("managed::custom_tool").await else {
        return;
    };
    let (mock, daemon) = weather_daemon().await;
    let report = run(&python, &daemon, "any-key", "custom_tool", weather_fields()).await;
    assert_custom_tool(&mock, &report);
    assert_eq!(
        report["agent_tool_classes"],
        json!(["BetaManagedAgentsCustomTool"]),
        "{report}"
    );
    assert_eq!(
        report["sent"][0]["class"],
        "BetaManagedAgentsUserCustomToolResultEvent"
    );
    assert_typed(&report, "classes");
    assert_typed(&report, "listed_classes");
}

/// As [`a_custom_tool_waits_for_the_clients_result`], with the TypeScript SDK, the result sent
/// as soon as the `agent.custom_tool_use` is read (before the idle), as the API allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_runs_a_custom_tool() {
    let sdk = typescript().await;
    let (mock, daemon) = weather_daemon().await;
    let mut fields = weather_fields();
    fields["early"] = json!(true);
    let report = run_ts(&sdk, &daemon, "any-key", "custom_tool", fields).await;
    assert_custom_tool(&mock, &report);
    assert_declared(
        &sdk,
        "BetaManagedAgentsStreamSessionEvents",
        &report,
        "shapes",
    );
    assert_declared(
        &sdk,
        "BetaManagedAgentsSessionEvent",
        &report,
        "listed_shapes",
    );
    let custom = (
        "custom_tool",
        "agents/agents.d.ts",
        "BetaManagedAgentsCustomTool",
    );
    assert_objects_declared(&sdk, &report, &[custom]);
}

/// An interrupt while a custom tool waits for the client ends the turn, and the call waits no
/// more: a result sent after it is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_a_custom_tools_wait() {
    let Some(python) = python("managed::custom_tool_interrupt").await else {
        return;
    };
    let mock = MockApi::start().await;
    mock.once_when_prompt_contains(
        "weather in Oslo",
        Reply::tool_use("mcp__custom__get_weather", json!({"city": "Oslo"})),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let fields = json!({"prompt": "the weather in Oslo?", "interrupt": true});
    let report = run(&python, &daemon, "any-key", "custom_tool", fields).await;
    assert_eq!(
        report["waited"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    assert_eq!(report["echoed"], json!([]), "{report}");
    let messages = crate::support::messages(&daemon, &thread_of(&report)).await;
    assert_eq!(messages[0]["status"], "interrupted", "{messages:?}");
    let refused = &report["refusals"][0];
    assert_eq!(refused["status"], 400, "{report}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("waits for a result")),
        "{report}"
    );
    assert_typed(&report, "classes");
}

/// A session whose agent has a custom tool still offers it to the model after a restart: the
/// profile made again at the start has the agent's tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_tool_is_offered_after_a_restart() {
    let Some(python) = python("managed::custom_tool_restart").await else {
        return;
    };
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let made = run(
        &python,
        &daemon,
        "any-key",
        "made",
        json!({"weather": true}),
    )
    .await;
    let daemon = daemon.restart().await;
    let (status, reply) = daemon.send(&thread_of(&made), "hello again").await;
    assert_eq!(status, 200, "{reply}");
    let requests = mock.message_requests();
    let last = requests.last().expect("a model request");
    assert!(
        last.tool("mcp__custom__get_weather").is_some(),
        "offered: {:?}",
        last.tool_names()
    );
}

/// A session's `github_repository` under `workspaces.roots` is a worktree of its own, from the
/// checkout named, where its files are put too and its turns run; a repository to clone, a
/// token, and one outside the roots are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_works_in_a_worktree_of_a_repository() {
    let Some(python) = python("managed::repository").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("root");
    let repo = harness_tests::git::repository(&root.join("app"));
    let outside = harness_tests::git::repository(&base.join("elsewhere"));
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.workspaces.roots = vec![root.clone()]).await;
    let fields = json!({"repo": repo, "outside": outside, "prompt": "where are we"});
    let report = run(&python, &daemon, "any-key", "repository", fields).await;
    // The files first, then the repository.
    assert_eq!(
        report["resources"][1],
        json!({"type": "github_repository", "url": format!("file://{}", repo.display()),
               "checkout": {"type": "branch", "name": "main"}, "mount_path": "/workspace/app"}),
        "{report}"
    );
    assert_eq!(report["resources"][0]["mount_path"], "/docs/notes.txt");
    assert_typed(&json!({"c": report["resource_classes"]}), "c");
    assert_eq!(report["stop_reason"], "end_turn");
    let (_, thread) = daemon
        .get(&format!("/api/threads/{}", thread_of(&report)))
        .await;
    let workspace = &thread["workspace"];
    assert_eq!(workspace["kind"], "worktree", "{thread}");
    assert_eq!(workspace["repo"], json!(repo), "{thread}");
    assert_eq!(workspace["baseRef"], "main", "{thread}");
    let folder = std::path::PathBuf::from(workspace["path"].as_str().unwrap());
    assert!(
        folder.join("README.md").is_file(),
        "a checkout of the repository"
    );
    let note = std::fs::read_to_string(folder.join("docs/notes.txt")).unwrap();
    assert_eq!(note, "remember the milk");
    assert!(
        !repo.join("docs").exists(),
        "the main checkout is as it was"
    );
    let refusals = strings(&report["refusals"]);
    assert_eq!(refusals.len(), 3, "{report}");
    assert!(
        refusals[0].contains("Harness clones nothing"),
        "{refusals:?}"
    );
    assert!(refusals[1].contains("authorization_token"), "{refusals:?}");
    assert!(refusals[2].contains("workspaces.roots"), "{refusals:?}");
}

/// A daemon whose model calls the peer daemon's `time__current_time` through the agent's MCP
/// server `peer` for "ask the peer", once; and that peer (another daemon's `/mcp`, no token).
async fn peer_daemons() -> (MockApi, TestDaemon, TestDaemon) {
    let mock = MockApi::start().await;
    let peer = TestDaemon::start(&mock, |c| c.auth_token = None).await;
    mock.once_when_prompt_contains(
        "ask the peer",
        Reply::tool_use("mcp__peer__time__current_time", json!({})),
    );
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    (mock, daemon, peer)
}

/// The agent echoes its server and its toolset (defaults resolved) at each version; the
/// model's call is an `agent.mcp_tool_use` (`evaluated_permission` as `permission`) and its
/// result an `agent.mcp_tool_result` naming it, each parsed by the SDK's own class; the peer's
/// answer reached the model.
fn assert_mcp_tool(mock: &MockApi, report: &Value, permission: &str) {
    assert_eq!(
        report["agent_servers"],
        json!([{"type": "url", "name": "peer", "url": report["url"]}]),
        "{report}"
    );
    let toolset = &report["agent_tools"][0];
    assert_eq!(toolset["type"], "mcp_toolset", "{report}");
    assert_eq!(toolset["mcp_server_name"], "peer", "{report}");
    assert_eq!(
        toolset["default_config"],
        json!({"enabled": true, "permission_policy": {"type": format!("always_{permission}")}}),
        "{report}"
    );
    assert_eq!(toolset["configs"], json!([]), "{report}");
    let versions = report["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 2, "{report}");
    for version in versions {
        assert_eq!(version["servers"], json!(["peer"]), "{report}");
        assert_eq!(version["tools"], json!(["mcp_toolset"]), "{report}");
    }
    let uses = report["uses"].as_array().expect("uses");
    assert_eq!(uses.len(), 1, "{report}");
    assert_eq!(uses[0]["name"], "time__current_time", "{report}");
    assert_eq!(uses[0]["server"], "peer", "{report}");
    assert_eq!(uses[0]["permission"], permission, "{report}");
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{report}");
    assert_eq!(results[0]["mcp_tool_use_id"], uses[0]["id"], "{report}");
    assert_eq!(results[0]["is_error"], false, "{report}");
    assert!(
        results[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("timezone")),
        "{report}"
    );
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    let listed = strings(&report["listed"]);
    for kind in ["agent.mcp_tool_use", "agent.mcp_tool_result"] {
        assert!(listed.iter().any(|k| k == kind), "{kind}: {listed:?}");
    }
    assert!(
        !listed.iter().any(|k| k == "agent.tool_result"),
        "{listed:?}"
    );
    for key in ["classes", "listed_classes", "agent_classes"] {
        assert_typed(report, key);
    }
    let answered: Vec<_> = mock
        .message_requests()
        .iter()
        .flat_map(|r| r.tool_results())
        .collect();
    assert!(
        answered
            .iter()
            .any(|r| !r.is_error && r.text.contains("timezone")),
        "the peer's tool answered the model: {answered:?}"
    );
}

/// An agent's MCP server (`always_allow`) is reached without asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_mcp_server_is_reached_and_its_tools_events_are_mcp_ones() {
    let Some(python) = python("managed::mcp_tool").await else {
        return;
    };
    let (mock, daemon, peer) = peer_daemons().await;
    let fields = json!({"url": format!("{}/mcp", peer.base), "policy": "always_allow",
        "prompt": "ask the peer"});
    let mut report = run(&python, &daemon, "any-key", "mcp_tool", fields.clone()).await;
    report["url"] = fields["url"].clone();
    assert_mcp_tool(&mock, &report, "allow");
    assert_eq!(report["waited"], json!([]), "{report}");
    daemon.stop().await;
    peer.stop().await;
}

/// An agent's MCP server whose toolset asks (`always_ask`): the call waits for the client's
/// `user.tool_confirmation`, then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_mcp_tool_that_asks_waits_for_the_clients_confirmation() {
    let Some(python) = python("managed::mcp_tool_ask").await else {
        return;
    };
    let (mock, daemon, peer) = peer_daemons().await;
    let fields = json!({"url": format!("{}/mcp", peer.base), "policy": "always_ask",
        "prompt": "ask the peer"});
    let mut report = run(&python, &daemon, "any-key", "mcp_tool", fields.clone()).await;
    report["url"] = fields["url"].clone();
    assert_mcp_tool(&mock, &report, "ask");
    let uses = report["uses"].as_array().expect("uses");
    assert_eq!(report["waited"], json!([[uses[0]["id"]]]), "{report}");
    daemon.stop().await;
    peer.stop().await;
}
