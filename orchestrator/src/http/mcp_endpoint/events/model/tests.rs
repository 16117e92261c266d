use chrono::TimeZone;
use expect_test::{expect, Expect};
use plugin_contract::ThreadId;
use serde_json::json;

use super::*;
use crate::store::MessageId;

fn row(id: i64, kind: &str, data: Value) -> EventRow {
    EventRow {
        id,
        thread_id: ThreadId::from_string("thr_1".to_owned()),
        message_id: Some(MessageId::from_string("msg_1")),
        kind: kind.into(),
        data,
        created_at: Utc
            .with_ymd_and_hms(2026, 12, 6, 7, 0, 0)
            .single()
            .expect("a time"),
    }
}

/// Every occurrence `row` stands for, one per event type, as delivered.
#[track_caller]
fn check(row: EventRow, expect: Expect) {
    let all: Vec<Value> = EventName::ALL
        .into_iter()
        .filter_map(|name| occurrence(&row, name))
        .map(|o| o.to_json())
        .collect();
    expect.assert_eq(&serde_json::to_string_pretty(&all).expect("json"));
}

#[test]
fn a_finished_turn_is_a_turn_ended_with_its_reply() {
    let reply = json!({"id": "msg_2", "content": "Hello.", "status": "done"});
    check(
        row(
            41,
            "turn_finished",
            json!({"messageId": "msg_1", "reply": reply}),
        ),
        expect![[r#"
            [
              {
                "cursor": "c1.41",
                "data": {
                  "messageId": "msg_1",
                  "replyId": "msg_2",
                  "status": "done",
                  "text": "Hello.",
                  "threadId": "thr_1"
                },
                "eventId": "41:turn.ended",
                "name": "turn.ended",
                "timestamp": "2026-12-06T07:00:00.000Z"
              }
            ]"#]],
    );
}

#[test]
fn a_refused_turn_is_a_turn_ended_and_a_budget_reached() {
    let budget = json!({"budget": "daily", "limitUsd": 1.0, "spentUsd": 1.25});
    check(
        row(
            42,
            "turn_failed",
            json!({"messageId": "msg_1", "status": "refused", "cause": "refused",
                   "error": "spent", "budget": budget}),
        ),
        expect![[r#"
            [
              {
                "cursor": "c1.42",
                "data": {
                  "cause": "refused",
                  "error": "spent",
                  "messageId": "msg_1",
                  "status": "refused",
                  "threadId": "thr_1"
                },
                "eventId": "42:turn.ended",
                "name": "turn.ended",
                "timestamp": "2026-12-06T07:00:00.000Z"
              },
              {
                "cursor": "c1.42",
                "data": {
                  "budget": "daily",
                  "error": "spent",
                  "limitUsd": 1.0,
                  "messageId": "msg_1",
                  "spentUsd": 1.25,
                  "status": "refused",
                  "threadId": "thr_1"
                },
                "eventId": "42:budget.reached",
                "name": "budget.reached",
                "timestamp": "2026-12-06T07:00:00.000Z"
              }
            ]"#]],
    );
}

#[test]
fn a_failure_without_a_budget_is_no_budget_reached() {
    let failed = row(
        43,
        "turn_failed",
        json!({"messageId": "msg_1", "status": "error", "cause": "error", "error": "boom"}),
    );
    assert!(occurrence(&failed, EventName::BudgetReached).is_none());
    assert!(occurrence(&failed, EventName::TurnEnded).is_some());
}

#[test]
fn permissions_and_schedule_runs_carry_what_answers_them() {
    check(
        row(
            44,
            "permission_requested",
            json!({"requestId": "req_1", "toolName": "Bash", "input": {"command": "ls"}, "toolUseId": null}),
        ),
        expect![[r#"
            [
              {
                "cursor": "c1.44",
                "data": {
                  "input": {
                    "command": "ls"
                  },
                  "messageId": "msg_1",
                  "requestId": "req_1",
                  "threadId": "thr_1",
                  "toolName": "Bash"
                },
                "eventId": "44:permission.requested",
                "name": "permission.requested",
                "timestamp": "2026-12-06T07:00:00.000Z"
              }
            ]"#]],
    );
    check(
        row(
            45,
            "schedule_run_started",
            json!({"scheduleId": "sch_1", "runId": 3, "messageId": "msg_9", "trigger": "cron"}),
        ),
        expect![[r#"
            [
              {
                "cursor": "c1.45",
                "data": {
                  "messageId": "msg_9",
                  "runId": 3,
                  "scheduleId": "sch_1",
                  "threadId": "thr_1",
                  "trigger": "cron"
                },
                "eventId": "45:schedule.run",
                "name": "schedule.run",
                "timestamp": "2026-12-06T07:00:00.000Z"
              }
            ]"#]],
    );
}

#[test]
fn the_other_kinds_are_no_occurrence() {
    for kind in [
        "text_delta",
        "turn_started",
        "permission_decided",
        "message_received",
    ] {
        check(row(46, kind, json!({"text": "x"})), expect!["[]"]);
    }
}

#[test]
fn a_cursor_round_trips_and_a_foreign_one_is_refused() {
    assert_eq!(Cursor::parse(&Cursor(17).to_string()), Ok(Cursor(17)));
    assert_eq!(Cursor(0).to_string(), "c1.0");
    for bad in ["17", "c1.", "c1.-3", "c2.5", "c1.5x", ""] {
        let err = Cursor::parse(bad).expect_err(bad);
        assert!(err.contains("not one this server gave out"), "{err}");
    }
}

#[test]
fn read_params_take_defaults_and_refuse_what_does_not_fit() {
    let read = read_params(&json!({"name": "turn.ended"})).expect("params");
    assert_eq!(read.cursor, None);
    assert_eq!(read.max_events, DEFAULT_MAX_EVENTS);
    assert_eq!(read.subscription.filter, Filter::default());
    let read = read_params(&json!({
        "name": "turn.ended", "cursor": "c1.9", "maxEvents": 5000, "maxAgeMs": 60000,
        "arguments": {"threadId": "thr_1", "tags": ["a", "b"]}
    }))
    .expect("params");
    assert_eq!(read.cursor, Some(Cursor(9)));
    assert_eq!(read.max_events, MAX_EVENTS, "capped");
    assert_eq!(read.max_age_ms, Some(60_000));
    assert_eq!(read.subscription.filter.thread_id.as_deref(), Some("thr_1"));
    assert_eq!(read.subscription.filter.tags, ["a", "b"]);
    for (params, why) in [
        (json!({}), "`name`"),
        (json!({"name": "turn.done"}), "no event type `turn.done`"),
        (
            json!({"name": "turn.ended", "arguments": {"thread": "x"}}),
            "input schema",
        ),
        (json!({"name": "turn.ended", "cursor": 5}), "`cursor`"),
        (json!({"name": "turn.ended", "maxEvents": 0}), "`maxEvents`"),
        (json!({"name": "turn.ended", "maxAgeMs": -1}), "`maxAgeMs`"),
    ] {
        let err = read_params(&params).expect_err(why);
        assert!(err.contains(why), "{params}: {err}");
    }
}

#[test]
fn subscribe_params_need_a_webhook_url_and_secret_and_bound_the_ttl() {
    let base = json!({
        "name": "turn.ended", "arguments": {"tags": ["x"]},
        "delivery": {"mode": "webhook", "url": "https://example.com/h", "secret": "whsec_abc"}
    });
    let made = subscribe_params(&base).expect("params");
    assert_eq!(made.url, "https://example.com/h");
    assert_eq!(made.ttl_ms, DEFAULT_TTL_MS);
    let mut long = base.clone();
    long["ttlMs"] = json!(MAX_TTL_MS * 10);
    assert_eq!(subscribe_params(&long).expect("params").ttl_ms, MAX_TTL_MS);
    let mut poll = base.clone();
    poll["delivery"]["mode"] = json!("poll");
    assert!(subscribe_params(&poll)
        .expect_err("mode")
        .contains("webhook"));
    let mut no_secret = base.clone();
    no_secret["delivery"]
        .as_object_mut()
        .expect("object")
        .remove("secret");
    assert!(subscribe_params(&no_secret)
        .expect_err("secret")
        .contains("secret"));
    let gone = unsubscribe_params(&base).expect("params");
    assert_eq!(gone.subscription, made.read.subscription);
}

#[test]
fn every_event_type_is_listed_with_its_schemas() {
    for name in EventName::ALL {
        let listed = name.listed();
        assert_eq!(listed["name"], name.as_str());
        assert_eq!(listed["delivery"], json!(["poll", "push", "webhook"]));
        assert_eq!(listed["inputSchema"]["type"], "object");
        assert!(listed["payloadSchema"]["properties"]["threadId"].is_object());
        assert_eq!(EventName::parse(name.as_str()), Some(name));
    }
}
