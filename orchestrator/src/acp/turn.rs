//! One `session/prompt`: the thread's event stream is opened first, then the message is posted
//! (`wait=false`), then the stream's events of that message's turn become `session/update`s,
//! permission requests become `session/request_permission`s, and the turn's end becomes the
//! stop reason. [`Watch`] decides what each event means, without IO.

use axum::http::Method;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::rpc::{Peer, RpcError, INTERNAL_ERROR};
use super::translate;
use crate::remote::{Daemon, ThreadEvent};

/// The parts a turn uses.
pub struct Turn<'a> {
    pub daemon: &'a Daemon,
    pub peer: &'a Peer,
    /// The ACP session, which is the thread id.
    pub session: &'a str,
    /// Ours, so our message is found on the stream and a cancel can name it.
    pub client_message_id: &'a str,
}

/// What one event means for the turn.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Not ours, or nothing to show.
    Skip,
    /// A `session/update` to send.
    Update(Value),
    /// A person is asked: the `permission_requested` data.
    Ask(Value),
    /// The turn ended: the stop reason, or the daemon's error.
    End(Result<&'static str, String>),
}

/// Where the turn of our message stands on the stream.
#[derive(Debug, Default)]
pub struct Watch {
    client_message_id: String,
    /// Our user message's id, once `message_received` named it.
    message_id: Option<String>,
    /// Between our `turn_started` and its end: the turn's events are ours.
    running: bool,
    /// Text came as deltas, so complete `assistant_text` blocks are not sent again.
    deltas_seen: bool,
}

impl Watch {
    pub fn new(client_message_id: &str) -> Watch {
        Watch {
            client_message_id: client_message_id.to_owned(),
            ..Watch::default()
        }
    }

    /// `message_id`: the frame's, the user message whose turn the event belongs to.
    pub fn step(&mut self, kind: &str, message_id: Option<&str>, data: &Value) -> Step {
        let ours = match message_id {
            Some(id) => self.message_id.as_deref() == Some(id),
            None => self.running,
        };
        match kind {
            "message_received" if data["clientMessageId"] == self.client_message_id.as_str() => {
                self.message_id = data["messageId"].as_str().map(str::to_owned);
                Step::Skip
            }
            "turn_started" => {
                self.running = ours;
                Step::Skip
            }
            "turn_finished" if ours => Step::End(Ok("end_turn")),
            "turn_failed" if ours => Step::End(failed(data)),
            "permission_requested" if ours => Step::Ask(data.clone()),
            _ if ours && self.running => {
                self.deltas_seen |= kind == "text_delta";
                translate::update_for(kind, data, self.deltas_seen).map_or(Step::Skip, Step::Update)
            }
            _ => Step::Skip,
        }
    }
}

/// A failed turn: `cancelled` when someone interrupted it, else the daemon's error.
fn failed(data: &Value) -> Result<&'static str, String> {
    let cause = data["cause"].as_str().unwrap_or("");
    if data["status"] == "interrupted" && matches!(cause, "interrupted" | "withdrawn") {
        return Ok("cancelled");
    }
    let error = data["error"].as_str().unwrap_or("the turn failed");
    Err(format!("the turn failed ({cause}): {error}"))
}

impl Turn<'_> {
    /// Runs the turn: its stop reason and the last event id seen.
    pub async fn run(
        &self,
        content: Value,
        options: Option<Value>,
        after: Option<&str>,
    ) -> Result<(&'static str, Option<String>), RpcError> {
        // Open before posting: the daemon has subscribed when this returns, and a stream from
        // `after` replays whatever happened in between anyway.
        let mut events = self.daemon.events(self.session, after).await?;
        let mut body = json!({"content": content, "clientMessageId": self.client_message_id});
        // The editor's mode and model, when it chose them.
        if let (Some(body), Some(Value::Object(options))) = (body.as_object_mut(), options) {
            body.extend(options);
        }
        let path = format!("/api/threads/{}/messages?wait=false", self.session);
        self.daemon.call(Method::POST, &path, Some(body)).await?;
        let mut watch = Watch::new(self.client_message_id);
        // Questions to the client run beside the stream, so a cancel or the turn's end is seen
        // while one waits; whatever is still asked when the turn ends is dropped with the set.
        let mut asking = JoinSet::new();
        let mut last = after.map(str::to_owned);
        while let Some(ThreadEvent {
            id,
            kind,
            message_id,
            data,
        }) = events.next().await
        {
            if !id.is_empty() {
                last = Some(id);
            }
            match watch.step(&kind, message_id.as_deref(), &data) {
                Step::Skip => {}
                Step::Update(update) => self.update(update),
                Step::Ask(request) => {
                    let (daemon, peer) = (self.daemon.clone(), self.peer.clone());
                    let session = self.session.to_owned();
                    asking.spawn(ask(daemon, peer, session, request));
                }
                Step::End(Ok(stop)) => return Ok((stop, last)),
                Step::End(Err(message)) => return Err(RpcError::new(INTERNAL_ERROR, message)),
            }
        }
        Err(RpcError::new(
            INTERNAL_ERROR,
            "the daemon's event stream ended before the turn did",
        ))
    }

    fn update(&self, update: Value) {
        self.peer.notify(
            "session/update",
            json!({"sessionId": self.session, "update": update}),
        );
    }
}

