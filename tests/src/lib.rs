//! End-to-end test support for Harness: the real `claude` CLI against a mock Messages API.
//!
//! - [`a2a`]: the official A2A Python SDK in a venv, and the script it drives the daemon's A2A door with.
//! - [`browser`]: real headless Chromium over WebDriver for the web page's tests (installed with apt when missing).
//! - [`cli`]: finds or installs the pinned CLI under `target/claude-cli/`, the environment that points it at the mock,
//!   and the CLI's table of built-in tools read from its binary.
//! - [`mock`]: the scriptable mock of the Anthropic Messages API, the only fake in the loop.
//! - [`util`]: bounded polling (`eventually`), process inspection, tracing for tests.
//! - [`client`]: the HTTP client for a daemon (in-process or the `harness` binary): `(status, JSON)` per call.
//! - [`daemon`]: the real daemon on `127.0.0.1:0`, its CLI pointed at the mock.
//! - [`mcp`]: clients of the daemon's `/mcp`: raw JSON-RPC over HTTP, and the official MCP Python SDK in a venv.
//! - [`otel`]: an outside OTLP trace receiver (PyPI `oteltest`'s sink) that writes each span it gets.
//! - [`node`]: pinned npm packages under `<target>/`, and ES module scripts run beside them.
//! - [`oauth`]: an outside OAuth/OIDC issuer (npm `oauth2-mock-server`) and the Python SDK's OAuth client script.
//! - [`openapi`]: requests generated from the daemon's OpenAPI document (PyPI `schemathesis`), sent to it.
//! - [`probe`]: the `harness-plugin-probe` crate, whose tools exercise validation, defaults, timeouts, panics and
//!   output checks (shared with the MCP adapter's unit tests).
//!
//! Errors are `anyhow` here (STYLE 2.5: test support); nothing waits without a timeout (STYLE 2.12).

pub mod a2a;
pub mod browser;
pub mod cli;
pub mod client;
pub mod daemon;
pub mod git;
pub mod mcp;
pub mod media;
pub mod mock;
pub mod node;
pub mod oauth;
pub mod openapi;
pub mod otel;
pub mod util;
pub mod webhooks;

pub use harness_plugin_probe as probe;
