//! End-to-end test support for Harness: the real `claude` CLI against a mock Messages API.
//!
//! - [`cli`]: finds or installs the pinned CLI under `target/claude-cli/`, and the environment that points it at the mock.
//! - [`mock`]: the scriptable mock of the Anthropic Messages API, the only fake in the loop.
//! - [`util`]: bounded polling (`eventually`), process inspection, tracing for tests.
//!
//! A `daemon` module (the orchestrator started on `127.0.0.1:0` against the mock) is planned beside these.
//!
//! Errors are `anyhow` here (STYLE 2.5: test support); nothing waits without a timeout (STYLE 2.12).

pub mod cli;
pub mod mock;
pub mod util;
