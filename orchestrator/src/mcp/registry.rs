//! The daemon's tools, checked and compiled at load, and the one way a tool is called.
//!
//! Invariant: nothing in a tool call aborts the caller. Schema violations, tool errors, panics,
//! timeouts and bad structured output all become a result with `isError: true` whose text says
//! what went wrong, so the model can read it and the turn goes on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};
use tokio_util::task::AbortOnDropHandle;
use tracing::{error, warn};

use plugin_contract::{Plugin, Tool, ToolContext, ToolError, ToolOutput};

use super::schema::{self, CompiledTool, SchemaError};

/// A tool ready to be called.
pub struct RegisteredTool {
    pub plugin: String,
    pub compiled: CompiledTool,
    handler: Arc<dyn Tool>,
}

/// What a tool call produced: the MCP `CallToolResult` the model gets.
#[derive(Clone, Debug)]
pub struct CallOutcome {
    pub result: CallToolResult,
    pub duration: Duration,
    /// Present when the input failed validation.
    pub violations: Option<Vec<schema::Violation>>,
    /// Present when the tool's structured output failed its own output schema (a bug in the
    /// tool, not in the caller): the result is an error naming each failing path.
    pub output_violations: Option<Vec<schema::Violation>>,
}

impl CallOutcome {
    /// `{content: [{type: "text", text}], isError: true}`.
    pub fn error_result(text: String) -> CallToolResult {
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.result_type = None;
        result
    }

    pub fn is_error(&self) -> bool {
        self.result.is_error == Some(true)
    }

    /// The result's text content, joined.
    pub fn text(&self) -> String {
        self.result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The result as JSON, exactly as the model gets it.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&self.result).unwrap_or(Value::Null)
    }
}

pub struct ToolRegistry {
    tools: BTreeMap<String, RegisteredTool>,
    default_timeout: Duration,
}

impl ToolRegistry {
    /// Checks names and compiles every schema. Any problem is a start-up error that names the
    /// plugin, the tool and what is wrong.
    pub fn load(
        plugins: &[Arc<dyn Plugin>],
        default_timeout: Duration,
    ) -> Result<ToolRegistry, SchemaError> {
        Self::load_where(plugins, default_timeout, |_| true)
    }

    /// [`ToolRegistry::load`] with only the tools `keep` accepts (the MCP endpoint leaves out
    /// tools that need a calling thread).
    pub fn load_where(
        plugins: &[Arc<dyn Plugin>],
        default_timeout: Duration,
        keep: impl Fn(&dyn Tool) -> bool,
    ) -> Result<ToolRegistry, SchemaError> {
        let mut loaded = Vec::new();
        for plugin in plugins {
            for handler in plugin.tools().into_iter().filter(|t| keep(t.as_ref())) {
                // `compile_tool` checks the name too; uniqueness needs them all.
                let compiled = schema::compile_tool(plugin.name(), &handler.spec())?;
                loaded.push(RegisteredTool {
                    plugin: plugin.name().to_owned(),
                    compiled,
                    handler,
                });
            }
        }
        schema::check_unique(loaded.iter().map(|t| t.compiled.name.as_str()))?;
        let tools = loaded
            .into_iter()
            .map(|t| (t.compiled.name.clone(), t))
            .collect();
        Ok(ToolRegistry {
            tools,
            default_timeout,
        })
    }

    pub fn empty() -> ToolRegistry {
        ToolRegistry {
            tools: BTreeMap::new(),
            default_timeout: Duration::from_secs(120),
        }
    }

    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The longest a call to any of these tools may run: each tool's own timeout, else the
    /// default. Whoever waits on a call from outside (the CLI) must wait longer than this.
    pub fn longest_timeout(&self) -> Duration {
        self.tools
            .values()
            .map(|t| t.compiled.timeout.unwrap_or(self.default_timeout))
            .fold(self.default_timeout, Duration::max)
    }

    /// The `tools/list` entries: API-safe input schemas, output schemas when declared.
    pub fn list(&self) -> Vec<rmcp::model::Tool> {
        let object = |schema: &Value| Arc::new(schema.as_object().cloned().unwrap_or_default());
        self.tools
            .values()
            .map(|t| {
                let mut tool = rmcp::model::Tool::new(
                    t.compiled.name.clone(),
                    t.compiled.description.clone(),
                    object(&t.compiled.advertised_schema),
                );
                tool.output_schema = t.compiled.output_schema.as_ref().map(object);
                tool
            })
            .collect()
    }

