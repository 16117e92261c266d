//! The adapter on its own: JSON-RPC in, JSON-RPC out, with the shared probe plugin, an in-memory
//! store and the contract's stub delegate. No CLI here.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use harness_plugin_probe::{ProbePlugin, SLOW_TIMEOUT};
use plugin_contract::testing::StubDelegate;
use plugin_contract::{Plugin, ThreadId, ToolContext};

use super::*;
use crate::store::NewThread;

// ---------------------------------------------------------------------------------------------
// The fixture: the shared probe plugin (`harness-plugin-probe`), an in-memory store, one thread

/// Every probe tool, by name, as the adapter lists them.
const PROBE_TOOLS: [&str; 9] = [
    "probe__explode",
    "probe__gate",
    "probe__miscount",
    "probe__order",
    "probe__repeat",
    "probe__ship",
    "probe__slow",
    "probe__tally",
    "probe__whoami",
];

struct Fixture {
    adapter: Arc<McpAdapter>,
    store: Store,
    thread: ThreadId,
    /// The test's handle on the loaded plugin: its call count and its gate.
    probe: ProbePlugin,
}

async fn fixture() -> Fixture {
    let probe = ProbePlugin::default();
    let plugins: Vec<Arc<dyn Plugin>> = vec![Arc::new(probe.clone())];
    let registry = ToolRegistry::load(&plugins, Duration::from_secs(5)).expect("probe loads");
    let store = Store::open(":memory:").await.expect("in-memory store");
    let thread = store
        .create_thread(NewThread::default())
        .await
        .expect("a thread")
        .id;
    let adapter = Arc::new(McpAdapter::new(Arc::new(registry), store.clone()));
    Fixture {
        adapter,
        store,
        thread,
        probe,
    }
}

/// One JSON-RPC message to `server` from `thread`'s process, as the pool serves it: routed, and
/// a tool call run with the thread's context.
async fn send(
    adapter: &McpAdapter,
    store: &Store,
    thread: &ThreadId,
    server: &str,
    message: Value,
) -> Value {
    match adapter.route(thread, server, message) {
        Route::Reply(reply) | Route::Listed(reply) => reply,
        Route::Call(call) => {
            let ctx = ToolContext {
                thread_id: Some(thread.clone()),
                store: Arc::new(store.clone()),
                delegate: Arc::new(StubDelegate::default()),
            };
            adapter.call(call, ctx).await
        }
    }
}

impl Fixture {
    /// One JSON-RPC message to the `harness` server, as the CLI's process sends it.
    async fn rpc(&self, message: Value) -> Value {
        send(
            &self.adapter,
            &self.store,
            &self.thread,
            SERVER_NAME,
            message,
        )
        .await
    }

    /// A `tools/call` with id 7; returns the whole JSON-RPC reply.
    async fn call(&self, name: &str, arguments: Value) -> Value {
        self.rpc(json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": arguments,
                       "_meta": {"claudecode/toolUseId": "toolu_test_1", "progressToken": 7}}
        }))
        .await
    }
}

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------------
// The handshake and the small methods

#[tokio::test]
async fn initialize_echoes_a_known_version_and_falls_back_otherwise() {
    let f = fixture().await;
    for (asked, answered) in [
        (Some("2025-11-25"), "2025-11-25"),
        (Some("2024-11-05"), "2024-11-05"),
        (Some("1999-01-01"), "2025-06-18"),
    ] {
        let mut params = json!({"capabilities": {}, "clientInfo": {"name": "claude-code", "version": "2.1.330"}});
        if let Some(asked) = asked {
            params["protocolVersion"] = json!(asked);
        }
        let reply = f
            .rpc(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}))
            .await;
        assert_eq!(
            reply,
            json!({"jsonrpc": "2.0", "id": 0, "result": {
                "protocolVersion": answered,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "harness", "version": env!("CARGO_PKG_VERSION")}
            }}),
            "asked {asked:?}"
        );
    }
}

#[tokio::test]
async fn notifications_get_an_empty_result_without_id() {
    let f = fixture().await;
    for method in ["notifications/initialized", "notifications/cancelled"] {
        let reply = f
            .rpc(json!({"jsonrpc": "2.0", "method": method, "params": {"requestId": 2}}))
            .await;
        assert_eq!(reply, json!({"jsonrpc": "2.0", "result": {}}), "{method}");
    }
}

#[tokio::test]
async fn ping_and_unknown_methods() {
    let f = fixture().await;
    let reply = f
        .rpc(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        .await;
    assert_eq!(reply, json!({"jsonrpc": "2.0", "id": 3, "result": {}}));

    let reply = f
        .rpc(json!({"jsonrpc": "2.0", "id": 4, "method": "resources/list"}))
        .await;
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 4, "error": {
            "code": -32601, "message": "method not found: resources/list"
        }})
    );
}

