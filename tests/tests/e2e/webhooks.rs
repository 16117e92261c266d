//! Webhooks, checked by a receiver that verifies with the Standard Webhooks reference library:
//! every turn's end is delivered, signed, at least once, through failures and a crash of the
//! daemon; every attempt is stored; a dead delivery is sent again on request.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::webhooks::Receiver;
use orchestrator::config::{Config, WebhookEndpoint};
use orchestrator::webhooks::Signer;

/// Webhooks to `receiver` with `secret`, retried quickly (a test waits for them).
fn hooks(config: &mut Config, url: &str, secret: &str, max_attempts: u32) {
    let webhooks = &mut config.webhooks;
    webhooks.allow_private_targets = true;
    webhooks.endpoints = vec![WebhookEndpoint {
        url: url.to_owned(),
        secret: Some(secret.to_owned()),
        secrets: Vec::new(),
        events: Vec::new(),
    }];
    webhooks.max_attempts = max_attempts;
    webhooks.retry_min = Duration::from_millis(20);
    webhooks.retry_max = Duration::from_millis(200);
    webhooks.poll = Duration::from_millis(50);
    // A claim the crash left runs out after three of these.
    webhooks.timeout = Duration::from_secs(2);
}

/// With the receiver failing 30 % of attempts and the daemon dying like `kill -9` halfway,
/// every turn's `turn.finished` reaches it, verified, under its own `webhook-id`; the ids are
/// the deliveries' ids and every delivery ends `delivered`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_turn_is_delivered_signed_through_failures_and_a_crash() {
    let Some(python) = harness_tests::mcp::python_or_skip("webhooks").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = Signer::generate_secret();
    let receiver = Receiver::start(&python, dir.path(), &secret, 0.3, None);
    let mock = MockApi::start().await;
    let url = receiver.url.clone();
    let mut daemon = TestDaemon::start(&mock, |c| hooks(c, &url, &secret, 30)).await;
    let thread = daemon.create_thread().await;
    let turns = 1000;
    let mut messages = BTreeSet::new();
    for i in 0..turns {
        if i == turns / 2 {
            daemon = daemon.crash_and_restart().await;
        }
        let (status, body) = daemon.send(&thread, &format!("turn {i}")).await;
        assert_eq!(status, 200, "{body}");
        messages.insert(body["userMessageId"].as_str().expect("id").to_owned());
    }
    harness_tests::util::eventually_async(
        Duration::from_secs(120),
        "every turn's webhook is accepted",
        || async {
            let accepted: BTreeSet<String> = receiver
                .accepted()
                .iter()
                .filter_map(|r| r["data"]["messageId"].as_str().map(str::to_owned))
                .collect();
            accepted == messages
        },
    )
    .await
    .unwrap();
    let requests = receiver.requests();
    assert!(
        requests.iter().all(|r| r["verified"] == true),
        "every signature verifies"
    );
    let failed = requests.iter().filter(|r| r["answered"] == 500).count();
    assert!(failed > 0, "the receiver failed some attempts");
    let accepted = receiver.accepted();
    let ids: BTreeSet<&str> = accepted.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids.len(), turns, "one webhook-id per turn");
    for request in &accepted {
        assert_eq!(request["type"], "turn.finished", "{request}");
        assert_eq!(request["data"]["threadId"], thread.as_str());
        assert_eq!(request["data"]["status"], "done");
    }
    // The store's record: each id a delivery, delivered, with its attempts.
    let (status, body) = daemon.get("/api/webhooks/deliveries?limit=1000").await;
    assert_eq!(status, 200, "{body}");
    let deliveries = body["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), turns);
    assert!(
        deliveries.iter().all(|d| d["status"] == "delivered"),
        "{body}"
    );
    let stored: BTreeSet<&str> = deliveries.iter().filter_map(|d| d["id"].as_str()).collect();
    assert_eq!(stored, ids);
    let retried = deliveries
        .iter()
        .find(|d| d["attempts"].as_i64() > Some(1))
        .expect("a delivery that needed more than one attempt");
    let (_, one) = daemon
        .get(&format!(
            "/api/webhooks/deliveries/{}",
            retried["id"].as_str().unwrap()
        ))
        .await;
    let log = one["attemptLog"].as_array().expect("attempts");
    assert_eq!(log.len() as i64, one["attempts"].as_i64().unwrap());
    assert_eq!(log.last().unwrap()["statusCode"], 204, "{one}");
    assert_eq!(log[0]["statusCode"], 500, "{one}");
    daemon.stop().await;
}