    /// Validates, fills defaults, runs the tool in its own task under a timeout, checks its
    /// structured output. Every failure on the way is an error result the model reads.
    pub async fn call(&self, name: &str, input: Value, ctx: ToolContext) -> CallOutcome {
        let started = Instant::now();
        let (result, failure) = match self.call_checked(name, input, ctx).await {
            Ok(result) => (result, Failure::default()),
            Err(failure) => (CallOutcome::error_result(failure.text.clone()), failure),
        };
        CallOutcome {
            result,
            duration: started.elapsed(),
            violations: failure.input,
            output_violations: failure.output,
        }
    }

    /// [`ToolRegistry::call`]'s steps: the tool found, its input checked, the tool run, its
    /// output checked; the first that fails is the outcome.
    async fn call_checked(
        &self,
        name: &str,
        input: Value,
        ctx: ToolContext,
    ) -> Result<CallToolResult, Failure> {
        let Some(tool) = self.tools.get(name) else {
            let known: Vec<&str> = self.names().collect();
            return Err(Failure::said(format!(
                "unknown tool `{name}`; known tools: {}",
                known.join(", ")
            )));
        };
        let input = checked_input(tool, name, input, ctx.thread_id.as_ref())?;
        let limit = tool.compiled.timeout.unwrap_or(self.default_timeout);
        let output = run_tool(name, tool.handler.clone(), ctx, input, limit)
            .await
            .map_err(Failure::said)?;
        checked_output(tool, name, output)
    }
}

/// A door that does a tool's work itself, later (an MCP task of `threads__send`), checks and
/// answers through these, so that its input is refused and its result reads as a call's would.
impl ToolRegistry {
    /// The input of a call of `name` with its defaults filled in, or the error result a call
    /// would answer (an unknown tool, or the input schema's violations).
    pub fn prepare(&self, name: &str, input: Value) -> Result<Value, CallToolResult> {
        let Some(tool) = self.tools.get(name) else {
            return Err(CallOutcome::error_result(format!("unknown tool `{name}`")));
        };
        checked_input(tool, name, input, None).map_err(|f| CallOutcome::error_result(f.text))
    }

    /// The result a call of `name` that ended with `output` answers: the same output check and
    /// error texts as [`ToolRegistry::call`].
    pub fn answer(&self, name: &str, output: Result<ToolOutput, ToolError>) -> CallToolResult {
        let Some(tool) = self.tools.get(name) else {
            return CallOutcome::error_result(format!("unknown tool `{name}`"));
        };
        output
            .map_err(|err| Failure::said(error_text(name, err)))
            .and_then(|output| checked_output(tool, name, output))
            .unwrap_or_else(|failure| CallOutcome::error_result(failure.text))
    }
}

/// What the model reads of a tool's error.
fn error_text(name: &str, err: ToolError) -> String {
    match err {
        ToolError::InvalidInput(msg) => format!("invalid input for tool `{name}`: {msg}"),
        ToolError::Failed(msg) => format!("tool `{name}` failed: {msg}"),
    }
}

/// Why a call has no result: the text the model reads instead, and the violations when a schema
/// refused the input or the output.
#[derive(Default)]
struct Failure {
    text: String,
    input: Option<Vec<schema::Violation>>,
    output: Option<Vec<schema::Violation>>,
}

impl Failure {
    fn said(text: String) -> Failure {
        Failure {
            text,
            ..Failure::default()
        }
    }
}

/// The input with its defaults filled in (`null` is `{}`), or the violations of the tool's input
/// schema as an error result.
fn checked_input(
    tool: &RegisteredTool,
    name: &str,
    input: Value,
    thread: Option<&plugin_contract::ThreadId>,
) -> Result<Value, Failure> {
    let input = if input.is_null() { json!({}) } else { input };
    tool.compiled.prepare_input(input).map_err(|violations| {
        let text = schema::render_violations(name, &violations);
        warn!(thread_id = ?thread, tool = name, violations = violations.len(), "Tool input rejected: {text}");
        Failure {
            input: Some(violations),
            ..Failure::said(text)
        }
    })
}

