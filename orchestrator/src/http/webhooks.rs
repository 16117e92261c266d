//! `/api/webhooks/deliveries`: what was sent to the webhook endpoints, every attempt, and
//! sending a delivery again.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::error::ErrorBody;
use super::{ApiError, ApiPath, ApiQuery, ApiState};
use crate::api;
use crate::store::{AttemptRow, DeliveryRow, DeliveryStatus};

/// One event sent to one endpoint; its `id` is the `webhook-id` of every attempt.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub id: String,
    /// `turn.finished`, `turn.failed`, `budget.reached`.
    #[serde(rename = "type")]
    pub kind: String,
    pub url: String,
    pub thread_id: String,
    /// The payload's `data`.
    pub data: serde_json::Value,
    pub status: DeliveryStatus,
    pub attempts: i64,
    /// When the next attempt is due (`pending`).
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    /// When what it announces happened (the payload's `timestamp`).
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Every attempt, oldest first (`GET …/deliveries/{id}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt_log: Option<Vec<Attempt>>,
}

impl From<DeliveryRow> for Delivery {
    fn from(row: DeliveryRow) -> Self {
        Delivery {
            id: row.id,
            kind: row.kind,
            url: row.url,
            thread_id: row.thread_id.to_string(),
            data: row.data,
            status: row.status,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            last_error: row.last_error,
            created_at: row.created_at,
            updated_at: row.updated_at,
            attempt_log: None,
        }
    }
}

/// One attempt at a delivery.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// The node that sent it.
    pub node: String,
    /// The endpoint's HTTP status, when it answered.
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub ms: i64,
    pub at: DateTime<Utc>,
}

impl From<AttemptRow> for Attempt {
    fn from(row: AttemptRow) -> Self {
        Attempt {
            node: row.node,
            status_code: row.status_code,
            error: row.error,
            ms: row.ms,
            at: row.at,
        }
    }
}

/// A page of deliveries, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryList {
    pub deliveries: Vec<Delivery>,
    /// The next page's `cursor`; `null` on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only deliveries in this state.
    status: Option<DeliveryStatus>,
    /// At most this many per page (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `nextCursor` of the previous page (one this list gave out: another is refused).
    #[param(pattern = r"^[A-Za-z0-9_-]*$")]
    cursor: Option<String>,
}

/// `GET /api/webhooks/deliveries`: the newest first.
#[utoipa::path(get, path = "/webhooks/deliveries", operation_id = "listWebhookDeliveries", tag = "webhooks",
    params(ListQuery),
    responses(
        (status = 200, description = "The deliveries, newest first.", body = DeliveryList),
        (status = 400, description = "A bad query string.", body = ErrorBody),
        (status = 422, description = "`limit` out of range, or a `cursor` this list did not give.", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<ApiState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            "limit must be between 1 and 1000",
        ));
    }
    let before = query
        .cursor
        .as_deref()
        .map(api::pages::row_cursor)
        .transpose()?;
    let before = before.as_ref().map(|(at, id)| (at.as_str(), id.as_str()));
    let mut rows = state
        .store
        .list_deliveries(query.status, limit + 1, before)
        .await?;
    let next_cursor = api::pages::trim(&mut rows, i64::from(limit), |row| {
        api::cursor::at_row(row.created_at, &row.id)
    });
    Ok(Json(DeliveryList {
        deliveries: rows.into_iter().map(Delivery::from).collect(),
        next_cursor,
    }))
}

/// `GET /api/webhooks/deliveries/{id}`: the delivery with every attempt.
#[utoipa::path(get, path = "/webhooks/deliveries/{id}", operation_id = "getWebhookDelivery", tag = "webhooks",
    params(("id" = String, Path, description = "The delivery's id, its `webhook-id` (`msg_…`).")),
    responses(
        (status = 200, description = "The delivery and its attempts.", body = Delivery),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown delivery.", body = ErrorBody),
    ))]
pub async fn get_one(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Delivery>, ApiError> {
    let row = state
        .store
        .delivery(&id)
        .await?
        .ok_or_else(|| unknown(&id))?;
    let attempts = state.store.delivery_attempts(&id).await?;
    let mut delivery = Delivery::from(row);
    delivery.attempt_log = Some(attempts.into_iter().map(Attempt::from).collect());
    Ok(Json(delivery))
}

/// `POST /api/webhooks/deliveries/{id}/redeliver`: sends it again (a dead one too), its attempts
/// counted from zero; the receiver sees the same `webhook-id`.
#[utoipa::path(post, path = "/webhooks/deliveries/{id}/redeliver", operation_id = "redeliverWebhook", tag = "webhooks",
    params(("id" = String, Path, description = "The delivery's id (`msg_…`).")),
    responses(
        (status = 200, description = "The delivery, due now.", body = Delivery),
        (status = 400, description = "A bad path.", body = ErrorBody),
        (status = 404, description = "Unknown delivery.", body = ErrorBody),
    ))]
pub async fn redeliver(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Delivery>, ApiError> {
    let row = state
        .store
        .redeliver(&id)
        .await?
        .ok_or_else(|| unknown(&id))?;
    state.webhooks.poke();
    Ok(Json(Delivery::from(row)))
}

fn unknown(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("webhook delivery {id} not found"),
    )
}
