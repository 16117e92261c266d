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
    // A few `/proc` reads per live process: off the async workers.
    let pool = state.pool.clone();
    if let Err(err) = tokio::task::spawn_blocking(move || pool.measure_memory()).await {
        error!(error = %err, "Could not read the processes' memory.");
    }
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