#[tokio::test]
async fn an_unknown_server_is_method_not_found() {
    let f = fixture().await;
    let reply = send(
        &f.adapter,
        &f.store,
        &f.thread,
        "elsewhere",
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}),
    )
    .await;
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 0, "error": {
            "code": -32601, "message": "Server 'elsewhere' not found"
        }})
    );
}

#[tokio::test]
async fn tools_list_has_names_descriptions_and_schemas() {
    let f = fixture().await;
    let reply = f
        .rpc(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(reply["id"], 1);
    let tools = reply["result"]["tools"].as_array().expect("a tool list");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, PROBE_TOOLS);
    for tool in tools {
        assert!(tool["description"].is_string(), "{tool}");
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is listed: {reply}"))
    };
    let repeat = tool("probe__repeat");
    assert_eq!(repeat["description"], "Repeats a word.");
    assert_eq!(
        repeat["inputSchema"],
        json!({
            "type": "object",
            "properties": {
                "word": {"type": "string", "description": "The word."},
                "times": {"type": "integer", "minimum": 1, "default": 2}
            },
            "required": ["word"]
        })
    );
    assert_eq!(
        repeat["outputSchema"]["required"],
        json!(["said", "thread"]),
        "{repeat}"
    );
    assert!(
        tool("probe__gate").get("outputSchema").is_none(),
        "only declared output schemas are advertised"
    );
}

// ---------------------------------------------------------------------------------------------
// tools/call

#[tokio::test]
async fn a_call_fills_defaults_runs_for_the_thread_and_is_recorded() {
    let f = fixture().await;
    let reply = f.call("probe__repeat", json!({"word": "hi"})).await;
    assert_eq!(reply["jsonrpc"], "2.0");
    assert_eq!(reply["id"], 7, "the reply carries the request's id");
    let result = &reply["result"];
    assert_eq!(result.get("isError"), None, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"said": "hi hi", "thread": f.thread.as_str()})
    );
    assert_eq!(text_of(result), "hi hi");

    let calls = f.store.tool_calls(&f.thread).await.expect("recorded calls");
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.tool, "probe__repeat");
    assert_eq!(call.thread_id.as_ref(), Some(&f.thread));
    assert_eq!(call.tool_use_id.as_deref(), Some("toolu_test_1"));
    assert_eq!(call.input, json!({"word": "hi"}));
    assert_eq!(call.result.as_ref(), Some(result));
    assert!(!call.is_error);
}

#[tokio::test]
async fn violations_are_an_error_result_listing_every_pointer() {
    let f = fixture().await;
    let reply = f.call("probe__repeat", json!({"times": 0})).await;
    assert_eq!(reply["id"], 7);
    let result = &reply["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        text_of(result),
        "Invalid input for tool `probe__repeat`:\n\
         - at (root): \"word\" is a required property\n\
         - at /times: 0 is less than the minimum of 1"
    );
    let reply = f
        .call("probe__repeat", json!({"word": ["a"], "times": "2"}))
        .await;
    assert_eq!(
        text_of(&reply["result"]),
        "Invalid input for tool `probe__repeat`:\n\
         - at /times: \"2\" is not of type \"integer\"\n\
         - at /word: [\"a\"] is not of type \"string\""
    );
    assert_eq!(f.probe.calls(), 0, "a refused input never reaches the tool");
    let calls = f.store.tool_calls(&f.thread).await.expect("recorded calls");
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c.is_error));
}

#[tokio::test]
async fn missing_arguments_count_as_an_empty_object() {
    let f = fixture().await;
    let reply = f
        .rpc(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "probe__repeat"}}))
        .await;
    assert_eq!(reply["id"], 9);
    assert_eq!(
        text_of(&reply["result"]),
        "Invalid input for tool `probe__repeat`:\n- at (root): \"word\" is a required property",
        "`{{}}` with its defaults, not `null`"
    );
}

