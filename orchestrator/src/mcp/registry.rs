//! The daemon's tools, checked and compiled at load, and the one way a tool is called.
//!
//! Invariant: nothing in a tool call aborts the caller. Schema violations, tool errors, panics,
//! timeouts and bad structured output all become a result with `isError: true` whose text says
//! what went wrong, so the model can read it and the turn goes on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tracing::{error, warn};

use plugin_contract::{Plugin, Tool, ToolContext, ToolError};

use super::schema::{self, CompiledTool, SchemaError};

/// A tool ready to be called.
pub struct RegisteredTool {
    pub plugin: String,
    pub compiled: CompiledTool,
    handler: Arc<dyn Tool>,
}

/// What a tool call produced, in the MCP `CallToolResult` shape the model gets.
#[derive(Clone, Debug)]
pub struct CallOutcome {
    /// `{content: [{type: "text", text}], structuredContent?, isError?}`
    pub result: Value,
    pub is_error: bool,
    pub duration: Duration,
    /// Present when the input failed validation.
    pub violations: Option<Vec<schema::Violation>>,
}

impl CallOutcome {
    fn error(text: String, started: Instant) -> Self {
        CallOutcome {
            result: json!({"content": [{"type": "text", "text": text}], "isError": true}),
            is_error: true,
            duration: started.elapsed(),
            violations: None,
        }
    }

    /// The result's text content, joined.
    pub fn text(&self) -> String {
        self.result["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
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
        let mut loaded = Vec::new();
        for plugin in plugins {
            for handler in plugin.tools() {
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

    /// The `tools/list` entries: API-safe input schemas, output schemas when declared.
    pub fn list(&self) -> Vec<Value> {
        self.tools
            .values()
            .map(|t| {
                let mut entry = Map::new();
                entry.insert("name".into(), json!(t.compiled.name));
                entry.insert("description".into(), json!(t.compiled.description));
                entry.insert("inputSchema".into(), t.compiled.advertised_schema.clone());
                if let Some(output) = &t.compiled.output_schema {
                    entry.insert("outputSchema".into(), output.clone());
                }
                Value::Object(entry)
            })
            .collect()
    }

    /// Validates, fills defaults, runs the tool in its own task under a timeout, checks its
    /// structured output.
    pub async fn call(&self, name: &str, input: Value, ctx: ToolContext) -> CallOutcome {
        let started = Instant::now();
        let Some(tool) = self.tools.get(name) else {
            let known: Vec<&str> = self.names().collect();
            return CallOutcome::error(
                format!("unknown tool `{name}`; known tools: {}", known.join(", ")),
                started,
            );
        };
        let input = if input.is_null() { json!({}) } else { input };
        let input = match tool.compiled.prepare_input(input) {
            Ok(input) => input,
            Err(violations) => {
                let text = schema::render_violations(name, &violations);
                warn!(thread_id = %ctx.thread_id, tool = name, violations = violations.len(), "Tool input rejected: {text}");
                let mut outcome = CallOutcome::error(text, started);
                outcome.violations = Some(violations);
                return outcome;
            }
        };
        let limit = tool.compiled.timeout.unwrap_or(self.default_timeout);
        let handler = tool.handler.clone();
        // Aborted if this call is dropped (the CLI cancelled it) or times out.
        let mut task = AbortOnDrop(tokio::spawn(async move { handler.call(ctx, input).await }));
        let joined = match tokio::time::timeout(limit, &mut task.0).await {
            Ok(joined) => joined,
            Err(_) => {
                return CallOutcome::error(
                    format!("tool `{name}` did not finish within {limit:?} and was stopped"),
                    started,
                );
            }
        };
        let output = match joined {
            Ok(Ok(output)) => output,
            Ok(Err(ToolError::InvalidInput(msg))) => {
                return CallOutcome::error(
                    format!("invalid input for tool `{name}`: {msg}"),
                    started,
                )
            }
            Ok(Err(ToolError::Failed(msg))) => {
                return CallOutcome::error(format!("tool `{name}` failed: {msg}"), started)
            }
            Err(join) if join.is_panic() => {
                let msg = panic_message(join.into_panic());
                error!(tool = name, panic = %msg, "Tool panicked.");
                return CallOutcome::error(format!("tool `{name}` panicked: {msg}"), started);
            }
            Err(_) => return CallOutcome::error(format!("tool `{name}` was cancelled"), started),
        };
        let mut result = json!({"content": [{"type": "text", "text": output.text}]});
        if let Some(structured) = output.structured {
            if let Err(violations) = tool.compiled.check_output(&structured) {
                let text = schema::render_violations(name, &violations);
                error!(
                    tool = name,
                    "Tool output does not match its output schema: {text}"
                );
                return CallOutcome::error(
                    format!("tool `{name}` produced output that does not match its output schema:\n{text}"),
                    started,
                );
            }
            result["structuredContent"] = structured;
        } else if tool.compiled.output_schema.is_some() {
            error!(
                tool = name,
                "Tool declares an output schema but returned no structured output."
            );
            return CallOutcome::error(
                format!("tool `{name}` returned no structured output"),
                started,
            );
        }
        CallOutcome {
            result,
            is_error: false,
            duration: started.elapsed(),
            violations: None,
        }
    }
}

/// Aborts the tool's task when the call that awaits it goes away.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
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
}
