//! The in-process MCP server `harness`, spoken over the CLI's control channel.
//!
//! - [`schema`]: JSON Schema normalization, API-safe advertising, validation and defaults (no IO).
//! - [`registry`]: the loaded tools; one call path (validate → run with timeout → check output)
//!   shared by the CLI and the HTTP API.
//! - [`adapter`]: JSON-RPC in `rmcp`'s model types: routes each message from a process, runs
//!   tool calls with the turn's context, records every call.

pub mod adapter;
pub mod registry;
pub mod schema;

pub use adapter::{McpAdapter, Route, ToolCall, SERVER_NAME};
pub use registry::{CallOutcome, ToolRegistry};
