//! The contract between the Harness daemon and its plugins.
//!
//! Everything a plugin may name lives here: identities ([`ThreadId`], [`CliSessionId`]), tools
//! ([`Tool`], [`ToolSpec`], [`ToolOutput`], [`ToolError`]), the per-turn context hook
//! ([`ContextProvider`]) and the capabilities the daemon hands in through [`ToolContext`]
//! ([`ThreadStore`], [`Invoker`], [`Delegate`]).
//!
//! **Boundary:** plugins depend on this crate only, never on `orchestrator`.
//! **Invariant:** no axum, sqlx or tokio::process in this crate's dependency list; it holds types and
//! traits, no IO.

mod ids;
mod invoke;
mod tool;

pub use ids::{CliSessionId, ThreadId};
pub use invoke::{
    EventSink, InvokeError, InvokeOptions, InvokeOutcome, Invoker, SessionStart, StreamEvent,
    TurnPreparer,
};
pub use tool::{
    ContextProvider, Delegate, DelegateReply, HistoryMessage, Plugin, ThreadInfo, ThreadStore,
    Tool, ToolContext, ToolError, ToolOutput, ToolSpec, TurnContext,
};

/// Re-exported so plugins can implement the async traits without naming the crate themselves.
pub use async_trait::async_trait;
