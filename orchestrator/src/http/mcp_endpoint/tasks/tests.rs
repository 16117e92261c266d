//! A turn's task as the extension's `DetailedTask`, read from each state a turn can be in, and a
//! person's answer read from an elicitation result.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use plugin_contract::{async_trait, Plugin, ThreadId, Tool, ToolContext, ToolOutput, ToolSpec};

use super::*;
use crate::store::{MessageRow, MessageStatus};

/// The `threads` plugin with `send`'s spec alone: a registry that checks inputs and answers.
struct SpecOnly;

#[async_trait]
impl Tool for SpecOnly {
    fn spec(&self) -> ToolSpec {
        threads::send_spec()
    }
    async fn call(
        &self,
        _ctx: ToolContext,
        _input: Value,
    ) -> Result<ToolOutput, plugin_contract::ToolError> {
        unreachable!("a task's registry only checks and answers")
    }
}

struct Threads;

impl Plugin for Threads {
    fn name(&self) -> &str {
        "threads"
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(SpecOnly)]
    }
}

fn registry() -> ToolRegistry {
    let plugins: Vec<Arc<dyn Plugin>> = vec![Arc::new(Threads)];
    ToolRegistry::load(&plugins, std::time::Duration::from_secs(5)).expect("the spec compiles")
}

fn view(state: TurnState) -> TurnView {
    let at = Utc.with_ymd_and_hms(2026, 12, 6, 7, 0, 0).unwrap();
    TurnView {
        thread: ThreadId::from_string("thr_1".to_owned()),
        message: MessageId::from_string("msg_1".to_owned()),
        client_message_id: Some("c1".into()),
        created_at: at,
        updated_at: at + chrono::Duration::seconds(3),
        state,
    }
}

fn shown(state: TurnState) -> Value {
    serde_json::to_value(detailed(&view(state), &registry())).unwrap()
}

fn reply(text: &str) -> MessageRow {
    let at = Utc.with_ymd_and_hms(2026, 12, 6, 7, 0, 3).unwrap();
    crate::store::tests::reply_row(text, at)
}

fn permission(request_id: &str, tool: &str) -> api::Permission {
    api::Permission {
        request_id: request_id.into(),
        thread_id: ThreadId::from_string("thr_1".to_owned()),
        message_id: Some(MessageId::from_string("msg_1".to_owned())),
        tool_use_id: Some("toolu_1".into()),
        tool_name: tool.into(),
        input: json!({"command": "ls"}),
        status: "pending".into(),
        decided_by: None,
        answered_by: None,
        reason: None,
        created_at: Utc.with_ymd_and_hms(2026, 12, 6, 7, 0, 2).unwrap(),
        decided_at: None,
    }
}

#[test]
fn a_running_turn_is_a_working_task_with_its_times() {
    let task = shown(TurnState::Working);
    assert_eq!(task["taskId"], "msg_1");
    assert_eq!(task["status"], "working");
    assert_eq!(task["createdAt"], "2026-12-06T07:00:00+00:00");
    assert_eq!(task["lastUpdatedAt"], "2026-12-06T07:00:03+00:00");
    assert_eq!(task["pollIntervalMs"], POLL_INTERVAL_MS);
    assert_eq!(task["ttlMs"], Value::Null, "kept as long as its thread");
    assert!(task.get("result").is_none() && task.get("inputRequests").is_none());
}

#[test]
fn a_pending_permission_is_an_elicitation_keyed_by_its_request() {
    let pending = vec![permission("req-7", "Bash")];
    let task = shown(TurnState::AwaitingApproval(pending));
    assert_eq!(task["status"], "input_required");
    let asked = &task["inputRequests"]["req-7"];
    assert_eq!(asked["method"], "elicitation/create", "{task}");
    assert_eq!(asked["params"]["mode"], "form");
    let message = asked["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("Bash") && message.contains("ls"),
        "{message}"
    );
    let schema = &asked["params"]["requestedSchema"];
    assert_eq!(schema["properties"]["allow"]["type"], "boolean");
    assert!(task["statusMessage"].as_str().unwrap().contains("Bash"));
}

#[test]
fn a_reply_completes_the_task_with_the_result_a_send_answers() {
    let task = shown(TurnState::Replied(Box::new(reply("Hello."))));
    assert_eq!(task["status"], "completed");
    let result = &task["result"];
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(result["content"][0]["text"], "Hello.");
    let structured = &result["structuredContent"];
    assert_eq!(structured["status"], "done");
    assert_eq!(structured["reply"], "Hello.");
    assert_eq!(structured["threadId"], "thr_1");
    assert_eq!(structured["messageId"], "msg_1");
    assert_eq!(structured["replyMessageId"], "msg_2");
}

#[test]
fn a_failed_turn_completes_and_a_refused_one_is_a_tool_error() {
    let failed = shown(TurnState::Failed {
        status: MessageStatus::Error,
        error: "API down".into(),
    });
    assert_eq!(
        failed["status"], "completed",
        "not `failed`: no JSON-RPC error"
    );
    assert_eq!(failed["result"]["structuredContent"]["status"], "error");
    assert_eq!(failed["result"]["structuredContent"]["error"], "API down");
    let refused = shown(TurnState::Failed {
        status: MessageStatus::Refused,
        error: "budget reached".into(),
    });
    assert_eq!(refused["status"], "completed");
    assert_eq!(refused["result"]["isError"], true);
    let text = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("budget reached"), "{text}");
}

#[test]
fn a_stopped_turn_is_a_cancelled_task_saying_why() {
    let task = shown(TurnState::Stopped {
        error: "interrupted by a person".into(),
    });
    assert_eq!(task["status"], "cancelled");
    assert_eq!(task["statusMessage"], "interrupted by a person");
    assert!(task.get("result").is_none());
}

#[test]
fn an_elicitation_result_is_read_as_a_decision() {
    let caller = Caller::operator();
    let accept = answer_of(&json!({"action": "accept", "content": {}}), &caller);
    assert!(accept.allow);
    let allow = answer_of(
        &json!({"action": "accept", "content": {"allow": true}}),
        &caller,
    );
    assert!(allow.allow && !allow.always);
    let always = json!({"action": "accept", "content": {"allow": true, "always": true}});
    assert!(answer_of(&always, &caller).always);
    let never = json!({"action": "accept", "content": {"allow": false, "always": true}});
    assert!(
        !answer_of(&never, &caller).always,
        "always goes with an allow only"
    );
    let refused = json!({"action": "accept", "content": {"allow": false, "reason": "not now"}});
    let refused = answer_of(&refused, &caller);
    assert!(!refused.allow);
    assert_eq!(refused.message.as_deref(), Some("not now"));
    assert!(!answer_of(&json!({"action": "decline"}), &caller).allow);
    assert!(!answer_of(&json!({"action": "cancel"}), &caller).allow);
}

#[test]
fn only_a_send_that_declared_the_extension_becomes_a_task() {
    assert!(becomes_task("threads__send", true));
    assert!(!becomes_task("threads__send", false));
    assert!(!becomes_task("threads__get", true));
}

#[test]
fn a_listen_names_its_tasks() {
    let listen = json!({"params": {"notifications": {"taskIds": ["msg_1", "msg_2"]}}});
    assert_eq!(
        listened(&listen),
        Some(vec!["msg_1".to_owned(), "msg_2".to_owned()])
    );
    let other = json!({"params": {"notifications": {"toolsListChanged": true}}});
    assert_eq!(listened(&other), None);
}
