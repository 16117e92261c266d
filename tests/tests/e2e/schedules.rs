//! Schedules (issue #27): checked at creation, changed, paused, deleted; a manual run of a paused
//! schedule; ticks of a cron with `overlap: skip`; missed ticks after downtime made one run or
//! one skipped record; an unattended run's permission denied without waiting for a person. The
//! cluster case (one run per tick on two nodes) is in `cluster.rs`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::eventually_async;
use orchestrator::config::ApprovalMode;

use super::tenants::OPERATOR;

async fn create(daemon: &TestDaemon, body: Value) -> Value {
    let (status, schedule) = daemon.post("/api/schedules", body).await;
    assert_eq!(status, StatusCode::CREATED, "{schedule}");
    schedule
}

async fn runs(daemon: &TestDaemon, id: &str) -> Vec<Value> {
    let (status, body) = daemon.get(&format!("/api/schedules/{id}/runs")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["runs"].as_array().cloned().unwrap_or_default()
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("a time: {value}"))
}

async fn delete(daemon: &TestDaemon, path: &str) -> StatusCode {
    reqwest::Client::new()
        .delete(format!("{}{path}", daemon.base))
        .send()
        .await
        .expect("DELETE reaches the daemon")
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_checked_changed_paused_and_deleted() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;

    let refused = [
        (
            json!({"cron": "61 * * * *", "threadId": thread, "prompt": "p"}),
            "cron:",
        ),
        (
            json!({"cron": "0 0 30 2 *", "threadId": thread, "prompt": "p"}),
            "never",
        ),
        (
            json!({"cron": "* * * * *", "timezone": "Mars/Olympus", "threadId": thread, "prompt": "p"}),
            "timezone:",
        ),
        (json!({"cron": "* * * * *", "prompt": "p"}), "exactly one"),
        (
            json!({"cron": "* * * * *", "threadId": thread, "thread": {}, "prompt": "p"}),
            "exactly one",
        ),
        (
            json!({"cron": "* * * * *", "threadId": "thr_nope", "prompt": "p"}),
            "not found",
        ),
        (
            json!({"cron": "* * * * *", "threadId": thread, "prompt": "  "}),
            "blank",
        ),
        (
            json!({"cron": "* * * * *", "thread": {"profile": "nope"}, "prompt": "p"}),
            "profile",
        ),
        (
            json!({"cron": "* * * * *", "threadId": thread, "prompt": "p", "overlap": "wait"}),
            "overlap",
        ),
    ];
    for (body, why) in refused {
        let (status, error) = daemon.post("/api/schedules", body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body} → {error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(why),
            "{body} → {error}"
        );
    }

    // 09:00 in Berlin is 08:00 UTC in winter, 07:00 in summer.
    let schedule = create(
        &daemon,
        json!({"name": "morning", "cron": "0 9 * * *", "timezone": "Europe/Berlin",
               "threadId": thread, "prompt": "good morning"}),
    )
    .await;
    let id = schedule["id"].as_str().expect("an id").to_owned();
    assert!(id.starts_with("sch_"), "{schedule}");
    assert_eq!(schedule["enabled"], true);
    assert_eq!(schedule["overlap"], "skip");
    assert_eq!(schedule["catchUp"], "once");
    let next = time(&schedule["nextRunAt"]);
    assert!(next > Utc::now(), "{schedule}");
    let utc = next.format("%H:%M:%S").to_string();
    assert!(utc == "08:00:00" || utc == "07:00:00", "{schedule}");

    let (status, list) = daemon.get("/api/schedules").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["schedules"][0]["id"], id.as_str(), "{list}");

    let path = format!("/api/schedules/{id}");
    let (status, changed) = daemon
        .patch(
            &path,
            json!({"cron": "*/15 * * * * *", "timezone": "UTC", "prompt": "tick"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    let next = time(&changed["nextRunAt"]);
    assert!(
        next - Utc::now() <= chrono::Duration::seconds(16),
        "{changed}"
    );
    assert_eq!(changed["name"], "morning", "kept");
    let (status, _) = daemon.patch(&path, json!({"cron": "nope"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    let (status, paused) = daemon.post(&format!("{path}/pause"), json!(null)).await;
    assert_eq!(
        (status, paused["enabled"].clone()),
        (StatusCode::OK, json!(false))
    );
    let (status, resumed) = daemon.post(&format!("{path}/resume"), json!(null)).await;
    assert_eq!(
        (status, resumed["enabled"].clone()),
        (StatusCode::OK, json!(true))
    );

    assert_eq!(delete(&daemon, &path).await, StatusCode::NO_CONTENT);
    assert_eq!(daemon.get(&path).await.0, StatusCode::NOT_FOUND);
    assert_eq!(delete(&daemon, &path).await, StatusCode::NOT_FOUND);
    assert_eq!(
        daemon.get(&format!("{path}/runs")).await.0,
        StatusCode::NOT_FOUND
    );
    let (status, list) = daemon.get("/api/schedules").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["schedules"], json!([]), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_run_of_a_paused_schedule_runs_unattended_and_is_recorded() {
    let mock = MockApi::start().await;
    // A person would be asked for `Bash`: nobody attends a schedule's run, so it is denied.
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Ask;
    })
    .await;
    let thread = daemon.create_thread().await;
    let planted = daemon.data_dir().join("planted-by-a-schedule");
    mock.once_when_prompt_contains(
        "RUN-BASH-FROM-A-SCHEDULE",
        Reply::tool_use(
            "Bash",
            json!({"command": format!("touch {}", planted.display()), "description": "d"}),
        ),
    );
    let schedule = create(
        &daemon,
        json!({"cron": "0 0 1 1 *", "threadId": thread, "prompt": "RUN-BASH-FROM-A-SCHEDULE",
               "enabled": false}),
    )
    .await;
    let id = schedule["id"].as_str().expect("an id");

    let (status, started) = daemon
        .post(&format!("/api/schedules/{id}/run"), json!(null))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let run_id = started["runId"].as_i64().expect("a run id");
    eventually_async(Duration::from_secs(60), "the run's turn ends", || async {
        runs(&daemon, id)
            .await
            .first()
            .is_some_and(|r| r["outcome"] == "done")
    })
    .await
    .unwrap();
    let all = runs(&daemon, id).await;
    assert_eq!(
        all.len(),
        1,
        "a paused schedule ran only when asked: {all:?}"
    );
    let run = &all[0];
    assert_eq!(run["id"], run_id);
    assert_eq!(run["trigger"], "manual");
    assert_eq!(run["status"], "started");
    assert_eq!(run["threadId"], thread.as_str());
    let message = run["messageId"].as_str().expect("its message").to_owned();
    let (_, stored) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(
        stored["messages"][0]["caller"],
        json!({"subject": format!("schedule:{id}"), "tenant": null}),
        "the run acts for its schedule"
    );

    // Denied by the policy at once, never left pending for a person; nothing ran.
    let (status, permissions) = daemon
        .get(&format!("/api/threads/{thread}/permissions?all=true"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let decided = &permissions["permissions"][0];
    assert_eq!(decided["status"], "denied", "{permissions}");
    assert_eq!(decided["decidedBy"], "policy", "{permissions}");
    assert!(!planted.exists(), "the command did not run");

    // The thread's stream says which schedule sent the message.
    let events = daemon
        .daemon()
        .store
        .events_after(&plugin_contract::ThreadId::from_string(&thread), 0, 1000)
        .await
        .unwrap();
    let announced = events
        .iter()
        .find(|e| e.kind == "schedule_run_started")
        .expect("schedule_run_started");
    assert_eq!(
        announced.message_id.as_ref().map(|m| m.as_str()),
        Some(message.as_str())
    );
    assert_eq!(announced.data["runId"], run_id);
    assert_eq!(announced.data["messageId"], message.as_str());
    assert_eq!(announced.data["trigger"], "manual");
    let (_, after) = daemon.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(
        after["nextRunAt"], schedule["nextRunAt"],
        "a manual run moves no tick"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_run_once_each_and_overlap_skip_skips_while_a_run_still_runs() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    mock.once_when_prompt_contains("SCHEDULED-AND-HANGING", Reply::Hang);
    let schedule = create(
        &daemon,
        json!({"cron": "* * * * * *", "threadId": thread, "prompt": "SCHEDULED-AND-HANGING"}),
    )
    .await;
    let id = schedule["id"].as_str().expect("an id");
    eventually_async(Duration::from_secs(60), "two ticks skipped", || async {
        runs(&daemon, id)
            .await
            .iter()
            .filter(|r| r["status"] == "skipped")
            .count()
            >= 2
    })
    .await
    .unwrap();
    let (status, _) = daemon
        .post(&format!("/api/schedules/{id}/pause"), json!(null))
        .await;
    assert_eq!(status, StatusCode::OK);
    let all = runs(&daemon, id).await;
    let started: Vec<&Value> = all.iter().filter(|r| r["status"] == "started").collect();
    assert_eq!(started.len(), 1, "one run, the rest skipped: {all:?}");
    for skipped in all.iter().filter(|r| r["status"] == "skipped") {
        assert!(
            skipped["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("still runs"),
            "{skipped}"
        );
    }
    let mut ticks: Vec<DateTime<Utc>> = all.iter().map(|r| time(&r["dueAt"])).collect();
    let count = ticks.len();
    ticks.sort();
    ticks.dedup();
    assert_eq!(ticks.len(), count, "each tick once: {all:?}");
    assert!(all.iter().all(|r| r["trigger"] == "cron"), "{all:?}");
    let (status, _) = daemon
        .post(&format!("/api/threads/{thread}/interrupt"), json!(null))
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_missed_while_down_make_one_catch_up_run_or_one_skipped_record() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let once = create(
        &daemon,
        json!({"name": "nightly", "cron": "* * * * *", "thread": {"title": "made by a schedule"},
               "prompt": "CAUGHT-UP"}),
    )
    .await;
    let skip = create(
        &daemon,
        json!({"cron": "* * * * *", "thread": {}, "prompt": "NOT-CAUGHT-UP", "catchUp": "skip"}),
    )
    .await;
    // As after ten minutes with no node up: the next tick is long past.
    let store = &daemon.daemon().store;
    let past = orchestrator::store::time_text(Utc::now() - chrono::Duration::minutes(10));
    for schedule in [&once, &skip] {
        let id = schedule["id"].as_str().expect("an id");
        let row = store.schedule(id).await.unwrap().expect("stored");
        let moved = orchestrator::schedules::as_new(&row, &past);
        store
            .update_schedule(id, moved)
            .await
            .unwrap()
            .expect("updated");
    }
    let (once, skip) = (once["id"].as_str().unwrap(), skip["id"].as_str().unwrap());
    eventually_async(Duration::from_secs(60), "both caught up", || async {
        let a = runs(&daemon, once).await;
        let b = runs(&daemon, skip).await;
        a.iter().any(|r| r["outcome"] == "done") && !b.is_empty()
    })
    .await
    .unwrap();
    let now = Utc::now();
    let a: Vec<Value> = runs(&daemon, once)
        .await
        .into_iter()
        .filter(|r| r["trigger"] == "catch_up")
        .collect();
    assert_eq!(a.len(), 1, "one run for ten missed minutes: {a:?}");
    assert_eq!(a[0]["status"], "started");
    let due = time(&a[0]["dueAt"]);
    assert!(
        now - due < chrono::Duration::minutes(2),
        "the last missed tick: {a:?}"
    );
    let made = a[0]["threadId"].as_str().expect("a fresh thread");
    let (_, thread) = daemon.get(&format!("/api/threads/{made}")).await;
    assert_eq!(thread["title"], "made by a schedule");
    assert_eq!(thread["messages"][1]["content"], "echo: CAUGHT-UP");

    let b: Vec<Value> = runs(&daemon, skip)
        .await
        .into_iter()
        .filter(|r| r["trigger"] == "catch_up")
        .collect();
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0]["status"], "skipped");
    assert!(
        b[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("catchUp: skip"),
        "{b:?}"
    );
    assert_eq!(b[0]["messageId"], Value::Null);
    for id in [once, skip] {
        let (_, schedule) = daemon.get(&format!("/api/schedules/{id}")).await;
        assert!(time(&schedule["nextRunAt"]) > due, "{schedule}");
    }
    assert!(
        !mock
            .message_requests()
            .iter()
            .any(|r| r.all_text().contains("NOT-CAUGHT-UP")),
        "a skipped catch-up sends nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_a_scheduled_run_delegates_to_runs_unattended_too() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Ask;
        // Longer than the wait below: a child left waiting for a person fails the test.
        c.approvals.timeout = Duration::from_secs(300);
    })
    .await;
    let planted = daemon.data_dir().join("planted-by-a-child");
    mock.once_when_prompt_contains(
        "SCHEDULED-DELEGATION",
        Reply::tool_use(
            "mcp__harness__delegation__delegate",
            json!({"prompt": "CHILD-RUNS-BASH"}),
        ),
    );
    mock.once_when_prompt_contains(
        "CHILD-RUNS-BASH",
        Reply::tool_use(
            "Bash",
            json!({"command": format!("touch {}", planted.display()), "description": "d"}),
        ),
    );
    let thread = daemon.create_thread().await;
    let schedule = create(
        &daemon,
        json!({"cron": "0 0 1 1 *", "threadId": thread, "prompt": "SCHEDULED-DELEGATION",
               "enabled": false}),
    )
    .await;
    let id = schedule["id"].as_str().expect("an id");
    let (status, _) = daemon
        .post(&format!("/api/schedules/{id}/run"), json!(null))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    eventually_async(
        Duration::from_secs(60),
        "the run ends, child and all",
        || async {
            runs(&daemon, id)
                .await
                .first()
                .is_some_and(|r| r["outcome"] == "done")
        },
    )
    .await
    .unwrap();
    let (_, list) = daemon.get("/api/threads").await;
    let child = list["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["parentId"] == thread.as_str())
        .and_then(|t| t["id"].as_str())
        .expect("the child thread")
        .to_owned();
    let (_, permissions) = daemon
        .get(&format!("/api/threads/{child}/permissions?all=true"))
        .await;
    let decided = &permissions["permissions"][0];
    assert_eq!(decided["status"], "denied", "{permissions}");
    assert_eq!(decided["decidedBy"], "policy", "{permissions}");
    assert!(!planted.exists(), "the child's command did not run");
    let (_, stored) = daemon.get(&format!("/api/threads/{child}")).await;
    assert_eq!(
        stored["messages"][0]["caller"]["subject"],
        format!("schedule:{id}"),
        "the child acts for its parent's caller"
    );
}

/// A request as `bearer`: (status, JSON body).
async fn as_key(
    daemon: &TestDaemon,
    bearer: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, body, _) =
        super::support::call(&daemon.base, Some(bearer), method, path, body).await;
    (status, body)
}

/// A key of tenant `acme` that may write threads and schedules, with `limits`: (key, id).
async fn make_key(daemon: &TestDaemon, limits: Value) -> (String, String) {
    let scopes = ["threads:read", "threads:write"];
    super::tenants::make_key(&daemon.base, "acme", &scopes, limits).await
}

/// A schedule `key` makes, ticking every second: its id.
async fn every_second(daemon: &TestDaemon, key: &str, target: Value) -> String {
    let mut body = json!({"cron": "* * * * * *", "prompt": "scheduled tick"});
    if let (Some(body), Some(target)) = (body.as_object_mut(), target.as_object()) {
        body.extend(target.clone());
    }
    let (status, made) = as_key(
        daemon,
        key,
        reqwest::Method::POST,
        "/api/schedules",
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    made["id"].as_str().expect("its id").to_owned()
}

/// [`runs`], asked by the operator.
async fn operator_runs(daemon: &TestDaemon, id: &str) -> Vec<Value> {
    let path = format!("/api/schedules/{id}/runs");
    let (status, body) = as_key(daemon, OPERATOR, reqwest::Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["runs"].as_array().cloned().unwrap_or_default()
}

async fn pause(daemon: &TestDaemon, id: &str) {
    let path = format!("/api/schedules/{id}/pause");
    let (status, body) = as_key(daemon, OPERATOR, reqwest::Method::POST, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A key's schedule spends the key's daily budget (#46): on `main` its runs acted as
/// `schedule:<id>`, which no key lookup finds, and a schedule ticking every second ran 7.5× a
/// two-turn budget while the key's spending stayed at nothing. Now the runs are the key's: at
/// most one turn beyond the budget runs, the rest are refused saying which budget, and the key's
/// spending is what its schedule's turns cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_schedule_spends_the_keys_daily_budget() {
    let mock = MockApi::start().await;
    let turn = super::usage::one_turns_cost(&mock).await;
    let limit = turn * 2.5;
    let daemon = TestDaemon::start(&mock, |c| {
        c.auth_token = Some(OPERATOR.into());
        c.budget.turn_estimate_usd = turn;
    })
    .await;
    let (key, key_id) = make_key(&daemon, json!({"dailyUsd": limit})).await;
    let (status, thread) = as_key(
        &daemon,
        &key,
        reqwest::Method::POST,
        "/api/threads",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{thread}");
    let id = every_second(
        &daemon,
        &key,
        json!({"threadId": thread["id"], "overlap": "queue"}),
    )
    .await;
    eventually_async(Duration::from_secs(90), "six runs are recorded", || async {
        let all = operator_runs(&daemon, &id).await;
        all.len() >= 6 && all.iter().all(|r| r["outcome"] != "pending")
    })
    .await
    .unwrap();
    pause(&daemon, &id).await;
    let all = operator_runs(&daemon, &id).await;
    let ran = all.iter().filter(|r| r["outcome"] == "done").count();
    let refused: Vec<&Value> = all
        .iter()
        .filter(|r| r["status"] == "failed" || r["outcome"] == "refused")
        .collect();
    assert!(
        (1..=3).contains(&ran),
        "{ran} runs ran on 2.5 turns' worth: {all:?}"
    );
    assert!(!refused.is_empty(), "{all:?}");
    let (_, keys) = as_key(&daemon, OPERATOR, reqwest::Method::GET, "/api/keys", None).await;
    let listed = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == key_id.as_str())
        .cloned()
        .unwrap();
    let charged = listed["spentTodayUsd"].as_f64().unwrap();
    assert!(
        charged >= turn * ran as f64 * 0.99,
        "the key paid for its runs: {listed}"
    );
    assert!(
        charged <= limit + turn * 1.5,
        "{charged} on a {limit} budget"
    );
    daemon.stop().await;
}

/// A key's schedule keeps the key's turns at once, and stops with the key (#46): with
/// `maxConcurrentTurns: 1` a run's turn waits while the key's other turn runs (on `main` three
/// ran at once), and once the key is revoked the next tick pauses the schedule and its run says
/// why (on `main`, twelve more ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_schedule_keeps_its_turns_at_once_and_stops_when_it_is_revoked() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(OPERATOR.into())).await;
    let (key, key_id) = make_key(&daemon, json!({"maxConcurrentTurns": 1})).await;
    mock.when_prompt_contains("scheduled tick", Reply::Hang);
    // A fresh thread per run: nothing but the key's limit keeps the runs' turns apart.
    let target = json!({"thread": {"title": "run"}, "overlap": "queue"});
    let id = every_second(&daemon, &key, target).await;
    eventually_async(
        Duration::from_secs(60),
        "three runs are recorded",
        || async {
            operator_runs(&daemon, &id)
                .await
                .iter()
                .filter(|r| r["threadId"].is_string())
                .count()
                >= 3
        },
    )
    .await
    .unwrap();
    // The runs' turns after the first wait for the key's one turn: none has started.
    let all = operator_runs(&daemon, &id).await;
    let mut started = 0;
    for run in all.iter().filter(|r| r["threadId"].is_string()) {
        let events =
            super::support::stored_events(&daemon, run["threadId"].as_str().unwrap()).await;
        started += usize::from(events.iter().any(|e| e.kind == "turn_started"));
    }
    assert_eq!(started, 1, "the key's turns at once: {all:?}");

    let path = format!("/api/keys/{key_id}");
    let (status, body) = as_key(&daemon, OPERATOR, reqwest::Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually_async(Duration::from_secs(30), "the schedule pauses", || async {
        let path = format!("/api/schedules/{id}");
        let (_, schedule) = as_key(&daemon, OPERATOR, reqwest::Method::GET, &path, None).await;
        schedule["enabled"] == false
    })
    .await
    .unwrap();
    let last = operator_runs(&daemon, &id).await;
    let stopped = last
        .iter()
        .find(|r| r["status"] == "failed")
        .expect("a run failed");
    let reason = stopped["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("revoked"), "{stopped}");
    daemon.stop().await;
}

/// A key's schedule keeps the key's rate (#46): with `rpm: 2` the key's own request that made
/// the schedule and its first run take the minute's two; the next run is refused saying so, not
/// sent (on `main` a run was no request of the key's, and every tick ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_schedule_keeps_the_keys_rate() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.auth_token = Some(OPERATOR.into())).await;
    let (key, _) = make_key(&daemon, json!({"rpm": 2})).await;
    let target = json!({"thread": {"title": "run"}, "overlap": "queue"});
    let id = every_second(&daemon, &key, target).await;
    eventually_async(Duration::from_secs(30), "a run is refused", || async {
        operator_runs(&daemon, &id)
            .await
            .iter()
            .any(|r| r["status"] == "failed")
    })
    .await
    .unwrap();
    pause(&daemon, &id).await;
    let all = operator_runs(&daemon, &id).await;
    let sent = all.iter().filter(|r| r["status"] == "started").count();
    assert_eq!(sent, 1, "one run in the key's minute: {all:?}");
    let refused = all
        .iter()
        .find(|r| r["status"] == "failed")
        .expect("a refused run");
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("rpm 2"), "{refused}");
    daemon.stop().await;
}
