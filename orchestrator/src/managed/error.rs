//! The API's errors: `{"type": "error", "error": {"type", "message"}, "request_id"}` with the
//! status and error type the SDKs map to their exceptions. A conflict that cannot succeed on
//! retry says so (`x-should-retry: false`), or the SDKs would retry it. [`reshape`] gives the
//! same shape to what the layers in front of the door refuse (the token, the scope, the body).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tracing::error;

use crate::pipeline::PipelineError;
use crate::service::ServiceError;
use crate::store::StoreError;

/// An error, as the API answers it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ManagedErrorBody {
    /// Always `error`.
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    pub kind: &'static str,
    pub error: ManagedErrorDetail,
    /// The request's id (`req_…`), also in the `request-id` header.
    pub request_id: Option<String>,
}

/// What went wrong: the API's error type and a message.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ManagedErrorDetail {
    /// `invalid_request_error`, `authentication_error`, `billing_error`, `permission_error`,
    /// `not_found_error`, `rate_limit_error`, `timeout_error`, `overloaded_error` or
    /// `api_error`.
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

/// One error of the door.
#[derive(Debug)]
pub struct ManagedError {
    pub status: StatusCode,
    pub message: String,
}

impl ManagedError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ManagedError {
        ManagedError {
            status,
            message: message.into(),
        }
    }

    /// `400 invalid_request_error`.
    pub fn invalid(message: impl Into<String>) -> ManagedError {
        ManagedError::new(StatusCode::BAD_REQUEST, message)
    }

    /// `404 not_found_error`: also the answer for what another tenant owns.
    pub fn not_found(message: impl Into<String>) -> ManagedError {
        ManagedError::new(StatusCode::NOT_FOUND, message)
    }

    /// `409`: a state that a retry does not change.
    pub fn conflict(message: impl Into<String>) -> ManagedError {
        ManagedError::new(StatusCode::CONFLICT, message)
    }

    fn internal(err: &dyn std::fmt::Display) -> ManagedError {
        error!(error = %err, "Internal error.");
        ManagedError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
    }
}

/// A body the door stored (JSON text), read back; one it cannot read is an internal error
/// naming `what`.
pub fn stored<T: serde::de::DeserializeOwned>(
    text: &str,
    what: impl std::fmt::Display,
) -> Result<T, ManagedError> {
    serde_json::from_str(text).map_err(|err| {
        ManagedError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{what} is stored unreadably: {err}"),
        )
    })
}

/// The API's error type for a status.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 409 | 413 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 | 405 => "not_found_error",
        408 | 504 => "timeout_error",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The envelope of an error with `status` and `message`.
pub fn envelope(status: StatusCode, message: &str, request_id: Option<&str>) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type(status), "message": message},
        "request_id": request_id,
    })
}

impl IntoResponse for ManagedError {
    fn into_response(self) -> Response {
        let body = envelope(self.status, &self.message, None);
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::CONFLICT {
            response
                .headers_mut()
                .insert("x-should-retry", HeaderValue::from_static("false"));
        }
        response
    }
}

impl From<StoreError> for ManagedError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::ThreadNotFound(_) => ManagedError::not_found("session not found"),
            StoreError::MessageNotFound(id) => {
                ManagedError::not_found(format!("event {id} not found"))
            }
            StoreError::LeaseLost(_) => ManagedError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the session is moving between nodes; retry",
            ),
            other => ManagedError::internal(&other),
        }
    }
}

impl From<PipelineError> for ManagedError {
    fn from(err: PipelineError) -> Self {
        let status = match &err {
            PipelineError::InvalidInput(_) | PipelineError::File(_) => StatusCode::BAD_REQUEST,
            PipelineError::Workspace(_) => StatusCode::BAD_REQUEST,
            PipelineError::ThreadNotFound(_) => {
                return ManagedError::not_found("session not found")
            }
            PipelineError::QueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
            PipelineError::ClientIdConflict { .. }
            | PipelineError::Archived(_)
            | PipelineError::Profile(_) => StatusCode::CONFLICT,
            PipelineError::BudgetExceeded { .. } => StatusCode::PAYMENT_REQUIRED,
            PipelineError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            PipelineError::Store(_) => {
                return match err {
                    PipelineError::Store(err) => err.into(),
                    _ => unreachable!("matched above"),
                }
            }
            PipelineError::Turn { .. }
            | PipelineError::Process(_)
            | PipelineError::PreviousFailure { .. } => StatusCode::BAD_GATEWAY,
        };
        ManagedError::new(status, err.to_string())
    }
}

impl From<ServiceError> for ManagedError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::Pipeline(err) => err.into(),
            ServiceError::Store(err) => err.into(),
            ServiceError::Page(err) => ManagedError::invalid(err.to_string()),
            ServiceError::Invalid(message) => ManagedError::invalid(message),
            ServiceError::NotFound(message) => ManagedError::not_found(message),
            ServiceError::Conflict(message) => ManagedError::new(StatusCode::CONFLICT, message),
            ServiceError::Owner { status, message } => ManagedError::new(status, message),
            ServiceError::Moving(message) => {
                ManagedError::new(StatusCode::SERVICE_UNAVAILABLE, message)
            }
        }
    }
}

impl From<crate::goals::GoalError> for ManagedError {
    fn from(err: crate::goals::GoalError) -> Self {
        use crate::goals::GoalError;
        match err {
            GoalError::Invalid(message) => ManagedError::invalid(message),
            GoalError::Busy { .. } => ManagedError::new(StatusCode::CONFLICT, err.to_string()),
            GoalError::Service(err) => err.into(),
        }
    }
}

/// Answers every error of the door in the API's shape: one of Harness's own (`{"error":
/// {"code", "message"}}`, from the token check, the scope check or the body guard) is
/// rewritten with its message; the door's own pass as they are. Every answer carries a
/// `request-id` (the request's `x-request-id`), which the SDKs show on their errors.
pub async fn reshape(request: Request, next: Next) -> Response {
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(|id| format!("req_{}", id.replace('-', "")));
    let response = next.run(request).await;
    let (mut parts, body) = response.into_parts();
    if let Some(id) = request_id
        .as_deref()
        .and_then(|id| HeaderValue::from_str(id).ok())
    {
        parts.headers.insert("request-id", id);
    }
    if parts.status.is_success() || parts.status.is_informational() {
        return Response::from_parts(parts, body);
    }
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let shown: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let message = match (&shown["type"], &shown["error"]["message"]) {
        (Value::String(kind), _) if kind == "error" => {
            // The door's own: add the request id.
            let mut shown = shown;
            shown["request_id"] = json!(request_id);
            return rebuilt(parts, &shown);
        }
        (_, Value::String(message)) => message.clone(),
        _ => String::from_utf8_lossy(&bytes).into_owned(),
    };
    rebuilt(
        parts.clone(),
        &envelope(parts.status, &message, request_id.as_deref()),
    )
}

fn rebuilt(mut parts: axum::http::response::Parts, body: &Value) -> Response {
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body.to_string()))
}
