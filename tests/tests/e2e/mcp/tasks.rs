//! MCP Tasks (`io.modelcontextprotocol/tasks`) on `/mcp`, driven by the official TypeScript SDK
//! and its Tasks extension package: a `threads__send` from a client that declares the extension
//! is a task the package settles, a pending approval is input it answers, a cancel stops the
//! turn, and a task handed off survives its connection and a restart of the daemon. A client that
//! does not declare it keeps the blocking call; `subscriptions/listen` streams a task's changes.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{run_ts_tasks_client, McpAnswer, McpHttp, MODERN_VERSION};
use harness_tests::mock::{MockApi, Reply};
use orchestrator::config::ApprovalMode;

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// Runs the SDK's tasks client against `daemon` with `config` (its `url` added).
async fn sdk(daemon: &TestDaemon, mut config: Value) -> Value {
    config["url"] = json!(format!("{}/mcp", daemon.base));
    run_ts_tasks_client(config)
        .await
        .unwrap_or_else(|err| panic!("the tasks client failed: {err:#}"))
}

/// A 2026-07-28 request (the headers and `_meta` the version asks for), declaring the tasks
/// extension or not.
async fn modern(mcp: &McpHttp, method: &str, params: Value, declares: bool) -> McpAnswer {
    let mut params = params;
    let extensions = if declares {
        json!({TASKS: {}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
        "io.modelcontextprotocol/clientInfo": {"name": "harness-tests", "version": "0"},
    });
    let name = params["name"]
        .as_str()
        .or(params["taskId"].as_str())
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let mut headers = vec![
        ("mcp-protocol-version", MODERN_VERSION),
        ("mcp-method", method),
    ];
    if let Some(name) = &name {
        headers.push(("mcp-name", name));
    }
    mcp.post_raw(body.to_string(), &headers).await
}

/// The thread's user message `message`'s status, from the API.
async fn status_of(daemon: &TestDaemon, thread: &str, message: &str) -> String {
    let (status, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let found = messages.iter().find(|m| m["id"] == message);
    found.map_or_else(
        || panic!("no message {message} in {body}"),
        |m| m["status"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_is_a_task_the_sdk_settles_and_a_client_without_tasks_still_waits() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let mcp = McpHttp::new(&daemon.base, None);

    // Advertised to a client that declares the extension, and only to it.
    let discovered = sdk(&daemon, json!({"mode": "discover"})).await;
    assert_eq!(discovered["era"], "modern", "{discovered}");
    assert!(
        discovered["capabilities"]["extensions"][TASKS].is_object(),
        "{discovered}"
    );
    let plain = modern(&mcp, "server/discover", json!({}), false).await;
    let extensions = &plain.result()["capabilities"]["extensions"];
    assert!(extensions.get(TASKS).is_none(), "{plain:?}");

    let thread = daemon.create_thread().await;
    let settled = sdk(
        &daemon,
        json!({"mode": "send", "threadId": thread, "text": "hello tasks"}),
    )
    .await;
    assert_eq!(settled["kind"], "task", "{settled}");
    assert_eq!(settled["status"], "completed", "{settled}");
    let result = &settled["result"]["structuredContent"];
    assert_eq!(result["reply"], "echo: hello tasks", "{settled}");
    assert_eq!(result["status"], "done");
    assert_eq!(result["threadId"], thread.as_str());
    let task_id = settled["taskId"].as_str().expect("the task's id");
    assert_eq!(task_id, result["messageId"], "the task is the message");

    // A task is read back with `tasks/get` by a declaring client; another is refused.
    let get = json!({"taskId": task_id});
    let got = modern(&mcp, "tasks/get", get.clone(), true).await;
    assert_eq!(got.result()["status"], "completed", "{got:?}");
    assert_eq!(got.result()["resultType"], "complete");
    assert_eq!(
        got.result()["result"]["structuredContent"]["reply"],
        "echo: hello tasks"
    );
    let refused = modern(&mcp, "tasks/get", get, false).await;
    assert_eq!(refused.last()["error"]["code"], -32021, "{refused:?}");
    let unknown = modern(&mcp, "tasks/get", json!({"taskId": "msg_nope"}), true).await;
    assert_eq!(unknown.last()["error"]["code"], -32602, "{unknown:?}");

    // Without the extension the same call waits for its reply, as before.
    let args = json!({"name": "threads__send",
        "arguments": {"threadId": thread, "content": "no tasks here"}});
    let blocking = modern(&mcp, "tools/call", args, false).await;
    let result = blocking.result();
    assert_ne!(result["resultType"], "task", "{blocking:?}");
    assert_eq!(result["structuredContent"]["reply"], "echo: no tasks here");

    // A bad input is refused as the blocking call refuses it, not as a task.
    let args = json!({"name": "threads__send", "arguments": {"threadId": thread, "bogus": 1}});
    let bad = modern(&mcp, "tools/call", args, true).await;
    assert_eq!(bad.result()["isError"], true, "{bad:?}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_approval_is_input_the_sdk_answers_both_ways() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Ask;
    })
    .await;
    let thread = daemon.create_thread().await;
    // Where the thread's process works, and may write.
    let dir = daemon.thread_folder(&thread);
    let (one, two) = (dir.join("one"), dir.join("two"));
    for (trigger, file) in [("first please", &one), ("second please", &two)] {
        let command = format!("touch {} && echo made-it", file.display());
        let input = json!({"command": command, "description": "d"});
        mock.once_when_prompt_contains(trigger, Reply::tool_use("Bash", input));
    }

    let allowed = sdk(
        &daemon,
        json!({"mode": "ask", "threadId": thread, "text": "first please", "answers": ["accept"]}),
    )
    .await;
    assert_eq!(allowed["status"], "completed", "{allowed}");
    let asked = allowed["elicitations"][0]["message"].as_str().unwrap_or("");
    assert!(
        asked.contains("Bash") && asked.contains("touch"),
        "{allowed}"
    );
    let reply = allowed["result"]["structuredContent"]["reply"]
        .as_str()
        .unwrap_or("");
    assert!(
        reply.contains("made-it"),
        "the model saw the output: {allowed}"
    );
    assert!(one.exists(), "the allowed command ran");

    let denied = sdk(
        &daemon,
        json!({"mode": "ask", "threadId": thread, "text": "second please", "answers": ["decline"]}),
    )
    .await;
    assert_eq!(denied["status"], "completed", "{denied}");
    assert_eq!(denied["elicitations"].as_array().map(Vec::len), Some(1));
    assert!(!two.exists(), "the denied command did not run");

    let permissions = crate::approvals::all_permissions(&daemon, &thread).await;
    let decided: Vec<(&str, &str)> = permissions
        .iter()
        .map(|p| {
            (
                p["status"].as_str().unwrap_or(""),
                p["decidedBy"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        decided,
        [("allowed", "person"), ("denied", "person")],
        "{permissions:?}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_stops_its_turn() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    mock.when_prompt_contains(
        "take your time",
        Reply::slow_text(vec!["word "; 120], Duration::from_millis(250)),
    );
    let thread = daemon.create_thread().await;
    let cancelled = sdk(
        &daemon,
        json!({"mode": "cancel", "threadId": thread, "text": "take your time"}),
    )
    .await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let task_id = cancelled["taskId"]
        .as_str()
        .expect("the task's id")
        .to_owned();
    assert_eq!(
        status_of(&daemon, &thread, &task_id).await,
        "interrupted",
        "the turn was stopped, not left to run its 30 s"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_outlives_its_connection_and_a_restart() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    mock.when_prompt_contains(
        "finish without me",
        Reply::slow_text(["done ", "while ", "away"], Duration::from_millis(300)),
    );
    let thread = daemon.create_thread().await;
    let started = sdk(
        &daemon,
        json!({"mode": "start", "threadId": thread, "text": "finish without me"}),
    )
    .await;
    assert_eq!(started["kind"], "task", "{started}");
    let reference = started["reference"].clone();
    let task_id = reference["taskId"].as_str().expect("a task id").to_owned();
    // The client is gone; the turn ends anyway, and the daemon restarts.
    let ended =
        harness_tests::util::eventually_async(Duration::from_secs(60), "the turn's end", || {
            let (daemon, thread, task_id) = (&daemon, &thread, &task_id);
            async move { status_of(daemon, thread, task_id).await != "pending" }
        })
        .await;
    ended.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(status_of(&daemon, &thread, &task_id).await, "done");
    let daemon = daemon.restart().await;

    let resumed = sdk(&daemon, json!({"mode": "resume", "reference": reference})).await;
    assert_eq!(resumed["status"], "completed", "{resumed}");
    assert_eq!(
        resumed["result"]["structuredContent"]["reply"],
        "done while away"
    );
    assert_eq!(resumed["taskId"], task_id.as_str());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_streams_a_tasks_changes_until_it_ends() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let mcp = McpHttp::new(&daemon.base, None);
    mock.when_prompt_contains(
        "stream me",
        Reply::slow_text(["one ", "two"], Duration::from_millis(300)),
    );
    let thread = daemon.create_thread().await;
    let args = json!({"name": "threads__send",
        "arguments": {"threadId": thread, "content": "stream me"}});
    let created = modern(&mcp, "tools/call", args, true).await;
    let task = created.result();
    assert_eq!(task["resultType"], "task", "{created:?}");
    assert_eq!(task["status"], "working");
    let task_id = task["taskId"].as_str().unwrap().to_owned();

    let listen = json!({"notifications": {"taskIds": [task_id, "msg_not_a_task"]}});
    // Answered once the task has ended: every frame of the stream is read.
    let streamed = modern(&mcp, "subscriptions/listen", listen.clone(), true).await;
    let methods: Vec<&str> = streamed
        .messages
        .iter()
        .filter_map(|m| m["method"].as_str())
        .collect();
    assert_eq!(
        methods.first(),
        Some(&"notifications/subscriptions/acknowledged"),
        "{streamed:?}"
    );
    let acknowledged = &streamed.messages[0]["params"]["notifications"]["taskIds"];
    assert_eq!(acknowledged, &json!([task_id]), "only the caller's tasks");
    let statuses: Vec<&str> = streamed
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/tasks")
        .filter_map(|m| m["params"]["status"].as_str())
        .collect();
    assert_eq!(statuses.last(), Some(&"completed"), "{streamed:?}");
    let last = streamed
        .messages
        .iter()
        .rev()
        .find(|m| m["method"] == "notifications/tasks")
        .unwrap();
    assert_eq!(
        last["params"]["result"]["structuredContent"]["reply"],
        "one two"
    );
    assert_eq!(streamed.last()["id"], 7, "the listen's own answer ends it");
    // A client without the extension may not listen for tasks.
    let refused = modern(&mcp, "subscriptions/listen", listen, false).await;
    assert_eq!(refused.last()["error"]["code"], -32021, "{refused:?}");
    daemon.stop().await;
}
