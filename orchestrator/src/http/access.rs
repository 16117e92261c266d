//! What a caller may reach: the scope each route needs ([`NEEDS`]), and the tenant that owns what
//! a route names.
//!
//! [`check`] runs behind the token check on every route with a caller (`/api`, `/mcp`,
//! `/metrics`), before anything else sees the request:
//! 1. **Scope.** The route's entry in [`NEEDS`] (its row of `operations::OPERATIONS`); a caller without it gets `403 forbidden`
//!    naming the scope, in the body and in a challenge ([`ScopeChallenge`]). A route the table
//!    lacks needs `admin` (the e2e test `tenants` holds every route of the OpenAPI document to an
//!    entry).
//! 2. **Ownership.** A route under `/api/threads/{id}` or `/api/schedules/{id}` names a thread or
//!    a schedule. One the caller does not see ([`Caller::sees`]: another tenant's) is answered
//!    exactly as one that does not exist, `404`, so a key cannot even learn that it exists.
//!
//! What names a thread elsewhere checks it with [`visible_thread`]: a body's `threadId`
//! (`/api/prewarm`, `/api/tools/{name}/call`, a schedule's thread) and `/mcp`'s `threads__*`
//! tools. Lists keep only what the caller sees (`threads::list`, `schedules::list`,
//! `threads__list`). A request forwarded to the thread's owner carries its caller, and the owner
//! checks it again.

use std::sync::{Arc, LazyLock};

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use plugin_contract::ThreadId;

use super::{ApiError, ApiState};
use crate::caller::{Caller, Scope};
use crate::oauth::ResourceServer;

/// What a route needs of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Any caller the token check let through.
    Caller,
    Scope(Scope),
}

/// The scope of every route behind the token, by method and route as axum matched it: the
/// rows of [`super::operations::OPERATIONS`] that need a token.
pub static NEEDS: LazyLock<Vec<(Method, &'static str, Need)>> = LazyLock::new(|| {
    super::operations::OPERATIONS
        .iter()
        .filter_map(|op| op.need.map(|need| (op.verb.method(), op.path, need)))
        .collect()
});

/// What `method route` needs; `admin` for a route the operations do not list (fail closed).
pub fn need_of(method: &Method, route: &str) -> Need {
    super::operations::find(method, route)
        .and_then(|op| op.need)
        .unwrap_or(Need::Scope(Scope::Admin))
}

/// The `403` of a caller without `scope`.
pub fn forbidden(scope: Scope) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", missing_scope(scope))
}

/// What a caller without `scope` is told.
pub fn missing_scope(scope: Scope) -> String {
    format!("this needs the scope `{scope}`, which the caller's key does not have")
}

/// How a caller without a scope is challenged: `403` with `WWW-Authenticate: Bearer
/// error="insufficient_scope", scope="…"` (RFC 6750 §3.1), which for an OAuth caller also says
/// where to ask for a token with more (`resource_metadata`: MCP clients step up with it).
/// [`check`] leaves one on every request it lets through, for a scope a request needs beyond its
/// route's (`/mcp`'s tool calls that change something).
#[derive(Clone, Default)]
pub struct ScopeChallenge {
    /// The OAuth resource server, when OAuth is on.
    oauth: Option<Arc<ResourceServer>>,
}

impl ScopeChallenge {
    /// The `WWW-Authenticate` value for `caller`, without `scope`, on a request to `path`.
    pub fn of(&self, caller: &Caller, headers: &HeaderMap, path: &str, scope: Scope) -> String {
        let oauth = self
            .oauth
            .as_deref()
            .filter(|_| caller.subject.starts_with(crate::oauth::SUBJECT_PREFIX));
        super::oauth::insufficient_scope(oauth, headers, path, scope.as_str())
    }
}

/// Checks the request's scope and, for a route naming a thread or a schedule, that the caller
/// sees it (see the module's doc).
pub async fn check(State(state): State<ApiState>, mut request: Request, next: Next) -> Response {
    let caller = super::caller_in(request.extensions());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default();
    let challenge = ScopeChallenge {
        oauth: state.oauth.clone(),
    };
    if let Need::Scope(scope) = need_of(request.method(), &route) {
        if !caller.has(scope) {
            let said = challenge.of(&caller, request.headers(), request.uri().path(), scope);
            return super::oauth::with_challenge(forbidden(scope), &said);
        }
    }
    request.extensions_mut().insert(challenge);
    if caller.sees_all() {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let id = match RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(params) => params
            .iter()
            .find(|(name, _)| *name == "id")
            .map(|(_, value)| value.to_owned()),
        Err(_) => None,
    };
    let owned = match (id, route.split('/').nth(2)) {
        (Some(id), Some("threads")) => {
            visible_thread(&state.store, &caller, &ThreadId::from_string(id))
                .await
                .map(drop)
                .map_err(ApiError::from)
        }
        (Some(id), Some("schedules")) => visible_schedule(&state, &caller, &id).await,
        _ => Ok(()),
    };
    match owned {
        Ok(()) => next.run(Request::from_parts(parts, body)).await,
        Err(err) => err.into_response(),
    }
}

/// The thread `id`, when `caller` sees it (the thread service's one answer, for every door).
pub use crate::service::visible_thread;

/// `Ok` when `caller` sees the schedule `id` (or it does not exist: its handler says so); else
/// the handler's own `404`.
async fn visible_schedule(state: &ApiState, caller: &Caller, id: &str) -> Result<(), ApiError> {
    match state.store.schedule(id).await? {
        Some(schedule) if !caller.sees(schedule.tenant.as_deref()) => {
            Err(super::schedules::not_found(id))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ: Need = Need::Scope(Scope::ThreadsRead);
    const APPROVE: Need = Need::Scope(Scope::Approvals);
    const ADMIN: Need = Need::Scope(Scope::Admin);

    #[test]
    fn an_unlisted_route_needs_admin() {
        assert_eq!(need_of(&Method::GET, "/api/threads"), READ);
        assert_eq!(
            need_of(&Method::POST, "/api/threads/{id}/permissions/{request_id}"),
            APPROVE
        );
        assert_eq!(need_of(&Method::PUT, "/api/threads"), ADMIN);
        assert_eq!(need_of(&Method::GET, "/api/something-new"), ADMIN);
    }
}