/// Runs the tool in its own task, aborted if this call is dropped (the CLI cancelled it) or
/// outlives `limit`; the request's trace goes with it into the task. A timeout, the
/// tool's error, a panic or a cancel is the text the model reads.
async fn run_tool(
    name: &str,
    handler: Arc<dyn Tool>,
    ctx: ToolContext,
    input: Value,
    limit: Duration,
) -> Result<ToolOutput, String> {
    let traceparent = crate::traces::parent();
    let mut task = AbortOnDropHandle::new(tokio::spawn(crate::traces::under(
        traceparent,
        async move { handler.call(ctx, input).await },
    )));
    let Ok(joined) = tokio::time::timeout(limit, &mut task).await else {
        return Err(format!(
            "tool `{name}` did not finish within {limit:?} and was stopped"
        ));
    };
    match joined {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(err)) => Err(error_text(name, err)),
        Err(join) if join.is_panic() => {
            let msg = panic_message(join.into_panic());
            error!(tool = name, panic = %msg, "Tool panicked.");
            Err(format!("tool `{name}` panicked: {msg}"))
        }
        Err(_) => Err(format!("tool `{name}` was cancelled")),
    }
}

/// The tool's output as a result: its text, and its structured output when it matches the
/// tool's output schema (one that does not, or none where the tool declares a schema, is an
/// error result: a bug in the tool).
fn checked_output(
    tool: &RegisteredTool,
    name: &str,
    output: ToolOutput,
) -> Result<CallToolResult, Failure> {
    let mut result = CallToolResult::success(vec![ContentBlock::text(output.text)]);
    result.result_type = None;
    result.is_error = None;
    if let Some(structured) = output.structured {
        if let Err(violations) = tool.compiled.check_output(&structured) {
            let mut text =
                format!("tool `{name}` produced output that does not match its output schema:");
            for violation in &violations {
                text.push_str("\n- ");
                text.push_str(&violation.to_string());
            }
            error!(
                tool = name,
                "Tool output does not match its output schema: {text}"
            );
            return Err(Failure {
                output: Some(violations),
                ..Failure::said(text)
            });
        }
        result.structured_content = Some(structured);
    } else if tool.compiled.output_schema.is_some() {
        error!(
            tool = name,
            "Tool declares an output schema but returned no structured output."
        );
        return Err(Failure::said(format!(
            "tool `{name}` returned no structured output"
        )));
    }
    Ok(result)
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_tools_with_one_name_stop_the_load() {
        let time: Arc<dyn Plugin> = Arc::new(harness_plugin_time::TimePlugin);
        let err = ToolRegistry::load(&[time.clone(), time], Duration::from_secs(1))
            .err()
            .expect("a duplicate name is refused");
        assert!(err.to_string().contains("time__current_time"), "{err}");
    }

    #[test]
    fn each_tool_is_listed_once_under_its_full_name() {
        let time: Arc<dyn Plugin> = Arc::new(harness_plugin_time::TimePlugin);
        let registry = ToolRegistry::load(&[time], Duration::from_secs(1)).unwrap();
        assert_eq!(registry.names().collect::<Vec<_>>(), ["time__current_time"]);
        assert_eq!(registry.list().len(), 1);
    }

    #[test]
    fn the_longest_timeout_is_the_default_or_a_longer_one_a_tool_sets() {
        let probe: Arc<dyn Plugin> = Arc::new(harness_plugin_probe::ProbePlugin::default());
        let slow = harness_plugin_probe::SLOW_TIMEOUT;
        let registry =
            ToolRegistry::load(std::slice::from_ref(&probe), Duration::from_secs(1)).unwrap();
        assert_eq!(registry.longest_timeout(), Duration::from_secs(1));
        let short = slow / 3;
        let registry = ToolRegistry::load(&[probe], short).unwrap();
        assert_eq!(registry.longest_timeout(), slow, "probe__slow sets its own");
        assert_eq!(
            ToolRegistry::empty().longest_timeout(),
            Duration::from_secs(120)
        );
    }
}
