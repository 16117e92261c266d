//! The mapping as values: a turn in each state as a task, requests read, the card.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::*;
use crate::store::{MessageId, MessageRow, MessageStatus};
use plugin_contract::ThreadId;

fn at() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn view(state: TurnState) -> TurnView {
    TurnView {
        thread: ThreadId::from_string("thr_1"),
        message: MessageId::from_string("msg_1"),
        client_message_id: Some("a2a-1".into()),
        created_at: at(),
        updated_at: at(),
        state,
    }
}

fn reply(text: &str, structured: Option<Value>) -> Box<MessageRow> {
    Box::new(MessageRow {
        structured_output: structured,
        ..crate::store::tests::reply_row(text, at())
    })
}

fn permission(request: &str) -> crate::api::Permission {
    crate::api::Permission {
        request_id: request.into(),
        thread_id: ThreadId::from_string("thr_1"),
        message_id: Some(MessageId::from_string("msg_1")),
        tool_use_id: None,
        tool_name: "Bash".into(),
        input: json!({"command": "touch x"}),
        status: "pending".into(),
        decided_by: None,
        answered_by: None,
        reason: None,
        created_at: at(),
        decided_at: None,
    }
}

#[test]
fn each_turn_state_is_its_task_state() {
    let failed = |status| TurnState::Failed {
        status,
        error: "no".into(),
    };
    for (state, expected) in [
        (TurnState::Working, "TASK_STATE_WORKING"),
        (
            TurnState::AwaitingApproval(vec![permission("r1")]),
            "TASK_STATE_INPUT_REQUIRED",
        ),
        (
            TurnState::Replied(reply("hi", None)),
            "TASK_STATE_COMPLETED",
        ),
        (failed(MessageStatus::Error), "TASK_STATE_FAILED"),
        (failed(MessageStatus::Refused), "TASK_STATE_REJECTED"),
        (
            TurnState::Stopped {
                error: "interrupted".into(),
            },
            "TASK_STATE_CANCELED",
        ),
    ] {
        let task = task(&view(state));
        assert_eq!(task["status"]["state"], expected, "{task}");
        assert_eq!(task["id"], "msg_1");
        assert_eq!(task["contextId"], "thr_1");
        assert_eq!(task["status"]["timestamp"], "2026-01-01T00:00:00.000Z");
    }
}

#[test]
fn a_reply_is_the_artifact_and_the_status_message() {
    let done = view(TurnState::Replied(reply(
        "the answer",
        Some(json!({"n": 1})),
    )));
    let task = task(&done);
    assert_eq!(task["artifacts"][0]["artifactId"], "msg_2");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "the answer");
    assert_eq!(task["artifacts"][0]["parts"][1]["data"], json!({"n": 1}));
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "the answer");
    let artifact = artifact_update(&done).unwrap();
    assert_eq!(artifact["artifactUpdate"]["taskId"], "msg_1");
    assert_eq!(artifact["artifactUpdate"]["lastChunk"], true);
    assert_eq!(artifact_update(&view(TurnState::Working)), None);
    assert!(task_without_artifacts(&view(TurnState::Working)));
}

fn task_without_artifacts(view: &TurnView) -> bool {
    task(view).get("artifacts").is_none()
}

