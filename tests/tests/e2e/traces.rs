//! Traces (#29): with `otel.endpoint` set, every turn is one trace, sent over OTLP/HTTP to a
//! receiver nobody here wrote (the OpenTelemetry project's `oteltest` sink). A turn with a
//! delegation gives the span tree: the caller's `traceparent` → `invoke_agent` → `queue`,
//! `checkout` (`slot wait`, `spawn`), `chat` per model round trip (and the model gateway's
//! `POST /v1/messages` for each), `execute_tool` (plugin `delegation`) → the child thread's own
//! `invoke_agent`. The process started for the turn has
//! its `TRACEPARENT`; `/mcp`'s `traceparent` is a turn's parent too; no message text is on a
//! span unless configured.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{McpHttp, HANDSHAKE_VERSION};
use harness_tests::mock::{MockApi, Reply};
use harness_tests::otel::{Receiver, Span};
use harness_tests::util::eventually;

const DELEGATE_TOOL: &str = "mcp__harness__delegation__delegate";
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// A receiver, the mock and a daemon sending it its traces (`tweak` sets more); `None` when
/// there is no Python.
async fn traced(
    test: &str,
    tweak: impl FnOnce(&mut orchestrator::config::Config) + Send + 'static,
) -> Option<(Receiver, MockApi, TestDaemon, tempfile::TempDir)> {
    let python = harness_tests::mcp::python_or_skip(test).await?;
    let dir = tempfile::tempdir().expect("a temp dir");
    let receiver = Receiver::start(&python, dir.path());
    let mock = MockApi::start().await;
    let endpoint = receiver.endpoint.clone();
    let daemon = TestDaemon::start(&mock, move |config| {
        config.otel.endpoint = Some(endpoint);
        tweak(config);
    })
    .await;
    Some((receiver, mock, daemon, dir))
}

fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id)
        .collect()
}

fn one<'a>(spans: &[&'a Span], name: &str) -> &'a Span {
    let named: Vec<&&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(named.len(), 1, "one `{name}` among {:?}", names(spans));
    named[0]
}

