//! The `delegation` plugin: `delegation__delegate {prompt, model?}` runs the prompt on a new child
//! thread (its parent set to the calling thread, its own process in the pool) through the
//! daemon's message pipeline, and returns the child's reply as the tool result.
//!
//! Depth is limited: a thread that is already `max_depth` levels below a root thread cannot
//! delegate further, and the model gets a clear tool error saying so.

use std::sync::Arc;
use std::time::Duration;

use plugin_contract::{async_trait, Plugin, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use serde_json::{json, Value};

pub struct DelegationPlugin {
    max_depth: u32,
    timeout: Duration,
}

impl DelegationPlugin {
    /// `timeout` bounds one delegated turn; the tool's own timeout sits a little above it.
    pub fn new(max_depth: u32, timeout: Duration) -> Self {
        Self { max_depth, timeout }
    }
}

impl Plugin for DelegationPlugin {
    fn name(&self) -> &str {
        "delegation"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(Delegate {
            max_depth: self.max_depth,
            timeout: self.timeout,
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
            .delegate(thread, prompt, model)
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

    #[test]
    fn tool_timeout_is_above_the_turn_timeout() {
        let tool = Delegate {
            max_depth: 3,
            timeout: Duration::from_secs(60),
        };
        assert!(tool.spec().timeout.unwrap() > Duration::from_secs(60));
    }
}
