//! The script's vocabulary ([`Reply`]) and how one reply becomes bytes on the wire ([`plan`]). No IO here: the server
//! in `mock.rs` walks the returned [`Plan`], so every wire format detail is testable as data.

use std::time::Duration;

use serde_json::{json, Value};

/// How the mock answers one `POST /v1/messages`.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A complete assistant text, streamed as one to three `text_delta`s (split at spaces) to exercise reassembly.
    Text(String),
    /// One `text_delta` per chunk with `delay` between chunks: for interrupts and "reply in progress" tests.
    SlowText {
        chunks: Vec<String>,
        delay: Duration,
    },
    /// A `thinking` block (extended thinking, with a made-up signature), then the text, as
    /// [`Reply::Text`].
    Thinking { thinking: String, text: String },
    /// A `tool_use` block with id `toolu_mock_N` (N = the request's number) and `stop_reason: "tool_use"`.
    ToolUse { name: String, input: Value },
    /// An HTTP error with an Anthropic error body: `{"type":"error","error":{"type":kind,"message":message}}`.
    Error {
        status: u16,
        kind: String,
        message: String,
    },
    /// Accept the request and never answer. The connection is dropped when the [`super::MockApi`] is dropped, or
    /// after ten minutes.
    Hang,
    /// Send `message_start` and `content_block_start` (status 200), then stall like [`Reply::Hang`].
    StallAfterStart,
    /// Close the connection without writing an HTTP response.
    DropConnection,
}

impl Reply {
    /// [`Reply::Text`].
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text(text.into())
    }

    /// [`Reply::SlowText`].
    pub fn slow_text<S: Into<String>>(
        chunks: impl IntoIterator<Item = S>,
        delay: Duration,
    ) -> Reply {
        Reply::SlowText {
            chunks: chunks.into_iter().map(Into::into).collect(),
            delay,
        }
    }

    /// [`Reply::Thinking`].
    pub fn thinking(thinking: impl Into<String>, text: impl Into<String>) -> Reply {
        Reply::Thinking {
            thinking: thinking.into(),
            text: text.into(),
        }
    }

    /// [`Reply::ToolUse`] of the tool the model knows as `name` (for sdk MCP tools: `mcp__<server>__<tool>`).
    pub fn tool_use(name: impl Into<String>, input: Value) -> Reply {
        Reply::ToolUse {
            name: name.into(),
            input,
        }
    }

    /// The model asks the CLI's `Write` tool to write `content` to `path`.
    pub fn write(path: &std::path::Path, content: &str) -> Reply {
        Reply::tool_use(
            "Write",
            serde_json::json!({"file_path": path.display().to_string(), "content": content}),
        )
    }

    /// An error with the kind Anthropic uses for `status` and the message `mock <status>` (what the protocol notes'
    /// measurements used): 400 `invalid_request_error`, 401 `authentication_error`, 403 `permission_error`,
    /// 404 `not_found_error`, 413 `request_too_large`, 429 `rate_limit_error`, 529 `overloaded_error`,
    /// other 5xx `api_error`, other 4xx `invalid_request_error`.
    pub fn error(status: u16) -> Reply {
        let kind = match status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        };
        Reply::Error {
            status,
            kind: kind.to_owned(),
            message: format!("mock {status}"),
        }
    }
}

/// What the server needs to know about the request it answers.
#[derive(Clone, Debug)]
pub(crate) struct ReplyContext {
    /// Per-[`super::MockApi`] request number; ids are `msg_mock_N` and `toolu_mock_N`.
    pub number: u64,
    /// Echoed back as the response's `model`.
    pub model: String,
    /// `"stream": true` gets SSE; anything else a plain JSON message.
    pub stream: bool,
    /// What the reply reports it used: [`usage_for`] the number unless the script says otherwise.
    pub usage: MockUsage,
}

/// The reply, turned into wire actions.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Plan {
    /// A JSON body with this status, sent after `delay`.
    Json {
        status: u16,
        body: Value,
        delay: Duration,
    },
    /// A `200 text/event-stream` response made of these steps.
    Stream(Vec<Step>),
    /// Never answer.
    Hang,
    /// Close the connection.
    Drop,
}

/// One action within an SSE response.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Step {
    /// Write this event (already framed as `event: …\ndata: …\n\n`).
    Send(String),
    /// Wait before the next step.
    Sleep(Duration),
    /// Stop writing and keep the response open, like [`Plan::Hang`].
    Stall,
}