fn names(spans: &[&Span]) -> Vec<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_with_a_delegation_is_one_trace_under_the_callers_span() {
    let Some((receiver, mock, daemon, _dir)) = traced("traces", |_| {}).await else {
        return;
    };
    mock.once_when_prompt_contains(
        "please delegate",
        Reply::tool_use(DELEGATE_TOOL, json!({"prompt": "child task XYZ"})),
    );
    let parent = daemon.create_thread().await;
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let answer = reqwest::Client::new()
        .post(format!("{}/api/threads/{parent}/messages", daemon.base))
        .header("traceparent", &traceparent)
        .json(&json!({"content": "please delegate this"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let body: serde_json::Value = answer.json().await.unwrap();
    let message = body["userMessageId"].as_str().unwrap().to_owned();

    // The parent's process was started for this turn: its TRACEPARENT names the trace.
    let pid = daemon.pid_of(&parent).expect("the parent's process");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    let child_env = environ
        .split('\0')
        .find_map(|kv| kv.strip_prefix("TRACEPARENT="))
        .expect("TRACEPARENT in the process's environment");
    assert!(
        child_env.starts_with(&format!("00-{CALLER_TRACE}-")),
        "{child_env}"
    );

    // Both turns' roots arrive (the exporter sends every second).
    eventually(Duration::from_secs(30), "both turns' spans", || {
        receiver
            .spans()
            .iter()
            .filter(|s| s.name == "invoke_agent harness")
            .count()
            >= 2
    })
    .await
    .unwrap();
    let spans = receiver.spans();
    assert!(
        spans.iter().all(|s| s.trace_id == CALLER_TRACE),
        "one trace: {spans:?}"
    );
    assert!(spans
        .iter()
        .all(|s| s.service.as_deref() == Some("harness")));
    let root = spans
        .iter()
        .find(|s| s.name == "invoke_agent harness" && s.parent_span_id == CALLER_SPAN)
        .expect("the turn's root, under the caller's span");
    assert_eq!(root.attr("gen_ai.operation.name"), "invoke_agent");
    assert_eq!(root.attr("gen_ai.conversation.id"), parent.as_str());
    assert_eq!(root.attr("harness.message.id"), message.as_str());
    assert_eq!(root.attr("harness.start"), "fresh");
    assert!(
        root.attr("gen_ai.usage.input_tokens").as_i64() > Some(0),
        "{root:?}"
    );
    assert!(
        root.attr("harness.cost_usd").as_f64() > Some(0.0),
        "{root:?}"
    );
    assert!(
        root.attr("gen_ai.input.messages").is_null(),
        "no text unless configured"
    );
    assert_eq!(root.status, 0);
    assert!(
        child_env.contains(&root.span_id),
        "TRACEPARENT is the turn's span"
    );

    let under_root = children(&spans, root);
    let queue = one(&under_root, "queue");
    assert!(queue.start >= root.start && queue.end <= root.end);
    let checkout = one(&under_root, "checkout");
    assert_eq!(checkout.attr("harness.start"), "fresh");
    let started = children(&spans, checkout);
    let (slot, spawn) = (one(&started, "slot wait"), one(&started, "spawn"));
    assert!(
        slot.end <= spawn.start + 1 && spawn.end <= checkout.end,
        "{slot:?} {spawn:?}"
    );
    // Two model round trips: the tool call, then the answer after its result.
    let chats: Vec<&&Span> = under_root.iter().filter(|s| s.name == "chat").collect();
    assert_eq!(chats.len(), 2, "{:?}", names(&under_root));
    for chat in &chats {
        assert_eq!(chat.attr("gen_ai.operation.name"), "chat");
        assert!(chat.attr("gen_ai.response.id").is_string());
        assert!(chat.attr("gen_ai.usage.output_tokens").as_i64() > Some(0));
    }
    // The model gateway's view of the same two requests: the HTTP call, its status and usage.
    let calls: Vec<&&Span> = under_root
        .iter()
        .filter(|s| s.name == "POST /v1/messages")
        .collect();
    assert_eq!(calls.len(), 2, "{:?}", names(&under_root));
    for (call, chat) in calls.iter().zip(&chats) {
        assert_eq!(call.attr("http.response.status_code"), 200);
        assert_eq!(
            call.attr("gen_ai.usage.input_tokens"),
            chat.attr("gen_ai.usage.input_tokens")
        );
        // The whole response's output (the mock reports 7), on both spans: the CLI's
        // `assistant` line comes before the stream's end and says 1 (#46), so the `chat` span
        // takes the gateway's count.
        assert_eq!(call.attr("gen_ai.usage.output_tokens"), 7, "{call:?}");
        assert_eq!(chat.attr("gen_ai.usage.output_tokens"), 7, "{chat:?}");
        assert!(
            call.attr("harness.cost_usd").as_f64() > Some(0.0),
            "{call:?}"
        );
        assert!(call.start >= root.start && call.end <= root.end);
    }
    let tool = one(&under_root, &format!("execute_tool {DELEGATE_TOOL}"));
    assert_eq!(tool.attr("harness.plugin"), "delegation");
    assert_eq!(tool.attr("gen_ai.tool.name"), DELEGATE_TOOL);
    assert!(chats[0].end <= tool.start + 1_000_000 && tool.end <= chats[1].end);

    // The child's turn is a child of the tool call.
    let child_root = one(&children(&spans, tool), "invoke_agent harness");
    assert_ne!(child_root.attr("gen_ai.conversation.id"), parent.as_str());
    let under_child = children(&spans, child_root);
    one(&under_child, "chat");
    one(&under_child, "checkout");
    assert!(child_root.start >= tool.start && child_root.end <= tool.end);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_send_carries_its_traceparent_and_content_is_opt_in() {
    let tweak = |config: &mut orchestrator::config::Config| {
        config.otel.capture_content = true;
        config.otel.service_name = "harness-mcp".into();
    };
    let Some((receiver, _mock, daemon, _dir)) = traced("traces over /mcp", tweak).await else {
        return;
    };
    let thread = daemon.create_thread().await;
    let mcp = McpHttp::new(&daemon.base, None);
    let call = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "threads__send", "arguments": {"threadId": thread, "content": "hello there"}}
    });
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let answer = mcp
        .post_raw(
            call.to_string(),
            &[
                ("mcp-protocol-version", HANDSHAKE_VERSION),
                ("traceparent", traceparent.as_str()),
            ],
        )
        .await;
    assert_eq!(
        answer.result()["structuredContent"]["status"],
        "done",
        "{answer:?}"
    );
    eventually(Duration::from_secs(30), "the turn's root span", || {
        receiver
            .spans()
            .iter()
            .any(|s| s.name == "invoke_agent harness")
    })
    .await
    .unwrap();
    let spans = receiver.spans();
    let root = spans
        .iter()
        .find(|s| s.name == "invoke_agent harness")
        .unwrap();
    assert_eq!(
        (root.trace_id.as_str(), root.parent_span_id.as_str()),
        (CALLER_TRACE, CALLER_SPAN)
    );
    assert_eq!(root.service.as_deref(), Some("harness-mcp"));
    let input = root
        .attr("gen_ai.input.messages")
        .as_str()
        .unwrap_or_default();
    assert!(input.contains("hello there"), "{root:?}");
    let output = root
        .attr("gen_ai.output.messages")
        .as_str()
        .unwrap_or_default();
    assert!(output.contains("echo: hello there"), "{root:?}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_wait_is_a_span_as_long_as_the_person_took() {
    let tweak = |config: &mut orchestrator::config::Config| {
        config.claude.builtin_tools = Some("Bash".into());
        config.approvals.mode = orchestrator::config::ApprovalMode::Ask;
    };
    let Some((receiver, mock, daemon, _dir)) = traced("traces of approvals", tweak).await else {
        return;
    };
    mock.once_when_prompt_contains(
        "please run",
        // A command with an effect: the CLI asks about it.
        Reply::tool_use(
            "Bash",
            json!({"command": "touch made.txt && echo ran", "description": "d"}),
        ),
    );
    let thread = daemon.create_thread().await;
    let (client, id) = (daemon.client().clone(), thread.clone());
    let turn = tokio::spawn(async move { client.send(&id, "please run").await });
    let path = format!("/api/threads/{thread}/permissions");
    let pending = || async {
        let (_, body) = daemon.get(&path).await;
        body["permissions"][0]["requestId"]
            .as_str()
            .map(str::to_owned)
    };
    harness_tests::util::eventually_async(
        Duration::from_secs(60),
        "a pending permission",
        || async { pending().await.is_some() },
    )
    .await
    .unwrap();
    let request = pending().await.expect("a pending permission");
    let asked = std::time::Instant::now();
    // The person takes a while; the span must cover it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = format!("{path}/{request}");
    let (status, _) = daemon.post(&answer, json!({"decision": "allow"})).await;
    assert_eq!(status, StatusCode::OK);
    let waited = asked.elapsed();
    let (status, body) = turn.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually(
        Duration::from_secs(30),
        "the approval span and the turn's",
        || {
            let spans = receiver.spans();
            ["approval Bash", "invoke_agent harness"]
                .iter()
                .all(|name| spans.iter().any(|s| s.name == *name))
        },
    )
    .await
    .unwrap();
    let spans = receiver.spans();
    let approval = spans.iter().find(|s| s.name == "approval Bash").unwrap();
    let root = spans
        .iter()
        .find(|s| s.span_id == approval.parent_span_id)
        .expect("under the turn");
    assert_eq!(root.name, "invoke_agent harness");
    let took = Duration::from_nanos(approval.end - approval.start);
    assert!(
        took >= Duration::from_millis(300) && took <= waited + Duration::from_secs(5),
        "{took:?}"
    );
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool Bash")
        .expect("the tool's span");
    assert!(
        tool.start <= approval.start && approval.end <= tool.end,
        "{tool:?} {approval:?}"
    );
    daemon.stop().await;
}
