//! The `delegation` plugin: `delegation__delegate {prompt, model?}` runs the prompt on a new child
//! thread (its parent set to the calling thread, its own process in the pool) through the
//! daemon's message pipeline, and returns the child's reply as the tool result.
//!
//! Depth is limited: a thread that is already `max_depth` levels below a root thread cannot
//! delegate further, and the model gets a clear tool error saying so.
//!
//! Settings come from `[plugins.delegation]` ([`DelegationSettings`]); the daemon holds none of
//! its own. It learns the two bounds it needs from the plugin: the child's turn timeout comes
//! with each [`plugin_contract::Delegate::delegate`] call, and the tool's own timeout (a little
//! above it) is in its [`ToolSpec`], from which the daemon sizes the CLI's MCP call limit.

use std::sync::Arc;
use std::time::Duration;

use plugin_contract::{
    async_trait, parse_settings, Plugin, PluginTable, SettingsError, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec,
};
use serde::Deserialize;
use serde_json::{json, Value};

/// The plugin's name: its tools are `delegation__*`, its settings `[plugins.delegation]`.
pub const NAME: &str = "delegation";

/// `[plugins.delegation]`. Every key is optional; an unknown one stops start-up.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DelegationSettings {
    /// How many levels below a root thread a child may sit: a thread this deep cannot delegate.
    /// Each level holds a process and a place under the concurrency limit while it waits.
    pub max_depth: u32,
    /// Bound on one delegated turn, in seconds in the file. The tool's own timeout sits 10 s
    /// above it, so the child's turn ends first, with its own error.
    #[serde(with = "plugin_contract::settings::secs")]
    pub timeout: Duration,
}

impl Default for DelegationSettings {
    fn default() -> Self {
        Self {
            max_depth: 3,
            timeout: Duration::from_secs(15 * 60),
        }
    }
}

pub struct DelegationPlugin {
    settings: DelegationSettings,
}

impl DelegationPlugin {
    pub fn new(settings: DelegationSettings) -> Self {
        Self { settings }
    }

    /// The plugin as `[plugins.delegation]` sets it (`None`: no table, the defaults).
    pub fn from_table(table: Option<&PluginTable>) -> Result<Self, SettingsError> {
        Ok(Self::new(parse_settings(NAME, table)?))
    }
}

impl Plugin for DelegationPlugin {
    fn name(&self) -> &str {
        NAME
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(Delegate {
            max_depth: self.settings.max_depth,
            timeout: self.settings.timeout,
        })]
    }
}

struct Delegate {
    max_depth: u32,
    timeout: Duration,
}

