//! The contract between the Harness daemon and its plugins.
//!
//! Everything a plugin may name lives here, and nothing else: a message's content
//! ([`UserContent`]: text, images and documents, the `claude-cli` protocol's own type), identities ([`ThreadId`],
//! [`CliSessionId`]), tools ([`Tool`], [`ToolSpec`], [`ToolOutput`], [`ToolError`]), the per-turn
//! context hook ([`ContextProvider`], [`TurnContext`], [`SessionStart`]) and the capabilities the
//! daemon hands in through [`ToolContext`] ([`ThreadStore`], [`Delegate`]), and each plugin's own
//! settings from its `[plugins.NAME]` table ([`settings`]). With the `testing` feature,
//! [`testing`] has one stand-in per capability for plugins' tests.
//!
//! **Boundary:** plugins depend on this crate only, never on `orchestrator`.
//! **Invariant:** no axum, sqlx or tokio::process in this crate's dependency list (`claude-cli`
//! comes without its `process` feature); it holds types and
//! traits, no IO.

mod ids;
mod session;
pub mod settings;
#[cfg(feature = "testing")]
pub mod testing;
mod tool;

pub use claude_cli::protocol::{ContentBlock, MediaSource, UserContent};
pub use ids::{CliSessionId, ThreadId};
pub use session::SessionStart;
pub use settings::{parse_settings, NoSettings, PluginTable, SettingsError};
pub use tool::{
    ContextProvider, Delegate, DelegateReply, HistoryMessage, Plugin, ThreadInfo, ThreadStore,
    Tool, ToolContext, ToolError, ToolOutput, ToolSpec, TurnContext,
};

/// Re-exported so plugins can implement the async traits without naming the crate themselves.
pub use async_trait::async_trait;
