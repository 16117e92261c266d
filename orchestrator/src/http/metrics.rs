//! `GET /metrics`: this daemon's Prometheus series as OpenMetrics text (see [`crate::metrics`]).

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tracing::error;

use super::{ApiError, ApiState};

/// The `harness_*` series; the full list is in `orchestrator/src/metrics.rs`.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "service",
    responses((status = 200, description = "Prometheus/OpenMetrics text.",
               content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8",
               body = String)))]
pub async fn render(State(state): State<ApiState>) -> Response {
    // The last memory samples, read off the request path (`Pool::sample_memory`).
    state.pool.measure_memory();
    match state.metrics.render() {
        Ok(body) => ([(CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response(),
        Err(err) => {
            error!(error = %err, "Could not encode the metrics.");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "could not encode the metrics",
            )
            .into_response()
        }
    }
}
