//! The web page in real headless Chromium (WebDriver): the daemon on 127.0.0.1:0 with the real
//! `claude` CLI and the mock Messages API, the browser reaching it through a link the tests can
//! cut. A target of its own, so it builds and runs beside the e2e one.

mod approvals;
mod attachments;
mod automation;
mod chat;
mod lifecycle;
mod markdown;
mod resilience;
mod support;
mod tenants;
mod turn_options;
mod workspaces;
