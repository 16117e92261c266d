//! What turns cost, against the real CLI: each reply stores the usage of its `result` line, a
//! thread sums them, `/metrics` counts them; budgets refuse a turn with 402 before anything
//! reaches the model.

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::McpHttp;
use harness_tests::mock::{usage_for, MockApi, Reply};

use super::http_api::{check_against, openapi_doc};
use super::metrics::{scrape, value};
use super::support::stored_events;

const KINDS: [(&str, &str); 4] = [
    ("inputTokens", "input"),
    ("outputTokens", "output"),
    ("cacheReadTokens", "cache_read"),
    ("cacheWriteTokens", "cache_write"),
];

fn int(v: &Value, field: &str) -> i64 {
    v[field]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer {field} in {v}"))
}

fn usd(v: &Value) -> f64 {
    v["costUsd"]
        .as_f64()
        .unwrap_or_else(|| panic!("no costUsd in {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_over_two_turns_is_the_sum_of_each_reply_and_of_what_the_api_reported() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "first").await;
    daemon.reply(&thread, "second").await;

    let (status, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4, "{body}");
    let replies: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| &m["usage"])
        .collect();
    assert!(
        messages
            .iter()
            .filter(|m| m["role"] == "user")
            .all(|m| m.get("usage").is_none()),
        "a question that got its reply carries no usage: {body}"
    );
    let total = &body["usage"];
    // What the mock reported, request by request (each with its own figures).
    let requests = mock.message_requests().len() as u64;
    assert!(requests >= 2, "{requests} requests");
    let reported = (1..=requests).map(usage_for).fold([0_i64; 4], |sum, u| {
        [
            sum[0] + u.input_tokens as i64,
            sum[1] + u.output_tokens as i64,
            sum[2] + u.cache_read_input_tokens as i64,
            sum[3] + u.cache_creation_input_tokens as i64,
        ]
    });
    for (i, (field, _)) in KINDS.iter().enumerate() {
        let per_reply: i64 = replies.iter().map(|u| int(u, field)).sum();
        assert_eq!(int(total, field), per_reply, "{field}: {body}");
        assert_eq!(
            int(total, field),
            reported[i],
            "{field} as the mock reported it"
        );
    }
    // Every reply is priced, and the thread's cost is their sum.
    assert!(replies.iter().all(|u| usd(u) > 0.0), "{body}");
    let per_reply: f64 = replies.iter().map(|u| usd(u)).sum();
    assert!((usd(total) - per_reply).abs() < 1e-12, "{body}");
    assert!(int(total, "apiMs") >= 0);

    let text = scrape(&daemon).await;
    for (field, kind) in KINDS {
        let series = format!("harness_tokens_total{{kind=\"{kind}\"}}");
        assert_eq!(
            value(&text, &series),
            Some(int(total, field) as f64),
            "{series}"
        );
    }
    let cost = value(&text, "harness_cost_usd_total").expect("the cost series");
    assert!((cost - usd(total)).abs() < 1e-9, "{cost} vs {total}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_past_its_budget_gets_402_and_the_model_sees_nothing() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    // Below the first turn's cost: that turn runs (nothing is spent yet), the next may not.
    let (status, body) = daemon
        .post("/api/threads", json!({"maxBudgetUsd": 0.000001}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["maxBudgetUsd"], json!(0.000001));
    let thread = body["id"].as_str().expect("id").to_owned();
    daemon.reply(&thread, "first").await;
    let asked = mock.message_requests().len();
    let (_, before) = daemon.get(&format!("/api/threads/{thread}")).await;
    let spent = usd(&before["usage"]);

    let path = format!("/api/threads/{thread}/messages");
    let (status, body) = daemon
        .post(
            &path,
            json!({"content": "second", "clientMessageId": "c-2"}),
        )
        .await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    let error = &body["error"];
    assert_eq!(error["code"], "budget_exceeded", "{body}");
    assert_eq!(error["budget"], "thread", "{body}");
    assert_eq!(error["limitUsd"], json!(0.000001), "{body}");
    assert_eq!(error["spentUsd"].as_f64(), Some(spent), "{body}");
    let refused_id = error["messageId"].as_str().expect("messageId").to_owned();
    let doc = openapi_doc(&daemon).await;
    check_against(&doc, "ErrorBody", &body);
    // Asking without waiting is refused the same way, at once.
    let (status, body) = daemon
        .post(&format!("{path}?wait=false"), json!({"content": "third"}))
        .await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    assert_eq!(
        mock.message_requests().len(),
        asked,
        "nothing reached the model"
    );

    // Both are kept, as refused, and their turns ended on the event stream.
    let (_, stored) = daemon.get(&format!("/api/threads/{thread}")).await;
    let statuses: Vec<&str> = stored["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["status"].as_str().expect("status"))
        .collect();
    assert_eq!(statuses, ["done", "done", "refused", "refused"], "{stored}");
    // `threads__get` answers for a refused message too, within its own output schema.
    let mcp = McpHttp::new(&daemon.base, None);
    let tools = mcp.tools().await;
    let got = mcp
        .call_tool(9, "threads__get", json!({"threadId": thread}))
        .await;
    let result = got.result();
    assert_eq!(result.get("isError"), None, "{result}");
    let listed = &result["structuredContent"];
    let schema = &tools["threads__get"]["outputSchema"];
    let validator = jsonschema::validator_for(schema).expect("a valid output schema");
    assert!(validator.is_valid(listed), "{listed}");
    assert_eq!(listed["messages"][3]["status"], "refused", "{listed}");
    let events = stored_events(&daemon, &thread).await;
    let refusal = events
        .iter()
        .find(|e| e.kind == "turn_failed" && e.data["messageId"] == json!(refused_id))
        .expect("a turn_failed for the refused message");
    assert_eq!(refusal.data["status"], "refused");
    assert_eq!(refusal.data["budget"]["budget"], "thread");
    // As the OpenAPI document describes them: the thread with its usage, the refusal's event.
    check_against(&doc, "ThreadWithMessages", &stored);
    let streamed = json!({
        "id": refusal.id, "kind": refusal.kind, "messageId": refusal.message_id,
        "data": refusal.data, "at": refusal.created_at,
    });
    check_against(&doc, "ThreadEvent", &streamed);

    // Raised, the same clientMessageId runs the refused message after all.
    let (status, body) = daemon
        .patch(
            &format!("/api/threads/{thread}"),
            json!({"maxBudgetUsd": 5}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["maxBudgetUsd"], json!(5.0));
    let (status, body) = daemon
        .post(
            &path,
            json!({"content": "second", "clientMessageId": "c-2"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["userMessageId"], json!(refused_id));
    assert_eq!(body["message"]["content"], "echo: second");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daily_budget_counts_every_thread() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.budget.daily_usd = Some(0.000001)).await;
    let first = daemon.create_thread().await;
    daemon.reply(&first, "spend it").await;
    let asked = mock.message_requests().len();

    let other = daemon.create_thread().await;
    let (status, body) = daemon.send(&other, "anything left?").await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    assert_eq!(body["error"]["budget"], "daily", "{body}");
    assert!(
        body["error"]["spentUsd"].as_f64().expect("spentUsd") > 0.000001,
        "{body}"
    );
    assert_eq!(
        mock.message_requests().len(),
        asked,
        "nothing reached the model"
    );
    let text = scrape(&daemon).await;
    assert_eq!(
        value(&text, r#"harness_turns_refused_total{budget="daily"}"#),
        Some(1.0)
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_must_be_amounts_and_threads_must_exist() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (status, body) = daemon
        .post("/api/threads", json!({"maxBudgetUsd": -1}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("maxBudgetUsd")));
    let thread = daemon.create_thread().await;
    let path = format!("/api/threads/{thread}");
    for bad in [
        json!({"maxBudgetUsd": -0.5}),
        json!({"maxBudgetUsd": "ten"}),
        json!({"budget": 1}),
    ] {
        let (status, body) = daemon.patch(&path, bad.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
    }
    let (status, body) = daemon.patch(&path, json!({"maxBudgetUsd": 2.5})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["maxBudgetUsd"], json!(2.5));
    assert_eq!(body["usage"]["costUsd"], json!(0.0));
    // `null` removes the limit; an absent field leaves it alone.
    let (_, body) = daemon.patch(&path, json!({})).await;
    assert_eq!(body["maxBudgetUsd"], json!(2.5));
    let (_, body) = daemon.patch(&path, json!({"maxBudgetUsd": null})).await;
    assert_eq!(body["maxBudgetUsd"], Value::Null);
    let (status, body) = daemon
        .patch("/api/threads/no-such-thread", json!({"maxBudgetUsd": 1}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    daemon.stop().await;
}

/// Twelve threads send at once on the last of the daily budget. Each turn holds its estimate
/// while it runs, so only those that fit start; the others get 402 at once, and the day's
/// spending passes its limit by at most one turn's cost (once it measured 3.7× the limit: every
/// waiting turn saw the same spending).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_racing_the_daily_budget_do_not_all_run() {
    let mock = MockApi::start().await;
    let turn = one_turns_cost(&mock).await;

    let limit = turn * 3.5;
    let daemon = TestDaemon::start(&mock, |c| {
        c.budget.daily_usd = Some(limit);
        c.budget.turn_estimate_usd = turn;
    })
    .await;
    let first = daemon.create_thread().await;
    daemon.reply(&first, "spend one turn").await;
    let mut threads = Vec::new();
    for _ in 0..12 {
        threads.push(daemon.create_thread().await);
    }
    let answers = futures::future::join_all(
        threads
            .iter()
            .map(|thread| daemon.send(thread, "all at once")),
    )
    .await;
    let ran = answers.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let refused = answers
        .iter()
        .filter(|(s, b)| *s == StatusCode::PAYMENT_REQUIRED && b["error"]["budget"] == "daily")
        .count();
    assert_eq!(ran + refused, 12, "{answers:?}");
    assert!(
        (1..=3).contains(&ran),
        "{ran} of 12 ran on 2.5 turns' worth"
    );

    let text = scrape(&daemon).await;
    let spent = value(&text, "harness_cost_usd_total").expect("the cost series");
    let most = limit + turn * 1.5;
    assert!(
        spent <= most,
        "spent {spent:.6} USD on a {limit:.6} budget (one turn: {turn:.6})"
    );
    daemon.stop().await;
}

/// What one turn costs on `mock`, measured on a daemon of its own.
pub(crate) async fn one_turns_cost(mock: &MockApi) -> f64 {
    let probe = TestDaemon::start(mock, |_| {}).await;
    let thread = probe.create_thread().await;
    probe.reply(&thread, "what does a turn cost").await;
    let (_, body) = probe.get(&format!("/api/threads/{thread}")).await;
    let turn = usd(&body["usage"]);
    probe.stop().await;
    assert!(turn > 0.0, "{body}");
    turn
}

/// A thread whose model delegates again after every child's answer: the children's turns count
/// against the thread's budget, so the children stop once it is held or spent, and so does the
/// parent's turn (once, one parent turn delegating six times spent 12× the parent's limit: each
/// child had a limit of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegated_turns_count_against_the_delegating_threads_budget() {
    const DELEGATE: &str = "mcp__harness__delegation__delegate";
    let mock = MockApi::start().await;
    let turn = one_turns_cost(&mock).await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.budget.turn_estimate_usd = turn;
        c.turn.max_tool_calls = 8;
    })
    .await;
    let limit = turn * 2.5;
    let (status, body) = daemon
        .post("/api/threads", json!({"maxBudgetUsd": limit}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let parent = body["id"].as_str().unwrap().to_owned();
    let again = Reply::tool_use(DELEGATE, json!({"prompt": "child job"}));
    mock.once_when_prompt_contains("delegate a lot", again.clone());
    mock.when_prompt_contains("echo: child job", again);
    let (status, body) = daemon.send(&parent, "delegate a lot").await;
    // The children's spending counts in the parent's budget as it happens: once it is reached,
    // the model gateway refuses the parent's next model request and the turn stops there.
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    assert_eq!(body["error"]["budget"], "thread", "{body}");
    let message = body["error"]["messageId"].as_str().unwrap().to_owned();

    let (_, list) = daemon.get("/api/threads").await;
    let children: Vec<String> = list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["parentId"] == parent.as_str())
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    let (_, parent_body) = daemon.get(&format!("/api/threads/{parent}")).await;
    let mut tree = usd(&parent_body["usage"]);
    let mut ran = 0;
    for child in &children {
        let (_, body) = daemon.get(&format!("/api/threads/{child}")).await;
        let cost = usd(&body["usage"]);
        ran += usize::from(cost > 0.0);
        tree += cost;
    }
    assert!(ran >= 1, "a child ran: {children:?}");
    assert!(ran <= 2, "{ran} children ran on a budget of 2.5 turns");
    // Stopped within one model request of the limit (each request here costs about a turn).
    assert!(
        tree <= limit + turn * 1.01,
        "the tree spent {tree:.6} on {limit:.6}"
    );
    // The gateway's record of the parent's turn ends with the refused request.
    let (_, record) = daemon
        .get(&format!(
            "/api/threads/{parent}/messages/{message}/model-requests"
        ))
        .await;
    let requests = record["modelRequests"].as_array().unwrap();
    let statuses: Vec<i64> = requests
        .iter()
        .map(|r| r["status"].as_i64().unwrap())
        .collect();
    let went = statuses.iter().take_while(|s| **s == 200).count();
    assert!(went >= 1 && went < statuses.len(), "{record}");
    assert!(statuses[went..].iter().all(|s| *s == 402), "{record}");
    daemon.stop().await;
}
