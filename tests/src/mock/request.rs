//! What the mock saw: one [`RecordedRequest`] per HTTP request, with helpers that read a Messages API body the way
//! tests ask questions about it ("what did the user say last?", "which tools were offered?"). No IO here.

use std::time::Instant;

use base64::Engine;
use serde_json::Value;

/// Text blocks the CLI injects into user messages on its own start with this; they are not what the user typed.
const SYSTEM_REMINDER: &str = "<system-reminder>";

/// One HTTP request as the mock received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// `GET`, `POST`, … Only `POST /v1/messages` is answered from the script.
    pub method: String,
    /// The URI path without the query (`/v1/messages`, `/v1/messages/count_tokens`).
    pub path: String,
    /// The raw query string, if any: the CLI sends `beta=true`.
    pub query: Option<String>,
    /// Header names are lower case (as `http` stores them); a value that is not UTF-8 is converted lossily.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Null` when empty, a JSON string holding the raw text when it is not JSON.
    pub body: Value,
    /// When the request arrived, so tests can reason about ordering and timing across CLI processes.
    pub at: Instant,
}

/// A `tool_result` block from the last user message, flattened for assertions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResultBlock {
    /// Ties the result to the `tool_use` block the mock sent (`toolu_mock_N`).
    pub tool_use_id: String,
    /// The CLI sets this for unknown tools, denied tools and tool failures.
    pub is_error: bool,
    /// The result's content as text: a string content as is, text blocks joined with `\n`.
    pub text: String,
}

/// An `image` or `document` block the CLI sent, its base64 decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaBlock {
    /// `image` or `document`.
    pub kind: String,
    pub media_type: String,
    pub data: Vec<u8>,
}

impl MediaBlock {
    fn from_block(block: &Value) -> Option<MediaBlock> {
        let kind = block.get("type").and_then(Value::as_str)?;
        if kind != "image" && kind != "document" {
            return None;
        }
        let source = block.get("source")?;
        let text = |name: &str| source.get(name).and_then(Value::as_str).unwrap_or_default();
        Some(MediaBlock {
            kind: kind.to_owned(),
            media_type: text("media_type").to_owned(),
            // Not base64 (a source of another kind): no bytes, which no assertion will match.
            data: base64::engine::general_purpose::STANDARD
                .decode(text("data"))
                .unwrap_or_default(),
        })
    }
}

impl RecordedRequest {
    /// The image and document blocks of the last user message, in order.
    pub fn last_user_media(&self) -> Vec<MediaBlock> {
        match self.last_user_message().and_then(|m| m.get("content")) {
            Some(Value::Array(blocks)) => {
                blocks.iter().filter_map(MediaBlock::from_block).collect()
            }
            _ => Vec::new(),
        }
    }

