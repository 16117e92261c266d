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
        if ctx.thread_id.as_str().is_empty() {
            return Err(ToolError::InvalidInput(
                "delegation needs a calling thread; when calling the tool over HTTP, pass threadId"
                    .into(),
            ));
        }
        let depth = ctx
            .store
            .depth(&ctx.thread_id)
            .await
            .map_err(ToolError::Failed)?;
        if depth >= self.max_depth {
            return Err(ToolError::Failed(format!(
                "delegation depth limit reached: this thread is {depth} level(s) below its root and the limit is {}; \
                 do the task yourself",
                self.max_depth
            )));
        }
        let reply = ctx
            .delegate
            .delegate(&ctx.thread_id, prompt, model)
            .await
            .map_err(ToolError::Failed)?;
        Ok(ToolOutput::text(reply.text))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use plugin_contract::{
        CliSessionId, DelegateReply, HistoryMessage, InvokeError, InvokeOptions, InvokeOutcome,
        Invoker, ThreadId, ThreadInfo, ThreadStore,
    };

    use super::*;

    /// Threads t0 ← t1 ← t2 ← t3 (each the parent of the next).
    struct Chain;
    #[async_trait]
    impl ThreadStore for Chain {
        async fn thread(&self, id: &ThreadId) -> Result<Option<ThreadInfo>, String> {
            let n: u32 = id
                .as_str()
                .trim_start_matches('t')
                .parse()
                .map_err(|_| "bad id".to_string())?;
            Ok(Some(ThreadInfo {
                id: id.clone(),
                title: None,
                model: None,
                parent_id: (n > 0).then(|| ThreadId::from_string(format!("t{}", n - 1))),
            }))
        }
        async fn history(&self, _: &ThreadId) -> Result<Vec<HistoryMessage>, String> {
            Ok(Vec::new())
        }
        async fn depth(&self, id: &ThreadId) -> Result<u32, String> {
            // tN is N levels below t0.
            id.as_str()
                .trim_start_matches('t')
                .parse()
                .map_err(|_| "bad id".to_string())
        }
    }

    #[derive(Default)]
    struct Recorder(Mutex<HashMap<String, String>>);
    #[async_trait]
    impl plugin_contract::Delegate for Recorder {
        async fn delegate(
            &self,
            parent: &ThreadId,
            prompt: String,
            _: Option<String>,
        ) -> Result<DelegateReply, String> {
            self.0
                .lock()
                .unwrap()
                .insert(parent.to_string(), prompt.clone());
            Ok(DelegateReply {
                child_thread_id: ThreadId::from_string("child"),
                text: format!("did: {prompt}"),
            })
        }
    }

    struct NoInvoker;
    #[async_trait]
    impl Invoker for NoInvoker {
        async fn invoke(&self, _: &str, _: InvokeOptions) -> Result<InvokeOutcome, InvokeError> {
            Err(InvokeError::ShuttingDown)
        }
        async fn prewarm(
            &self,
            _: &ThreadId,
            _: Option<CliSessionId>,
            _: Option<String>,
        ) -> Result<(), InvokeError> {
            Ok(())
        }
    }

    fn ctx(thread: &str, recorder: Arc<Recorder>) -> ToolContext {
        ToolContext {
            thread_id: ThreadId::from_string(thread),
            store: Arc::new(Chain),
            invoker: Arc::new(NoInvoker),
            delegate: recorder,
        }
    }

    #[tokio::test]
    async fn delegates_below_the_limit_and_returns_the_reply() {
        let recorder = Arc::new(Recorder::default());
        let tool = Delegate {
            max_depth: 3,
            timeout: Duration::from_secs(1),
        };
        let out = tool
            .call(ctx("t2", recorder.clone()), json!({"prompt": "sum 2+2"}))
            .await
            .unwrap();
        assert_eq!(out.text, "did: sum 2+2");
        assert_eq!(
            recorder.0.lock().unwrap().get("t2").map(String::as_str),
            Some("sum 2+2")
        );
    }

    #[tokio::test]
    async fn refuses_at_the_depth_limit() {
        let recorder = Arc::new(Recorder::default());
        let tool = Delegate {
            max_depth: 3,
            timeout: Duration::from_secs(1),
        };
        let err = tool
            .call(ctx("t3", recorder.clone()), json!({"prompt": "x"}))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("depth limit"), "{err}");
        assert!(
            recorder.0.lock().unwrap().is_empty(),
            "no child was started"
        );
    }

    #[tokio::test]
    async fn a_call_without_a_thread_says_so() {
        let recorder = Arc::new(Recorder::default());
        let tool = Delegate {
            max_depth: 3,
            timeout: Duration::from_secs(1),
        };
        let err = tool
            .call(ctx("", recorder.clone()), json!({"prompt": "x"}))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("pass threadId"), "{err}");
        assert!(recorder.0.lock().unwrap().is_empty());
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
