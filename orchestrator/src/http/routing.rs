//! Clustering at the HTTP edge: a request that needs the thread's process (a message, an
//! interrupt, a permission answer: its row in `operations::OPERATIONS` says `Runs::Owner`) runs
//! on the node holding the thread's lease. [`to_owner`]
//! asks [`Cluster::route`]: here (the handler finds the [`Fence`] in the request's extensions),
//! or forwarded to the live owner, once and marked. An owner that cannot be reached is waited
//! out: when its lease expires this node takes the thread and serves the request itself.
//!
//! Without clustering the layer passes every request through untouched.

use axum::body::Body;
use axum::extract::{MatchedPath, OriginalUri, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::{debug, warn};

use plugin_contract::ThreadId;

use super::{ApiError, ApiState};
use crate::caller::Caller;
use crate::cluster::{
    Cluster, ForwardError, Forwarded, Outgoing, Route, RouteError, FORWARDED_HEADER,
};
use crate::store::StoreError;

/// Serves the request here when this node holds (or takes) the thread's lease, else forwards it
/// to the owner. The thread is the path segment after `threads`.
pub async fn to_owner(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let Some(cluster) = state.cluster.clone() else {
        return next.run(request).await;
    };
    // What the operation's row says: only what needs the thread's process goes to its owner.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("", |m| m.as_str());
    let at_owner = super::operations::find(request.method(), route)
        .is_some_and(|op| op.runs == super::operations::Runs::Owner);
    let Some(thread) = thread_of(request.uri().path()).filter(|_| at_owner) else {
        return next.run(request).await;
    };
    let forwarded = request.headers().contains_key(FORWARDED_HEADER);
    match cluster.route(&thread, forwarded).await {
        Ok(Route::Local(fence)) => serve_here(request, next, fence).await,
        Ok(Route::Forward(url)) => forward(&cluster, &thread, &url, request, next).await,
        // The handler answers 404 in its own words.
        Err(RouteError::Store(StoreError::ThreadNotFound(_))) => next.run(request).await,
        Err(err) => route_error(err),
    }
}

async fn serve_here(mut request: Request, next: Next, fence: crate::store::Fence) -> Response {
    request.extensions_mut().insert(fence);
    next.run(request).await
}

async fn forward(
    cluster: &Cluster,
    thread: &ThreadId,
    url: &str,
    request: Request,
    next: Next,
) -> Response {
    let path_and_query = request
        .extensions()
        .get::<OriginalUri>()
        .map(|uri| uri.0.clone())
        .unwrap_or_else(|| request.uri().clone());
    let path_and_query = path_and_query
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let (parts, body) = request.into_parts();
    // Bounded by `guard` already (a message's body may carry files: `[files]`).
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(_) => {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "the body is over the limit",
            )
            .into_response()
        }
    };
    debug!(thread_id = %thread, owner = %url, "Forwarding to the thread's owner.");
    let caller = super::caller_in(&parts.extensions);
    match cluster
        .forward(
            thread,
            url,
            Outgoing {
                method: parts.method.clone(),
                path_and_query: &path_and_query,
                headers: &parts.headers,
                body: body.clone(),
                caller: &caller,
            },
        )
        .await
    {
        Ok(answer) => relayed(answer),
        Err(ForwardError::Unreachable { url, source }) => {
            // Most likely dead: its lease runs out within a TTL, then the thread is ours.
            warn!(thread_id = %thread, owner = %url, error = %source, "The thread's owner cannot be reached; waiting for its lease to expire.");
            match cluster.take_when_expired(thread).await {
                Ok(Route::Local(fence)) => {
                    let request = Request::from_parts(parts, Body::from(body));
                    serve_here(request, next, fence).await
                }
                Ok(Route::Forward(_)) | Err(RouteError::NotOwner { .. }) => {
                    route_error(RouteError::NotOwner {
                        thread: thread.clone(),
                    })
                }
                Err(err) => route_error(err),
            }
        }
        Err(err @ ForwardError::OwnerLost { .. }) => {
            warn!(thread_id = %thread, error = %err, "The thread's owner stopped answering.");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_owner",
                "the node that owned this thread stopped answering and lost it; retry with the same clientMessageId",
            )
            .into_response()
        }
        Err(err @ ForwardError::Failed { .. }) => {
            warn!(thread_id = %thread, error = %err, "Forwarding to the thread's owner failed.");
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "owner_failed",
                "the node that owns this thread did not answer; retry with the same clientMessageId",
            )
            .into_response()
        }
    }
}

/// Where a request [`elsewhere`] looked at is served.
pub enum Placed {
    /// Here: with this node's lease on the thread when clustered (`None`: clustering is off, or
    /// there is no such thread, which the handler reports).
    Here(Option<crate::store::Fence>),
    /// At the owner: its answer (or the error that prevented one).
    There(Response),
}

/// For a route whose thread is not in its path (`POST /api/prewarm`, a schedule's run): served
/// here, or forwarded to the thread's owner.
pub async fn elsewhere(
    state: &ApiState,
    thread: &ThreadId,
    headers: &axum::http::HeaderMap,
    path_and_query: &str,
    body: axum::body::Bytes,
    caller: &Caller,
) -> Placed {
    let Some(cluster) = state.cluster.as_ref() else {
        return Placed::Here(None);
    };
    let forwarded = headers.contains_key(FORWARDED_HEADER);
    let url = match cluster.route(thread, forwarded).await {
        Ok(Route::Local(fence)) => return Placed::Here(Some(fence)),
        Err(RouteError::Store(StoreError::ThreadNotFound(_))) => return Placed::Here(None),
        Ok(Route::Forward(url)) => url,
        Err(err) => return Placed::There(route_error(err)),
    };
    let answer = cluster
        .forward(
            thread,
            &url,
            Outgoing {
                method: axum::http::Method::POST,
                path_and_query,
                headers,
                body,
                caller,
            },
        )
        .await;
    Placed::There(match answer {
        Ok(answer) => relayed(answer),
        Err(err) => {
            warn!(thread_id = %thread, error = %err, "Forwarding to the thread's owner failed.");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_owner",
                format!("thread {thread} is served by a node that cannot be reached; retry"),
            )
            .into_response()
        }
    })
}

/// The owner's answer, passed back as it came: status, `content-type` and body.
fn relayed(answer: Forwarded) -> Response {
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = answer.status;
    if let Some(content_type) = answer.content_type {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
    }
    response
}

fn route_error(err: RouteError) -> Response {
    match err {
        RouteError::Store(err) => ApiError::from(err).into_response(),
        RouteError::NotOwner { thread } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_owner",
            format!("thread {thread} is moving between nodes; retry"),
        )
        .into_response(),
    }
}

/// The thread id in `/threads/{id}/…` (with or without the `/api` prefix), by the
/// operations' paths.
pub(super) fn thread_of(path: &str) -> Option<ThreadId> {
    super::operations::thread_of(path).map(ThreadId::from_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_is_the_segment_after_threads() {
        let id = |p: &str| thread_of(p).map(|t| t.as_str().to_owned());
        assert_eq!(id("/threads/thr_1/messages").as_deref(), Some("thr_1"));
        assert_eq!(
            id("/api/threads/thr_2/permissions/r").as_deref(),
            Some("thr_2")
        );
        assert_eq!(id("/threads/"), None);
        assert_eq!(id("/prewarm"), None);
    }
}
