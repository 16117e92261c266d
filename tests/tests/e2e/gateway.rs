//! The model gateway, against the real CLI: the children talk to the model only through it, see
//! a token of their own instead of the operator's key, are metered as each response streams, are
//! stopped within one request of a budget, and the upstream's 429/529 reach the throttle once.

use std::path::Path;
use std::time::Duration;

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, MockUsage, Reply};
use harness_tests::util::eventually_async;
use orchestrator::config::ApprovalMode;

use crate::metrics::{scrape, value};

/// The key the tests give the daemon (`cli_env`): only the gateway may hold it.
const KEY: &str = "sk-test";

const TIME_TOOL: &str = "mcp__harness__time__current_time";

/// A process's environment, one `NAME=value` per entry.
fn environ(pid: u32) -> Vec<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).expect("the child's environ");
    bytes
        .split(|b| *b == 0)
        .map(|entry| String::from_utf8_lossy(entry).into_owned())
        .collect()
}

fn env_value(environ: &[String], name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    environ
        .iter()
        .find_map(|entry| entry.strip_prefix(&prefix).map(str::to_owned))
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if kind.is_file() {
            let bytes = std::fs::read(&path).unwrap_or_default();
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

async fn model_requests(daemon: &TestDaemon, thread: &str, message: &str) -> Vec<Value> {
    let path = format!("/api/threads/{thread}/messages/{message}/model-requests");
    let (status, body) = daemon.get(&path).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["modelRequests"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The key stays in the daemon: not in the child's environment, argv or files, not in what a
/// model running `printenv` reads; the scripted API gets it from the gateway; the gateway takes
/// no request without a live process's token; each request is metered as the API reported it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_child_sees_the_key_and_the_model_gets_it_from_the_gateway() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Allow;
    })
    .await;
    let thread = daemon.create_thread().await;
    mock.once_when_prompt_contains(
        "show me your environment",
        Reply::tool_use(
            "Bash",
            json!({"command": "printenv; tr '\\0' '\\n' < /proc/self/environ", "description": "env"}),
        ),
    );
    let (status, body) = daemon.send(&thread, "show me your environment").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let message = body["userMessageId"].as_str().unwrap().to_owned();

    // What the model read: a token of the process's own, the gateway's address, no key.
    let seen: String = mock
        .message_requests()
        .iter()
        .flat_map(|r| r.tool_results())
        .map(|r| r.text)
        .collect();
    assert!(seen.contains("ANTHROPIC_API_KEY=hgw_"), "{seen}");
    assert!(!seen.contains(KEY), "the model read the key: {seen}");
    assert!(
        !seen.contains(&mock.url()),
        "the model read the upstream: {seen}"
    );

    // The process itself: environment, argv, and every file of the daemon's data directory.
    let pid = daemon.pid_of(&thread).expect("the thread's process");
    let env = environ(pid);
    assert!(env.iter().all(|e| !e.contains(KEY)), "{env:?}");
    let token = env_value(&env, "ANTHROPIC_API_KEY").expect("a token");
    assert!(token.starts_with("hgw_"), "{token}");
    let gateway = env_value(&env, "ANTHROPIC_BASE_URL").expect("the gateway's address");
    assert_ne!(gateway, mock.url());
    assert!(env_value(&env, "ANTHROPIC_AUTH_TOKEN").is_none());
    let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(!argv.windows(KEY.len()).any(|w| w == KEY.as_bytes()));
    let holding = files_holding(&daemon.data_dir(), KEY.as_bytes());
    assert!(holding.is_empty(), "files holding the key: {holding:?}");

    // The scripted API got the real key on every request, from the gateway.
    let requests = mock.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(request.header("x-api-key"), Some(KEY));
    }

    // The gateway refuses what does not carry a live process's token, in the API's shape.
    let asked = mock.requests().len();
    let client = reqwest::Client::new();
    for key in [Some(KEY), Some("hgw_made-up"), None] {
        let mut request = client
            .post(format!("{gateway}/v1/messages"))
            .json(&json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []}));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{key:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    }
    assert_eq!(
        mock.requests().len(),
        asked,
        "nothing refused went upstream"
    );

    // Each request of the turn, as the API reported it, priced as the CLI prices it.
    let recorded = model_requests(&daemon, &thread, &message).await;
    let sent = mock.message_requests();
    assert_eq!(recorded.len(), sent.len(), "{recorded:?}");
    for (row, number) in recorded.iter().zip(1..) {
        let reported = harness_tests::mock::usage_for(number);
        assert_eq!(row["status"], 200, "{row}");
        assert_eq!(row["inputTokens"], reported.input_tokens, "{row}");
        assert_eq!(row["outputTokens"], reported.output_tokens, "{row}");
        assert_eq!(row["cacheReadTokens"], reported.cache_read_input_tokens);
        assert_eq!(
            row["cacheWriteTokens"],
            reported.cache_creation_input_tokens
        );
    }
    let metered: f64 = recorded
        .iter()
        .map(|r| r["costUsd"].as_f64().unwrap())
        .sum();
    let (_, stored) = daemon.get(&format!("/api/threads/{thread}")).await;
    let reported = stored["usage"]["costUsd"].as_f64().unwrap();
    assert!(
        (metered - reported).abs() <= reported * 0.01,
        "the gateway metered {metered}, the CLI reported {reported}"
    );
    let text = scrape(&daemon).await;
    assert_eq!(
        value(&text, r#"harness_model_requests_total{status="200"}"#),
        Some(sent.len() as f64),
        "{text}"
    );
    daemon.stop().await;
}