/// Asks the client about one `permission_requested` and gives the daemon its answer. "Allow
/// always" is the API's `always`: the narrowest rules naming the call are added to the thread.
async fn ask(daemon: Daemon, peer: Peer, session: String, request: Value) {
    let tool = request["toolName"].as_str().unwrap_or("tool");
    let tool_call_id = request["toolUseId"]
        .as_str()
        .or(request["requestId"].as_str())
        .unwrap_or_default();
    let params = json!({
        "sessionId": session,
        "toolCall": {
            "toolCallId": tool_call_id,
            "title": translate::tool_title(tool, &request["input"]),
            "kind": translate::tool_kind(tool),
            "status": "pending",
            "rawInput": request["input"],
        },
        "options": [
            {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
            {"optionId": "allow_always", "name": "Allow always", "kind": "allow_always"},
            {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
        ],
    });
    let answer = peer.request("session/request_permission", params).await;
    let chosen = answer
        .as_ref()
        .ok()
        .filter(|a| a["outcome"]["outcome"] == "selected")
        .and_then(|a| a["outcome"]["optionId"].as_str());
    let body = match chosen {
        Some("allow_once") => json!({"decision": "allow"}),
        Some("allow_always") => json!({"decision": "allow", "always": true}),
        _ => json!({"decision": "deny", "message": "The user rejected this in the editor."}),
    };
    let request_id = request["requestId"].as_str().unwrap_or_default();
    let path = format!("/api/threads/{session}/permissions/{request_id}");
    // A 409 means it was decided meanwhile (an interrupt, the timeout): nothing to do.
    if let Err(err) = daemon.call(Method::POST, &path, Some(body)).await {
        tracing::warn!(thread_id = %session, request_id, error = %err.chain(), "ACP: answering a permission failed.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_turn_is_followed_to_its_end() {
        let mut watch = Watch::new("c1");
        let (other, mine) = (Some("m0"), Some("m1"));
        assert_eq!(watch.step("turn_started", other, &json!({})), Step::Skip);
        let delta = json!({"text": "not ours"});
        assert_eq!(watch.step("text_delta", other, &delta), Step::Skip);
        assert_eq!(watch.step("turn_finished", other, &json!({})), Step::Skip);
        let received = json!({"messageId": "m1", "clientMessageId": "c1"});
        assert_eq!(watch.step("message_received", mine, &received), Step::Skip);
        assert_eq!(watch.step("turn_started", mine, &json!({})), Step::Skip);
        assert_eq!(
            watch.step("text_delta", mine, &json!({"text": "hi"})),
            Step::Update(translate::chunk("agent_message_chunk", "hi"))
        );
        let text = json!({"text": "hi"});
        assert_eq!(watch.step("assistant_text", mine, &text), Step::Skip);
        let asked = json!({"requestId": "r", "toolName": "Bash", "input": {}});
        assert_eq!(
            watch.step("permission_requested", mine, &asked),
            Step::Ask(asked.clone())
        );
        assert_eq!(
            watch.step("turn_finished", mine, &json!({})),
            Step::End(Ok("end_turn"))
        );
    }

    #[test]
    fn failed_turns_are_cancelled_or_errors() {
        let cancelled = json!({"status": "interrupted", "cause": "interrupted", "error": "x"});
        assert_eq!(failed(&cancelled), Ok("cancelled"));
        let crashed = json!({"status": "error", "cause": "error", "error": "API down"});
        assert_eq!(
            failed(&crashed),
            Err("the turn failed (error): API down".into())
        );
    }
}
