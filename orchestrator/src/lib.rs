//! Harness: a daemon that holds conversations ("threads") with the `claude` CLI.
//!
//! Module map (see ARCHITECTURE.md for the path of one message):
//! - [`config`]: settings from file, env and flags, with defaults.
//! - [`store`]: all SQL; threads, messages, events, tool calls.
//! - [`invoker`]: the `claude` CLI: stream-json protocol (no IO) and the child process (IO).
//! - [`pool`]: warm processes in a moka cache keyed by [`plugin_contract::ThreadId`].
//! - [`mcp`]: the in-process MCP server `harness` that serves plugin tools to each process.
//! - [`pipeline`]: `handle_message`, the one path every message takes.
//! - [`metrics`]: the Prometheus series behind `GET /metrics`, one registry per daemon.
//! - [`http`]: the axum API; thin handlers over the pipeline and the store.

pub mod app;
pub mod config;
pub mod events;
pub mod http;
pub mod invoker;
pub mod mcp;
pub mod metrics;
pub mod pipeline;
pub mod pool;
mod private_fs;
pub mod store;
mod sync;