#[tokio::test]
async fn unknown_tools_panics_and_timeouts_are_error_results() {
    let f = fixture().await;
    let reply = f.call("probe__nope", json!({})).await;
    assert_eq!(reply["result"]["isError"], true);
    assert_eq!(
        text_of(&reply["result"]),
        format!(
            "unknown tool `probe__nope`; known tools: {}",
            PROBE_TOOLS.join(", ")
        )
    );

    let reply = f.call("probe__explode", json!({})).await;
    assert_eq!(reply["result"]["isError"], true);
    assert_eq!(
        text_of(&reply["result"]),
        "tool `probe__explode` panicked: probe exploded on purpose"
    );

    let reply = f.call("probe__slow", json!({})).await;
    assert_eq!(reply["result"]["isError"], true);
    assert_eq!(
        text_of(&reply["result"]),
        format!("tool `probe__slow` did not finish within {SLOW_TIMEOUT:?} and was stopped")
    );

    // The adapter still answers.
    let reply = f
        .call("probe__repeat", json!({"word": "ok", "times": 1}))
        .await;
    assert_eq!(text_of(&reply["result"]), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_does_not_block_another() {
    let f = fixture().await;
    let slow = {
        let (adapter, store, thread) = (f.adapter.clone(), f.store.clone(), f.thread.clone());
        tokio::spawn(async move {
            let message = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                 "params": {"name": "probe__gate", "arguments": {}}});
            send(&adapter, &store, &thread, SERVER_NAME, message).await
        })
    };
    // While the gate is shut, another call and a ping go through.
    let fast = tokio::time::timeout(
        Duration::from_secs(5),
        f.call("probe__repeat", json!({"word": "quick", "times": 1})),
    )
    .await
    .expect("the fast call is not held up by the slow one");
    assert_eq!(text_of(&fast["result"]), "quick");
    let ping = tokio::time::timeout(
        Duration::from_secs(5),
        f.rpc(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"})),
    )
    .await
    .expect("a ping is not held up either");
    assert_eq!(ping["result"], json!({}));
    assert!(!slow.is_finished(), "the slow call is still waiting");

    f.probe.open_gate();
    let slow = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .expect("the slow call finishes once opened")
        .expect("no panic");
    assert_eq!(slow["id"], 2);
    assert_eq!(text_of(&slow["result"]), "gate opened");
    let tools: Vec<String> = f
        .store
        .tool_calls(&f.thread)
        .await
        .expect("recorded calls")
        .into_iter()
        .map(|c| c.tool)
        .collect();
    assert_eq!(
        tools,
        ["probe__repeat", "probe__gate"],
        "recorded as they finished"
    );
}

#[tokio::test]
async fn a_malformed_request_is_a_json_rpc_error_not_a_panic() {
    let f = fixture().await;
    let reply = f
        .rpc(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": 5}}))
        .await;
    assert_eq!(reply["id"], 5);
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert!(reply["error"]["message"]
        .as_str()
        .unwrap()
        .contains("tools/call"));
    let reply = f.rpc(json!({"id": 6, "method": 7})).await;
    assert_eq!(
        reply["error"]["code"], -32600,
        "not JSON-RPC at all: {reply}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_cancelled_stops_the_running_call() {
    let f = fixture().await;
    let slow = {
        let (adapter, store, thread) = (f.adapter.clone(), f.store.clone(), f.thread.clone());
        tokio::spawn(async move {
            let message = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                 "params": {"name": "probe__gate", "arguments": {}}});
            send(&adapter, &store, &thread, SERVER_NAME, message).await
        })
    };
    // Cancel until the call has registered and answered (the notification may race the call).
    let reply = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            f.rpc(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": 7, "reason": "AbortError: remote-cancel"}}),
            )
            .await;
            if slow.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        reply.is_ok(),
        "the gated call ended without its gate opening"
    );
    let slow = slow.await.expect("no panic");
    assert_eq!(slow["id"], 7);
    assert_eq!(slow["result"]["isError"], true);
    assert_eq!(text_of(&slow["result"]), "tool `probe__gate` was cancelled");
}

// ---------------------------------------------------------------------------------------------
// The client's tools: the server `custom`, whose calls wait for the client's answer

fn weather() -> Arc<ClientTools> {
    let spec = plugin_contract::ToolSpec {
        name: "get_weather".into(),
        description: "The weather in a city.".into(),
        input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}),
        output_schema: None,
        timeout: None,
    };
    Arc::new(ClientTools::compile([spec]).expect("compiles"))
}

fn weather_call(id: u64, city: Value, tool_use_id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "get_weather", "arguments": {"city": city},
        "_meta": {"claudecode/toolUseId": tool_use_id}}})
}

fn client_call_of(route: Route) -> ToolCall {
    match route {
        Route::Call(call) if call.is_clients() => call,
        other => panic!("not a call to the client's tool: {other:?}"),
    }
}

#[tokio::test]
async fn the_clients_tools_are_their_own_server_and_only_where_a_profile_has_them() {
    let f = fixture().await;
    let tools = weather();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let Route::Listed(listed) =
        f.adapter
            .route_with(&f.thread, "custom", Some(&tools), list.clone())
    else {
        panic!("tools/list is answered at once");
    };
    assert_eq!(listed["result"]["tools"][0]["name"], "get_weather");
    assert_eq!(listed["result"]["tools"].as_array().map(Vec::len), Some(1));
    // Without the profile's tools there is no such server.
    let Route::Reply(refused) = f.adapter.route_with(&f.thread, "custom", None, list) else {
        panic!("answered at once");
    };
    assert_eq!(refused["error"]["message"], "Server 'custom' not found");
}

