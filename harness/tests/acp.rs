//! Harness's ACP agent driven by real ACP clients against a real daemon, over both transports:
//! stdio (`harness acp` spawned, as an editor runs a local agent) and the network (the daemon's
//! own `/acp` WebSocket, as an editor on another machine reaches it). Each flow runs with the
//! official TypeScript SDK (`acp/ts_client.mjs`) and the official Python SDK
//! (`acp/python_client.py`) on each: a streamed prompt, a folder outside `workspaces.roots`,
//! permissions answered each way (allow always as the thread's rule), a cancel mid-turn,
//! `session/load` after a restart and with the tool calls of its turns; and the network
//! endpoint behind the token and the tenant.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{run_python_script, venv_with, PythonSdk};
use harness_tests::mock::{MockApi, Reply};
use harness_tests::node::{npm_with, NodePackages};
use orchestrator::config::{ApprovalMode, Config};

/// The SDK, and `ws` as Node's WebSocket (Node 20 has none with headers).
const TS_SDK: [&str; 2] = ["@agentclientprotocol/sdk@2.4.0", "ws@8.18.3"];
const TS_CLIENT: &str = include_str!("acp/ts_client.mjs");
/// With its `http` extra: the WebSocket transport.
const PYTHON_SDK: &str = "agent-client-protocol[http]==0.12.1";
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

/// An official SDK.
#[derive(Clone, Copy, Debug)]
enum Sdk {
    TypeScript,
    Python,
}

/// How the editor reaches the agent.
#[derive(Clone, Copy, Debug)]
enum Transport {
    /// `harness acp` spawned, over its stdin and stdout.
    Stdio,
    /// The daemon's `/acp` WebSocket.
    Network,
}

/// Every SDK over every transport.
const WAYS: [(Sdk, Transport); 4] = [
    (Sdk::TypeScript, Transport::Stdio),
    (Sdk::TypeScript, Transport::Network),
    (Sdk::Python, Transport::Stdio),
    (Sdk::Python, Transport::Network),
];

/// Both SDKs, installed when missing.
#[derive(Clone)]
struct Clients {
    typescript: NodePackages,
    python: PathBuf,
}

async fn clients() -> Clients {
    let typescript = tokio::task::spawn_blocking(|| npm_with("acp-node", &TS_SDK))
        .await
        .expect("installer task")
        .expect("the ACP TypeScript SDK installs");
    let python = tokio::task::spawn_blocking(|| venv_with("acp-python", &[PYTHON_SDK]))
        .await
        .expect("installer task")
        .expect("the ACP Python SDK installs");
    let python = match python {
        PythonSdk::Ready(python) => python,
        PythonSdk::NoPython(why) => panic!("python3 is needed for this test: {why}"),
    };
    Clients { typescript, python }
}

/// One run of a client: its scenario, and what it may need besides.
struct Run<'a> {
    way: (Sdk, Transport),
    cwd: &'a Path,
    scenario: &'a str,
    fields: Value,
    /// The credential the editor sends over the network.
    token: Option<&'a str>,
}

impl Run<'_> {
    fn new<'a>(way: (Sdk, Transport), cwd: &'a Path, scenario: &'a str, fields: Value) -> Run<'a> {
        Run {
            way,
            cwd,
            scenario,
            fields,
            token: None,
        }
    }
}

