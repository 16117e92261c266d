//! The in-process MCP server `harness`, spoken over the CLI's control channel.
//!
//! - [`schema`]: JSON Schema normalization, API-safe advertising, validation and defaults (no IO).
//! - [`registry`]: the loaded tools; one call path (validate → run with timeout → check output)
//!   shared by the CLI and the HTTP API.
//! - [`adapter`]: JSON-RPC over `mcp_message` control requests; records every call.

pub mod adapter;
pub mod registry;
pub mod schema;

pub use adapter::{McpAdapter, ToolServices};
pub use registry::{CallOutcome, ToolRegistry};