#[test]
fn input_required_names_each_permission_and_how_to_answer() {
    let waiting = view(TurnState::AwaitingApproval(vec![
        permission("r1"),
        permission("r2"),
    ]));
    let status = &task(&waiting)["status"];
    let text = status["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(text.contains("Bash asks to run"), "{text}");
    assert!(text.contains("allow or deny"), "{text}");
    let listed = &status["message"]["parts"][1]["data"]["permissions"];
    assert_eq!(listed[0]["requestId"], "r1");
    assert_eq!(listed[1]["requestId"], "r2");
    assert_eq!(
        stage(&waiting),
        (TaskState::InputRequired, vec!["r1".into(), "r2".into()])
    );
    let update = update(&waiting);
    assert_eq!(
        update["statusUpdate"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    assert_eq!(update["statusUpdate"]["taskId"], "msg_1");
}

#[test]
fn a_send_is_read_with_its_text_context_and_configuration() {
    let params = json!({
        "message": {
            "messageId": "m-1",
            "contextId": "thr_1",
            "role": "ROLE_USER",
            "parts": [{"text": "hello"}, {"data": {"k": 1}}],
        },
        "configuration": {
            "returnImmediately": true,
            "taskPushNotificationConfig": {"url": "https://example.com/h", "token": "t"},
        },
        "metadata": {"skill": "lean"},
    });
    let send = send(&params).unwrap();
    assert_eq!(send.message_id, "m-1");
    assert_eq!(send.context.as_deref(), Some("thr_1"));
    assert_eq!(send.task, None);
    assert_eq!(send.text, "hello\n\n{\"k\":1}");
    assert!(send.return_immediately);
    assert_eq!(
        send.push,
        Some(Push {
            url: "https://example.com/h".into(),
            token: Some("t".into())
        })
    );
    assert_eq!(send.skill.as_deref(), Some("lean"));
    assert_eq!(send.decision, None);
}

#[track_caller]
fn refused(params: Value, code: i64) {
    let err = send(&params).unwrap_err();
    assert_eq!(err.code, code, "{err:?}");
}

#[test]
fn a_bad_send_is_refused_with_its_code() {
    let message = |parts: Value| json!({"message": {"messageId": "m", "parts": parts}});
    refused(json!({}), RpcError::INVALID_PARAMS);
    refused(message(json!([])), RpcError::INVALID_PARAMS);
    refused(message(json!([{"text": "  "}])), RpcError::INVALID_PARAMS);
    refused(
        json!({"message": {"parts": [{"text": "hi"}]}}),
        RpcError::INVALID_PARAMS,
    );
    refused(
        message(json!([{"url": "https://example.com/a.png", "mediaType": "image/png"}])),
        RpcError::CONTENT_TYPE_NOT_SUPPORTED,
    );
}

#[test]
fn an_answer_is_a_word_or_a_data_part() {
    let text = |t: &str| decision(&json!({"text": t})).map(|d| d.allow);
    assert_eq!(text("allow"), Some(true));
    assert_eq!(text(" Deny\n"), Some(false));
    assert_eq!(text("allow it, please"), None);
    let data = decision(&json!({"data": {"decision": "deny", "requestId": "r2", "reason": "no"}}))
        .unwrap();
    assert_eq!(
        data,
        Decision {
            allow: false,
            request_id: Some("r2".into()),
            reason: Some("no".into()),
            always: false,
        }
    );
    let always = |data: Value| decision(&json!({"data": data})).unwrap().always;
    assert!(always(json!({"decision": "allow", "always": true})));
    assert!(!always(json!({"decision": "deny", "always": true})));
    assert!(!always(json!({"decision": "allow"})));
    assert_eq!(decision(&json!({"data": {"decision": "maybe"}})), None);
    let params = json!({"message": {"messageId": "m", "taskId": "msg_1",
        "parts": [{"data": {"decision": "allow"}}]}});
    let send = send(&params).unwrap();
    assert_eq!(send.task.as_deref(), Some("msg_1"));
    assert!(send.decision.unwrap().allow);
}

#[test]
fn requests_and_answers_are_json_rpc() {
    let ok = request(br#"{"jsonrpc":"2.0","id":"7","method":"GetTask","params":{"id":"msg_1"}}"#)
        .unwrap();
    assert_eq!(ok.id, json!("7"));
    assert_eq!(Method::parse(&ok.method), Some(Method::GetTask));
    assert_eq!(task_id(&ok.params, "id").unwrap(), "msg_1");
    assert_eq!(Method::parse("message/send"), None);
    let (_, err) = request(b"{").unwrap_err();
    assert_eq!(err.code, RpcError::PARSE);
    let (id, err) = request(br#"{"jsonrpc":"2.0","id":3}"#).unwrap_err();
    assert_eq!((id, err.code), (json!(3), RpcError::INVALID_REQUEST));
    let mut err = RpcError::task_not_found("msg_9");
    err.reason = Some("not_found");
    let answer = failure(&json!(3), &err);
    assert_eq!(answer["error"]["code"], -32001);
    assert_eq!(answer["error"]["data"][0]["reason"], "not_found");
    assert_eq!(success(&json!(3), json!({}))["result"], json!({}));
}

#[test]
fn a_result_names_its_context() {
    let of = |result: Value| context_of(&result).map(|t| t.as_str().to_owned());
    assert_eq!(
        of(json!({"task": {"id": "msg_1", "contextId": "thr_1"}})).as_deref(),
        Some("thr_1")
    );
    assert_eq!(
        of(json!({"id": "msg_1", "contextId": "thr_2"})).as_deref(),
        Some("thr_2")
    );
    assert_eq!(
        of(json!({"id": "thr_3", "taskId": "msg_1", "url": "u"})).as_deref(),
        Some("thr_3")
    );
    assert_eq!(of(json!({"configs": []})), None);
}

#[test]
fn the_card_offers_json_rpc_bearer_streaming_and_push() {
    let card = card("http://h/a2a", None);
    assert_eq!(card["supportedInterfaces"][0]["url"], "http://h/a2a");
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["pushNotifications"], true);
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(card["skills"].as_array().unwrap().len(), 1);
}
