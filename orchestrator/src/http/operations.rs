//! Every operation the HTTP API serves, declared once: its method and path, the scope its caller
//! needs (or none: no token), where it runs (any node, or the node that owns the thread it
//! names), and the body it may carry. One row per operation, in [`OPERATIONS`]; the rest reads it:
//! - `access` ([`super::access::need_of`], [`super::access::NEEDS`]): the scope;
//! - `routing::to_owner`: whether the request goes to the thread's owner, and `routing::thread_of`
//!   which thread a path names;
//! - `guard::Guard::large`: which bodies may be large (files), before the request is routed;
//! - the router (`http::documented_routes`) registers each handler with its documentation, and a
//!   test holds the two to the same set: every routed operation has a row, every row a route.
//!
//! A path is axum's (`{id}`, `{*path}` for the rest of it); the document writes `{*path}` as
//! `{path}`. No IO.

use axum::http::Method;

use super::access::Need;
use crate::caller::Scope;

/// Where an operation runs, with clustering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// On the node the request reached.
    Anywhere,
    /// On the node that owns the thread the path names (it needs the thread's process or
    /// folder); forwarded there by `routing::to_owner`.
    Owner,
    /// On the node that owns the thread the request names outside its path (a body's
    /// `threadId`, a schedule's thread): its handler forwards it there (`routing::elsewhere`).
    OwnerOfNamed,
}

/// What an operation's body may be, as the guard bounds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// JSON within `max_body_bytes` (or none).
    Json,
    /// JSON that may carry files: within `files.max_message_bytes`.
    Message,
    /// A file under its own `Content-Type`: within `files.max_file_bytes`.
    Upload,
    /// A file in a `multipart/form-data` form: within `files.max_file_bytes`.
    Form,
}

/// An HTTP method, as a value a constant can hold (axum's `Method` has a destructor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Patch,
    Delete,
}

impl Verb {
    pub fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Patch => Method::PATCH,
            Verb::Delete => Method::DELETE,
        }
    }
}

/// One operation of the HTTP API.
#[derive(Clone, Copy, Debug)]
pub struct Operation {
    pub verb: Verb,
    pub path: &'static str,
    /// `None`: served without a token (the page, the document, OAuth's discovery and issuer).
    pub need: Option<Need>,
    pub runs: Runs,
    pub body: Body,
}

impl Operation {
    /// An operation behind the token, run anywhere, with a JSON body (or none).
    const fn new(verb: Verb, path: &'static str, need: Need) -> Operation {
        Operation {
            verb,
            path,
            need: Some(need),
            runs: Runs::Anywhere,
            body: Body::Json,
        }
    }

    /// An operation served without a token.
    const fn open(verb: Verb, path: &'static str) -> Operation {
        Operation {
            need: None,
            ..Operation::new(verb, path, ANY)
        }
    }

    /// Run on the thread's owner.
    const fn at_owner(self) -> Operation {
        Operation {
            runs: Runs::Owner,
            ..self
        }
    }

    /// Run on the owner of the thread the request names outside its path.
    const fn at_owner_of_named(self) -> Operation {
        Operation {
            runs: Runs::OwnerOfNamed,
            ..self
        }
    }

    /// Carrying a body of `body`'s kind.
    const fn carrying(self, body: Body) -> Operation {
        Operation { body, ..self }
    }

    /// Whether `path` (a request's) is this operation's: each `{param}` one segment, not
    /// empty; `{*rest}` one or more.
    pub fn matches(&self, path: &str) -> bool {
        let mut given = path.split('/');
        for part in self.path.split('/') {
            if part.starts_with("{*") {
                return given.any(|segment| !segment.is_empty());
            }
            let Some(segment) = given.next() else {
                return false;
            };
            let param = part.starts_with('{');
            if (param && segment.is_empty()) || (!param && part != segment) {
                return false;
            }
        }
        given.next().is_none()
    }
}

const GET: Verb = Verb::Get;
const POST: Verb = Verb::Post;
const PATCH: Verb = Verb::Patch;
const DELETE: Verb = Verb::Delete;

use Need::Caller as ANY;
const READ: Need = Need::Scope(Scope::ThreadsRead);
const WRITE: Need = Need::Scope(Scope::ThreadsWrite);
const APPROVE: Need = Need::Scope(Scope::Approvals);
const ADMIN: Need = Need::Scope(Scope::Admin);
const METRICS: Need = Need::Scope(Scope::Metrics);