    /// `body.model`, as the CLI chose it (`--model` or its default).
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(Value::as_str)
    }

    /// `body.messages`; empty when the body has none (count_tokens, non-JSON bodies).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The value of the first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// Whether the client asked for an SSE stream (`"stream": true`).
    pub fn is_streaming(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// True for the requests the script answers: `POST /v1/messages` (any query).
    pub fn is_message_request(&self) -> bool {
        self.method == "POST" && self.path == "/v1/messages"
    }

    /// The last message whose role is `user`, if any.
    pub fn last_user_message(&self) -> Option<&Value> {
        self.messages()
            .iter()
            .rev()
            .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
    }

    /// What the user said last: a string content as is, or the message's text blocks joined with `\n`, skipping the
    /// `<system-reminder>` blocks the CLI adds. Tool results are not included (see [`Self::tool_results`]).
    pub fn last_user_text(&self) -> String {
        let Some(content) = self.last_user_message().and_then(|m| m.get("content")) else {
            return String::new();
        };
        match content {
            Value::String(text) => text.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|block| block.get("text").and_then(Value::as_str))
                .filter(|text| !text.trim_start().starts_with(SYSTEM_REMINDER))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    /// Every text in every message (user and assistant, string contents, text blocks, tool_result contents), joined
    /// with `\n`: the way to check that earlier turns were carried in the history.
    pub fn all_text(&self) -> String {
        let mut texts = Vec::new();
        for message in self.messages() {
            if let Some(content) = message.get("content") {
                collect_texts(content, &mut texts);
            }
        }
        texts.join("\n")
    }

    /// The `tool_result` blocks of the last user message, in order.
    pub fn tool_results(&self) -> Vec<ToolResultBlock> {
        let Some(Value::Array(blocks)) = self.last_user_message().and_then(|m| m.get("content"))
        else {
            return Vec::new();
        };
        blocks
            .iter()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
            .map(|block| {
                let mut texts = Vec::new();
                if let Some(content) = block.get("content") {
                    collect_texts(content, &mut texts);
                }
                ToolResultBlock {
                    tool_use_id: block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    is_error: block.get("is_error").and_then(Value::as_bool) == Some(true),
                    text: texts.join("\n"),
                }
            })
            .collect()
    }

    /// `body.tools[].name`, in the order the CLI offered them.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools()
            .iter()
            .filter_map(|tool| tool.get("name").and_then(Value::as_str))
            .map(str::to_owned)
            .collect()
    }

    /// The whole `body.tools[]` entry called `name` (`name`, `description`, `input_schema`, …).
    pub fn tool(&self, name: &str) -> Option<&Value> {
        self.tools()
            .iter()
            .find(|tool| tool.get("name").and_then(Value::as_str) == Some(name))
    }

    /// `body.system` as text: a string as is, or the text blocks joined with `\n`.
    pub fn system_text(&self) -> String {
        let mut texts = Vec::new();
        if let Some(system) = self.body.get("system") {
            collect_texts(system, &mut texts);
        }
        texts.join("\n")
    }

    /// The text the script's rules are matched against: the last user message's text (as [`Self::last_user_text`])
    /// followed by its tool results' texts, joined with `\n`.
    pub(crate) fn prompt_text(&self) -> String {
        let mut parts = vec![self.last_user_text()];
        parts.extend(self.tool_results().into_iter().map(|result| result.text));
        parts.retain(|part| !part.is_empty());
        parts.join("\n")
    }

    fn tools(&self) -> &[Value] {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// Pushes every text found in a message content (a string, or blocks of type `text` / `tool_result`).
fn collect_texts<'a>(content: &'a Value, out: &mut Vec<&'a str>) {
    match content {
        Value::String(text) => out.push(text),
        Value::Array(blocks) => {
            for block in blocks {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(text) = block.get("text").and_then(Value::as_str) {
                            out.push(text);
                        }
                    }
                    Some("tool_result") => {
                        if let Some(inner) = block.get("content") {
                            collect_texts(inner, out);
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(body: Value) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            path: "/v1/messages".into(),
            query: Some("beta=true".into()),
            headers: vec![("content-type".into(), "application/json".into())],
            body,
            at: Instant::now(),
        }
    }

    #[test]
    fn last_user_text_skips_reminders_and_joins_blocks() {
        let req = request(json!({"model": "m", "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [{"type": "text", "text": "echo: first"}]},
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nnoise\n</system-reminder>"},
                {"type": "text", "text": "second"},
                {"type": "text", "text": "third"}
            ]}
        ]}));
        assert_eq!(req.model(), Some("m"));
        assert_eq!(req.last_user_text(), "second\nthird");
        assert!(req.all_text().contains("first\necho: first\n"));
        assert!(req.all_text().contains("noise"));
        assert!(req.tool_results().is_empty());
    }

    #[test]
    fn string_content_is_the_text() {
        let req = request(json!({"messages": [{"role": "user", "content": "hello"}]}));
        assert_eq!(req.last_user_text(), "hello");
        assert_eq!(req.prompt_text(), "hello");
    }

    #[test]
    fn tool_results_are_flattened() {
        let req = request(json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_mock_1", "name": "x", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_mock_1", "is_error": true,
                 "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"type": "tool_result", "tool_use_id": "toolu_mock_2", "content": "plain"}
            ]}
        ], "tools": [{"name": "x", "description": "d", "input_schema": {"type": "object"}}]}));
        assert_eq!(
            req.tool_results(),
            vec![
                ToolResultBlock {
                    tool_use_id: "toolu_mock_1".into(),
                    is_error: true,
                    text: "a\nb".into()
                },
                ToolResultBlock {
                    tool_use_id: "toolu_mock_2".into(),
                    is_error: false,
                    text: "plain".into()
                },
            ]
        );
        assert_eq!(req.last_user_text(), "");
        assert_eq!(req.prompt_text(), "a\nb\nplain");
        assert_eq!(req.tool_names(), vec!["x".to_owned()]);
        assert_eq!(
            req.tool("x").and_then(|t| t.get("description")),
            Some(&json!("d"))
        );
        assert!(req.tool("y").is_none());
    }

    #[test]
    fn odd_bodies_do_not_panic() {
        let req = request(Value::String("not json".into()));
        assert!(req.messages().is_empty());
        assert_eq!(req.last_user_text(), "");
        assert_eq!(req.all_text(), "");
        assert!(req.tool_names().is_empty());
        assert_eq!(req.header("Content-Type"), Some("application/json"));
    }
}
