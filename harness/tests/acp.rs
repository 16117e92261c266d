//! `harness acp` (issue #49) driven by real ACP clients over its stdio, against a real daemon:
//! the official TypeScript SDK (`acp/ts_client.mjs`) for a streamed prompt, a folder outside
//! `workspaces.roots`, permissions answered both ways, a cancel mid-turn and `session/load`
//! after a restart; the official Python SDK (`acp/python_client.py`) for a streamed prompt.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{run_python_script, venv_with, PythonSdk};
use harness_tests::mock::{MockApi, Reply};
use harness_tests::node::{npm_with, NodePackages};
use orchestrator::config::{ApprovalMode, Config};

const TS_SDK: &str = "@agentclientprotocol/sdk@2.4.0";
const TS_CLIENT: &str = include_str!("acp/ts_client.mjs");
const PYTHON_SDK: &str = "agent-client-protocol==0.12.1";
const PYTHON_CLIENT: &str = include_str!("acp/python_client.py");

/// The `harness` binary cargo built for this package's tests.
fn harness_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_harness"))
}

/// A root for workspaces with a `project` folder in it.
struct Root {
    _dir: tempfile::TempDir,
    root: PathBuf,
    project: PathBuf,
}

fn root() -> Root {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let root = dir.path().canonicalize().expect("it resolves").join("root");
    let project = root.join("project");
    std::fs::create_dir_all(&project).expect("the project folder");
    Root {
        _dir: dir,
        root,
        project,
    }
}

async fn daemon(mock: &MockApi, root: &Path, tweak: impl FnOnce(&mut Config)) -> TestDaemon {
    let root = root.to_path_buf();
    TestDaemon::start(mock, move |c| {
        c.workspaces.roots = vec![root];
        tweak(c);
    })
    .await
}

async fn typescript() -> NodePackages {
    tokio::task::spawn_blocking(|| npm_with("acp-node", &[TS_SDK]))
        .await
        .expect("installer task")
        .expect("the ACP TypeScript SDK installs")
}

/// Runs the TypeScript client's `scenario` against `daemon` in `cwd`, with `fields`.
async fn run_ts(
    sdk: &NodePackages,
    daemon: &TestDaemon,
    cwd: &Path,
    scenario: &str,
    fields: Value,
) -> Value {
    let bin = harness_bin();
    let mut config = json!({"bin": bin, "url": daemon.base, "cwd": cwd, "scenario": scenario});
    if let (Some(config), Some(fields)) = (config.as_object_mut(), fields.as_object()) {
        config.extend(fields.clone());
    }
    let sdk = sdk.clone();
    tokio::task::spawn_blocking(move || sdk.run_script("acp_client", TS_CLIENT, &config))
        .await
        .expect("the client's task")
        .unwrap_or_else(|err| panic!("the TypeScript {scenario} scenario: {err:#}"))
}

