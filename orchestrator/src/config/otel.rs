//! `[otel]`: OpenTelemetry traces of every turn (see `crate::traces`). Off unless `endpoint` is
//! set.

use serde::Deserialize;

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