/// Every operation; see the module's doc.
pub const OPERATIONS: &[Operation] = &[
    Operation::open(GET, "/healthz"),
    Operation::open(GET, "/"),
    Operation::open(GET, "/assets/{name}"),
    Operation::open(GET, "/api/openapi.json"),
    Operation::open(GET, "/.well-known/oauth-protected-resource"),
    Operation::open(GET, "/.well-known/oauth-protected-resource/mcp"),
    Operation::open(GET, "/.well-known/oauth-authorization-server"),
    Operation::open(POST, "/oauth/register"),
    Operation::open(GET, "/oauth/authorize"),
    Operation::open(POST, "/oauth/consent"),
    Operation::open(POST, "/oauth/token"),
    Operation::new(GET, "/api/me", ANY),
    Operation::new(GET, "/api/threads", READ),
    Operation::new(POST, "/api/threads", WRITE),
    Operation::new(GET, "/api/threads/{id}", READ),
    Operation::new(PATCH, "/api/threads/{id}", WRITE).at_owner(),
    Operation::new(DELETE, "/api/threads/{id}", WRITE).at_owner(),
    Operation::new(GET, "/api/threads/{id}/messages", READ),
    Operation::new(POST, "/api/threads/{id}/messages", WRITE)
        .at_owner()
        .carrying(Body::Message),
    Operation::new(POST, "/api/threads/{id}/interrupt", WRITE).at_owner(),
    Operation::new(POST, "/api/threads/{id}/fork", WRITE),
    Operation::new(POST, "/api/threads/{id}/archive", WRITE).at_owner(),
    Operation::new(GET, "/api/threads/{id}/diff", READ).at_owner(),
    Operation::new(GET, "/api/threads/{id}/events", READ),
    Operation::new(
        GET,
        "/api/threads/{id}/messages/{message_id}/outcomes",
        READ,
    ),
    Operation::new(
        GET,
        "/api/threads/{id}/messages/{message_id}/model-requests",
        READ,
    ),
    Operation::new(GET, "/api/threads/{id}/tool-calls", READ),
    // A thread's folder is on the node that runs it.
    Operation::new(GET, "/api/threads/{id}/files", READ).at_owner(),
    Operation::new(GET, "/api/threads/{id}/files/{*path}", READ).at_owner(),
    Operation::new(POST, "/api/files", WRITE).carrying(Body::Upload),
    Operation::new(GET, "/api/files/{id}", READ),
    Operation::new(GET, "/api/threads/{id}/permissions", READ),
    Operation::new(POST, "/api/threads/{id}/permissions/{request_id}", APPROVE).at_owner(),
    Operation::new(GET, "/api/threads/{id}/rules", READ),
    Operation::new(DELETE, "/api/threads/{id}/rules/{rule_id}", APPROVE),
    Operation::new(POST, "/api/prewarm", WRITE).at_owner_of_named(),
    Operation::new(GET, "/api/profiles", READ),
    Operation::new(GET, "/api/tools", READ),
    Operation::new(POST, "/api/tools/{name}/call", WRITE),
    Operation::new(GET, "/api/schedules", READ),
    Operation::new(POST, "/api/schedules", WRITE),
    Operation::new(GET, "/api/schedules/{id}", READ),
    Operation::new(PATCH, "/api/schedules/{id}", WRITE),
    Operation::new(DELETE, "/api/schedules/{id}", WRITE),
    Operation::new(POST, "/api/schedules/{id}/pause", WRITE),
    Operation::new(POST, "/api/schedules/{id}/resume", WRITE),
    Operation::new(POST, "/api/schedules/{id}/run", WRITE).at_owner_of_named(),
    Operation::new(GET, "/api/schedules/{id}/runs", READ),
    // Every thread's processes and every delivery: the operator's view.
    Operation::new(GET, "/api/pool", METRICS),
    Operation::new(GET, "/api/webhooks/deliveries", ADMIN),
    Operation::new(GET, "/api/webhooks/deliveries/{id}", ADMIN),
    Operation::new(POST, "/api/webhooks/deliveries/{id}/redeliver", ADMIN),
    Operation::new(GET, "/api/audit", ADMIN),
    Operation::new(GET, "/api/keys", ADMIN),
    Operation::new(POST, "/api/keys", ADMIN),
    Operation::new(DELETE, "/api/keys/{id}", ADMIN),
    Operation::new(GET, "/metrics", METRICS),
    // The Managed Agents API (`crate::managed`): agents and environments are the caller's
    // tenant's like its threads; a session is a thread.
    Operation::new(GET, "/v1/agents", READ),
    Operation::new(POST, "/v1/agents", WRITE),
    Operation::new(GET, "/v1/agents/{agent_id}", READ),
    Operation::new(POST, "/v1/agents/{agent_id}", WRITE),
    Operation::new(POST, "/v1/agents/{agent_id}/archive", WRITE),
    Operation::new(GET, "/v1/agents/{agent_id}/versions", READ),
    Operation::new(GET, "/v1/environments", READ),
    Operation::new(POST, "/v1/environments", WRITE),
    Operation::new(GET, "/v1/environments/{environment_id}", READ),
    Operation::new(POST, "/v1/environments/{environment_id}", WRITE),
    Operation::new(DELETE, "/v1/environments/{environment_id}", WRITE),
    Operation::new(POST, "/v1/environments/{environment_id}/archive", WRITE),
    Operation::new(GET, "/v1/sessions", READ),
    Operation::new(POST, "/v1/sessions", WRITE).carrying(Body::Message),
    Operation::new(GET, "/v1/sessions/{session_id}", READ),
    Operation::new(POST, "/v1/sessions/{session_id}", WRITE),
    // What needs the session's process runs on its thread's owner, as `/api`'s does.
    Operation::new(DELETE, "/v1/sessions/{session_id}", WRITE).at_owner(),
    Operation::new(POST, "/v1/sessions/{session_id}/archive", WRITE).at_owner(),
    Operation::new(GET, "/v1/sessions/{session_id}/events", READ),
    // A message's images and documents come as base64 blocks.
    Operation::new(POST, "/v1/sessions/{session_id}/events", WRITE)
        .carrying(Body::Message)
        .at_owner(),
    Operation::new(GET, "/v1/sessions/{session_id}/events/stream", READ),
    Operation::new(POST, "/v1/files", WRITE).carrying(Body::Form),
    Operation::new(GET, "/v1/files/{file_id}", READ),
    // Listing and reading; each tool call that changes something checks `threads:write` too
    // (`mcp_endpoint`, by the tool's own policy). Bodies are bounded as a message's are
    // (`threads__send` may carry files).
    Operation::new(POST, "/mcp", READ).carrying(Body::Message),
    Operation::new(GET, "/mcp", READ),
    Operation::new(DELETE, "/mcp", READ),
    // An editor's ACP connection: each call the agent makes for it is an `/api` call of its
    // caller, checked as such.
    Operation::new(GET, "/acp", READ),
    // A2A: reading tasks; each method that changes something checks `threads:write` (and an
    // answer to input-required `approvals`) itself (`http::a2a::needs`). A message is text.
    Operation::open(GET, "/.well-known/agent-card.json"),
    Operation::new(POST, "/a2a", READ),
];

