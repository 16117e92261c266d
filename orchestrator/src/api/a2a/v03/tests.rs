//! Each shape against the JSON v0.3 gives it (as the Python SDK's `a2a.compat.v0_3` writes it).

use serde_json::json;

use super::*;

#[test]
fn states_are_lower_case_with_hyphens() {
    let states = [
        ("TASK_STATE_WORKING", "working"),
        ("TASK_STATE_INPUT_REQUIRED", "input-required"),
        ("TASK_STATE_COMPLETED", "completed"),
        ("TASK_STATE_CANCELED", "canceled"),
        ("TASK_STATE_AUTH_REQUIRED", "auth-required"),
    ];
    for (v1, v03) in states {
        assert_eq!(state(v1), v03);
    }
}

#[test]
fn parts_go_both_ways() {
    let pairs = [
        (json!({"text": "hi"}), json!({"kind": "text", "text": "hi"})),
        (
            json!({"data": {"decision": "allow"}, "metadata": {"m": 1}}),
            json!({"kind": "data", "data": {"decision": "allow"}, "metadata": {"m": 1}}),
        ),
        (
            json!({"url": "https://x/y.png", "mediaType": "image/png", "filename": "y.png"}),
            json!({"kind": "file", "file": {"uri": "https://x/y.png", "mimeType": "image/png",
                                            "name": "y.png"}}),
        ),
        (
            json!({"raw": "aGk=", "mediaType": "text/plain"}),
            json!({"kind": "file", "file": {"bytes": "aGk=", "mimeType": "text/plain"}}),
        ),
    ];
    for (v1, v03) in pairs {
        assert_eq!(part(&v1), v03);
        assert_eq!(part_v1(&v03), Some(v1));
    }
    assert_eq!(part_v1(&json!({"kind": "video"})), None);
    assert_eq!(part_v1(&json!({"text": "no kind"})), None);
}

#[test]
fn a_user_message_becomes_v1_and_an_agent_one_v03() {
    let v03 = json!({"kind": "message", "messageId": "m1", "role": "user", "contextId": "thr_1",
                     "parts": [{"kind": "text", "text": "hello"}]});
    assert_eq!(
        message_v1(&v03).unwrap(),
        json!({"messageId": "m1", "contextId": "thr_1", "role": "ROLE_USER",
               "parts": [{"text": "hello"}]})
    );
    let bad = json!({"messageId": "m1", "role": "robot", "parts": []});
    assert!(message_v1(&bad).unwrap_err().contains("robot"));
    let unknown = json!({"messageId": "m1", "parts": [{"kind": "video"}]});
    assert!(message_v1(&unknown).is_err());
    let agent = json!({"messageId": "r1", "taskId": "msg_1", "contextId": "thr_1",
                       "role": "ROLE_AGENT", "parts": [{"text": "done"}]});
    assert_eq!(
        message(&agent),
        json!({"kind": "message", "messageId": "r1", "taskId": "msg_1", "contextId": "thr_1",
               "role": "agent", "parts": [{"kind": "text", "text": "done"}]})
    );
}

#[test]
fn a_task_and_each_stream_event_take_their_kind() {
    let status_v1 = json!({"state": "TASK_STATE_COMPLETED", "timestamp": "t",
        "message": {"messageId": "r1", "role": "ROLE_AGENT", "parts": [{"text": "done"}]}});
    let artifact_v1 = json!({"artifactId": "a1", "parts": [{"text": "done"}]});
    let task_v1 = json!({"id": "msg_1", "contextId": "thr_1", "status": status_v1,
                         "artifacts": [artifact_v1]});
    let task_v03 = task(&task_v1);
    assert_eq!(task_v03["kind"], "task");
    assert_eq!(task_v03["status"]["state"], "completed");
    assert_eq!(task_v03["status"]["message"]["role"], "agent");
    assert_eq!(task_v03["artifacts"][0]["parts"][0]["kind"], "text");
    assert_eq!(event(&json!({"task": task_v1})), task_v03);

    let update = |state: &str| {
        event(
            &json!({"statusUpdate": {"taskId": "msg_1", "contextId": "thr_1",
                                       "status": {"state": state, "timestamp": "t"}}}),
        )
    };
    let working = update("TASK_STATE_WORKING");
    assert_eq!(
        working,
        json!({"kind": "status-update", "taskId": "msg_1", "contextId": "thr_1",
               "status": {"state": "working", "timestamp": "t"}, "final": false})
    );
    assert_eq!(update("TASK_STATE_INPUT_REQUIRED")["final"], true);
    assert_eq!(update("TASK_STATE_CANCELED")["final"], true);
    let artifact_event = event(
        &json!({"artifactUpdate": {"taskId": "msg_1", "contextId": "thr_1",
        "artifact": artifact_v1, "lastChunk": true}}),
    );
    assert_eq!(artifact_event["kind"], "artifact-update");
    assert_eq!(artifact_event["lastChunk"], true);
    assert_eq!(artifact_event["artifact"]["parts"][0]["text"], "done");
}

#[test]
fn a_push_is_the_task_with_its_status() {
    let v1 = json!({"statusUpdate": {"taskId": "msg_1", "contextId": "thr_1",
                                     "status": {"state": "TASK_STATE_INPUT_REQUIRED",
                                                "timestamp": "t"}}});
    assert_eq!(
        push(&v1),
        json!({"kind": "task", "id": "msg_1", "contextId": "thr_1",
               "status": {"state": "input-required", "timestamp": "t"}})
    );
}
