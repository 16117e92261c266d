//! The MCP server's series: requests over the control channel and `/mcp`, and tool calls.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

series! {
    /// Owned by the MCP server: every tool call, from the model or the HTTP API.
    pub struct ToolMetrics {
        /// MCP requests from the CLI's processes, by method.
        requests: Family<MethodLabel, Counter> => "mcp_requests",
            "MCP requests from the CLI processes over the control channel, by method";
        calls: Family<ToolOutcomeLabels, Counter> => "tool_calls", "Tool calls by tool and outcome";
        duration: Family<ToolLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(tool_histogram) => "tool_call_duration_seconds",
            "Tool call latency, from validation to result";
        schema_failures: Family<ToolLabel, Counter> => "tool_schema_failures",
            "Tool inputs rejected by the tool's input schema";
        /// Structured results that broke the tool's own output schema.
        output_schema_failures: Family<ToolLabel, Counter> => "tool_output_schema_failures",
            "Structured tool results that failed the tool's own output schema";
        /// Requests to `/mcp` from outside MCP clients, by method.
        http_requests: Family<MethodLabel, Counter> => "mcp_http_requests",
            "Requests to the MCP endpoint /mcp from outside clients, by method";
        /// Webhook subscriptions of the Events extension (`events/subscribe`) live now.
        event_subscriptions: Gauge => "mcp_event_subscriptions",
            "Webhook subscriptions (MCP Events, events/subscribe) live now";
        /// Those that ended because their TTL ran out before a refresh.
        event_subscriptions_expired: Counter => "mcp_event_subscriptions_expired",
            "Webhook subscriptions (MCP Events) that expired, not refreshed within their TTL";
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabel {
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcomeLabels {
    tool: String,
    outcome: &'static str,
}

fn tool_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        120.0,
    ])
}

/// How a tool call ended, as labelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolOutcome {
    Ok,
    Error,
    /// The input failed the tool's schema (also counted in `tool_schema_failures`).
    InvalidInput,
}

impl ToolMetrics {
    /// Counts one MCP request from a process (`initialize`, `tools/list`, `tools/call`, `ping`).
    pub fn request(&self, method: &'static str) {
        self.requests.get_or_create(&MethodLabel { method }).inc();
    }

    /// Counts one request to the MCP endpoint `/mcp`.
    pub fn http_request(&self, method: &'static str) {
        self.http_requests
            .get_or_create(&MethodLabel { method })
            .inc();
    }

    /// Sets how many webhook subscriptions of the Events extension live now.
    pub fn event_subscriptions(&self, live: usize) {
        self.event_subscriptions
            .set(i64::try_from(live).unwrap_or(i64::MAX));
    }

    /// Counts a webhook subscription of the Events extension that expired.
    pub fn event_subscription_expired(&self) {
        self.event_subscriptions_expired.inc();
    }

    /// Counts a structured result that failed the tool's own output schema.
    pub fn output_schema_failure(&self, tool: &str) {
        self.output_schema_failures
            .get_or_create(&ToolLabel {
                tool: tool.to_owned(),
            })
            .inc();
    }

    /// Records one call. `tool` is a registered name or `unknown`, so a model inventing names
    /// cannot grow the series without bound.
    pub fn record(&self, tool: &str, outcome: ToolOutcome, took: Duration) {
        let label = match outcome {
            ToolOutcome::Ok => "ok",
            ToolOutcome::Error => "error",
            ToolOutcome::InvalidInput => "invalid_input",
        };
        self.calls
            .get_or_create(&ToolOutcomeLabels {
                tool: tool.to_owned(),
                outcome: label,
            })
            .inc();
        if outcome == ToolOutcome::InvalidInput {
            self.schema_failures
                .get_or_create(&ToolLabel {
                    tool: tool.to_owned(),
                })
                .inc();
        }
        self.duration
            .get_or_create(&ToolLabel {
                tool: tool.to_owned(),
            })
            .observe(took.as_secs_f64());
    }
}
