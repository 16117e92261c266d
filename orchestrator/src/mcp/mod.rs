//! The in-process MCP servers, spoken over the CLI's control channel: `harness` (the plugin tools)
//! and, for a profile with tools the client runs, `custom`.
//!
//! - [`schema`]: JSON Schema normalization, API-safe advertising, validation and defaults (no IO).
//! - [`registry`]: the loaded tools; one call path (validate → run with timeout → check output)
//!   shared by the CLI and the HTTP API.
//! - [`client`]: the tools a client runs (a Managed Agents API agent's custom tools), served as
//!   the server `custom`, and the calls that wait for the client's answer.
//! - [`adapter`]: JSON-RPC in `rmcp`'s model types: routes each message from a process, runs
//!   tool calls with the turn's context, records every call.

pub mod adapter;
pub mod client;
pub mod registry;
pub mod schema;

pub use adapter::{ClientCall, McpAdapter, Route, ToolCall, WaitingCall, SERVER_NAME};
pub use client::{ClientAnswer, ClientCalls, ClientTools, CLIENT_SERVER};
pub use registry::{CallOutcome, ToolRegistry};