/// The operation `method route` (`route` as axum matched it, a template).
pub fn find(method: &Method, route: &str) -> Option<&'static Operation> {
    OPERATIONS
        .iter()
        .find(|op| op.verb.method() == method && op.path == route)
}

/// The operation a request for `method path` (a path, not a template) is, before routing.
pub fn matching(method: &Method, path: &str) -> Option<&'static Operation> {
    OPERATIONS
        .iter()
        .find(|op| op.verb.method() == method && op.matches(path))
}

/// The thread of the session a path under `/v1/sessions/{session_id}` names.
fn session_thread_of(path: &str) -> Option<String> {
    let full = if path.starts_with("/v1/") {
        path.to_owned()
    } else {
        format!("/v1{path}")
    };
    let op = OPERATIONS
        .iter()
        .filter(|op| op.path.starts_with("/v1/sessions/{session_id}"))
        .find(|op| op.matches(&full))?;
    let at = op.path.split('/').position(|part| part == "{session_id}")?;
    let session = full.split('/').nth(at)?;
    crate::managed::thread_of_session(session).map(|thread| thread.as_str().to_owned())
}

/// The thread a path under `/api/threads/{id}` or `/v1/sessions/{session_id}` names (with or
/// without the `/api` or `/v1` prefix, which a nested router strips): a session is its thread.
pub fn thread_of(path: &str) -> Option<String> {
    if let Some(thread) = session_thread_of(path) {
        return Some(thread);
    }
    let full = if path.starts_with("/api/") {
        path.to_owned()
    } else {
        format!("/api{path}")
    };
    let op = OPERATIONS
        .iter()
        .filter(|op| op.path.starts_with("/api/threads/{id}"))
        .find(|op| op.matches(&full))?;
    let at = op.path.split('/').position(|part| part == "{id}")?;
    full.split('/').nth(at).map(str::to_owned)
}

#[cfg(test)]
mod tests;
