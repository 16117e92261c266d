//! The HTTP API. Handlers are thin: extract, call the pipeline or the store, map the result.
//! `router(app)` is a function, so tests can call it without a socket.

mod error;
mod metrics;
mod threads;
mod tools;

use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::app::App;
pub use error::ApiError;

/// `Json` whose rejections are our JSON errors (400 bad JSON with its position, 422 a missing or
/// mistyped field named by serde, 413 too large).
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

impl<T: serde::Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        Json(self.0).into_response()
    }
}

pub fn router(app: App) -> Router {
    let api = Router::new()
        .route("/threads", post(threads::create).get(threads::list))
        .route("/threads/{id}", get(threads::get_one))
        .route("/threads/{id}/messages", post(threads::post_message))
        .route("/threads/{id}/interrupt", post(threads::interrupt))
        .route("/threads/{id}/tool-calls", get(tools::thread_calls))
        .route("/threads/{id}/events", get(threads::events))
        .route("/prewarm", post(threads::prewarm))
        .route("/pool", get(tools::pool))
        .route("/tools", get(tools::list))
        .route("/tools/{name}/call", post(tools::call))
        .route_layer(middleware::from_fn_with_state(app.clone(), require_token));
    // Behind the token too: Prometheus sends it with `authorization: {credentials: …}`.
    let metrics = Router::new()
        .route("/metrics", get(metrics::render))
        .route_layer(middleware::from_fn_with_state(app.clone(), require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(metrics)
        .nest("/api", api)
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .layer(DefaultBodyLimit::max(app.config().max_body_bytes))
        .with_state(app)
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// When a token is configured, every `/api` request must carry `Authorization: Bearer <token>`.
async fn require_token(State(app): State<App>, request: Request, next: Next) -> Response {
    if let Some(token) = app.config().auth_token.as_deref().filter(|t| !t.is_empty()) {
        let presented = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes())) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong bearer token",
            )
            .into_response();
        }
    }
    next.run(request).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
