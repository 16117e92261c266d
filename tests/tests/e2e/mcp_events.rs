//! The MCP Events extension on `/mcp` (`io.modelcontextprotocol/events`), driven with real
//! turns: negotiated per request (advertised to, and served for, clients that declare it),
//! listed, polled with a cursor that resumes without repeats and per tenant, each event type from
//! what makes it (a turn's end, a permission request, a schedule run, a spent budget), streamed
//! as it happens, and delivered as webhooks that the Standard Webhooks reference library verifies,
//! until the subscription's TTL runs out, and again after a restart once the client refreshes.
//!
//! No official MCP SDK speaks the extension yet (the Python `mcp` 2.3.0 has no `events/*`;
//! `@ai-sdk/mcp`'s `experimental_events` has list and webhook subscriptions only), so the
//! client here is raw JSON-RPC ([`McpHttp`]) with the 2026-07-28 per-request metadata.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{modern_meta, McpAnswer, McpHttp, HANDSHAKE_VERSION, MODERN_VERSION};
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::{eventually, eventually_async};
use harness_tests::webhooks::Receiver;
use orchestrator::config::ApprovalMode;
use orchestrator::webhooks::Signer;

use crate::metrics::value;
use crate::support::call;

const EXTENSION: &str = "io.modelcontextprotocol/events";
const OPERATOR: &str = "the-operator-token";
const WAIT: Duration = Duration::from_secs(60);

/// The per-request `_meta` of a 2026-07-28 client, declaring the extension or not.
fn meta(declares: bool) -> Value {
    let mut meta = modern_meta();
    if declares {
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({"extensions": {EXTENSION: {}}});
    }
    meta
}

/// A 2026-07-28 request of `method` with `params` (and the `_meta`).
async fn request(mcp: &McpHttp, method: &str, mut params: Value, declares: bool) -> McpAnswer {
    params["_meta"] = meta(declares);
    let message = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    mcp.post_raw(
        message.to_string(),
        &[
            ("mcp-protocol-version", MODERN_VERSION),
            ("mcp-method", method),
        ],
    )
    .await
}

/// `events/poll` of `turn.ended` from `cursor`: the result.
async fn poll(mcp: &McpHttp, cursor: Value, arguments: Value) -> Value {
    poll_of(mcp, "turn.ended", cursor, arguments).await
}

/// `events/poll` of `name` from `cursor`: the result.
async fn poll_of(mcp: &McpHttp, name: &str, cursor: Value, arguments: Value) -> Value {
    let params = json!({"name": name, "arguments": arguments, "cursor": cursor});
    let answer = request(mcp, "events/poll", params, true).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    answer.result().clone()
}