/// Runs the client of `run.way` against `daemon`; the JSON line it printed.
async fn run(clients: &Clients, daemon: &TestDaemon, run: Run<'_>) -> Value {
    let (sdk, transport) = run.way;
    let ws_url = format!("{}/acp", daemon.base.replacen("http://", "ws://", 1));
    let transport_name = match transport {
        Transport::Stdio => "stdio",
        Transport::Network => "ws",
    };
    let mut config = json!({
        "bin": harness_bin(), "url": daemon.base, "wsUrl": ws_url, "token": run.token,
        "transport": transport_name, "cwd": run.cwd, "scenario": run.scenario,
    });
    if let (Some(config), Some(fields)) = (config.as_object_mut(), run.fields.as_object()) {
        config.extend(fields.clone());
    }
    let what = format!("{sdk:?} over {transport:?}, {}", run.scenario);
    let seen = match sdk {
        Sdk::TypeScript => {
            let node = clients.typescript.clone();
            tokio::task::spawn_blocking(move || node.run_script("acp_client", TS_CLIENT, &config))
                .await
                .expect("the client's task")
        }
        Sdk::Python => {
            let python = clients.python.clone();
            run_python_script(python, "acp_client.py", PYTHON_CLIENT, config).await
        }
    };
    seen.unwrap_or_else(|err| panic!("{what}: {err:#}"))
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
    let clients = clients().await;
    let mut sessions = Vec::new();
    for (n, way) in WAYS.into_iter().enumerate() {
        let (prompt, reply) = (format!("say hello {n}"), format!("Hello number {n}"));
        mock.when_prompt_contains(&prompt, Reply::text(&reply));
        let fields = json!({"prompt": prompt});
        let seen = run(
            &clients,
            &daemon,
            Run::new(way, &root.project, "prompt", fields),
        )
        .await;
        assert_eq!(seen["init"]["protocolVersion"], 1, "{way:?}: {seen}");
        if matches!(way.0, Sdk::TypeScript) {
            let capabilities = &seen["init"]["agentCapabilities"];
            assert_eq!(capabilities["loadSession"], true, "{seen}");
            assert_eq!(capabilities["promptCapabilities"]["image"], true);
        }
        assert_eq!(seen["stopReason"], "end_turn", "{way:?}: {seen}");
        // Every chunk came before the answer, and they make the reply.
        let at_answer = seen["updatesAtAnswer"].as_u64().expect("a count") as usize;
        let before: Value = seen["updates"].as_array().expect("updates")[..at_answer].into();
        assert_eq!(
            text_of(&before, "agent_message_chunk"),
            reply,
            "{way:?}: {seen}"
        );
        // The session is a thread in the editor's folder, with the reply stored.
        let session = seen["sessionId"].as_str().expect("a session id").to_owned();
        let (status, thread) = daemon.get(&format!("/api/threads/{session}")).await;
        assert_eq!(status, 200, "{thread}");
        assert_eq!(thread["messages"][1]["content"], reply.as_str(), "{thread}");
        let files = daemon.get(&format!("/api/threads/{session}/files")).await;
        assert_eq!(files.0, 200, "the thread has a workspace: {}", files.1);
        sessions.push((way, prompt, reply, session));

        // A folder outside the roots is refused, saying why.
        let outside = root.root.parent().expect("a parent").to_path_buf();
        let fields = json!({"prompt": "x"});
        let refused = run(&clients, &daemon, Run::new(way, &outside, "prompt", fields)).await;
        let message = refused["newError"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("outside workspaces.roots"),
            "{way:?}: {refused}"
        );
    }

    // After a restart, each session loads from the daemon's store.
    let daemon = daemon.restart().await;
    for (way, prompt, reply, session) in sessions {
        let fields = json!({"sessionId": session});
        let loaded = run(
            &clients,
            &daemon,
            Run::new(way, &root.project, "load", fields),
        )
        .await;
        assert_eq!(
            text_of(&loaded["updates"], "user_message_chunk"),
            prompt,
            "{way:?}: {loaded}"
        );
        assert_eq!(
            text_of(&loaded["updates"], "agent_message_chunk"),
            reply,
            "{way:?}: {loaded}"
        );
    }
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
    let clients = clients().await;
    for (n, way) in WAYS.into_iter().enumerate() {
        let options = [
            ("allow_once", true),
            ("allow_always", true),
            ("reject_once", false),
        ];
        for (option, allowed) in options {
            let file = format!("{option}-{n}.txt");
            let made = root.project.join(&file);
            let trigger = format!("please make {file}");
            let command = format!("touch {} && echo made-it", made.display());
            mock.once_when_prompt_contains(
                &trigger,
                Reply::tool_use("Bash", json!({"command": command, "description": "d"})),
            );
            let fields = json!({"prompt": trigger, "option": option});
            let seen = run(
                &clients,
                &daemon,
                Run::new(way, &root.project, "prompt", fields),
            )
            .await;
            let what = format!("{way:?} {option}");
            assert_eq!(seen["stopReason"], "end_turn", "{what}: {seen}");
            let asked = &seen["permissions"];
            assert_eq!(asked.as_array().map(Vec::len), Some(1), "{what}: {seen}");
            assert_eq!(asked[0]["toolCall"]["kind"], "execute", "{what}: {seen}");
            assert_eq!(asked[0]["options"].as_array().map(Vec::len), Some(3));
            let calls = updates_of(&seen["updates"], "tool_call");
            assert_eq!(calls.len(), 1, "{what}: {seen}");
            assert_eq!(calls[0]["rawInput"]["command"], command.as_str());
            let finished = updates_of(&seen["updates"], "tool_call_update");
            assert_eq!(finished.len(), 1, "{what}: {seen}");
            assert_eq!(made.exists(), allowed, "{what}: {seen}");
            let reply = text_of(&seen["updates"], "agent_message_chunk");
            if allowed {
                assert_eq!(finished[0]["status"], "completed", "{what}: {seen}");
                assert!(
                    reply.contains("made-it"),
                    "the model saw the output: {reply}"
                );
            } else {
                assert_eq!(finished[0]["status"], "failed", "{what}: {seen}");
                assert!(
                    reply.contains("rejected"),
                    "the model read the refusal: {reply}"
                );
            }
            let session = seen["sessionId"].as_str().expect("a session");
            if option == "allow_always" {
                allowed_always_stays_allowed(&daemon, &mock, session, &command, &made).await;
                // Loaded, the session shows both turns' tool calls between prompt and reply.
                let fields = json!({"sessionId": session});
                let run_load = Run::new(way, &root.project, "load", fields);
                let loaded = run(&clients, &daemon, run_load).await;
                let kinds: Vec<&str> = loaded["updates"]
                    .as_array()
                    .expect("updates")
                    .iter()
                    .filter_map(|u| u["sessionUpdate"].as_str())
                    .collect();
                let turn = [
                    "user_message_chunk",
                    "tool_call",
                    "tool_call_update",
                    "agent_message_chunk",
                ];
                assert_eq!(kinds, [turn, turn].concat(), "{what}: {loaded}");
                let calls = updates_of(&loaded["updates"], "tool_call");
                assert!(calls
                    .iter()
                    .all(|c| c["rawInput"]["command"] == command.as_str()));
                let done = updates_of(&loaded["updates"], "tool_call_update");
                assert!(done.iter().all(|c| c["status"] == "completed"), "{loaded}");
            }
        }
    }
    daemon.stop().await;
}

