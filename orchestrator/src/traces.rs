//! OpenTelemetry traces of turns (`[otel]`, off unless `otel.endpoint` is set): one trace per
//! turn, sent over OTLP/HTTP (protobuf) by a batch processor on its own thread.
//!
//! A turn's trace is a [`TurnTrace`], made when the turn begins: its root span
//! (`invoke_agent`, GenAI semantic conventions) is the child of the caller's W3C `traceparent`
//! when the request carried one (HTTP, `/mcp`, or a parent turn's tool call for a delegated
//! child). The turn adds child spans as it goes: its wait in the thread's line (`queue`), the
//! checkout of its process (`checkout`, with `slot wait` and `spawn` when it started one), its
//! wait under the concurrency limit (`throttle`), each model round trip the CLI reports
//! (`chat`), each tool call (`execute_tool`, with the plugin's name for ours) and each approval
//! wait (`approval`). Spans whose times are only known afterwards (`queue`, `slot wait`,
//! `spawn`, `chat`) are written with their own start and end times.
//!
//! The text of messages and replies is on the spans only with `otel.capture_content`.
//!
//! Its `[otel]` section ([`OtelConfig`]) is defined here, so this stays a leaf; `config`
//! re-exports it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use serde::Deserialize;
use tracing::warn;

/// `[otel]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtelConfig {
    /// The OTLP/HTTP traces endpoint (`http://collector:4318/v1/traces`); spans are sent as
    /// protobuf. Unset: no traces.
    pub endpoint: Option<String>,
    /// `service.name` of the spans.
    pub service_name: String,
    /// Puts the messages' text and the replies on the turn spans (`gen_ai.input.messages`,
    /// `gen_ai.output.messages`). Off: spans carry ids, models, tokens and costs only.
    pub capture_content: bool,
}

impl Default for OtelConfig {
    fn default() -> Self {
        OtelConfig {
            endpoint: None,
            service_name: "harness".into(),
            capture_content: false,
        }
    }
}

/// How often the batch processor sends what it has.
const EXPORT_EVERY: Duration = Duration::from_secs(1);

/// The daemon's tracer: off, or sending to `otel.endpoint`. Cheap to clone.
#[derive(Clone, Default)]
pub struct Traces {
    on: Option<Arc<On>>,
}

struct On {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    capture_content: bool,
}

/// `otel.endpoint` is not a URL the exporter takes.
#[derive(Debug, thiserror::Error)]
#[error("otel.endpoint: {0}")]
pub struct TracesError(String);

impl Traces {
    /// Starts the exporter when `config` names an endpoint; must run inside the tokio runtime
    /// (the exporter's requests run on it).
    pub fn start(config: &OtelConfig) -> Result<Traces, TracesError> {
        use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
        let Some(endpoint) = &config.endpoint else {
            return Ok(Traces::default());
        };
        let client = RuntimeClient {
            client: reqwest::Client::new(),
            runtime: tokio::runtime::Handle::current(),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint.clone())
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(Duration::from_secs(10))
            .with_http_client(client)
            .build()
            .map_err(|err| TracesError(err.to_string()))?;
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(EXPORT_EVERY)
                    .build(),
            )
            .build();
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batch)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("harness");
        Ok(Traces {
            on: Some(Arc::new(On {
                provider,
                tracer,
                capture_content: config.capture_content,
            })),
        })
    }

    /// The trace of a turn of `thread`'s message `message`, beginning now; a child of
    /// `traceparent` when it names a valid parent.
    pub fn turn(&self, traceparent: Option<&str>, thread: &str, message: &str) -> TurnTrace {
        let Some(on) = &self.on else {
            return TurnTrace::default();
        };
        let parent = traceparent.map_or_else(Context::new, extract);
        let span = on
            .tracer
            .span_builder("invoke_agent harness")
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.provider.name", "anthropic"),
                KeyValue::new("gen_ai.agent.name", "claude-code"),
                KeyValue::new("gen_ai.conversation.id", thread.to_owned()),
                KeyValue::new("harness.thread.id", thread.to_owned()),
                KeyValue::new("harness.message.id", message.to_owned()),
            ])
            .start_with_context(&on.tracer, &parent);
        TurnTrace {
            on: Some(on.clone()),
            cx: parent.with_span(span),
        }
    }

    /// Writes a span that ran from `start` to `end` under the span `traceparent` names (a
    /// turn's, for its model requests as the gateway saw them).
    pub fn past(
        &self,
        traceparent: &str,
        name: impl Into<std::borrow::Cow<'static, str>>,
        start: SystemTime,
        end: SystemTime,
        attributes: Vec<KeyValue>,
    ) {
        if let Some(on) = &self.on {
            past_span(on, &extract(traceparent), name, start, end, attributes);
        }
    }

    /// Sends what is buffered and stops the exporter (at shutdown).
    pub fn shutdown(&self) {
        if let Some(on) = &self.on {
            if let Err(err) = on.provider.shutdown() {
                warn!(error = %err, "Could not send the last traces.");
            }
        }
    }
}

/// One turn's trace (a no-op when traces are off). Ends its root span when dropped, if
/// [`TurnTrace::end`] did not.
#[derive(Default)]
pub struct TurnTrace {
    on: Option<Arc<On>>,
    cx: Context,
}

impl TurnTrace {
    /// True when the trace records anything.
    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// The W3C `traceparent` of the turn's root span (for a child process's `TRACEPARENT`).
    pub fn traceparent(&self) -> Option<String> {
        self.on.as_ref().map(|_| inject(&self.cx))
    }