/// The text of every update of kind `kind`, in order, joined.
fn text_of(updates: &Value, kind: &str) -> String {
    updates
        .as_array()
        .into_iter()
        .flatten()
        .filter(|u| u["sessionUpdate"] == kind)
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

fn updates_of<'a>(updates: &'a Value, kind: &str) -> Vec<&'a Value> {
    updates
        .as_array()
        .into_iter()
        .flatten()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_streams_to_end_turn_and_loads_after_a_restart() {
    let mock = MockApi::start().await;
    let root = root();
    let daemon = daemon(&mock, &root.root, |_| {}).await;
    let sdk = typescript().await;
    mock.when_prompt_contains("say hello", Reply::text("Hello from the daemon"));
    let seen = run_ts(
        &sdk,
        &daemon,
        &root.project,
        "prompt",
        json!({"prompt": "say hello"}),
    )
    .await;
    assert_eq!(seen["init"]["protocolVersion"], 1, "{seen}");
    assert_eq!(seen["init"]["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        seen["init"]["agentCapabilities"]["promptCapabilities"]["image"],
        true
    );
    assert_eq!(seen["stopReason"], "end_turn", "{seen}");
    // Every chunk came before the answer, and they make the reply.
    let at_answer = seen["updatesAtAnswer"].as_u64().expect("a count") as usize;
    let before: Value = seen["updates"].as_array().expect("updates")[..at_answer].into();
    assert_eq!(
        text_of(&before, "agent_message_chunk"),
        "Hello from the daemon",
        "{seen}"
    );
    // The session is a thread in the editor's folder, with the reply stored.
    let session = seen["sessionId"].as_str().expect("a session id").to_owned();
    let (status, thread) = daemon.get(&format!("/api/threads/{session}")).await;
    assert_eq!(status, 200, "{thread}");
    assert_eq!(
        thread["messages"][1]["content"], "Hello from the daemon",
        "{thread}"
    );
    let files = daemon.get(&format!("/api/threads/{session}/files")).await;
    assert_eq!(files.0, 200, "the thread has a workspace: {}", files.1);

    // A folder outside the roots is refused, saying why.
    let outside = root.root.parent().expect("a parent").to_path_buf();
    let refused = run_ts(&sdk, &daemon, &outside, "prompt", json!({"prompt": "x"})).await;
    let message = refused["newError"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("outside workspaces.roots"), "{refused}");

    // After a restart, the session loads from the daemon's store.
    let daemon = daemon.restart().await;
    let loaded = run_ts(
        &sdk,
        &daemon,
        &root.project,
        "load",
        json!({"sessionId": session}),
    )
    .await;
    assert_eq!(
        text_of(&loaded["updates"], "user_message_chunk"),
        "say hello",
        "{loaded}"
    );
    assert_eq!(
        text_of(&loaded["updates"], "agent_message_chunk"),
        "Hello from the daemon",
        "{loaded}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_are_asked_and_answered_both_ways() {
    let mock = MockApi::start().await;
    let root = root();
    let daemon = daemon(&mock, &root.root, |c| {
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Ask;
    })
    .await;
    let sdk = typescript().await;
    for (option, file, allowed) in [
        ("allow_once", "allowed.txt", true),
        ("reject_once", "rejected.txt", false),
    ] {
        let made = root.project.join(file);
        let trigger = format!("please make {file}");
        let command = format!("touch {} && echo made-it", made.display());
        mock.once_when_prompt_contains(
            &trigger,
            Reply::tool_use("Bash", json!({"command": command, "description": "d"})),
        );
        let seen = run_ts(
            &sdk,
            &daemon,
            &root.project,
            "prompt",
            json!({"prompt": trigger, "option": option}),
        )
        .await;
        assert_eq!(seen["stopReason"], "end_turn", "{seen}");
        let asked = &seen["permissions"];
        assert_eq!(asked.as_array().map(Vec::len), Some(1), "{seen}");
        assert_eq!(asked[0]["toolCall"]["kind"], "execute", "{seen}");
        assert_eq!(
            asked[0]["options"].as_array().map(Vec::len),
            Some(3),
            "{seen}"
        );
        let calls = updates_of(&seen["updates"], "tool_call");
        assert_eq!(calls.len(), 1, "{seen}");
        assert_eq!(calls[0]["rawInput"]["command"], command.as_str());
        let finished = updates_of(&seen["updates"], "tool_call_update");
        assert_eq!(finished.len(), 1, "{seen}");
        assert_eq!(made.exists(), allowed, "{option}: {seen}");
        let reply = text_of(&seen["updates"], "agent_message_chunk");
        if allowed {
            assert_eq!(finished[0]["status"], "completed", "{seen}");
            assert!(
                reply.contains("made-it"),
                "the model saw the output: {reply}"
            );
        } else {
            assert_eq!(finished[0]["status"], "failed", "{seen}");
            assert!(
                reply.contains("rejected"),
                "the model read the refusal: {reply}"
            );
        }
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_turn_ends_it_cancelled() {
    let mock = MockApi::start().await;
    let root = root();
    let daemon = daemon(&mock, &root.root, |_| {}).await;
    let sdk = typescript().await;
    let chunks: Vec<String> = (0..200).map(|n| format!("word{n} ")).collect();
    mock.when_prompt_contains(
        "tell a long story",
        Reply::slow_text(chunks, Duration::from_millis(100)),
    );
    let seen = run_ts(
        &sdk,
        &daemon,
        &root.project,
        "cancel",
        json!({"prompt": "tell a long story"}),
    )
    .await;
    assert_eq!(seen["stopReason"], "cancelled", "{seen}");
    let session = seen["sessionId"].as_str().expect("a session id");
    let (_, thread) = daemon.get(&format!("/api/threads/{session}")).await;
    assert_eq!(thread["messages"][0]["status"], "interrupted", "{thread}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_streams_a_prompt_to_end_turn() {
    let sdk = tokio::task::spawn_blocking(|| venv_with("acp-python", &[PYTHON_SDK]))
        .await
        .expect("installer task")
        .expect("the ACP Python SDK installs");
    let python = match sdk {
        PythonSdk::Ready(python) => python,
        PythonSdk::NoPython(why) => panic!("python3 is needed for this test: {why}"),
    };
    let mock = MockApi::start().await;
    let root = root();
    let daemon = daemon(&mock, &root.root, |_| {}).await;
    mock.when_prompt_contains("greet me", Reply::text("Greetings from the daemon"));
    let bin = harness_bin();
    let config = json!({"bin": bin, "url": daemon.base, "cwd": root.project, "prompt": "greet me"});
    let seen = run_python_script(python, "acp_client.py", PYTHON_CLIENT, config)
        .await
        .unwrap_or_else(|err| panic!("the Python client: {err:#}"));
    assert_eq!(seen["protocolVersion"], 1, "{seen}");
    assert_eq!(seen["stopReason"], "end_turn", "{seen}");
    let at_answer = seen["updatesAtAnswer"].as_u64().expect("a count") as usize;
    let before: Value = seen["updates"].as_array().expect("updates")[..at_answer].into();
    assert_eq!(
        text_of(&before, "agent_message_chunk"),
        "Greetings from the daemon",
        "{seen}"
    );
    daemon.stop().await;
}