/// The threads of the events a poll returned.
fn threads_of(result: &Value) -> Vec<String> {
    result["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["data"]["threadId"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// A key of `tenant` that reads and writes threads.
async fn key(base: &str, tenant: &str) -> String {
    let body = json!({"tenant": tenant, "scopes": ["threads:read", "threads:write"]});
    let (status, made, _) = call(base, Some(OPERATOR), Method::POST, "/api/keys", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    made["key"].as_str().expect("the key").to_owned()
}

/// A thread `bearer` creates, and a first turn in it: the thread's id.
async fn thread_with_a_turn(base: &str, bearer: &str) -> String {
    let (status, made, _) = call(
        base,
        Some(bearer),
        Method::POST,
        "/api/threads",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let thread = made["id"].as_str().expect("an id").to_owned();
    turn(base, bearer, &thread, "hello").await;
    thread
}

/// A turn of `thread`, to its end: the user message's id.
async fn turn(base: &str, bearer: &str, thread: &str, text: &str) -> String {
    let path = format!("/api/threads/{thread}/messages");
    let body = json!({"content": text});
    let (status, sent, _) = call(base, Some(bearer), Method::POST, path, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    sent["userMessageId"].as_str().expect("its id").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_negotiated_listed_and_polled_per_tenant_resuming_without_repeats() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(OPERATOR.into())).await;
    let base = daemon.base.clone();
    let (acme, globex) = (key(&base, "acme").await, key(&base, "globex").await);
    let (acme_mcp, globex_mcp) = (
        McpHttp::new(&base, Some(&acme)),
        McpHttp::new(&base, Some(&globex)),
    );

    // Advertised to a client that declares it, and only to one.
    for declares in [true, false] {
        let answer = request(&acme_mcp, "server/discover", json!({}), declares).await;
        let advertised = answer.result()["capabilities"]["extensions"][EXTENSION].is_object();
        assert_eq!(advertised, declares, "{answer:?}");
    }
    // Not negotiated: -32021 naming the capability (2026-07-28), -32601 (the handshake's
    // generation, which has no per-request capabilities).
    let refused = request(&acme_mcp, "events/list", json!({}), false).await;
    assert_eq!(refused.last()["error"]["code"], -32021, "{refused:?}");
    assert!(
        refused.last()["error"]["data"]["requiredCapabilities"]["extensions"][EXTENSION]
            .is_object(),
        "{refused:?}"
    );
    let legacy = json!({"jsonrpc": "2.0", "id": 1, "method": "events/list", "params": {}});
    let legacy = acme_mcp
        .post_raw(
            legacy.to_string(),
            &[("mcp-protocol-version", HANDSHAKE_VERSION)],
        )
        .await;
    assert_eq!(legacy.last()["error"]["code"], -32601, "{legacy:?}");

    let listed = request(&acme_mcp, "events/list", json!({}), true).await;
    let types = listed.result()["events"]
        .as_array()
        .expect("event types")
        .clone();
    let names: Vec<&str> = types.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "turn.ended",
            "permission.requested",
            "budget.reached",
            "schedule.run"
        ]
    );
    for listed in &types {
        assert_eq!(
            listed["delivery"],
            json!(["poll", "push", "webhook"]),
            "{listed}"
        );
        assert!(
            listed["inputSchema"]["properties"]["threadId"].is_object(),
            "{listed}"
        );
        assert!(
            listed["payloadSchema"]["properties"]["threadId"].is_object(),
            "{listed}"
        );
    }

    // A first poll without a cursor starts from now: nothing, and where to go on from.
    let start = poll(&acme_mcp, Value::Null, json!({})).await;
    assert_eq!(start["events"], json!([]), "{start}");
    let globex_start = poll(&globex_mcp, Value::Null, json!({})).await;

    let ours = thread_with_a_turn(&base, &acme).await;
    let theirs = thread_with_a_turn(&base, &globex).await;

    // Acme sees its turn's end and not globex's; globex the other way round.
    let first = poll(&acme_mcp, start["cursor"].clone(), json!({})).await;
    assert_eq!(threads_of(&first), [ours.as_str()], "{first}");
    let event = &first["events"][0];
    assert_eq!(event["name"], "turn.ended");
    assert_eq!(event["data"]["status"], "done", "{event}");
    assert!(event["data"]["text"].is_string(), "{event}");
    assert!(
        event["timestamp"].is_string() && event["eventId"].is_string(),
        "{event}"
    );
    assert_eq!(event["cursor"], first["cursor"], "{first}");
    assert_eq!(first["truncated"], false);
    let globex_first = poll(&globex_mcp, globex_start["cursor"].clone(), json!({})).await;
    assert_eq!(
        threads_of(&globex_first),
        [theirs.as_str()],
        "{globex_first}"
    );

    // The cursor resumes: nothing again, then only what is new.
    let again = poll(&acme_mcp, first["cursor"].clone(), json!({})).await;
    assert_eq!(again["events"], json!([]), "{again}");
    let message = turn(&base, &acme, &ours, "and again").await;
    let next = poll(&acme_mcp, again["cursor"].clone(), json!({})).await;
    assert_eq!(threads_of(&next), [ours.as_str()], "{next}");
    assert_eq!(
        next["events"][0]["data"]["messageId"],
        message.as_str(),
        "{next}"
    );
    assert_ne!(next["events"][0]["eventId"], event["eventId"]);

    // Arguments narrow it; another tenant's thread is one that does not exist.
    let only = poll(
        &acme_mcp,
        start["cursor"].clone(),
        json!({"threadId": ours}),
    )
    .await;
    assert_eq!(only["events"].as_array().map(Vec::len), Some(2), "{only}");
    let params = json!({"name": "turn.ended", "arguments": {"threadId": theirs}, "cursor": null});
    let hidden = request(&acme_mcp, "events/poll", params, true).await;
    assert_eq!(hidden.last()["error"]["code"], -32602, "{hidden:?}");
    let bad = json!({"name": "turn.ended", "cursor": "not-ours"});
    let bad = request(&acme_mcp, "events/poll", bad, true).await;
    assert_eq!(bad.last()["error"]["code"], -32602, "{bad:?}");
    daemon.stop().await;
}

/// Polls `name` from `cursor` until it returns an event: that event.
async fn first_event(mcp: &McpHttp, name: &str, cursor: &Value, arguments: &Value) -> Value {
    let polling = async {
        loop {
            let polled = poll_of(mcp, name, cursor.clone(), arguments.clone()).await;
            if !polled["events"][0].is_null() {
                return polled["events"][0].clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(WAIT, polling)
        .await
        .unwrap_or_else(|_| panic!("no {name} event in time"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_request_and_a_schedule_run_are_events_of_their_own() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Ask;
    })
    .await;
    let mcp = McpHttp::new(&daemon.base, None);
    let thread = daemon.create_thread().await;
    let arguments = json!({"threadId": thread});
    let asked_from = poll_of(&mcp, "permission.requested", Value::Null, arguments.clone()).await;
    let runs_from = poll_of(&mcp, "schedule.run", Value::Null, arguments.clone()).await;

    let body = json!({"cron": "0 0 1 1 *", "threadId": thread, "prompt": "yearly"});
    let (status, schedule) = daemon.post("/api/schedules", body).await;
    assert_eq!(status, StatusCode::CREATED, "{schedule}");
    let schedule = schedule["id"].as_str().expect("an id").to_owned();
    let (status, started) = daemon
        .post(&format!("/api/schedules/{schedule}/run"), json!(null))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let run = first_event(&mcp, "schedule.run", &runs_from["cursor"], &arguments).await;
    assert_eq!(run["data"]["scheduleId"], schedule.as_str(), "{run}");
    assert_eq!(run["data"]["runId"], started["runId"], "{run}");
    assert_eq!(run["data"]["trigger"], "manual", "{run}");

    mock.once_when_prompt_contains(
        "run it",
        Reply::tool_use(
            "Bash",
            json!({"command": "touch events-test", "description": "d"}),
        ),
    );
    let path = format!("/api/threads/{thread}/messages?wait=false");
    let (status, queued) = daemon.post(&path, json!({"content": "run it"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let asked = first_event(
        &mcp,
        "permission.requested",
        &asked_from["cursor"],
        &arguments,
    )
    .await;
    assert_eq!(asked["data"]["toolName"], "Bash", "{asked}");
    assert_eq!(
        asked["data"]["input"]["command"], "touch events-test",
        "{asked}"
    );
    let request = asked["data"]["requestId"].as_str().expect("a request id");
    // The event names what answers it.
    let answer = format!("/api/threads/{thread}/permissions/{request}");
    let (status, answered) = daemon.post(&answer, json!({"decision": "deny"})).await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_is_a_budget_reached_and_a_refused_turn_ended() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.budget.daily_usd = Some(0.000001)).await;
    let mcp = McpHttp::new(&daemon.base, None);
    let from = poll_of(&mcp, "budget.reached", Value::Null, json!({})).await;
    let first = daemon.create_thread().await;
    daemon.reply(&first, "spend it").await;
    let other = daemon.create_thread().await;
    let (status, body) = daemon.send(&other, "anything left?").await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");

    let reached = first_event(&mcp, "budget.reached", &from["cursor"], &json!({})).await;
    assert_eq!(reached["data"]["threadId"], other.as_str(), "{reached}");
    assert_eq!(reached["data"]["budget"], "daily", "{reached}");
    assert!(reached["data"]["spentUsd"].is_number(), "{reached}");
    // The same stored event is the turn's end, refused: another occurrence, another id.
    let arguments = json!({"threadId": other});
    let ended = first_event(&mcp, "turn.ended", &from["cursor"], &arguments).await;
    assert_eq!(ended["data"]["status"], "refused", "{ended}");
    assert_ne!(ended["eventId"], reached["eventId"]);
    assert_eq!(ended["cursor"], reached["cursor"]);
    daemon.stop().await;
}

/// Reads the SSE frames of a streamed response until `done` holds for one: the JSON-RPC
/// messages so far.
async fn read_until(
    response: &mut reqwest::Response,
    buffer: &mut String,
    done: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut messages = Vec::new();
    let reading = async {
        loop {
            while let Some(end) = buffer.find("\n\n") {
                let frame: String = buffer.drain(..end + 2).collect();
                for data in frame.lines().filter_map(|l| l.strip_prefix("data:")) {
                    if let Ok(message) = serde_json::from_str::<Value>(data.trim()) {
                        let last = done(&message);
                        messages.push(message);
                        if last {
                            return;
                        }
                    }
                }
            }
            let chunk = response.chunk().await.expect("the stream stays open");
            let chunk = chunk.expect("the stream does not end");
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(WAIT, reading)
        .await
        .unwrap_or_else(|_| panic!("no such frame in time; had {messages:?}"));
    messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_delivers_a_turns_end_as_it_happens() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let mut params = json!({"name": "turn.ended", "arguments": {"threadId": thread}});
    params["_meta"] = meta(true);
    let message = json!({"jsonrpc": "2.0", "id": 9, "method": "events/stream", "params": params});
    let mut response = reqwest::Client::new()
        .post(format!("{}/mcp", daemon.base))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN_VERSION)
        .header("mcp-method", "events/stream")
        .body(message.to_string())
        .send()
        .await
        .expect("the daemon answers");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let mut buffer = String::new();
    let active = read_until(&mut response, &mut buffer, |m| {
        m["method"] == "notifications/events/active"
    })
    .await;
    let active = active.last().expect("active");
    let subscription = active["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone();
    assert!(subscription.is_string(), "{active}");
    assert!(active["params"]["cursor"].is_string(), "{active}");

    // Nothing had happened when it opened: the turn that ends now is what it delivers.
    let (status, sent) = daemon.send(&thread, "stream me").await;
    assert_eq!(status, 200, "{sent}");
    let frames = read_until(&mut response, &mut buffer, |m| {
        m["method"] == "notifications/events/event"
    })
    .await;
    let event = &frames.last().expect("an event")["params"];
    assert_eq!(event["name"], "turn.ended", "{event}");
    assert_eq!(event["data"]["threadId"], thread.as_str(), "{event}");
    assert_eq!(event["data"]["messageId"], sent["userMessageId"], "{event}");
    assert_eq!(
        event["_meta"]["io.modelcontextprotocol/subscriptionId"],
        subscription
    );
    drop(response);
    daemon.stop().await;
}

/// The requests `receiver` took at `path` (its query names the subscription).
fn taken(receiver: &Receiver, query: &str) -> Vec<Value> {
    receiver
        .accepted()
        .into_iter()
        .filter(|r| r["path"].as_str().is_some_and(|p| p.ends_with(query)))
        .collect()
}

/// A scrape of `/metrics` as the operator.
async fn metric(base: &str, series: &str) -> Option<f64> {
    let (_, text, _) = call(base, Some(OPERATOR), Method::GET, "/metrics", None).await;
    value(text.as_str().unwrap_or(""), series)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_subscription_delivers_signed_events_until_its_ttl_runs_out_and_after_a_restart()
{
    let Some(python) = harness_tests::mcp::python_or_skip("mcp_events").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    // The client's own secret: the receiver verifies with it.
    let secret = Signer::generate_secret();
    let receiver = Receiver::start(&python, dir.path(), &secret, 0.0, None);
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.auth_token = Some(OPERATOR.into());
        c.webhooks.allow_private_targets = true;
        c.webhooks.poll = Duration::from_millis(50);
        c.webhooks.retry_min = Duration::from_millis(20);
        c.webhooks.retry_max = Duration::from_millis(200);
    })
    .await;
    let base = daemon.base.clone();
    let acme = key(&base, "acme").await;
    let mcp = McpHttp::new(&base, Some(&acme));
    let subscribe = |query: &str, ttl_ms: u64| {
        json!({
            "name": "turn.ended", "arguments": {},
            "delivery": {"mode": "webhook", "url": format!("{}?sub={query}", receiver.url), "secret": secret},
            "ttlMs": ttl_ms
        })
    };
    let made = request(&mcp, "events/subscribe", subscribe("long", 600_000), true).await;
    let made = made.result().clone();
    assert!(
        made["id"].as_str().is_some_and(|id| id.starts_with("sub_")),
        "{made}"
    );
    assert!(
        made["refreshBefore"].is_string() && made["cursor"].is_string(),
        "{made}"
    );
    assert_eq!(made["truncated"], false);
    // A refresh is the same request again: the same subscription.
    let refreshed = request(&mcp, "events/subscribe", subscribe("long", 600_000), true).await;
    assert_eq!(refreshed.result()["id"], made["id"]);
    // Without https, or to a private address, only when the daemon lets private targets in:
    // here a bad secret is what is refused.
    let mut bad = subscribe("bad", 1000);
    bad["delivery"]["secret"] = json!("not-a-secret");
    let bad = request(&mcp, "events/subscribe", bad, true).await;
    assert_eq!(bad.last()["error"]["code"], -32602, "{bad:?}");

    let thread = thread_with_a_turn(&base, &acme).await;
    let delivered = || taken(&receiver, "sub=long");
    eventually(WAIT, "the turn's end delivered", || !delivered().is_empty())
        .await
        .expect("delivered");
    let hook = &delivered()[0];
    assert_eq!(hook["verified"], true, "{hook}");
    let payload = &hook["payload"];
    assert_eq!(payload["name"], "turn.ended", "{hook}");
    assert_eq!(payload["data"]["threadId"], thread.as_str(), "{hook}");
    assert_eq!(
        hook["id"], payload["eventId"],
        "webhook-id is the eventId: {hook}"
    );

    // A short TTL, not refreshed: the daemon ends the subscription by itself.
    let short = request(&mcp, "events/subscribe", subscribe("short", 300), true).await;
    assert!(short.result()["id"].is_string(), "{short:?}");
    let expired = "harness_mcp_event_subscriptions_expired_total";
    eventually_async(WAIT, "the short subscription expired", || async {
        metric(&base, expired).await == Some(1.0)
    })
    .await
    .expect("expired");
    assert_eq!(
        metric(&base, "harness_mcp_event_subscriptions").await,
        Some(1.0)
    );
    // The next turn's end reaches the live subscription, and not the expired one.
    let message = turn(&base, &acme, &thread, "after the expiry").await;
    eventually(WAIT, "the second turn's end delivered", || {
        delivered()
            .iter()
            .any(|r| r["payload"]["data"]["messageId"] == message.as_str())
    })
    .await
    .expect("delivered");
    assert_eq!(taken(&receiver, "sub=short"), Vec::<Value>::new());

    // Subscriptions live in the daemon's memory and the client owns them: after a restart its
    // refresh, from the cursor of the last event it took, makes the same subscription again,
    // and what happened meanwhile arrives; nothing twice.
    let last = delivered().last().expect("delivered")["payload"]["cursor"].clone();
    let daemon = daemon.restart().await;
    let base = daemon.base.clone();
    let mcp = McpHttp::new(&base, Some(&acme));
    assert_eq!(
        metric(&base, "harness_mcp_event_subscriptions").await,
        Some(0.0)
    );
    let away = turn(&base, &acme, &thread, "while no one listened").await;
    let mut again = subscribe("long", 600_000);
    again["cursor"] = last.clone();
    let again = request(&mcp, "events/subscribe", again, true).await;
    assert_eq!(again.result()["id"], made["id"], "{again:?}");
    assert_eq!(again.result()["cursor"], last, "{again:?}");
    eventually(WAIT, "the turn of the restart delivered", || {
        delivered()
            .iter()
            .any(|r| r["payload"]["data"]["messageId"] == away.as_str())
    })
    .await
    .expect("delivered");
    let ids: Vec<Value> = delivered()
        .iter()
        .map(|r| r["payload"]["eventId"].clone())
        .collect();
    assert_eq!(ids.len(), 3, "three turns, each once, in order: {ids:?}");
    let unique: std::collections::BTreeSet<String> = ids.iter().map(Value::to_string).collect();
    assert_eq!(unique.len(), ids.len(), "each event once: {ids:?}");

    let gone = json!({"name": "turn.ended", "arguments": {},
                      "delivery": {"mode": "webhook", "url": format!("{}?sub=long", receiver.url)}});
    let gone = request(&mcp, "events/unsubscribe", gone, true).await;
    assert_eq!(gone.result(), &json!({}));
    assert_eq!(
        metric(&base, "harness_mcp_event_subscriptions").await,
        Some(0.0)
    );
    daemon.stop().await;
}
