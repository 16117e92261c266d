//! A session's events read in order, with what one row cannot tell by itself: an
//! `agent.message` whose text came in pieces first is named after its first piece, so the
//! previews a stream shows of it (`event_deltas[]=agent.message`: an `event_start`, then an
//! `event_delta` per piece) name the message that completes them, in the stream and in the list
//! alike. Everything else is [`project`]'s.
//!
//! A block streamed in pieces is `text_delta` rows, then its `assistant_text` row: its
//! `agent.message` is `sevt_{first piece's row}_0` (a `text_delta` row has no event of its own,
//! so the id is free). Without pieces (the lean profile) it keeps its own row's id. The end of a
//! turn drops a preview its text never completed.
//!
//! It also knows which rows belong to a goal's turn ([`super::project::Lens::goal_turn`]): the
//! messages it starts with (from the store, for what came before the first row read) and
//! those whose `message_received` it reads.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::{json, Value};

use super::project::{project, Lens};
use super::wire::SessionEvent;
use crate::goals::GOAL_TURN_PREFIX;
use crate::store::{EventRow, MessageId};

/// The session's events, read in the order they were stored.
#[derive(Debug, Default)]
pub struct Reader {
    /// The row of the first piece of the text block being streamed.
    preview: Option<i64>,
    /// The messages that started a goal's turn.
    goal_turns: HashSet<MessageId>,
}

/// One frame of a stream: an event, or a preview of one.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Frame {
    Event(SessionEvent),
    /// `event_start` or `event_delta`, as the SDKs' accumulators read them.
    Preview(Value),
}

impl Frame {
    /// Its `type`: the SSE event name.
    pub fn kind(&self) -> &str {
        match self {
            Frame::Event(event) => super::wire::event_type(&event.body),
            Frame::Preview(value) => value["type"].as_str().unwrap_or("event_delta"),
        }
    }
}

impl Reader {
    /// A reader that knows `goal_turns` started goals' turns.
    pub fn new(goal_turns: impl IntoIterator<Item = MessageId>) -> Reader {
        Reader {
            preview: None,
            goal_turns: goal_turns.into_iter().collect(),
        }
    }

    /// The events of `row`, the next stored one.
    pub fn events(&mut self, row: &EventRow, asks: &dyn Fn(&str) -> bool) -> Vec<SessionEvent> {
        let starts_goal_turn = row.kind == "message_received"
            && row.data["clientMessageId"]
                .as_str()
                .is_some_and(|id| id.starts_with(GOAL_TURN_PREFIX));
        if let (true, Some(message)) = (starts_goal_turn, &row.message_id) {
            self.goal_turns.insert(message.clone());
        }
        let goal_turn = (row.message_id.as_ref()).is_some_and(|m| self.goal_turns.contains(m));
        let mut events = project(row, Lens { asks, goal_turn });
        match row.kind.as_str() {
            "text_delta" => {
                self.preview.get_or_insert(row.id);
            }
            "assistant_text" => {
                if let (Some(first), Some(event)) = (self.preview.take(), events.first_mut()) {
                    event.id = message_id(first);
                }
            }
            "turn_finished" | "turn_failed" => self.preview = None,
            _ => {}
        }
        events
    }

    /// The frames of `row`: its events, and with `previews` the previews of a text block
    /// streamed in pieces.
    pub fn frames(
        &mut self,
        row: &EventRow,
        asks: &dyn Fn(&str) -> bool,
        previews: bool,
    ) -> Vec<Frame> {
        let started = self.preview.is_some();
        let events = self.events(row, asks);
        let mut frames = Vec::new();
        if previews && row.kind == "text_delta" {
            let id = message_id(self.preview.unwrap_or(row.id));
            if !started {
                frames.push(Frame::Preview(json!({
                    "type": "event_start",
                    "event": {"type": "agent.message", "id": id},
                })));
            }
            let text = row.data["text"].as_str().unwrap_or_default();
            frames.push(Frame::Preview(json!({
                "type": "event_delta",
                "event_id": id,
                "delta": {"type": "content_delta", "index": 0, "content": {"type": "text", "text": text}},
            })));
        }
        frames.extend(events.into_iter().map(Frame::Event));
        frames
    }
}

