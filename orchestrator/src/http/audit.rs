//! The audit log: [`record`] writes an entry for every change a caller asks of `/api` or `/v1`
//! (a `POST`, `PATCH` or `DELETE`) once it is answered: who (the request's `Caller`), what (method and
//! route), which thread, the status, from where. The node the client reached writes it; a
//! request a peer forwarded is not written again by its owner. `/mcp`'s `threads__create` and
//! `threads__send` are written the same way (`mcp_endpoint`, action `mcp <tool>`). `GET
//! /api/audit` reads it, newest first; entries past `audit.keep_days` are purged hourly.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tracing::warn;

use super::error::ErrorBody;
use super::{ApiError, ApiQuery, ApiState};
use crate::caller::Caller;
use crate::cluster::FORWARDED_HEADER;
use crate::store::{AuditRow, NewAudit, Store};

/// Writes the audit entry of a change once it is answered.
pub async fn record(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let changes = matches!(
        *request.method(),
        Method::POST | Method::PATCH | Method::DELETE
    );
    if !changes || request.headers().contains_key(FORWARDED_HEADER) {
        return next.run(request).await;
    }
    let caller = super::caller_in(request.extensions());
    let path = request
        .extensions()
        .get::<axum::extract::OriginalUri>()
        .map_or_else(
            || request.uri().path().to_owned(),
            |uri| uri.0.path().to_owned(),
        );
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| path.clone(), |m| m.as_str().to_owned());
    let action = format!("{} {route}", request.method());
    let remote = remote_of(request.extensions());
    let response = next.run(request).await;
    let thread = super::routing::thread_of(&path);
    let entry = Entry {
        caller: &caller,
        action: &action,
        path: &path,
        thread: thread.as_ref(),
        status: response.status(),
        remote: remote.as_deref(),
    };
    write(&state.store, entry).await;
    response
}

/// The client's address, when the listener recorded it.
pub(crate) fn remote_of(extensions: &axum::http::Extensions) -> Option<String> {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.to_string())
}

/// One entry to write.
pub(crate) struct Entry<'a> {
    pub caller: &'a Caller,
    pub action: &'a str,
    pub path: &'a str,
    pub thread: Option<&'a plugin_contract::ThreadId>,
    pub status: StatusCode,
    pub remote: Option<&'a str>,
}

/// Writes `entry`; a failure is logged (the change itself is done).
pub(crate) async fn write(store: &Store, entry: Entry<'_>) {
    let written = store
        .record_audit(NewAudit {
            subject: &entry.caller.subject,
            tenant: entry.caller.tenant.as_deref(),
            action: entry.action,
            path: entry.path,
            thread_id: entry.thread,
            status: i64::from(entry.status.as_u16()),
            remote: entry.remote,
        })
        .await;
    if let Err(err) = written {
        warn!(action = entry.action, error = %err, "Could not write an audit entry.");
    }
}

/// One entry of the audit log.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// Who: `operator`, an API key's id, `schedule:<id>`, …
    pub subject: String,
    pub tenant: Option<String>,
    /// The method and route (`POST /api/threads/{id}/messages`), or `mcp <tool>`.
    pub action: String,
    /// The path as asked.
    pub path: String,
    pub thread_id: Option<String>,
    /// The answer's HTTP status.
    pub status: i64,
    /// The client's address.
    pub remote: Option<String>,
}

impl From<AuditRow> for AuditEntry {
    fn from(row: AuditRow) -> Self {
        AuditEntry {
            id: row.id,
            at: row.at,
            subject: row.subject,
            tenant: row.tenant,
            action: row.action,
            path: row.path,
            thread_id: row.thread_id.map(|t| t.to_string()),
            status: row.status,
            remote: row.remote,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditLog {
    pub entries: Vec<AuditEntry>,
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// At most this many (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// Only entries older than this one (its `id`): the next page.
    before: Option<i64>,
}

/// `GET /api/audit`: who changed what, newest first.
#[utoipa::path(get, path = "/audit", operation_id = "listAudit", tag = "service",
    params(AuditQuery),
    responses(
        (status = 200, description = "Entries, newest first.", body = AuditLog),
        (status = 400, description = "A bad query string.", body = ErrorBody),
        (status = 422, description = "`limit` out of range.", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<ApiState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<AuditLog>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::unprocessable("limit must be between 1 and 1000"));
    }
    let rows = state.store.audit_entries(limit, query.before).await?;
    Ok(Json(AuditLog {
        entries: rows.into_iter().map(AuditEntry::from).collect(),
    }))
}
