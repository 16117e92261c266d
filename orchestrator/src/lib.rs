//! Harness: a daemon that holds conversations ("threads") with the `claude` CLI.
//!
//! Module map, top to bottom and left to right (see ARCHITECTURE.md for the path of one
//! message). Each module imports only modules after it here; `tests.rs` holds every file to
//! that, reading the order from these lines (the modules before each line's first `:`), so a new
//! module is one more line:
//! - [`server`]: builds every part in dependency order; start, run, shutdown.
//! - [`http`]: the listener, the guard every request passes, the axum API (thin handlers).
//! - [`acp`], [`remote`]: the Agent Client Protocol agent for editors, over a daemon's API (over
//!   stdio in `harness acp`, over a WebSocket at `/acp`); the API as a client reaches it: at a
//!   URL, or through this daemon's own router as the caller who reached the door.
//! - [`managed`]: the Managed Agents API (`/v1/agents`, `/v1/environments`, `/v1/sessions`):
//!   a door over the thread service, for Anthropic's own SDKs.
//! - [`goals`]: a task with a rubric, worked on and graded by a grader thread until it is met
//!   (the Managed Agents API's outcomes); each goal's loop, over the thread service.
//! - [`service`]: the thread service: every thread operation, once, for every door (`/api`,
//!   `/mcp`); the caller explicit, the answers the API types; a message at the
//!   thread's owner through [`cluster`].
//! - [`schedules`], [`redrive`], [`retention`]: prompts sent on a cron, each tick run once; the
//!   sweep that runs turns cut by a crash again; the audit purge, the event compaction, the
//!   unused OAuth clients' removal and the vacuum.
//! - [`cluster`]: several nodes on one PostgreSQL: thread leases, forwarding to the owner,
//!   the heartbeat.
//! - [`pipeline`]: the one path every message takes: queue, idempotency, throttle, context,
//!   turn.
//! - [`approvals`]: who decides the tool permissions the CLI asks for: rules, mode, a person.
//! - [`pool`]: warm processes keyed by [`plugin_contract::ThreadId`]; checkout → lease → finish.
//! - [`workspace`]: the folders and git worktrees threads work in (a worktree's folder named
//!   as [`launch`] names a thread's).
//! - [`launch`]: how children start: folders, environment, options, walls, a gateway token
//!   each.
//! - [`gateway`], [`throttle`]: the model gateway every child talks to: the key kept here, each
//!   request metered and checked against the budgets as it happens, the upstream's 429/529 to
//!   the throttle (turns at once, backing off under rate limits).
//! - [`mcp`]: the in-process MCP server `harness` that serves plugin tools to each process.
//! - [`events`]: the bus that stores a thread's events, then publishes them.
//! - [`oauth`]: access tokens of an OAuth issuer, or of the daemon's own authorization server;
//!   above [`webhooks`] and [`config`]: it reads `[oauth]` and fetches a client's metadata
//!   through the webhooks' guard on addresses (`webhooks::target`).
//! - [`webhooks`]: the outbox of thread events to endpoints, signed deliveries; what it sends
//!   are [`api`]'s webhook types.
//! - [`api`]: what clients see: response bodies built from the store's rows, and the thread
//!   events ([`api::events::ThreadEvent`]), one type per kind that the OpenAPI document derives.
//! - [`config`]: the settings; not a leaf: it reuses checks of [`budget`] and [`store`], and
//!   re-exports the sections of modules below it (`[files]`, `[otel]`), defined there.
//! - [`keys`]: API keys (stored hashed), their tenants and their limits.
//! - [`files`]: the images and documents of messages: checked and stored on the way in,
//!   references in the store, their bytes again just before the CLI sees a prompt.
//! - [`budget`]: the thread's, the key's and the day's budgets a turn is checked against.
//! - [`store`]: all SQL, on SQLite or PostgreSQL; threads, messages, events, tool calls, usage,
//!   transcripts, leases.
//! - [`metrics`]: the Prometheus series, one registry per daemon; knows nothing it measures.
//! - [`caller`], [`traces`], [`turn_error`], [`environment`], `private_fs`, `secret`, `sync`:
//!   leaves: who calls (subject, tenant, scopes); a turn's trace; the environment as it was at
//!   start, its secrets out of the live one.

pub mod acp;
pub mod api;
pub mod approvals;
pub mod budget;
pub mod caller;
pub mod cluster;
pub mod config;
pub mod environment;
pub mod events;
pub mod files;
pub mod gateway;
pub mod goals;
pub mod http;
pub mod keys;
pub mod launch;
pub mod managed;
pub mod mcp;
pub mod metrics;
pub mod oauth;
pub mod pipeline;
pub mod pool;
mod private_fs;
pub mod redrive;
pub mod remote;
pub mod retention;
pub mod schedules;
mod secret;
pub mod server;
pub mod service;
pub mod store;
mod sync;
pub mod throttle;
pub mod traces;
pub mod turn_error;
pub mod webhooks;
pub mod workspace;

#[cfg(test)]
mod tests;
