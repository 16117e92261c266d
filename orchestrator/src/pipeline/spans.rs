//! The spans a running turn adds to its trace (`crate::traces`) as the CLI reports its steps:
//! each model round trip (`chat`), from the CLI's `assistant` lines, which name the API response
//! they belong to; each tool call (`execute_tool`), from the call's start to its result; each
//! approval wait. A round trip starts when the request could go: at the turn's start, or when
//! the last tool result before it went back; it ends with the response's last line. Its token
//! counts are the model gateway's, read from the whole response (the CLI's lines carry the
//! counts of the response's start: one output token), else the CLI's.

use std::collections::HashMap;
use std::time::SystemTime;

use claude_cli::{ApiUsage, ModelCall, TurnEvent};
use opentelemetry::KeyValue;

use crate::traces::{ChildSpan, TurnTrace};

/// A model response being reported.
struct Round {
    id: String,
    model: String,
    start: SystemTime,
    last: SystemTime,
    usage: ApiUsage,
}

/// The usage the model gateway read from a response, by its id.
pub(super) type Metered<'a> = &'a (dyn Fn(&str) -> Option<ApiUsage> + Sync);

pub(super) struct TurnSpans<'a> {
    trace: &'a TurnTrace,
    metered: Metered<'a>,
    round: Option<Round>,
    /// When the next request could go.
    next_start: SystemTime,
    /// Open tool calls by `tool_use_id`.
    tools: HashMap<String, ChildSpan>,
}

impl<'a> TurnSpans<'a> {
    pub(super) fn new(trace: &'a TurnTrace, metered: Metered<'a>) -> Self {
        TurnSpans {
            trace,
            metered,
            round: None,
            next_start: SystemTime::now(),
            tools: HashMap::new(),
        }
    }

    /// An `assistant` line of `call`.
    pub(super) fn model_call(&mut self, call: ModelCall) {
        if !self.trace.is_on() {
            return;
        }
        let now = SystemTime::now();
        match &mut self.round {
            Some(round) if round.id == call.id => {
                round.last = now;
                round.usage = call.usage;
            }
            _ => {
                self.close_round();
                self.round = Some(Round {
                    id: call.id,
                    model: call.model,
                    start: self.next_start.min(now),
                    last: now,
                    usage: call.usage,
                });
            }
        }
    }

    /// An event of the turn: a tool call's start or result.
    pub(super) fn event(&mut self, event: &TurnEvent) {
        if !self.trace.is_on() {
            return;
        }
        match event {
            TurnEvent::ToolCallStarted(call) => self.open_tool(&call.tool_use_id, &call.name),
            TurnEvent::ToolCallFinished(done) => {
                if let Some(span) = self.tools.remove(&done.tool_use_id) {
                    if done.is_error {
                        span.fail("the tool answered with an error");
                    }
                }
                self.next_start = SystemTime::now();
            }
            _ => {}
        }
    }

    /// One of our tools runs for the call `tool_use_id`: the span names its plugin; its
    /// `traceparent`, the parent of what the call starts (a delegated child's turn).
    pub(super) fn our_tool(
        &mut self,
        tool_use_id: Option<&str>,
        name: &str,
        plugin: Option<&str>,
    ) -> Option<String> {
        let id = tool_use_id?;
        self.open_tool(id, name);
        let span = self.tools.get(id)?;
        if let Some(plugin) = plugin {
            span.set([KeyValue::new("harness.plugin", plugin.to_owned())]);
        }
        span.traceparent()
    }

    /// A span for the wait on a person's (or a rule's) answer to `tool`'s permission request.
    pub(super) fn approval(&self, tool: &str) -> ChildSpan {
        self.trace.child(
            format!("approval {tool}"),
            vec![KeyValue::new("gen_ai.tool.name", tool.to_owned())],
        )
    }

    fn open_tool(&mut self, id: &str, name: &str) {
        if self.tools.contains_key(id) {
            return;
        }
        let span = self.trace.child(
            format!("execute_tool {name}"),
            vec![
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", name.to_owned()),
                KeyValue::new("gen_ai.tool.call.id", id.to_owned()),
            ],
        );
        self.tools.insert(id.to_owned(), span);
    }

    fn close_round(&mut self) {
        let Some(round) = self.round.take() else {
            return;
        };
        let usage = &(self.metered)(&round.id).unwrap_or(round.usage);
        self.trace.past(
            "chat",
            round.start,
            round.last,
            vec![
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.provider.name", "anthropic"),
                KeyValue::new("gen_ai.request.model", round.model.clone()),
                KeyValue::new("gen_ai.response.model", round.model),
                KeyValue::new("gen_ai.response.id", round.id),
                KeyValue::new("gen_ai.usage.input_tokens", usage.input_tokens as i64),
                KeyValue::new("gen_ai.usage.output_tokens", usage.output_tokens as i64),
                KeyValue::new(
                    "gen_ai.usage.cache_read.input_tokens",
                    usage.cache_read_input_tokens as i64,
                ),
                KeyValue::new(
                    "gen_ai.usage.cache_creation.input_tokens",
                    usage.cache_creation_input_tokens as i64,
                ),
            ],
        );
    }
}

impl Drop for TurnSpans<'_> {
    /// The turn ended: its last response's span is written; tool calls still open end now.
    fn drop(&mut self) {
        self.close_round();
    }
}