/// The id of an `agent.message` whose first piece is the row `first`.
fn message_id(first: i64) -> String {
    format!("sevt_{first}_0")
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use plugin_contract::ThreadId;

    use super::*;

    fn row(id: i64, kind: &str, data: Value) -> EventRow {
        EventRow {
            id,
            thread_id: ThreadId::from_string("thr_1"),
            message_id: None,
            kind: kind.into(),
            data,
            created_at: Utc::now(),
        }
    }

    fn read(rows: &[EventRow], previews: bool) -> Vec<Value> {
        let mut reader = Reader::default();
        let never = |_: &str| false;
        rows.iter()
            .flat_map(|r| reader.frames(r, &never, previews))
            .map(|f| serde_json::to_value(&f).unwrap())
            .collect()
    }

    #[test]
    fn pieces_preview_the_message_they_make_under_its_id() {
        let rows = [
            row(4, "text_delta", json!({"text": "Hel"})),
            row(5, "text_delta", json!({"text": "lo"})),
            row(6, "assistant_text", json!({"text": "Hello"})),
        ];
        let frames = read(&rows, true);
        let kinds: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["event_start", "event_delta", "event_delta", "agent.message"]
        );
        assert_eq!(
            frames[0]["event"],
            json!({"type": "agent.message", "id": "sevt_4_0"})
        );
        assert_eq!(frames[1]["event_id"], "sevt_4_0");
        assert_eq!(frames[2]["delta"]["content"]["text"], "lo");
        assert_eq!(frames[3]["id"], "sevt_4_0");
        // Without previews, the same message under the same id: the list's.
        let listed = read(&rows, false);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["id"], "sevt_4_0");
    }

    /// A turn's frames in the order the API documents: running, the model request's start, the
    /// message's previews and the message, the request's end, idle.
    #[test]
    fn a_model_requests_span_holds_the_previews_and_the_message() {
        let request = json!({"requestId": "mreq_1", "model": "m"});
        let finished = json!({"requestId": "mreq_1", "model": "m", "status": 200, "isError": false,
            "inputTokens": 1, "outputTokens": 2, "cacheReadTokens": 0, "cacheWriteTokens": 0, "durationMs": 5});
        let rows = [
            row(
                2,
                "turn_started",
                json!({"messageId": "msg_1", "origin": "user"}),
            ),
            row(3, "model_request_started", request),
            row(4, "text_delta", json!({"text": "Hel"})),
            row(5, "text_delta", json!({"text": "lo"})),
            row(6, "assistant_text", json!({"text": "Hello"})),
            row(7, "model_request_finished", finished),
            row(
                8,
                "turn_finished",
                json!({"messageId": "msg_1", "reply": {}}),
            ),
        ];
        let frames = read(&rows, true);
        let kinds: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "session.status_running",
                "span.model_request_start",
                "event_start",
                "event_delta",
                "event_delta",
                "agent.message",
                "span.model_request_end",
                "session.status_idle"
            ]
        );
        assert_eq!(frames[1]["id"], "sevt_mreq_1");
        assert_eq!(frames[5]["id"], "sevt_4_0");
        assert_eq!(frames[6]["model_request_start_id"], "sevt_mreq_1");
    }

    #[test]
    fn a_custom_tools_result_is_the_clients_answer_alone() {
        let started = json!({"tool_use_id": "toolu_1", "name": "mcp__custom__w", "input": {}});
        let answered = json!({"toolUseId": "toolu_1", "name": "mcp__custom__w",
            "state": "answered", "content": [{"type": "text", "text": "42"}], "isError": false});
        let finished = |id: &str, name: &str| json!({"tool_use_id": id, "name": name, "is_error": false, "content": "42"});
        let rows = [
            row(1, "tool_call_started", started),
            row(2, "client_tool_call", answered),
            row(
                3,
                "tool_call_finished",
                finished("toolu_1", "mcp__custom__w"),
            ),
            // Another tool's result is shown as ever.
            row(4, "tool_call_finished", finished("toolu_2", "Bash")),
        ];
        let kinds: Vec<String> = read(&rows, false)
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            kinds,
            [
                "agent.custom_tool_use",
                "user.custom_tool_result",
                "session.status_running",
                "agent.tool_result"
            ]
        );
    }

    #[test]
    fn an_mcp_tools_result_is_an_mcp_tool_result_naming_its_use() {
        let started = |id: &str, name: &str| json!({"tool_use_id": id, "name": name, "input": {}});
        let finished = |id: &str, name: Option<&str>| json!({"tool_use_id": id, "name": name, "is_error": false, "content": "12:00"});
        let rows = [
            row(1, "tool_call_started", started("toolu_1", "mcp__peer__now")),
            row(
                2,
                "tool_call_finished",
                finished("toolu_1", Some("mcp__peer__now")),
            ),
            row(3, "tool_call_started", started("toolu_2", "Bash")),
            row(4, "tool_call_finished", finished("toolu_2", Some("Bash"))),
            // A result whose use was not read (the read started between them) is told by its
            // own name; one stored without a name is a plain tool_result.
            row(
                5,
                "tool_call_finished",
                finished("toolu_3", Some("mcp__peer__now")),
            ),
            row(6, "tool_call_finished", finished("toolu_4", None)),
        ];
        let events = read(&rows, false);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "agent.mcp_tool_use",
                "agent.mcp_tool_result",
                "agent.tool_use",
                "agent.tool_result",
                "agent.mcp_tool_result",
                "agent.tool_result"
            ]
        );
        assert_eq!(events[0]["id"], "sevt_tu_toolu_1");
        assert_eq!(events[1]["id"], "sevt_tr_toolu_1");
        assert_eq!(events[1]["mcp_tool_use_id"], "sevt_tu_toolu_1");
        assert_eq!(events[1]["is_error"], false);
        assert_eq!(events[1]["content"][0]["text"], "12:00");
    }

    #[test]
    fn a_message_without_pieces_keeps_its_rows_id_and_a_turns_end_drops_a_preview() {
        let rows = [
            row(4, "text_delta", json!({"text": "cut"})),
            row(
                5,
                "turn_failed",
                json!({"cause": "interrupted", "error": "x", "status": "interrupted", "messageId": "msg_1"}),
            ),
            row(6, "assistant_text", json!({"text": "Whole"})),
        ];
        let listed = read(&rows, false);
        let message = listed
            .iter()
            .find(|e| e["type"] == "agent.message")
            .unwrap();
        assert_eq!(message["id"], "sevt_6_0");
    }

    #[test]
    fn a_reader_knows_a_goals_turns_from_the_start_and_from_what_it_reads() {
        let of = |id: i64, kind: &str, message: &str, data: Value| EventRow {
            message_id: Some(MessageId::from_string(message)),
            ..row(id, kind, data)
        };
        let never = |_: &str| false;
        // msg_1's turn began before the reader's first row; msg_2's message is read.
        let mut reader = Reader::new([MessageId::from_string("msg_1")]);
        let rows = [
            of(1, "turn_finished", "msg_1", json!({"messageId": "msg_1"})),
            of(
                2,
                "message_received",
                "msg_2",
                json!({"messageId": "msg_2", "origin": "user", "content": "x", "clientMessageId": "goal:outc_1:1"}),
            ),
            of(3, "turn_finished", "msg_2", json!({"messageId": "msg_2"})),
            of(
                4,
                "message_received",
                "msg_3",
                json!({"messageId": "msg_3", "origin": "user", "content": "hi", "clientMessageId": "mine"}),
            ),
            of(5, "turn_finished", "msg_3", json!({"messageId": "msg_3"})),
        ];
        let types: Vec<&str> = rows
            .iter()
            .flat_map(|r| reader.events(r, &never))
            .map(|e| super::super::wire::event_type(&e.body))
            .collect();
        assert_eq!(types, ["user.message", "session.status_idle"]);
    }
}