/// The mock's model calls a tool after every answer (40 times), each request at about 2 cents
/// at any model's price: a turn that runs away.
pub(crate) fn script_a_runaway(mock: &MockApi) {
    mock.report_usage(MockUsage {
        input_tokens: 4_000,
        output_tokens: 100,
        cache_read_input_tokens: 0,
        cache_creation_input_tokens: 0,
    });
    for _ in 0..40 {
        mock.enqueue(Reply::tool_use(TIME_TOOL, json!({})));
    }
}

/// A turn whose model calls a tool after every answer, on a thread with a $0.05 budget, is
/// stopped by the gateway at its first request after the budget is reached: the refusal is the
/// API's own error shape, the turn ends `refused` saying why, and what it spent is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_turn_stops_within_one_request_of_its_budget() {
    const BUDGET: f64 = 0.05;
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.turn.max_tool_calls = 100).await;
    script_a_runaway(&mock);
    let (status, body) = daemon
        .post("/api/threads", json!({"maxBudgetUsd": BUDGET}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let thread = body["id"].as_str().unwrap().to_owned();
    let (status, body) = daemon.send(&thread, "loop forever").await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    assert_eq!(body["error"]["budget"], "thread", "{body}");
    let message = body["error"]["messageId"].as_str().unwrap().to_owned();

    let recorded = model_requests(&daemon, &thread, &message).await;
    let statuses: Vec<i64> = recorded
        .iter()
        .map(|r| r["status"].as_i64().unwrap())
        .collect();
    // The requests that went, then the refused one: the CLI does not try a 402 again.
    let went: Vec<&Value> = recorded.iter().take_while(|r| r["status"] == 200).collect();
    assert_eq!(statuses[went.len()..], [402], "{statuses:?}");
    assert_eq!(
        went.len(),
        mock.message_requests().len(),
        "the refused stayed here"
    );
    let cost = |r: &Value| r["costUsd"].as_f64().unwrap();
    let spent: f64 = recorded.iter().map(cost).sum();
    let per_request = cost(went[0]);
    assert!(per_request > 0.005, "{per_request}");
    // Stopped at the first request once the budget was reached: before the last one that went,
    // less than the budget was spent.
    assert!(spent >= BUDGET, "{spent}");
    assert!(spent - cost(went[went.len() - 1]) < BUDGET, "{spent}");
    // The CLI ended the turn on the refusal, and the turn is recorded as refused, with its cost.
    let (_, outcomes) = daemon
        .get(&format!(
            "/api/threads/{thread}/messages/{message}/outcomes"
        ))
        .await;
    let outcome = &outcomes["outcomes"][0];
    assert_eq!(outcome["cause"], "refused", "{outcomes}");
    let error = outcome["error"].as_str().unwrap();
    assert!(error.contains("ran out during the turn"), "{error}");
    let (_, stored) = daemon.get(&format!("/api/threads/{thread}")).await;
    let kept = stored["usage"]["costUsd"].as_f64().unwrap();
    assert!(
        kept >= BUDGET && kept < BUDGET + per_request * 1.01,
        "{stored}"
    );
    let text = scrape(&daemon).await;
    assert_eq!(
        value(
            &text,
            r#"harness_model_requests_refused_total{budget="thread"}"#
        ),
        Some(1.0),
        "{text}"
    );
    // The refusal is a request the gateway answered, counted with the others.
    let requests = |status: u16| {
        value(
            &text,
            &format!("harness_model_requests_total{{status=\"{status}\"}}"),
        )
    };
    assert_eq!(requests(402), Some(1.0), "{text}");
    assert_eq!(requests(200), Some(went.len() as f64), "{text}");
    // A spent thread's next message is refused before anything starts.
    let (status, _) = daemon.send(&thread, "again").await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    daemon.stop().await;
}

/// A storm of 429s, then one of 529s, while four turns run: the gateway reports each to the
/// throttle, which halves the limit once per window however many arrive (the CLI's own retry
/// reports lower nothing more); the CLI retries through the storm and every turn ends `done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storms_halve_the_limit_once_per_window_and_no_retried_turn_fails() {
    for (round, status) in [429_u16, 529].into_iter().enumerate() {
        let mock = MockApi::start().await;
        let daemon = TestDaemon::start(&mock, |c| {
            c.pool.max_capacity = 4;
            c.claude.max_retries = 6;
            c.rate_limit.cooldown = Duration::from_secs(300);
        })
        .await;
        let threads: Vec<String> = join_all((0..4).map(|_| daemon.create_thread())).await;
        let outage = mock.fail_while(status);
        let text = format!("storm {round}");
        let sends = join_all(threads.iter().map(|t| daemon.send(t, &text)));
        let storm = async {
            // Each turn met the storm (the CLI gives up after a few 529s in a row).
            eventually_async(Duration::from_secs(60), "four refused requests", || async {
                mock.message_requests().len() >= 4
            })
            .await
            .expect("the turns meet the storm");
            // No turn can have gone through yet: the limit is where the storm put it.
            let text = scrape(&daemon).await;
            assert_eq!(
                value(&text, "harness_turn_concurrency_limit"),
                Some(2.0),
                "{status}: {text}"
            );
            outage.end();
        };
        let (answers, ()) = futures::future::join(sends, storm).await;
        for (status, body) in answers {
            assert_eq!(status, StatusCode::OK, "{body}");
        }
        let text = scrape(&daemon).await;
        let signals = value(
            &text,
            r#"harness_backpressure_signals_total{signal="upstream"}"#,
        );
        assert!(signals.is_some_and(|n| n >= 4.0), "{status}: {text}");
        assert_eq!(
            value(&text, "harness_turn_concurrency_decreases_total"),
            Some(1.0),
            "{status}: {text}"
        );
        daemon.stop().await;
    }
}

