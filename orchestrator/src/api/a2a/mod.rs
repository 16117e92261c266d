//! The words of the Agent2Agent protocol (A2A v1.0, its JSON form) that more than one door
//! speaks: a task's states, and the status update both the JSON-RPC stream (`http::a2a`) and
//! a push notification (`crate::webhooks`) carry. No IO; the mapping of a turn onto a whole
//! task is `http::a2a::wire`'s.
//!
//! A2A v1.0 writes its enums as protobuf's JSON does: `TASK_STATE_WORKING`, `ROLE_AGENT`.
//! [`v03`] writes the same in A2A v0.3's JSON, for callers that still speak it.

use serde_json::{json, Value};

pub mod v03;

/// A task's state, as A2A names it. Harness uses the ones a turn can be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// Queued or running.
    Working,
    /// Waiting for a person to answer a permission (approvals mode `ask`).
    InputRequired,
    /// Ended with a reply.
    Completed,
    /// Ended without a reply.
    Failed,
    /// A budget refused the message before the model saw it.
    Rejected,
    /// Interrupted, withdrawn, or cut by a restart.
    Canceled,
}

impl TaskState {
    /// The name A2A's JSON gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
        }
    }

    /// Whether a stream of the task ends here: a final state, or one that waits for the caller.
    pub fn ends_stream(self) -> bool {
        self != TaskState::Working
    }
}

/// An agent's message of one text part, `id` its message id.
pub fn agent_text(id: &str, task: &str, context: &str, text: &str) -> Value {
    json!({
        "messageId": id,
        "taskId": task,
        "contextId": context,
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
    })
}

/// A `StreamResponse` holding a status update: `task` (the user message's id) of `context`
/// (its thread) is in `state` since `timestamp` (RFC 3339), with the agent's `message` if any.
pub fn status_update(
    task: &str,
    context: &str,
    state: TaskState,
    timestamp: &str,
    message: Option<Value>,
) -> Value {
    let mut status = json!({"state": state.as_str(), "timestamp": timestamp});
    if let Some(message) = message {
        status["message"] = message;
    }
    json!({"statusUpdate": {"taskId": task, "contextId": context, "status": status}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_update_names_the_task_its_context_and_state() {
        let update = status_update(
            "msg_1",
            "thr_1",
            TaskState::InputRequired,
            "2026-01-01T00:00:00Z",
            Some(agent_text("m", "msg_1", "thr_1", "May Bash run?")),
        );
        assert_eq!(update["statusUpdate"]["taskId"], "msg_1");
        assert_eq!(update["statusUpdate"]["contextId"], "thr_1");
        assert_eq!(
            update["statusUpdate"]["status"]["state"],
            "TASK_STATE_INPUT_REQUIRED"
        );
        assert_eq!(
            update["statusUpdate"]["status"]["message"]["parts"][0]["text"],
            "May Bash run?"
        );
        assert!(TaskState::InputRequired.ends_stream());
        assert!(!TaskState::Working.ends_stream());
    }
}
