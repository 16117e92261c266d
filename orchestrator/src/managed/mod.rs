//! The Managed Agents API: Anthropic's `/v1/agents`, `/v1/environments`, `/v1/sessions` and
//! their events (beta `managed-agents-2026-04-01`), served so that the official SDKs run
//! against Harness by changing only their base URL. A door over the thread service
//! ([`crate::service::ThreadService`]), as `/api` and `/mcp` are: a session is a thread, an
//! agent (at a version) a profile made over the API, and a session's events a projection of
//! its thread's events ([`events`]).

pub mod events;