#[tokio::test]
async fn a_call_to_the_clients_tool_waits_for_its_answer() {
    let f = fixture().await;
    let tools = weather();
    let route = f.adapter.route_with(
        &f.thread,
        "custom",
        Some(&tools),
        weather_call(3, json!("Paris"), "toolu_w1"),
    );
    let ClientCall::Waiting(waiting) = f.adapter.client_call(client_call_of(route)) else {
        panic!("a good call waits");
    };
    assert_eq!(waiting.name, "mcp__custom__get_weather");
    assert!(f.adapter.client_calls().is_waiting(&f.thread, "toolu_w1"));
    let answer = ClientAnswer {
        content: vec![rmcp::model::ContentBlock::text("sunny")],
        is_error: false,
    };
    let adapter = f.adapter.clone();
    let answered = tokio::spawn(async move { adapter.client_answer(waiting).await });
    f.adapter
        .client_calls()
        .answer(&f.thread, "toolu_w1", answer.clone())
        .expect("it waits");
    let (got, reply) = tokio::time::timeout(Duration::from_secs(5), answered)
        .await
        .expect("answered in time")
        .expect("the task");
    assert_eq!(got, Some(answer));
    assert_eq!(reply["id"], 3);
    assert_eq!(reply["result"]["content"][0]["text"], "sunny");
    assert!(
        reply["result"].get("isError").is_none_or(|e| e == false),
        "{reply}"
    );
    let calls = f.store.tool_calls(&f.thread).await.expect("recorded calls");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].tool, "custom__get_weather");
    assert_eq!(calls[0].tool_use_id.as_deref(), Some("toolu_w1"));
    assert!(!calls[0].is_error);
}

#[tokio::test]
async fn a_bad_call_to_the_clients_tool_is_answered_at_once_and_a_cancel_ends_a_wait() {
    let f = fixture().await;
    let tools = weather();
    let route = f.adapter.route_with(
        &f.thread,
        "custom",
        Some(&tools),
        weather_call(4, json!(5), "toolu_w2"),
    );
    let ClientCall::Done(reply) = f.adapter.client_call(client_call_of(route)) else {
        panic!("an input its schema refuses is not waited on");
    };
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert!(!f.adapter.client_calls().is_waiting(&f.thread, "toolu_w2"));

    let route = f.adapter.route_with(
        &f.thread,
        "custom",
        Some(&tools),
        weather_call(5, json!("Oslo"), "toolu_w3"),
    );
    let ClientCall::Waiting(waiting) = f.adapter.client_call(client_call_of(route)) else {
        panic!("a good call waits");
    };
    let adapter = f.adapter.clone();
    let answered = tokio::spawn(async move { adapter.client_answer(waiting).await });
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 5}});
    // The call registers itself as running once polled.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let (got, reply) = loop {
        f.adapter
            .route_with(&f.thread, "custom", Some(&tools), cancel.clone());
        if answered.is_finished() {
            break answered.await.expect("the task");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cancel ends the wait"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(got, None);
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert!(!f.adapter.client_calls().is_waiting(&f.thread, "toolu_w3"));
}

#[tokio::test]
async fn the_clients_error_reaches_the_model_as_an_error_result() {
    let f = fixture().await;
    let tools = weather();
    let route = f.adapter.route_with(
        &f.thread,
        "custom",
        Some(&tools),
        weather_call(6, json!("Rome"), "toolu_w4"),
    );
    let ClientCall::Waiting(waiting) = f.adapter.client_call(client_call_of(route)) else {
        panic!("a good call waits");
    };
    let adapter = f.adapter.clone();
    let answered = tokio::spawn(async move { adapter.client_answer(waiting).await });
    let answer = ClientAnswer {
        content: vec![rmcp::model::ContentBlock::text("no such city")],
        is_error: true,
    };
    let grace = Duration::from_secs(5);
    (f.adapter.client_calls())
        .answer_within(&f.thread, "toolu_w4", answer, grace)
        .await
        .expect("it waits");
    let (_, reply) = tokio::time::timeout(Duration::from_secs(5), answered)
        .await
        .expect("answered in time")
        .expect("the task");
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert_eq!(reply["result"]["content"][0]["text"], "no such city");
    let calls = f.store.tool_calls(&f.thread).await.expect("recorded calls");
    assert!(calls[0].is_error, "{calls:?}");
}