/// After "allow always", the thread has the command's rules, and the same command later on the
/// thread (sent over the API) runs without asking anyone.
async fn allowed_always_stays_allowed(
    daemon: &TestDaemon,
    mock: &MockApi,
    session: &str,
    command: &str,
    made: &Path,
) {
    let (status, rules) = daemon.get(&format!("/api/threads/{session}/rules")).await;
    assert_eq!(status, 200, "{rules}");
    let mut texts: Vec<&str> = rules["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["rule"].as_str())
        .collect();
    texts.sort_unstable();
    let touch = format!("Bash(touch {})", made.display());
    assert_eq!(texts, ["Bash(echo made-it)", touch.as_str()], "{rules}");
    std::fs::remove_file(made).expect("the first run made it");
    let trigger = format!("again make {}", made.display());
    mock.once_when_prompt_contains(
        &trigger,
        Reply::tool_use("Bash", json!({"command": command, "description": "d"})),
    );
    let (status, sent) = daemon.send(session, &trigger).await;
    assert_eq!(status, 200, "{sent}");
    assert!(made.exists(), "the rule let it run: {sent}");
    let path = format!("/api/threads/{session}/permissions?all=true");
    let (_, asked) = daemon.get(&path).await;
    let decided: Vec<(&str, &str)> = asked["permissions"]
        .as_array()
        .expect("permissions")
        .iter()
        .map(|p| {
            let by = p["decidedBy"].as_str().unwrap_or_default();
            (p["status"].as_str().unwrap_or_default(), by)
        })
        .collect();
    assert_eq!(
        decided,
        [("allowed", "person"), ("allowed", "rule")],
        "{asked}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_turn_ends_it_cancelled() {
    let mock = MockApi::start().await;
    let root = root();
    let daemon = daemon(&mock, &root.root, |_| {}).await;
    let clients = clients().await;
    let chunks: Vec<String> = (0..200).map(|n| format!("word{n} ")).collect();
    mock.when_prompt_contains(
        "tell a long story",
        Reply::slow_text(chunks, Duration::from_millis(100)),
    );
    for way in WAYS {
        let fields = json!({"prompt": "tell a long story"});
        let seen = run(
            &clients,
            &daemon,
            Run::new(way, &root.project, "cancel", fields),
        )
        .await;
        assert_eq!(seen["stopReason"], "cancelled", "{way:?}: {seen}");
        let session = seen["sessionId"].as_str().expect("a session id");
        let (_, thread) = daemon.get(&format!("/api/threads/{session}")).await;
        assert_eq!(
            thread["messages"][0]["status"], "interrupted",
            "{way:?}: {thread}"
        );
    }
    daemon.stop().await;
}

/// The network door asks what `/api` asks: a token (none: the upgrade is refused), and a
/// tenant's key sees its tenant's sessions only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_endpoint_is_behind_the_token_and_the_tenant() {
    const OPERATOR: &str = "acp-operator-token";
    let mock = MockApi::start().await;
    let root = root();
    let daemon = daemon(&mock, &root.root, |c| c.auth_token = Some(OPERATOR.into())).await;
    let clients = clients().await;
    let ts = (Sdk::TypeScript, Transport::Network);

    let anonymous = Run::new(ts, &root.project, "prompt", json!({"prompt": "hi"}));
    let refused = run(&clients, &daemon, anonymous).await;
    let error = refused["connectError"].as_str().unwrap_or_default();
    assert!(
        !error.is_empty() && refused.get("sessionId").is_none(),
        "{refused}"
    );

    let key = |tenant: &str| {
        let body = json!({"tenant": tenant, "scopes": ["threads:read", "threads:write"]});
        let client = reqwest::Client::new();
        let url = format!("{}/api/keys", daemon.base);
        async move {
            let made: Value = client
                .post(url)
                .bearer_auth(OPERATOR)
                .json(&body)
                .send()
                .await
                .expect("the daemon answers")
                .json()
                .await
                .expect("a key");
            made["key"].as_str().expect("the key").to_owned()
        }
    };
    let (acme, other) = (key("acme").await, key("other").await);
    mock.when_prompt_contains("hello acme", Reply::text("Hello, acme"));
    let prompt = Run {
        token: Some(&acme),
        ..Run::new(ts, &root.project, "prompt", json!({"prompt": "hello acme"}))
    };
    let seen = run(&clients, &daemon, prompt).await;
    assert_eq!(seen["stopReason"], "end_turn", "{seen}");
    let session = seen["sessionId"].as_str().expect("a session").to_owned();
    let load = |token| Run {
        token: Some(token),
        ..Run::new(
            (Sdk::Python, Transport::Network),
            &root.project,
            "load",
            json!({"sessionId": session}),
        )
    };
    let loaded = run(&clients, &daemon, load(&acme)).await;
    assert_eq!(
        text_of(&loaded["updates"], "agent_message_chunk"),
        "Hello, acme"
    );
    // Another tenant's editor cannot load it: it does not exist for that key.
    let foreign = run(&clients, &daemon, load(&other)).await;
    let error = foreign["loadError"].to_string();
    assert!(error.contains("404"), "{foreign}");
    assert_eq!(
        text_of(&foreign["updates"], "agent_message_chunk"),
        "",
        "{foreign}"
    );
    daemon.stop().await;
}

/// The editor's mode and model go with each prompt: the modes offered stop at the profile's own,
/// and the turn runs in the chosen mode with the chosen model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_chooses_the_mode_and_the_model() {
    let mock = MockApi::start().await;
    let root = root();
    let daemon = daemon(&mock, &root.root, |_| {}).await;
    let clients = clients().await;
    mock.when_prompt_contains("plan something", Reply::text("A plan"));
    let way = (Sdk::TypeScript, Transport::Network);
    let fields = json!({"prompt": "plan something", "mode": "plan", "model": "opus"});
    let seen = run(
        &clients,
        &daemon,
        Run::new(way, &root.project, "choose", fields),
    )
    .await;
    assert_eq!(seen["stopReason"], "end_turn", "{seen}");
    let modes = &seen["created"]["modes"];
    assert_eq!(modes["currentModeId"], "default", "{seen}");
    let offered: Vec<&str> = modes["availableModes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(
        offered,
        ["plan", "default"],
        "no wider than the profile's: {seen}"
    );
    let refused = seen["chosen"]["wideModeError"].as_str().unwrap_or_default();
    assert!(!refused.is_empty(), "a wider mode is refused: {seen}");
    assert_eq!(
        seen["chosen"]["options"]["configOptions"][0]["currentValue"],
        "opus"
    );
    let mode_updates = updates_of(&seen["updates"], "current_mode_update");
    assert_eq!(mode_updates.len(), 1, "{seen}");
    assert_eq!(mode_updates[0]["currentModeId"], "plan");

    // The turn ran with both: the model the CLI asked the API for, the mode its process runs.
    let asked = mock.message_requests();
    let request = asked
        .iter()
        .find(|r| r.all_text().contains("plan something"))
        .expect("the prompt reached the model");
    let model = request.model().unwrap_or_default();
    assert!(model.contains("opus"), "the chosen model: {model}");
    let session = seen["sessionId"].as_str().expect("a session");
    let (_, pool) = daemon.get("/api/pool").await;
    let process = pool["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["threadId"] == session)
        .unwrap_or_else(|| panic!("no process of {session} in {pool}"));
    assert_eq!(process["permissionMode"], "plan", "{pool}");
    daemon.stop().await;
}

/// The CLI's to-do list reaches the editor as the agent's plan, not as a tool call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_to_do_list_is_the_plan() {
    let mock = MockApi::start().await;
    let root = root();
    let daemon = daemon(&mock, &root.root, |c| {
        c.claude.builtin_tools = Some("TodoWrite".into());
    })
    .await;
    let clients = clients().await;
    let todos = json!({"todos": [
        {"content": "Read the parser", "status": "completed", "activeForm": "Reading the parser"},
        {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
    ]});
    mock.once_when_prompt_contains("make a plan", Reply::tool_use("TodoWrite", todos));
    let way = (Sdk::Python, Transport::Network);
    let fields = json!({"prompt": "make a plan"});
    let seen = run(
        &clients,
        &daemon,
        Run::new(way, &root.project, "prompt", fields),
    )
    .await;
    assert_eq!(seen["stopReason"], "end_turn", "{seen}");
    let plans = updates_of(&seen["updates"], "plan");
    assert_eq!(plans.len(), 1, "{seen}");
    let entries: Vec<(&str, &str)> = plans[0]["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["content"].as_str().unwrap_or(""),
                e["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("Read the parser", "completed"),
            ("Fix the bug", "in_progress")
        ],
        "{seen}"
    );
    assert!(
        updates_of(&seen["updates"], "tool_call").is_empty(),
        "{seen}"
    );
    daemon.stop().await;
}