#[async_trait]
impl Tool for Delegate {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "delegate".into(),
            description: "Hand a self-contained task to a sub-agent that runs in its own conversation, \
                          and get its final answer back. The sub-agent does not see this conversation: \
                          put everything it needs in the prompt."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "minLength": 1, "description": "The complete task for the sub-agent."},
                    "model": {"type": "string", "description": "Model for the sub-agent; defaults to this thread's model."}
                },
                "required": ["prompt"],
                "additionalProperties": false
            }),
            output_schema: None,
            timeout: Some(self.timeout + Duration::from_secs(10)),
        }
    }

    async fn call(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let prompt = input
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let model = input
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let Some(thread) = &ctx.thread_id else {
            return Err(ToolError::InvalidInput(
                "delegation needs a calling thread; when calling the tool over HTTP, pass threadId"
                    .into(),
            ));
        };
        let depth = ctx.store.depth(thread).await.map_err(ToolError::Failed)?;
        if depth >= self.max_depth {
            return Err(ToolError::Failed(format!(
                "delegation depth limit reached: this thread is {depth} level(s) below its root and the limit is {}; \
                 do the task yourself",
                self.max_depth
            )));
        }
        let reply = ctx
            .delegate
            .delegate(thread, prompt.into(), model, self.timeout)
            .await
            .map_err(ToolError::Failed)?;
        Ok(ToolOutput::text(reply.text))
    }

    /// A child needs a parent: outside MCP clients, which call with no thread, do not see it.
    fn needs_thread(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use plugin_contract::testing::{tool_context, StubDelegate, StubStore};
    use plugin_contract::ThreadId;

    use super::*;

    /// Threads t0 ← t1 ← t2 ← t3 (each the parent of the next): tN is N levels below t0.
    fn chain() -> StubStore {
        (1..=3).fold(StubStore::default().with_thread("t0", None), |store, n| {
            store.with_thread(&format!("t{n}"), Some(&format!("t{}", n - 1)))
        })
    }

    fn tool() -> Delegate {
        Delegate {
            max_depth: 3,
            timeout: Duration::from_secs(1),
        }
    }

    #[tokio::test]
    async fn delegates_below_the_limit_and_returns_the_reply() {
        let delegate = Arc::new(StubDelegate::default());
        let out = tool()
            .call(
                tool_context(Some("t2"), chain(), delegate.clone()),
                json!({"prompt": "sum 2+2"}),
            )
            .await
            .unwrap();
        assert_eq!(out.text, "did: sum 2+2");
        assert_eq!(
            delegate.calls(),
            [(ThreadId::from_string("t2"), "sum 2+2".to_owned())]
        );
    }

    #[tokio::test]
    async fn refuses_at_the_depth_limit() {
        let delegate = Arc::new(StubDelegate::default());
        let err = tool()
            .call(
                tool_context(Some("t3"), chain(), delegate.clone()),
                json!({"prompt": "x"}),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("depth limit"), "{err}");
        assert!(delegate.calls().is_empty(), "no child was started");
    }

    #[tokio::test]
    async fn a_call_without_a_thread_says_so() {
        let delegate = Arc::new(StubDelegate::default());
        let err = tool()
            .call(
                tool_context(None, chain(), delegate.clone()),
                json!({"prompt": "x"}),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("pass threadId"), "{err}");
        assert!(delegate.calls().is_empty());
    }

    /// The plugin as the table `text` (a `[plugins.delegation]` body) sets it.
    fn from_settings(text: &str) -> Result<DelegationPlugin, SettingsError> {
        DelegationPlugin::from_table(Some(&text.parse::<PluginTable>().unwrap()))
    }

    /// The plugin's one tool.
    fn only_tool(plugin: &DelegationPlugin) -> Arc<dyn Tool> {
        let mut tools = plugin.tools();
        assert_eq!(tools.len(), 1);
        tools.remove(0)
    }

    #[test]
    fn without_a_table_the_settings_are_the_documented_defaults() {
        let plugin = DelegationPlugin::from_table(None).unwrap();
        assert_eq!(plugin.settings.max_depth, 3);
        assert_eq!(plugin.settings.timeout, Duration::from_secs(900));
        assert_eq!(plugin.settings, from_settings("").unwrap().settings);
    }

    #[test]
    fn a_typo_in_the_table_is_refused_naming_the_plugin_and_the_key() {
        let err = from_settings("max_dept = 1").err().expect("refused");
        let shown = err.to_string();
        assert!(
            shown.contains("[plugins.delegation]") && shown.contains("`max_dept`"),
            "{shown}"
        );
        let err = from_settings("timeout = \"15m\"").err().expect("refused");
        assert!(err.to_string().contains("`timeout`"), "{err}");
    }

    #[tokio::test]
    async fn the_table_sets_the_turn_bound_the_tool_timeout_and_the_depth() {
        let plugin = from_settings("max_depth = 1\ntimeout = 42").unwrap();
        let tool = only_tool(&plugin);
        assert_eq!(tool.spec().timeout, Some(Duration::from_secs(52)));

        // The child's turn is bound by the table's timeout.
        let delegate = Arc::new(StubDelegate::default());
        tool.call(
            tool_context(Some("t0"), chain(), delegate.clone()),
            json!({"prompt": "x"}),
        )
        .await
        .unwrap();
        assert_eq!(delegate.timeouts(), [Duration::from_secs(42)]);

        // One level below a root is already the limit.
        let err = tool
            .call(
                tool_context(Some("t1"), chain(), delegate.clone()),
                json!({"prompt": "x"}),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("the limit is 1"), "{err}");
        assert_eq!(delegate.calls().len(), 1, "no second child was started");
    }

    #[test]
    fn tool_timeout_is_above_the_turn_timeout() {
        let tool = Delegate {
            max_depth: 3,
            timeout: Duration::from_secs(60),
        };
        assert!(tool.spec().timeout.unwrap() > Duration::from_secs(60));
    }
}
