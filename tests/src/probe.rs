//! `probe`: a plugin whose tools exist to exercise the daemon's tool path in tests: schema
//! validation and defaults (nested objects, arrays, enums, `$ref`/`$defs`, the shorthand form),
//! the per-tool timeout, a panicking handler and structured output that breaks its own schema.
//!
//! The tools that take input answer with `{"received": <input>}` as structured output, so a test
//! sees exactly what reached the handler after validation and defaults.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use plugin_contract::{async_trait, Plugin, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

/// The per-tool timeout of `probe__slow`; the tool itself sleeps [`SLOW_SLEEP`].
pub const SLOW_TIMEOUT: Duration = Duration::from_millis(300);
/// How long `probe__slow` sleeps: far beyond [`SLOW_TIMEOUT`].
pub const SLOW_SLEEP: Duration = Duration::from_secs(30);

/// The probe plugin: register it next to the default plugins with
/// [`crate::daemon::TestDaemon::start_with_plugins`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ProbePlugin;

impl Plugin for ProbePlugin {
    fn name(&self) -> &str {
        "probe"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(Echo { spec: order_spec() }),
            Arc::new(Echo { spec: ref_spec() }),
            Arc::new(Echo {
                spec: shorthand_spec(),
            }),
            Arc::new(Slow),
            Arc::new(Panics),
            Arc::new(BadOutput),
            Arc::new(WhoAmI),
        ]
    }
}

/// `probe__order`: nested object, array, enum and defaults, all explicit.
fn order_spec() -> ToolSpec {
    ToolSpec {
        name: "order".into(),
        description: "Places a probe order.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "item": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
                        "qty": {"type": "integer", "minimum": 1}
                    },
                    "required": ["sku", "qty"],
                    "additionalProperties": false
                },
                "tags": {"type": "array", "items": {"type": "string"}},
                "priority": {
                    "type": "string",
                    "enum": ["low", "normal", "high"],
                    "default": "normal",
                    "description": "How urgent the order is."
                },
                "note": {"type": "string", "default": "none"}
            },
            "required": ["item"],
            "additionalProperties": false
        }),
        output_schema: None,
        timeout: None,
    }
}

/// `probe__ship`: two properties sharing one definition through `$ref`/`$defs`.
fn ref_spec() -> ToolSpec {
    ToolSpec {
        name: "ship".into(),
        description: "Ships a probe parcel between two addresses.".into(),
        input_schema: json!({
            "type": "object",
            "$defs": {
                "address": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "City name."},
                        "country": {"type": "string", "default": "DE"}
                    },
                    "required": ["city"]
                }
            },
            "properties": {
                "from": {"$ref": "#/$defs/address", "description": "Where the parcel starts."},
                "to": {"$ref": "#/$defs/address"}
            },
            "required": ["from", "to"]
        }),
        output_schema: None,
        timeout: None,
    }
}

/// `probe__tally`: the shorthand form, with descriptions and a default.
fn shorthand_spec() -> ToolSpec {
    ToolSpec {
        name: "tally".into(),
        description: "Tallies probe things.".into(),
        input_schema: json!({
            "count": {"type": "integer", "default": 3, "description": "How many."},
            "label": {"type": "string", "description": "What to call them."},
            "ratio": "number"
        }),
        output_schema: None,
        timeout: None,
    }
}

/// Answers with the input it received.
struct Echo {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::structured(
            format!("received {input}"),
            json!({"received": input}),
        ))
    }
}

/// `probe__slow`: sleeps far longer than its own timeout.
struct Slow;

#[async_trait]
impl Tool for Slow {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "slow".into(),
            description: "Takes far too long.".into(),
            input_schema: json!({}),
            output_schema: None,
            timeout: Some(SLOW_TIMEOUT),
        }
    }

    async fn call(&self, _ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(SLOW_SLEEP).await;
        Ok(ToolOutput::text("finally"))
    }
}

/// `probe__explode`: panics.
struct Panics;

#[async_trait]
impl Tool for Panics {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "explode".into(),
            description: "Panics on purpose.".into(),
            input_schema: json!({}),
            output_schema: None,
            timeout: None,
        }
    }

    async fn call(&self, _ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        panic!("probe exploded on purpose");
    }
}

/// `probe__whoami`: the thread the daemon says the call runs for. It takes no arguments: the
/// daemon knows the thread of the process that called, so no tool ever needs an id from the model.
struct WhoAmI;

#[async_trait]
impl Tool for WhoAmI {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "whoami".into(),
            description: "Names the thread this call runs for.".into(),
            input_schema: json!({}),
            output_schema: Some(json!({
                "type": "object",
                "properties": {"thread": {"type": "string"}},
                "required": ["thread"],
                "additionalProperties": false
            })),
            timeout: None,
        }
    }

    async fn call(&self, ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        let thread = ctx
            .thread_id
            .as_ref()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default();
        Ok(ToolOutput::structured(
            format!("thread {thread}"),
            json!({"thread": thread}),
        ))
    }
}

/// `probe__miscount`: declares `{count: integer}` as output and returns a string count.
struct BadOutput;

#[async_trait]
impl Tool for BadOutput {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "miscount".into(),
            description: "Returns output that breaks its own output schema.".into(),
            input_schema: json!({}),
            output_schema: Some(json!({
                "type": "object",
                "properties": {"count": {"type": "integer"}},
                "required": ["count"]
            })),
            timeout: None,
        }
    }

    async fn call(&self, _ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::structured("many", json!({"count": "many"})))
    }
}