/// A profile with a fallback model, its main model overloaded: the CLI turns to the fallback
/// through the gateway, which saw every 529 (the throttle heard them) and meters the answer at
/// the fallback's price.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_model_falls_back_to_the_profiles_other_through_the_gateway() {
    const MAIN: &str = "claude-opus-5-5";
    const FALLBACK: &str = "claude-sonnet-5";
    let mock = MockApi::start().await;
    mock.fail_model(MAIN, 529);
    let daemon = TestDaemon::start(&mock, |c| {
        c.profiles.insert(
            "resilient".into(),
            orchestrator::config::ProfileConfig {
                model: Some(MAIN.into()),
                fallback_model: Some(FALLBACK.into()),
                ..Default::default()
            },
        );
    })
    .await;
    let (_, thread) = daemon
        .post("/api/threads", json!({"profile": "resilient"}))
        .await;
    let thread = thread["id"].as_str().unwrap().to_owned();
    let (status, body) = daemon.send(&thread, "are you there").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["message"]["content"], "echo: are you there", "{body}");
    let message = body["userMessageId"].as_str().unwrap().to_owned();
    let recorded = model_requests(&daemon, &thread, &message).await;
    let seen: Vec<(i64, Option<&str>)> = recorded
        .iter()
        .map(|r| (r["status"].as_i64().unwrap(), r["model"].as_str()))
        .collect();
    let (last, overloaded) = seen.split_last().unwrap();
    assert_eq!(*last, (200, Some(FALLBACK)), "{seen:?}");
    assert!(
        !overloaded.is_empty() && overloaded.iter().all(|(s, _)| *s == 529),
        "{seen:?}"
    );
    // At the fallback's price (2/10/2.5/0.2 per million tokens), from what the API reported.
    let answered = &recorded[recorded.len() - 1];
    let tokens = |name: &str| answered[name].as_f64().unwrap();
    let want = (tokens("inputTokens") * 2.0
        + tokens("outputTokens") * 10.0
        + tokens("cacheWriteTokens") * 2.5
        + tokens("cacheReadTokens") * 0.2)
        / 1e6;
    let cost = answered["costUsd"].as_f64().unwrap();
    assert!((cost - want).abs() < 1e-12, "{cost} != {want}");
    let text = scrape(&daemon).await;
    let signals = value(
        &text,
        r#"harness_backpressure_signals_total{signal="upstream"}"#,
    );
    assert_eq!(signals, Some(overloaded.len() as f64), "{text}");
    daemon.stop().await;
}

