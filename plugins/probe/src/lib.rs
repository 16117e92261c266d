//! `probe`: a test-only plugin whose tools exercise the daemon's tool path: schema validation and
//! defaults (nested objects, arrays, enums, `$ref`/`$defs`, the shorthand form), the per-tool
//! timeout, a panicking handler, structured output that breaks its own schema, the thread a call
//! runs for, and a call that waits until the test lets it finish.
//!
//! One set of test tools for the MCP adapter's unit tests (in `orchestrator`) and the end-to-end
//! tests (`harness-tests`); the daemon itself never loads it.
//!
//! `probe__order`, `probe__ship` and `probe__tally` answer with `{"received": <input>}` as
//! structured output, so a test sees exactly what reached the handler after validation and
//! defaults. [`ProbePlugin::calls`] counts the calls that reached any handler, so a test can see
//! that a refused input never did.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Notify;

use plugin_contract::{async_trait, Plugin, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

/// The per-tool timeout of `probe__slow`; the tool itself sleeps [`SLOW_SLEEP`].
pub const SLOW_TIMEOUT: Duration = Duration::from_millis(300);
/// How long `probe__slow` sleeps: far beyond [`SLOW_TIMEOUT`].
pub const SLOW_SLEEP: Duration = Duration::from_secs(30);

/// The probe plugin. Clones share the call count and the gate, so a test keeps one clone and
/// hands another to the daemon (`Arc::new(probe.clone())`).
#[derive(Clone, Debug, Default)]
pub struct ProbePlugin {
    /// Calls that reached a handler, counted before the handler runs.
    calls: Arc<AtomicUsize>,
    /// What `probe__gate` waits on; opened by [`ProbePlugin::open_gate`].
    gate: Arc<Notify>,
}

impl ProbePlugin {
    /// How many calls reached one of this plugin's handlers (a refused input never does).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Lets the waiting `probe__gate` call finish, or the next one if none waits yet.
    pub fn open_gate(&self) {
        self.gate.notify_one();
    }
}

impl Plugin for ProbePlugin {
    fn name(&self) -> &str {
        "probe"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(Received { spec: order_spec() }),
            Arc::new(Received { spec: ref_spec() }),
            Arc::new(Received {
                spec: shorthand_spec(),
            }),
            Arc::new(Repeat),
            Arc::new(Slow),
            Arc::new(Explode),
            Arc::new(Miscount),
            Arc::new(WhoAmI),
            Arc::new(Gate {
                open: self.gate.clone(),
            }),
        ];
        tools
            .into_iter()
            .map(|tool| {
                Arc::new(Counted {
                    calls: self.calls.clone(),
                    tool,
                }) as Arc<dyn Tool>
            })
            .collect()
    }
}

/// Counts a call, then runs the tool.
struct Counted {
    calls: Arc<AtomicUsize>,
    tool: Arc<dyn Tool>,
}

#[async_trait]
impl Tool for Counted {
    fn spec(&self) -> ToolSpec {
        self.tool.spec()
    }

    async fn call(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.tool.call(ctx, input).await
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
struct Received {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Received {
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

/// `probe__repeat`: `{word: string, times: integer ≥ 1 = 2}` (shorthand, with a minimum) →
/// `{"said": word × times, "thread": …}`, with a declared output schema.
struct Repeat;

#[async_trait]
impl Tool for Repeat {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "repeat".into(),
            description: "Repeats a word.".into(),
            input_schema: json!({
                "word": {"type": "string", "description": "The word."},
                "times": {"type": "integer", "minimum": 1, "default": 2}
            }),
            output_schema: Some(json!({
                "type": "object",
                "properties": {"said": {"type": "string"}, "thread": {"type": "string"}},
                "required": ["said", "thread"]
            })),
            timeout: None,
        }
    }

    async fn call(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let word = input["word"].as_str().unwrap_or_default();
        let times = input["times"].as_u64().unwrap_or(0) as usize;
        let said = vec![word; times].join(" ");
        let thread = ctx.thread_id.as_ref().map(|t| t.as_str().to_owned());
        Ok(ToolOutput::structured(
            said.clone(),
            json!({"said": said, "thread": thread}),
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
struct Explode;

#[async_trait]
impl Tool for Explode {
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
struct Miscount;

#[async_trait]
impl Tool for Miscount {
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

/// `probe__gate`: waits until the test calls [`ProbePlugin::open_gate`]; a call the test holds
/// open to show that it blocks nothing else, or to cancel it.
struct Gate {
    open: Arc<Notify>,
}

#[async_trait]
impl Tool for Gate {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "gate".into(),
            description: "Waits for the test.".into(),
            input_schema: json!({}),
            output_schema: None,
            timeout: None,
        }
    }

    async fn call(&self, _ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        self.open.notified().await;
        Ok(ToolOutput::text("gate opened"))
    }
}
