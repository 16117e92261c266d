use serde_json::{json, Value};

use super::*;
use crate::api::events::{PermissionRequested, ScheduleRunStarted};
use crate::budget::BudgetKind;
use crate::store::{NewReply, RunRef, TurnKey};

/// One event of each type, as the daemon builds them.
fn samples() -> Vec<WebhookEvent> {
    let thread = ThreadId::from_string("thr_1");
    let message = MessageId::from_string("msg_1");
    let reply = MessageId::from_string("msg_2");
    let run = RunRef {
        schedule_id: "sch_1".into(),
        run_id: 7,
    };
    let budget = BudgetExceeded {
        budget: BudgetKind::Daily,
        limit_usd: 1.0,
        spent_usd: 1.5,
    };
    let audience = Audience {
        turn: TurnKey {
            thread: &thread,
            message: &message,
        },
        run: Some(&run),
        callback: false,
    };
    let ending = |cause, reply| Ending {
        cause,
        error: None,
        reply,
        session: None,
        usage: None,
    };
    let replied = NewReply {
        id: &reply,
        text: "",
        model: None,
        structured_output: None,
    };
    let mut events =
        WebhookEvent::of_ending(&ending(EndCause::Done, Some(replied)), &audience, None);
    events.extend(WebhookEvent::of_ending(
        &ending(EndCause::Refused, None),
        &audience,
        Some(&budget),
    ));
    let asked = ThreadEvent::PermissionRequested(PermissionRequested {
        request_id: "req_1".into(),
        tool_name: "Bash".into(),
        input: json!({"command": "ls"}),
        tool_use_id: None,
    });
    let started = ThreadEvent::ScheduleRunStarted(ScheduleRunStarted {
        schedule_id: "sch_1".into(),
        run_id: 7,
        message_id: message.clone(),
        trigger: RunTrigger::Cron,
    });
    events.extend(WebhookEvent::of_event(&thread, &asked));
    events.extend(WebhookEvent::of_event(&thread, &started));
    events
}

/// A document with what [`WebhookSchemas`] adds to the daemon's (`http::openapi`).
fn document() -> Value {
    let mut doc = utoipa::openapi::OpenApiBuilder::new().build();
    WebhookSchemas.modify(&mut doc);
    serde_json::to_value(doc).expect("serializes")
}

/// Every type's body, as the dispatcher sends it, is what the document says that type's body
/// is; and every type has a sample here.
#[test]
fn each_type_serializes_to_what_its_documented_schema_accepts() {
    let doc = document();
    let events = samples();
    for kind in WebhookKind::ALL {
        assert!(
            events.iter().any(|e| e.kind() == kind),
            "no sample of {kind:?}"
        );
    }
    for event in events {
        let kind = event.kind();
        // As `crate::webhooks` sends it.
        let body = json!({
            "type": kind.as_str(),
            "timestamp": "2026-01-01T00:00:00.000000Z",
            "data": event.data(),
        });
        for schema in [kind.schema_name(), WEBHOOK_BODY] {
            let mut rooted = doc.clone();
            rooted["$ref"] = json!(format!("#/components/schemas/{schema}"));
            let validator = jsonschema::validator_for(&rooted).expect("the document compiles");
            let problems: Vec<String> = validator
                .iter_errors(&body)
                .map(|e| format!("{}: {e}", e.instance_path()))
                .collect();
            assert!(problems.is_empty(), "{schema} rejects {body}: {problems:?}");
        }
        let mut wrong = body.clone();
        wrong["data"]
            .as_object_mut()
            .expect("an object")
            .remove("threadId");
        let mut rooted = doc.clone();
        rooted["$ref"] = json!(format!("#/components/schemas/{}", kind.schema_name()));
        let validator = jsonschema::validator_for(&rooted).expect("the document compiles");
        assert!(!validator.is_valid(&wrong), "{kind:?} needs its threadId");
        let hook = &doc["webhooks"][kind.as_str()]["post"];
        assert_eq!(
            hook["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            format!("#/components/schemas/{}", kind.schema_name()),
            "{kind:?} is under `webhooks`"
        );
    }
}

/// The payloads keep the names and shapes they were delivered with before they were typed.
#[test]
fn payloads_keep_their_delivered_shape() {
    let data: Vec<(&str, Value)> = samples()
        .iter()
        .map(|e| (e.kind().as_str(), e.data()))
        .collect();
    let turn = json!({"threadId": "thr_1", "messageId": "msg_1", "status": "done", "cause": "done", "replyId": "msg_2"});
    let refused =
        json!({"threadId": "thr_1", "messageId": "msg_1", "status": "refused", "cause": "refused"});
    let run = |mut turn: Value| {
        turn["scheduleId"] = json!("sch_1");
        turn["runId"] = json!(7);
        turn
    };
    let mut budget = refused.clone();
    budget["budget"] = json!({"budget": "daily", "limitUsd": 1.0, "spentUsd": 1.5});
    assert_eq!(
        data,
        [
            ("turn.finished", turn.clone()),
            ("schedule.run_finished", run(turn)),
            ("turn.failed", refused.clone()),
            ("schedule.run_finished", run(refused)),
            ("budget.reached", budget),
            (
                "permission.requested",
                json!({"threadId": "thr_1", "requestId": "req_1", "toolName": "Bash"})
            ),
            (
                "schedule.run_started",
                json!({"threadId": "thr_1", "scheduleId": "sch_1", "runId": 7, "messageId": "msg_1", "trigger": "cron"})
            ),
        ]
    );
}

#[test]
fn every_type_parses_back_from_its_name_and_serializes_as_it() {
    for event in samples() {
        let kind = event.kind();
        assert_eq!(WebhookKind::parse(kind.as_str()), Some(kind));
        assert_eq!(
            serde_json::to_value(&event).expect("serializes")["type"],
            kind.as_str()
        );
    }
    assert_eq!(WebhookKind::parse("turn.done"), None);
}