/// With a Claude login instead of a key, the children keep authenticating with it, through the
/// gateway: their `Authorization` (the login's OAuth token, from the config dir) goes upstream as
/// it is, their gateway token rides in `ANTHROPIC_CUSTOM_HEADERS` and stays at the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_login_keeps_working_through_the_gateway() {
    const OAUTH: &str = "sk-ant-oat01-harness-test";
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.env.remove("ANTHROPIC_API_KEY");
        // What `claude /login` leaves in the config dir.
        let dir = c.claude_config_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let in_a_month = chrono::Utc::now().timestamp_millis() + 30 * 86_400_000;
        let login = json!({"claudeAiOauth": {
            "accessToken": OAUTH, "refreshToken": "sk-ant-ort01-harness-test",
            "expiresAt": in_a_month, "scopes": ["user:inference", "user:profile"],
            "subscriptionType": "max",
        }});
        std::fs::write(dir.join(".credentials.json"), login.to_string()).unwrap();
    })
    .await;
    let thread = daemon.create_thread().await;
    assert_eq!(daemon.reply(&thread, "logged in").await, "echo: logged in");

    let pid = daemon.pid_of(&thread).expect("the thread's process");
    let env = environ(pid);
    assert!(env_value(&env, "ANTHROPIC_API_KEY").is_none(), "{env:?}");
    let headers = env_value(&env, "ANTHROPIC_CUSTOM_HEADERS").expect("the token as a header");
    assert!(headers.starts_with("x-harness-token: hgw_"), "{headers}");
    let gateway = env_value(&env, "ANTHROPIC_BASE_URL").unwrap();
    assert_ne!(gateway, mock.url());
    let sent = mock.message_requests();
    assert!(!sent.is_empty());
    for request in &sent {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {OAUTH}").as_str())
        );
        assert_eq!(request.header("x-harness-token"), None);
        assert_eq!(request.header("x-api-key"), None);
    }
    // The login alone is no way in: the gateway still wants a live process's token.
    let response = reqwest::Client::new()
        .post(format!("{gateway}/v1/messages"))
        .bearer_auth(OAUTH)
        .json(&json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    daemon.stop().await;
}