/// A delivery that fails every attempt is dead, with each attempt stored; `redeliver` sends it
/// again under the same `webhook-id`; unknown ids are 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_delivery_is_sent_again_on_request() {
    let Some(python) = harness_tests::mcp::python_or_skip("webhooks").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = Signer::generate_secret();
    let down = dir.path().join("down");
    std::fs::write(&down, "").unwrap();
    let receiver = Receiver::start(&python, dir.path(), &secret, 0.0, Some(&down));
    let mock = MockApi::start().await;
    let url = receiver.url.clone();
    let daemon = TestDaemon::start(&mock, |c| hooks(c, &url, &secret, 2)).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "hello").await;
    let dead = harness_tests::util::eventually_async(
        Duration::from_secs(30),
        "the delivery is dead",
        || async {
            let (_, body) = daemon.get("/api/webhooks/deliveries?status=dead").await;
            body["deliveries"].as_array().is_some_and(|d| d.len() == 1)
        },
    )
    .await;
    dead.unwrap();
    let (_, body) = daemon.get("/api/webhooks/deliveries?status=dead").await;
    let id = body["deliveries"][0]["id"].as_str().expect("id").to_owned();
    assert_eq!(body["deliveries"][0]["attempts"], 2);
    assert_eq!(body["deliveries"][0]["lastError"], "HTTP 500");
    assert_eq!(receiver.requests().len(), 2);

    std::fs::remove_file(&down).unwrap();
    let (status, again) = daemon
        .post(
            &format!("/api/webhooks/deliveries/{id}/redeliver"),
            json!({}),
        )
        .await;
    assert_eq!(
        (status.as_u16(), &again["status"]),
        (200, &json!("pending")),
        "{again}"
    );
    harness_tests::util::eventually_async(Duration::from_secs(30), "delivered", || async {
        receiver.accepted().len() == 1
    })
    .await
    .unwrap();
    let accepted: Vec<Value> = receiver.accepted();
    assert_eq!(accepted[0]["id"], id.as_str(), "the same webhook-id");
    harness_tests::util::eventually_async(Duration::from_secs(10), "recorded", || async {
        let (_, one) = daemon.get(&format!("/api/webhooks/deliveries/{id}")).await;
        one["status"] == "delivered" && one["attemptLog"].as_array().map(Vec::len) == Some(3)
    })
    .await
    .unwrap();
    let (status, body) = daemon
        .post("/api/webhooks/deliveries/msg_nope/redeliver", json!({}))
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = daemon.get("/api/webhooks/deliveries?limit=0").await;
    assert_eq!(status, 422, "{body}");
    daemon.stop().await;
}

