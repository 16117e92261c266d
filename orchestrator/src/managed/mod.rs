//! The Managed Agents API: Anthropic's `/v1/agents`, `/v1/environments`, `/v1/sessions` and
//! their events (beta `managed-agents-2026-04-01`), served so that the official SDKs run
//! against Harness by changing only their base URL. A door over the thread service
//! ([`ThreadService`]), as `/api` and `/mcp` are: a session is a thread, an agent at a version
//! (in an environment) a profile made over the API ([`profile`]), and a session's events a
//! projection of its thread's events ([`events`]).
//!
//! Files: `wire.rs` (the objects), `params.rs` (what creates or changes them), `error.rs` (the
//! API's error shape, also for what the layers in front refuse), `agents.rs`,
//! `environments.rs`, `sessions.rs`, `session_events.rs` (send, list, stream), `files.rs`
//! (uploads, and where a session's files go), `profile.rs`, `ids.rs`, `lists.rs` (the body and
//! list parts every handler shares). The routes, their scopes and their body limits are rows of
//! `http::operations` like every other; `http` nests [`routes`] under `/v1`, behind the token
//! check (which also takes the key from `x-api-key`).
//!
//! An agent's custom tools are served to its sessions' CLI as the in-process MCP server `custom`
//! ([`crate::mcp::client`]); a call waits for the client's `user.custom_tool_result`. An
//! outcome (`user.define_outcome`) is a goal ([`crate::goals`]).
//!
//! An agent's MCP servers (`url`) are HTTP MCP servers of its profile, their `mcp_toolset`s
//! its approvals ([`profile`]); an MCP tool's result is an `agent.mcp_tool_result`
//! ([`events`]). Not served yet: skills on agents, refused with a message that says so. The `span.model_request_*` events are the model gateway's requests (`crate::gateway`
//! puts them on the thread's stream), and `session.status_terminated` the thread's archive or
//! delete. In a cluster, what needs a session's process runs on its thread's owner//! (`http::routing::to_owner`, by the operation's row), as `/api`'s messages do.
//!
//! Ownership: what a caller with a tenant makes belongs to that tenant; another tenant's agent,
//! environment or session is answered exactly as one that does not exist (`not_found_error`).

mod agents;
mod environments;
pub mod error;
pub mod events;
mod files;
mod ids;
mod lists;
pub mod params;
pub mod profile;
mod session_events;
mod sessions;
pub mod wire;

pub use sessions::make_profiles;

use std::sync::Arc;

use axum::extract::FromRef;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::caller::Caller;
use crate::config::Config;
use crate::pipeline::Pipeline;
use crate::pool::Pool;
use crate::service::ThreadService;
use crate::store::Store;

/// What the door's handlers use. Cheap to clone.
#[derive(Clone)]
pub struct ManagedState {
    pub threads: ThreadService,
    pub goals: crate::goals::Goals,
    pub pipeline: Pipeline,
    pub store: Store,
    pub pool: Pool,
    pub config: Arc<Config>,
    /// Permits for long-lived streams (`http.max_streams`), shared with `/api`'s.
    pub streams: crate::sync::Streams,
}

/// The OpenAPI tag of the door's operations.
pub const TAG: &str = "managed-agents";

/// Every route of the door, relative to `/v1`, documented.
pub fn routes<S>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    ManagedState: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(agents::create, agents::list))
        .routes(routes!(agents::retrieve, agents::update))
        .routes(routes!(agents::archive))
        .routes(routes!(agents::versions))
        .routes(routes!(environments::create, environments::list))
        .routes(routes!(
            environments::retrieve,
            environments::update,
            environments::delete
        ))
        .routes(routes!(environments::archive))
        .routes(routes!(sessions::create, sessions::list))
        .routes(routes!(
            sessions::retrieve,
            sessions::update,
            sessions::delete
        ))
        .routes(routes!(sessions::archive))
        .routes(routes!(session_events::send, session_events::list))
        .routes(routes!(session_events::stream))
        .routes(routes!(files::upload))
        .routes(routes!(files::retrieve))
}

/// The thread of the session `id` (`sesn_…`), or `None` for what is not a session id.
pub fn thread_of_session(id: &str) -> Option<plugin_contract::ThreadId> {
    ids::thread_of(id)
}

/// The owner a caller's objects are stored under: its tenant, `""` for the operator's.
fn owner_of(caller: &Caller) -> &str {
    caller.tenant.as_deref().unwrap_or("")
}

/// Whether `caller` sees what `owner` owns.
fn sees(caller: &Caller, owner: &str) -> bool {
    caller.sees_all() || owner_of(caller) == owner
}