/// Only the Messages API's own routes go upstream (#46): every request the CLI made in these
/// turns (a tool call among them) is one of `UPSTREAM_ROUTES`, and a child's own token on any
/// other path, as an attacker's `Bash` could send it between turns, is 404 at the gateway and
/// never reaches the upstream with the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_messages_routes_go_upstream() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    mock.once_when_prompt_contains("what time", Reply::tool_use(TIME_TOOL, json!({})));
    daemon.reply(&thread, "what time is it").await;
    daemon.reply(&thread, "and a plain turn").await;
    let used: std::collections::BTreeSet<(String, String)> = mock
        .requests()
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    assert!(!used.is_empty());
    for (method, path) in &used {
        assert!(
            orchestrator::gateway::UPSTREAM_ROUTES.contains(&(method.as_str(), path.as_str())),
            "the CLI used {method} {path}, which the gateway does not pass on"
        );
    }

    let env = environ(daemon.pid_of(&thread).expect("the thread's process"));
    let token = env_value(&env, "ANTHROPIC_API_KEY").expect("the child's token");
    let gateway = env_value(&env, "ANTHROPIC_BASE_URL").expect("the gateway");
    let before = mock.requests().len();
    let client = reqwest::Client::new();
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []});
    for (method, path) in [
        ("POST", "/v1/messages/"),
        ("POST", "//v1/messages"),
        ("POST", "/V1/messages"),
        ("POST", "/v1/messages/batches"),
        ("POST", "/v1/complete"),
        ("GET", "/v1/models"),
        ("GET", "/v1/messages"),
    ] {
        let response = client
            .request(
                method.parse().expect("a method"),
                format!("{gateway}{path}"),
            )
            .header("x-api-key", &token)
            .json(&body)
            .send()
            .await
            .expect("the gateway answers");
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path}");
    }
    assert_eq!(mock.requests().len(), before, "nothing else went upstream");
    daemon.stop().await;
}

/// The address and token of `thread`'s process, as a command it runs could read them.
fn child_credentials(daemon: &TestDaemon, thread: &str) -> (String, String) {
    let env = environ(daemon.pid_of(thread).expect("the thread's process"));
    let token = env_value(&env, "ANTHROPIC_API_KEY").expect("the child's token");
    let gateway = env_value(&env, "ANTHROPIC_BASE_URL").expect("the gateway");
    (gateway, token)
}

/// Input tokens the mock reports for each request from here on: $0.60 a request at the price of
/// a model the gateway has none of ([`expensive`]'s).
const EXPENSIVE_TOKENS: u64 = 120_000;

/// A request as a command with the child's token could send it: a prompt the size of
/// [`EXPENSIVE_TOKENS`] (about four bytes a token), to a model the gateway prices at its
/// fallback ($5 per million input tokens). Its status, once its answer is read whole (`whole`),
/// or as soon as it comes, the answer then left unread.
async fn expensive(gateway: &str, token: &str, whole: bool) -> StatusCode {
    let prompt = "word ".repeat(EXPENSIVE_TOKENS as usize * 4 / 5);
    let body = json!({"model": "harness-unpriced-model", "max_tokens": 5,
                      "messages": [{"role": "user", "content": prompt}]});
    let response = reqwest::Client::new()
        .post(format!("{gateway}/v1/messages"))
        .header("x-api-key", token)
        .json(&body)
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status();
    if whole {
        response.text().await.expect("the answer");
    }
    status
}

fn report_expensive_usage(mock: &MockApi) {
    mock.report_usage(MockUsage {
        input_tokens: EXPENSIVE_TOKENS,
        output_tokens: 0,
        cache_read_input_tokens: 0,
        cache_creation_input_tokens: 0,
    });
}

async fn thread_cost(daemon: &TestDaemon, thread: &str) -> f64 {
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    body["usage"]["costUsd"]
        .as_f64()
        .expect("the thread's cost")
}

