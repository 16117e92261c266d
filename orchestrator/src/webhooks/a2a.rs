//! A thread's own endpoint registered by an A2A caller (a push notification config,
//! `http::a2a`): the same outbox, fan-out, retries and Standard Webhooks signature as any
//! thread callback, but the body is what A2A receivers read, a `StreamResponse` holding the
//! task's status update, and the caller's token comes back as `X-A2A-Notification-Token`.
//!
//! Such an endpoint is told apart by its stored secret: `a2a:` + the signing key, where the key
//! is the caller's token (`whsec_` + base64 of its bytes, so the receiver can check the
//! signature with the token it chose) behind `a2a:token:`, or a random one when the caller gave
//! no token. An endpoint registered in A2A v0.3 is `a2a03:` (`a2a03:token:`), and its body is
//! what v0.3 pushes: the task, with its status (`api::a2a::v03::push`). Nothing else about the
//! thread's callback changes. No IO here.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;

use super::Signer;
use crate::api::a2a::{agent_text, status_update, TaskState};

/// Before the signing key of an A2A endpoint's stored secret.
const PREFIX: &str = "a2a:";
/// Before the signing key when it is the caller's token.
const TOKEN_PREFIX: &str = "a2a:token:";
/// The same, for an endpoint registered in A2A v0.3.
const PREFIX_V03: &str = "a2a03:";
const TOKEN_PREFIX_V03: &str = "a2a03:token:";

/// The webhook types an A2A endpoint is sent: those that change a task's state.
pub(super) const KINDS: [&str; 3] = ["turn.finished", "turn.failed", "permission.requested"];

/// How an A2A endpoint is answered, read back from its stored secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Push {
    /// `X-A2A-Notification-Token`: the caller's token, when it gave one.
    pub token: Option<String>,
    /// Registered in A2A v0.3: sent v0.3's body.
    pub v03: bool,
}

/// The secret to store for an A2A endpoint with the caller's `token` (at least 16 bytes: it is
/// the signing key too); without one, a random key. `v03`: registered in A2A v0.3.
pub fn callback_secret(token: Option<&str>, v03: bool) -> Result<String, String> {
    let (prefix, token_prefix) = match v03 {
        true => (PREFIX_V03, TOKEN_PREFIX_V03),
        false => (PREFIX, TOKEN_PREFIX),
    };
    match token {
        Some(token) if token.len() < 16 => {
            Err("the token is the signing key too: at least 16 characters".into())
        }
        Some(token) => Ok(format!("{token_prefix}whsec_{}", STANDARD.encode(token))),
        None => Ok(format!("{prefix}{}", Signer::generate_secret())),
    }
}

/// The A2A endpoint a stored secret describes and its signing secret (`whsec_…`); `None` for
/// a thread callback of `/api`'s kind.
pub(super) fn parse(secret: &str) -> Option<(Push, &str)> {
    let (rest, v03) = match secret.strip_prefix(PREFIX_V03) {
        Some(rest) => (rest, true),
        None => (secret.strip_prefix(PREFIX)?, false),
    };
    if let Some(key) = rest.strip_prefix("token:") {
        let bytes = STANDARD.decode(key.strip_prefix("whsec_")?).ok()?;
        let token = String::from_utf8(bytes).ok()?;
        return Some((
            Push {
                token: Some(token),
                v03,
            },
            key,
        ));
    }
    Some((Push { token: None, v03 }, rest))
}

/// The body of a delivery of `kind` with payload `data` to an A2A endpoint: the task's status
/// update. `task`: the user message the event is about (`data.messageId`, or for a permission
/// the message it was asked in); `None` when there is nothing to send.
pub(super) fn body(kind: &str, data: &Value, task: Option<&str>, timestamp: &str) -> Option<Value> {
    let task = task?;
    let context = data["threadId"].as_str()?;
    let (state, text) = match kind {
        "turn.finished" => (TaskState::Completed, None),
        "turn.failed" => {
            let state = match data["status"].as_str() {
                Some("interrupted") => TaskState::Canceled,
                Some("refused") => TaskState::Rejected,
                _ => TaskState::Failed,
            };
            (state, None)
        }
        "permission.requested" => {
            let tool = data["toolName"].as_str().unwrap_or("a tool");
            let text = format!("{tool} asks for permission; answer with allow or deny");
            (TaskState::InputRequired, Some(text))
        }
        _ => return None,
    };
    let message = text.map(|text| {
        let id = format!("{task}-{}", data["requestId"].as_str().unwrap_or("status"));
        agent_text(&id, task, context, &text)
    });
    Some(status_update(task, context, state, timestamp, message))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_token_is_the_key_and_comes_back() {
        for v03 in [false, true] {
            let secret = callback_secret(Some("a-token-of-sixteen+"), v03).unwrap();
            let (push, key) = parse(&secret).unwrap();
            assert_eq!(push.token.as_deref(), Some("a-token-of-sixteen+"));
            assert_eq!(push.v03, v03);
            assert!(Signer::new([key]).is_ok());
            let random = callback_secret(None, v03).unwrap();
            let (push, key) = parse(&random).unwrap();
            assert_eq!((push.token, push.v03), (None, v03));
            assert!(Signer::new([key]).is_ok());
            assert!(callback_secret(Some("short"), v03).is_err());
        }
        assert_eq!(parse(&Signer::generate_secret()), None, "an /api callback");
    }

    #[test]
    fn each_kind_becomes_its_state() {
        let data =
            |status: &str| json!({"threadId": "thr_1", "messageId": "msg_1", "status": status});
        let state = |kind: &str, data: Value| {
            body(kind, &data, Some("msg_1"), "t").unwrap()["statusUpdate"]["status"]["state"]
                .clone()
        };
        assert_eq!(state("turn.finished", data("done")), "TASK_STATE_COMPLETED");
        assert_eq!(state("turn.failed", data("error")), "TASK_STATE_FAILED");
        assert_eq!(
            state("turn.failed", data("interrupted")),
            "TASK_STATE_CANCELED"
        );
        assert_eq!(state("turn.failed", data("refused")), "TASK_STATE_REJECTED");
        let asked = json!({"threadId": "thr_1", "requestId": "r1", "toolName": "Bash"});
        let update = body("permission.requested", &asked, Some("msg_1"), "t").unwrap();
        assert_eq!(
            update["statusUpdate"]["status"]["state"],
            "TASK_STATE_INPUT_REQUIRED"
        );
        assert!(
            update["statusUpdate"]["status"]["message"]["parts"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("Bash")
        );
        assert_eq!(
            body("schedule.run_started", &data("done"), Some("m"), "t"),
            None
        );
        assert_eq!(body("turn.finished", &data("done"), None, "t"), None);
    }
}