    /// Sets attributes on the root span.
    pub fn set(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        if self.on.is_some() {
            self.cx.span().set_attributes(attributes);
        }
    }

    /// Puts the message's text on the root span, with `otel.capture_content`.
    pub fn content(&self, key: &'static str, role: &str, text: &str) {
        if self.on.as_ref().is_some_and(|on| on.capture_content) {
            let messages =
                serde_json::json!([{"role": role, "parts": [{"type": "text", "content": text}]}]);
            self.cx
                .span()
                .set_attribute(KeyValue::new(key, messages.to_string()));
        }
    }

    /// A child span that ran from `start` to `end`.
    pub fn past(
        &self,
        name: impl Into<std::borrow::Cow<'static, str>>,
        start: SystemTime,
        end: SystemTime,
        attributes: Vec<KeyValue>,
    ) {
        if let Some(on) = &self.on {
            past_span(on, &self.cx, name, start, end, attributes);
        }
    }

    /// A child span starting now; it ends when dropped.
    pub fn child(&self, name: String, attributes: Vec<KeyValue>) -> ChildSpan {
        self.child_at(name, SystemTime::now(), attributes)
    }

    /// A child span that started at `start`.
    pub fn child_at(
        &self,
        name: String,
        start: SystemTime,
        attributes: Vec<KeyValue>,
    ) -> ChildSpan {
        let Some(on) = &self.on else {
            return ChildSpan::default();
        };
        let span = on
            .tracer
            .span_builder(name)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&on.tracer, &self.cx);
        ChildSpan {
            on: Some(on.clone()),
            cx: Some(self.cx.with_span(span)),
        }
    }

    /// Ends the root span: `error` marks it failed.
    pub fn end(self, error: Option<&str>) {
        if self.on.is_some() {
            let span = self.cx.span();
            if let Some(error) = error {
                span.set_status(Status::error(error.to_owned()));
                span.set_attribute(KeyValue::new("error.type", "turn_failed"));
            }
            span.end();
        }
    }
}

/// A child span of a turn; ends when dropped.
#[derive(Default)]
pub struct ChildSpan {
    on: Option<Arc<On>>,
    cx: Option<Context>,
}

impl ChildSpan {
    /// A span of its own that ran from `start` to `end`.
    pub fn past(
        &self,
        name: impl Into<std::borrow::Cow<'static, str>>,
        start: SystemTime,
        end: SystemTime,
    ) {
        if let (Some(on), Some(cx)) = (&self.on, &self.cx) {
            past_span(on, cx, name, start, end, Vec::new());
        }
    }

    /// Its W3C `traceparent`: the parent of what it causes (a delegated child turn).
    pub fn traceparent(&self) -> Option<String> {
        self.cx.as_ref().map(inject)
    }

    pub fn set(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        if let Some(cx) = &self.cx {
            cx.span().set_attributes(attributes);
        }
    }

    /// Marks it failed.
    pub fn fail(&self, error: &str) {
        if let Some(cx) = &self.cx {
            cx.span().set_status(Status::error(error.to_owned()));
        }
    }
}

impl Drop for ChildSpan {
    fn drop(&mut self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }
}

tokio::task_local! {
    /// The `traceparent` of the request a task serves (`/mcp`'s tool calls run under it).
    static PARENT: Option<String>;
}

/// Runs `work` with `traceparent` as the parent of the turns it starts ([`parent`]).
pub async fn under<F: std::future::Future>(traceparent: Option<String>, work: F) -> F::Output {
    PARENT.scope(traceparent, work).await
}

/// The `traceparent` [`under`] set for this task, if any.
pub fn parent() -> Option<String> {
    PARENT.try_with(Clone::clone).ok().flatten()
}

/// The `traceparent` header of a request.
pub fn traceparent_of(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Writes a span that ran from `start` to `end` under `parent`.
fn past_span(
    on: &On,
    parent: &Context,
    name: impl Into<std::borrow::Cow<'static, str>>,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
) {
    let mut span = on
        .tracer
        .span_builder(name)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(&on.tracer, parent);
    span.end_with_timestamp(end);
}

/// The context a W3C `traceparent` names; an invalid one is ignored (a new trace).
fn extract(traceparent: &str) -> Context {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.trim().to_owned())]);
    TraceContextPropagator::new().extract(&carrier)
}

fn inject(cx: &Context) -> String {
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    carrier.remove("traceparent").unwrap_or_default()
}

/// The exporter's HTTP client: the daemon's reqwest, its requests run on the daemon's runtime
/// (the batch processor's thread has none).
#[derive(Debug)]
struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for RuntimeClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let (status, body) = sent.await??;
        Ok(opentelemetry_http::Response::builder()
            .status(status.as_u16())
            .body(body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_a_bad_one_starts_a_new_trace() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cx = extract(parent);
        assert!(cx.span().span_context().is_remote());
        assert_eq!(inject(&cx), parent);
        for bad in [
            "",
            "00-xyz",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        ] {
            assert!(!extract(bad).span().span_context().is_valid(), "{bad}");
        }
    }

    #[test]
    fn off_traces_cost_nothing_and_say_so() {
        let turn = Traces::default().turn(None, "thr_1", "msg_1");
        assert!(!turn.is_on());
        assert_eq!(turn.traceparent(), None);
        assert_eq!(turn.child("x".into(), Vec::new()).traceparent(), None);
    }
}