/// The gateway is the meter of record (#46): on `main`, three $0.60 requests with a child's
/// token between turns on a thread with `maxBudgetUsd` 0.50 all went (the thread's spending
/// stayed at the CLI's $0.0002) and the next turn ran. Now the first is charged to the thread
/// on its own, the others are refused, and so is the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_requests_between_turns_are_the_threads_spending() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (status, body) = daemon
        .post("/api/threads", json!({"maxBudgetUsd": 0.5}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let thread = body["id"].as_str().unwrap().to_owned();
    daemon.reply(&thread, "a cheap turn").await;
    let before = thread_cost(&daemon, &thread).await;
    assert!(before < 0.01, "{before}");
    let (gateway, token) = child_credentials(&daemon, &thread);
    report_expensive_usage(&mock);
    // The first is dropped unread: the usage in its body never passes the gateway, which then
    // charges its estimate.
    let mut statuses = Vec::new();
    for whole in [false, true, true] {
        statuses.push(expensive(&gateway, &token, whole).await.as_u16());
    }
    assert_eq!(statuses, [200, 402, 402]);
    let spent = thread_cost(&daemon, &thread).await - before;
    // Read, it cost $0.60; dropped unread, its estimate (its prompt, and its 5 tokens out).
    assert!(
        (0.6 - 1e-6..0.601).contains(&spent),
        "the thread paid for its request: {spent}"
    );
    let (status, body) = daemon.send(&thread, "the next turn").await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    assert_eq!(body["error"]["budget"], "thread", "{body}");
    daemon.stop().await;
}

/// Requests in flight hold their estimates (#46): on `main`, eight $0.60 requests sent at once
/// with a child's token during a turn on a $1.00 budget all went ($4.80). Now they go one at a
/// time near the limit: what went costs at most one request beyond the budget, and every one
/// that went is in the thread's spending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_parallel_requests_cannot_pass_a_budget_together() {
    const BUDGET: f64 = 1.0;
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (status, body) = daemon
        .post("/api/threads", json!({"maxBudgetUsd": BUDGET}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let thread = body["id"].as_str().unwrap().to_owned();
    daemon.reply(&thread, "a cheap turn").await;
    let before = thread_cost(&daemon, &thread).await;
    let (gateway, token) = child_credentials(&daemon, &thread);
    // A turn that streams for a while: the requests go while it runs.
    let chunks = vec!["slowly ".to_owned(); 20];
    mock.once_when_prompt_contains(
        "a slow turn",
        Reply::SlowText {
            chunks,
            delay: Duration::from_millis(100),
        },
    );
    let seen = mock.message_requests().len();
    let turn = {
        let client = daemon.client().clone();
        let thread = thread.clone();
        tokio::spawn(async move { client.send(&thread, "a slow turn").await })
    };
    mock.wait_for_requests(seen + 1, Duration::from_secs(60))
        .await
        .expect("the slow turn reaches the model");
    report_expensive_usage(&mock);
    let statuses = join_all((0..8).map(|_| expensive(&gateway, &token, true))).await;
    let went = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::PAYMENT_REQUIRED)
        .count();
    assert_eq!(went + refused, 8, "{statuses:?}");
    assert!(went < 8, "{statuses:?}");
    turn.await.expect("the slow turn ends");
    // Each request that went is stored (on its own, after its answer) and paid for.
    let paid = 0.6 * went as f64 - 1e-6;
    eventually_async(Duration::from_secs(10), "what went is paid for", || async {
        thread_cost(&daemon, &thread).await - before >= paid
    })
    .await
    .unwrap();
    let spent = thread_cost(&daemon, &thread).await - before;
    // The slow turn's own request cost at most $0.60 too; one request may pass the limit.
    assert!(spent <= BUDGET + 0.6 + 1e-6, "{went} went, {spent} spent");
    daemon.stop().await;
}

/// What matters of what the CLI asked the API for a message's turn: its betas, what its body
/// says of context management and prompt caching, and its `max_tokens`.
fn what_it_asked(mock: &MockApi, prompt: &str) -> Value {
    let requests = mock.message_requests();
    let request = requests
        .iter()
        .find(|r| r.last_user_text().contains(prompt))
        .expect("the turn's request");
    let mut betas: Vec<&str> = request
        .header("anthropic-beta")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .collect();
    betas.sort_unstable();
    let body = request.body.to_string();
    json!({
        "betas": betas,
        "context_management": request.body.get("context_management"),
        "cache_control": body.matches("\"cache_control\"").count(),
        "max_tokens": request.body.get("max_tokens"),
    })
}

/// One message's turn on a daemon `configure`d so; what the CLI asked.
async fn asked_by(configure: impl FnOnce(&mut orchestrator::config::Config)) -> Value {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, configure).await;
    let thread = daemon.create_thread().await;
    let (status, body) = daemon.send(&thread, "first party please").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    daemon.stop().await;
    what_it_asked(&mock, "first party please")
}