/// A thread made with a `callbackUrl` gets its events there, signed with its own secret (shown
/// once), with no endpoint configured: a turn's end, a permission a person is asked for, and a
/// schedule's run from start to finish. Another thread's events do not go there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_own_endpoint_hears_its_events_signed_with_its_own_secret() {
    let Some(python) = harness_tests::mcp::python_or_skip("webhooks").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let secret_file = dir.path().join("thread-secret");
    let receiver = Receiver::start(
        &python,
        dir.path(),
        &format!("@{}", secret_file.display()),
        0.0,
        None,
    );
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.webhooks.allow_private_targets = true;
        c.webhooks.poll = Duration::from_millis(50);
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = orchestrator::config::ApprovalMode::Ask;
    })
    .await;
    for bad in ["ftp://example.com/hook", "not a url"] {
        let (status, body) = daemon
            .post("/api/threads", json!({"callbackUrl": bad}))
            .await;
        assert_eq!(status, 422, "{bad}: {body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("callbackUrl"));
    }
    let (status, created) = daemon
        .post("/api/threads", json!({"callbackUrl": receiver.url}))
        .await;
    assert_eq!(status, 201, "{created}");
    let secret = created["callbackSecret"]
        .as_str()
        .expect("the secret, once");
    assert!(secret.starts_with("whsec_"), "{created}");
    std::fs::write(&secret_file, secret).expect("the receiver learns it");
    let thread = created["id"].as_str().expect("an id").to_owned();
    let (_, shown) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(shown["callbackUrl"], receiver.url.as_str());
    assert!(
        !shown.to_string().contains(secret),
        "the secret is never shown again"
    );
    let other = daemon.create_thread().await;

    // A turn's end, on each thread.
    assert_eq!(daemon.reply(&thread, "hello").await, "echo: hello");
    assert_eq!(daemon.reply(&other, "hello").await, "echo: hello");
    // A permission a person is asked for.
    mock.once_when_prompt_contains(
        "ASK-A-PERSON",
        harness_tests::mock::Reply::tool_use(
            "Bash",
            json!({"command": format!("touch {}", dir.path().join("asked").display()), "description": "d"}),
        ),
    );
    let turn = {
        let (client, thread) = (daemon.client().clone(), thread.clone());
        tokio::spawn(async move { client.send(&thread, "ASK-A-PERSON").await })
    };
    // A schedule's run.
    let (status, schedule) = daemon
        .post(
            "/api/schedules",
            json!({"cron": "0 0 1 1 *", "threadId": thread, "prompt": "scheduled", "overlap": "queue"}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let schedule = schedule["id"].as_str().expect("an id").to_owned();
    let wanted = [
        "turn.finished",
        "permission.requested",
        "schedule.run_started",
        "schedule.run_finished",
    ];
    let answered = std::sync::atomic::AtomicBool::new(false);
    harness_tests::util::eventually_async(Duration::from_secs(60), "every kind arrives", || {
        let (daemon, receiver, thread, schedule) = (&daemon, &receiver, &thread, &schedule);
        let answered = &answered;
        async move {
            let kinds: BTreeSet<String> = receiver
                .accepted()
                .iter()
                .filter_map(|r| r["type"].as_str().map(str::to_owned))
                .collect();
            if kinds.contains("permission.requested") && !answered.load(Ordering::SeqCst) {
                // The person denies it; the turn ends, and the schedule's run waits no more.
                let (_, pending) = daemon
                    .get(&format!("/api/threads/{thread}/permissions"))
                    .await;
                if let Some(id) = pending["permissions"][0]["requestId"].as_str() {
                    let (status, _) = daemon
                        .post(
                            &format!("/api/threads/{thread}/permissions/{id}"),
                            json!({"decision": "deny"}),
                        )
                        .await;
                    answered.store(status == 200, Ordering::SeqCst);
                    let (status, _) = daemon
                        .post(&format!("/api/schedules/{schedule}/run"), json!(null))
                        .await;
                    assert_eq!(status, 202);
                }
            }
            wanted.iter().all(|k| kinds.contains(*k))
        }
    })
    .await
    .unwrap_or_else(|err| {
        let (_, deliveries) = futures::executor::block_on(daemon.get("/api/webhooks/deliveries"));
        panic!("{err}: {:?}\n{deliveries}", receiver.requests())
    });
    let (status, _) = turn.await.expect("the turn's task");
    assert_eq!(status, 200);
    let requests = receiver.requests();
    assert!(
        requests.iter().all(|r| r["verified"] == true),
        "signed with the thread's secret: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .all(|r| r["data"]["threadId"] == thread.as_str()),
        "only its own thread's events: {requests:?}"
    );
    let finished = requests
        .iter()
        .find(|r| r["type"] == "schedule.run_finished")
        .expect("schedule.run_finished");
    assert_eq!(finished["data"]["scheduleId"], schedule.as_str());
    assert_eq!(finished["data"]["status"], "done");
    let asked = requests
        .iter()
        .find(|r| r["type"] == "permission.requested")
        .expect("permission.requested");
    assert_eq!(asked["data"]["toolName"], "Bash");
    let (_, deliveries) = daemon.get("/api/webhooks/deliveries").await;
    assert!(
        deliveries["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .all(|d| d["url"] == receiver.url.as_str()),
        "{deliveries}"
    );
    daemon.stop().await;
}
