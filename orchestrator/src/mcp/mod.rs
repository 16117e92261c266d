//! The in-process MCP server `harness`.

pub mod schema;