/// Turns `reply` into wire actions for the request described by `ctx`.
pub(crate) fn plan(reply: &Reply, ctx: &ReplyContext) -> Plan {
    match reply {
        Reply::Text(text) => text_plan(ctx, &split_text(text), Duration::ZERO),
        Reply::SlowText { chunks, delay } => text_plan(ctx, chunks, *delay),
        Reply::Thinking { thinking, text } => thinking_plan(ctx, thinking, text),
        Reply::ToolUse { name, input } => {
            let id = format!("toolu_mock_{}", ctx.number);
            if !ctx.stream {
                let block = json!({"type": "tool_use", "id": id, "name": name, "input": input});
                return Plan::Json {
                    status: 200,
                    body: message_body(ctx, block, "tool_use"),
                    delay: Duration::ZERO,
                };
            }
            Plan::Stream(vec![
                message_start(ctx),
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                           "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                ),
                event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
                ),
                block_stop(),
                message_delta(ctx, "tool_use"),
                message_stop(),
            ])
        }
        Reply::Error {
            status,
            kind,
            message,
        } => Plan::Json {
            status: *status,
            body: error_body(kind, message),
            delay: Duration::ZERO,
        },
        Reply::Hang => Plan::Hang,
        Reply::StallAfterStart if !ctx.stream => Plan::Hang,
        Reply::StallAfterStart => {
            Plan::Stream(vec![message_start(ctx), text_block_start(), Step::Stall])
        }
        Reply::DropConnection => Plan::Drop,
    }
}

/// An Anthropic error body.
pub(crate) fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn text_plan(ctx: &ReplyContext, chunks: &[String], delay: Duration) -> Plan {
    if !ctx.stream {
        let gaps = u32::try_from(chunks.len().saturating_sub(1)).unwrap_or(u32::MAX);
        return Plan::Json {
            status: 200,
            body: message_body(
                ctx,
                json!({"type": "text", "text": chunks.concat()}),
                "end_turn",
            ),
            delay: delay.saturating_mul(gaps),
        };
    }
    let mut steps = vec![message_start(ctx), text_block_start()];
    for (i, chunk) in chunks.iter().enumerate() {
        if i > 0 && !delay.is_zero() {
            steps.push(Step::Sleep(delay));
        }
        steps.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": chunk}}),
        ));
    }
    steps.extend([block_stop(), message_delta(ctx, "end_turn"), message_stop()]);
    Plan::Stream(steps)
}

/// A thinking block at index 0, then the text at index 1.
fn thinking_plan(ctx: &ReplyContext, thinking: &str, text: &str) -> Plan {
    let signature = format!("mock-signature-{}", ctx.number);
    if !ctx.stream {
        let mut body = message_body(ctx, json!({"type": "text", "text": text}), "end_turn");
        body["content"] = json!([
            {"type": "thinking", "thinking": thinking, "signature": signature},
            {"type": "text", "text": text},
        ]);
        return Plan::Json {
            status: 200,
            body,
            delay: Duration::ZERO,
        };
    }
    let delta = |index: u32, delta: Value| {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        )
    };
    let stop = |index: u32| {
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        )
    };
    Plan::Stream(vec![
        message_start(ctx),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        delta(0, json!({"type": "thinking_delta", "thinking": thinking})),
        delta(
            0,
            json!({"type": "signature_delta", "signature": signature}),
        ),
        stop(0),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        delta(1, json!({"type": "text_delta", "text": text})),
        stop(1),
        message_delta(ctx, "end_turn"),
        message_stop(),
    ])
}

/// A complete (non-streamed) assistant message with one content block.
fn message_body(ctx: &ReplyContext, block: Value, stop_reason: &str) -> Value {
    json!({
        "id": format!("msg_mock_{}", ctx.number), "type": "message", "role": "assistant", "model": ctx.model,
        "content": [block], "stop_reason": stop_reason, "stop_sequence": null,
        "usage": ctx.usage.wire(ctx.usage.output_tokens),
    })
}

/// The tokens the mock reports for its message request number `number` (from 1): different for
/// every request, so a test can check sums against what the API reported.
pub fn usage_for(number: u64) -> MockUsage {
    MockUsage {
        input_tokens: 100 + number,
        output_tokens: 7,
        cache_read_input_tokens: 20 * number,
        cache_creation_input_tokens: 3,
    }
}

/// A response's `usage`, as the Messages API reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MockUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
}

impl MockUsage {
    /// The wire object with `output_tokens` so far.
    fn wire(&self, output_tokens: u64) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        })
    }
}

/// Splits at spaces into at most three chunks (spaces kept), so a reply arrives as several deltas.
fn split_text(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    if words.len() <= 1 {
        return vec![text.to_owned()];
    }
    let per_chunk = words.len().div_ceil(3);
    words
        .chunks(per_chunk)
        .map(|chunk| chunk.concat())
        .collect()
}

fn event(name: &str, data: Value) -> Step {
    Step::Send(format!("event: {name}\ndata: {data}\n\n"))
}

