//! A trace receiver nobody here wrote: `otel_receiver.py` runs the OpenTelemetry project's own
//! OTLP test sink (PyPI `oteltest`, in the tests' Python venv, installed when missing) and
//! writes every span it receives as a JSON line.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::Value;

/// A running receiver; killed on drop.
pub struct Receiver {
    /// The OTLP/HTTP traces endpoint (`otel.endpoint`).
    pub endpoint: String,
    out: PathBuf,
    child: Child,
}

/// One span as received.
#[derive(Clone, Debug)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root.
    pub parent_span_id: String,
    pub name: String,
    pub start: u64,
    pub end: u64,
    /// OTLP status code: 0 unset, 1 ok, 2 error.
    pub status: u64,
    pub attributes: serde_json::Map<String, Value>,
    pub service: Option<String>,
}

impl Span {
    pub fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }
}

impl Receiver {
    /// Starts a receiver with `python` (the venv's, from `crate::mcp::python_or_skip`), writing
    /// under `dir`.
    pub fn start(python: &Path, dir: &Path) -> Receiver {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/otel_receiver.py");
        let out = dir.join("spans.jsonl");
        let mut command = Command::new(python);
        command.arg(script).arg(&out);
        let (child, port) = crate::util::spawn_listening(&mut command, "the OTLP receiver");
        Receiver {
            endpoint: format!("http://127.0.0.1:{port}/v1/traces"),
            out,
            child,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|v| Span {
                trace_id: v["traceId"].as_str().unwrap_or_default().to_owned(),
                span_id: v["spanId"].as_str().unwrap_or_default().to_owned(),
                parent_span_id: v["parentSpanId"].as_str().unwrap_or_default().to_owned(),
                name: v["name"].as_str().unwrap_or_default().to_owned(),
                start: v["start"].as_u64().unwrap_or_default(),
                end: v["end"].as_u64().unwrap_or_default(),
                status: v["status"].as_u64().unwrap_or_default(),
                attributes: v["attributes"].as_object().cloned().unwrap_or_default(),
                service: v["service"].as_str().map(str::to_owned),
            })
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
