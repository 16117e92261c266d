//! Plugins, their tools, and the capabilities the daemon hands to a running tool.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::{SessionStart, ThreadId, UserContent};

/// A plugin: a named bundle of tools and, optionally, a context hook.
pub trait Plugin: Send + Sync {
    /// The plugin's name; tool names are `<plugin>__<tool>`. Letters, digits and `_` only.
    fn name(&self) -> &str;

    /// The tools this plugin serves to every `claude` process.
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// A hook that may add context to the prompt of each turn.
    fn context_provider(&self) -> Option<Arc<dyn ContextProvider>> {
        None
    }
}

/// How a tool presents itself to the model.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    /// The tool's own name, without the plugin prefix: `current_time`.
    pub name: String,
    /// What the tool does; the model reads it.
    pub description: String,
    /// A JSON Schema (draft 2020-12) for the input, or the shorthand form
    /// `{"field": "string", "other": {"type": "integer", "default": 3}}`.
    pub input_schema: Value,
    /// A JSON Schema the tool's `structured` output must satisfy.
    pub output_schema: Option<Value>,
    /// Overrides the daemon's per-tool timeout (delegation runs whole turns and needs longer).
    pub timeout: Option<Duration>,
}

/// One tool. Input reaching [`Tool::call`] has already been validated against the input schema
/// and has its defaults filled in.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    fn spec(&self) -> ToolSpec;
    async fn call(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError>;

    /// True for a tool that only makes sense inside a thread (delegation runs a child of the
    /// calling thread). Such a tool is served to the CLI's processes only, not to outside MCP
    /// clients, which call with no thread.
    fn needs_thread(&self) -> bool {
        false
    }
}

/// What a tool returns to the model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolOutput {
    /// A text rendering of the result.
    pub text: String,
    /// Structured data. Claude Code shows the model only this (as JSON) when it is present, so it
    /// must carry everything the model needs.
    pub structured: Option<Value>,
}

impl ToolOutput {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            structured: None,
        }
    }

    pub fn structured(text: impl Into<String>, structured: Value) -> Self {
        Self {
            text: text.into(),
            structured: Some(structured),
        }
    }
}

/// A tool call that did not work. Either way the model gets the message as an error result and
/// the turn goes on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ToolError {
    /// The input made sense to the schema but not to the tool (an unknown timezone, say).
    #[error("{0}")]
    InvalidInput(String),
    /// The tool tried and failed.
    #[error("{0}")]
    Failed(String),
}

/// What the daemon hands to a running tool.
#[derive(Clone)]
pub struct ToolContext {
    /// The thread whose process called the tool; `None` for a call from the HTTP API that named
    /// no thread. A tool that only makes sense inside a thread refuses to run without one.
    pub thread_id: Option<ThreadId>,
    /// Read access to threads and their messages.
    pub store: Arc<dyn ThreadStore>,
    /// Runs a child thread through the daemon's message pipeline.
    pub delegate: Arc<dyn Delegate>,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("thread_id", &self.thread_id)
            .finish_non_exhaustive()
    }
}

/// A thread as plugins see it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadInfo {
    pub id: ThreadId,
    pub title: Option<String>,
    pub model: Option<String>,
    pub parent_id: Option<ThreadId>,
}

/// One earlier message of a thread.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HistoryMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// A user message's text, images and documents (images and documents as stored file
    /// references, which the daemon resolves to their bytes before the CLI sees them); an
    /// assistant message's text.
    pub content: UserContent,
}

/// Read access to the daemon's store.
#[async_trait::async_trait]
pub trait ThreadStore: Send + Sync {
    async fn thread(&self, id: &ThreadId) -> Result<Option<ThreadInfo>, String>;

    /// The thread's finished exchanges in order, oldest first: user messages and the assistant
    /// replies that answered them. The message of the turn being run is not included.
    async fn history(&self, id: &ThreadId) -> Result<Vec<HistoryMessage>, String>;

    /// How many ancestors the thread has through `parent_id` (a root thread has 0). Delegation
    /// uses it for its depth limit.
    async fn depth(&self, id: &ThreadId) -> Result<u32, String>;
}

/// The reply of a delegated child thread.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DelegateReply {
    pub child_thread_id: ThreadId,
    pub text: String,
}

/// Runs a prompt on a new child thread of `parent` through the daemon's one message pipeline.
#[async_trait::async_trait]
pub trait Delegate: Send + Sync {
    /// `timeout` bounds the child's turn. It is the caller's setting (the delegation plugin's
    /// `[plugins.delegation] timeout`), passed with each call so that the daemon keeps no
    /// delegation setting of its own.
    async fn delegate(
        &self,
        parent: &ThreadId,
        prompt: UserContent,
        model: Option<String>,
        timeout: Duration,
    ) -> Result<DelegateReply, String>;
}

/// What a context hook knows about the turn it may add to.
#[derive(Clone)]
pub struct TurnContext {
    pub thread_id: ThreadId,
    pub start: SessionStart,
    pub store: Arc<dyn ThreadStore>,
}

/// Adds to a turn's prompt before the CLI sees it.
#[async_trait::async_trait]
pub trait ContextProvider: Send + Sync {
    /// Returns what to put before the user's prompt (its own leading blocks, which may carry
    /// images and documents), or `None` to add nothing.
    async fn context(&self, turn: &TurnContext) -> Result<Option<UserContent>, String>;
}