fn message_start(ctx: &ReplyContext) -> Step {
    event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_mock_{}", ctx.number), "type": "message", "role": "assistant", "model": ctx.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": ctx.usage.wire(1),
        }}),
    )
}

fn text_block_start() -> Step {
    event(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    )
}

fn block_stop() -> Step {
    event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    )
}

/// The end of a message; `usage.output_tokens` is the message's total, as the API sends it.
fn message_delta(ctx: &ReplyContext, stop_reason: &str) -> Step {
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": ctx.usage.output_tokens}}),
    )
}

fn message_stop() -> Step {
    event("message_stop", json!({"type": "message_stop"}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(stream: bool) -> ReplyContext {
        ReplyContext {
            number: 7,
            model: "claude-test".into(),
            stream,
            usage: usage_for(7),
        }
    }

    /// `(event name, data)` of every `Send` step; `Sleep`/`Stall` become `("<sleep>", Null)` / `("<stall>", Null)`.
    fn decoded(plan: &Plan) -> Vec<(String, Value)> {
        let Plan::Stream(steps) = plan else {
            panic!("not a stream: {plan:?}")
        };
        steps
            .iter()
            .map(|step| match step {
                Step::Send(frame) => {
                    let (head, data) = frame.split_once('\n').unwrap();
                    assert!(frame.ends_with("\n\n"), "{frame:?}");
                    let name = head.strip_prefix("event: ").unwrap().to_owned();
                    let data = data.trim_end().strip_prefix("data: ").unwrap();
                    (name, serde_json::from_str(data).unwrap())
                }
                Step::Sleep(_) => ("<sleep>".to_owned(), Value::Null),
                Step::Stall => ("<stall>".to_owned(), Value::Null),
            })
            .collect()
    }

    #[test]
    fn text_splits_into_deltas_that_concatenate() {
        let events = decoded(&plan(&Reply::text("one two three four five"), &ctx(true)));
        let deltas: Vec<&str> = events
            .iter()
            .filter(|(name, _)| name == "content_block_delta")
            .map(|(_, data)| data["delta"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(deltas, vec!["one two ", "three four ", "five"]);
        assert_eq!(events[0].1["message"]["id"], "msg_mock_7");
        assert_eq!(events[0].1["message"]["model"], "claude-test");
        assert_eq!(split_text("single"), vec!["single"]);
        assert_eq!(split_text(""), vec![""]);
    }

    #[test]
    fn tool_use_streams_input_as_one_json_delta() {
        let events = decoded(&plan(&Reply::tool_use("t", json!({"a": 1})), &ctx(true)));
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(
            events[1].1["content_block"],
            json!({"type": "tool_use", "id": "toolu_mock_7", "name": "t", "input": {}})
        );
        assert_eq!(
            events[2].1["delta"],
            json!({"type": "input_json_delta", "partial_json": "{\"a\":1}"})
        );
        assert_eq!(events[4].1["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn slow_text_sleeps_between_chunks_and_stall_stops_after_start() {
        let slow = decoded(&plan(
            &Reply::slow_text(["a", "b"], Duration::from_millis(5)),
            &ctx(true),
        ));
        let names: Vec<&str> = slow.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names[2..5],
            ["content_block_delta", "<sleep>", "content_block_delta"]
        );
        let stall = decoded(&plan(&Reply::StallAfterStart, &ctx(true)));
        let names: Vec<&str> = stall.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            vec!["message_start", "content_block_start", "<stall>"]
        );
    }

    #[test]
    fn non_streaming_requests_get_a_json_message() {
        let Plan::Json { status, body, .. } = plan(&Reply::text("hi there"), &ctx(false)) else {
            panic!("expected json")
        };
        assert_eq!(status, 200);
        assert_eq!(
            body["content"],
            json!([{"type": "text", "text": "hi there"}])
        );
        assert_eq!(body["stop_reason"], "end_turn");
        let Plan::Json { body, .. } = plan(&Reply::tool_use("t", json!({})), &ctx(false)) else {
            panic!("expected json")
        };
        assert_eq!(body["content"][0]["id"], "toolu_mock_7");
        assert_eq!(plan(&Reply::StallAfterStart, &ctx(false)), Plan::Hang);
    }

    #[test]
    fn error_kinds_follow_the_status() {
        for (status, kind) in [
            (500, "api_error"),
            (529, "overloaded_error"),
            (400, "invalid_request_error"),
        ] {
            let Reply::Error {
                kind: got, message, ..
            } = Reply::error(status)
            else {
                panic!("not an error")
            };
            assert_eq!((got.as_str(), message), (kind, format!("mock {status}")));
        }
        let Plan::Json { status, body, .. } = plan(&Reply::error(529), &ctx(true)) else {
            panic!("expected json")
        };
        assert_eq!(status, 529);
        assert_eq!(
            body,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "mock 529"}})
        );
    }
}