/// Behind the gateway a child asks the API as it would talking to it directly as a first-party
/// client (`gateway.first_party`): the same betas, context management and cache breakpoints. As
/// a third party (`never`, or `auto` with an upstream that is not Anthropic's) it asks for
/// less, which is what the setting is for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_the_gateway_a_child_asks_as_a_first_party_client_would() {
    use orchestrator::config::FirstParty;
    use orchestrator::gateway::FIRST_PARTY_ENV;
    let direct = asked_by(|c| {
        c.gateway.enabled = false;
        c.claude.env.insert(FIRST_PARTY_ENV.into(), "1".into());
    })
    .await;
    let through = asked_by(|c| c.gateway.first_party = FirstParty::Always).await;
    let third = asked_by(|c| c.gateway.first_party = FirstParty::Never).await;
    assert_eq!(through, direct, "through the gateway as directly");
    assert_ne!(
        third, direct,
        "as a third party the CLI asks for less: else this test could not tell"
    );
}

/// A profile's `subagent_model`: the CLI's sub-agent (its `Agent` tool) asks the API on that
/// model while the thread stays on its own; the gateway's record of the turn shows each
/// request's model, and each is priced at its model's rates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_sub_agents_run_on_a_model_of_their_own() {
    const MAIN: &str = "claude-opus-5-5";
    const SUB: &str = "claude-haiku-5-5";
    let mock = MockApi::start().await;
    mock.once_when_prompt_contains(
        "hand it to a helper",
        Reply::tool_use(
            "Agent",
            json!({"description": "look it up", "prompt": "the helper's task", "subagent_type": "general-purpose"}),
        ),
    );
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Agent".into());
        c.profiles.insert(
            "delegating".into(),
            orchestrator::config::ProfileConfig {
                model: Some(MAIN.into()),
                subagent_model: Some(SUB.into()),
                ..Default::default()
            },
        );
    })
    .await;
    let (_, profiles) = daemon.get("/api/profiles").await;
    let shown = profiles["profiles"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == "delegating"))
        .map(|p| p["subagentModel"].clone());
    assert_eq!(shown, Some(json!(SUB)), "{profiles}");
    let (_, thread) = daemon
        .post("/api/threads", json!({"profile": "delegating"}))
        .await;
    let thread = thread["id"].as_str().unwrap().to_owned();
    let (status, body) = daemon.send(&thread, "hand it to a helper").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let requests = mock.message_requests();
    let helper = requests
        .iter()
        .find(|r| r.last_user_text().contains("the helper's task"))
        .expect("the sub-agent asked the API");
    assert_eq!(helper.model(), Some(SUB));
    let main = requests
        .iter()
        .find(|r| r.last_user_text().contains("hand it to a helper"))
        .expect("the thread asked the API");
    assert_eq!(main.model(), Some(MAIN));
    let message = body["userMessageId"].as_str().unwrap().to_owned();
    let recorded = model_requests(&daemon, &thread, &message).await;
    let models: std::collections::BTreeSet<&str> = recorded
        .iter()
        .filter_map(|r| r["model"].as_str())
        .collect();
    assert_eq!(models, [SUB, MAIN].into_iter().collect(), "{recorded:?}");
    // Each at its own model's price: the sub-agent's requests cost less per token.
    let per_token = |model: &str| {
        let r = recorded.iter().find(|r| r["model"] == model).unwrap();
        r["costUsd"].as_f64().unwrap() / r["inputTokens"].as_f64().unwrap()
    };
    assert!(per_token(SUB) < per_token(MAIN), "{recorded:?}");
    daemon.stop().await;
}
