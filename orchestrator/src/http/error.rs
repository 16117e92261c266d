//! `ApiError`: every failure the API reports, as a status and a JSON body
//! `{"error": {"code", "message"}}`. Internal errors are logged in full and shown as
//! "internal error".

use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use tracing::error;

use crate::api::pages::PageError;
use crate::budget::{BudgetExceeded, BudgetKind};
use crate::files::FileError;
use crate::pipeline::PipelineError;
use crate::service::ServiceError;
use crate::store::{MessageId, StoreError};
use crate::turn_error::TurnError;
use crate::workspace::WorkspaceError;
use claude_cli::{CliError, StartupClass};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// The user message a failed turn belongs to, so clients can match it.
    pub message_id: Option<MessageId>,
    /// A refusal by a budget (402): which one, its limit and what was spent.
    pub budget: Option<BudgetExceeded>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            message_id: None,
            budget: None,
        }
    }
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", what)
    }
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", message)
    }
    pub(super) fn internal(err: &dyn std::fmt::Display) -> Self {
        error!(error = %err, "Internal error.");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }
}

/// The body of every error the API answers (`/mcp` answers JSON-RPC errors instead, except for
/// the token, `Host` and `Origin` checks in front of it). The OpenAPI document's `ErrorBody`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: a stable `code` to branch on, a `message` for people.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// Stable and machine-readable: `not_found`, `thread_not_found`, `invalid_json`,
    /// `invalid_body`, `invalid_input`, `unauthorized`, `queue_full`, `turn_timeout`, ….
    #[schema(example = "thread_not_found")]
    pub code: &'static str,
    pub message: String,
    /// For a failed turn: the user message it belongs to, so a client can match it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<MessageId>,
    /// With `budget_exceeded` (402): the budget that is spent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetKind>,
    /// With `budget_exceeded`: that budget's limit in USD.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_usd: Option<f64>,
    /// With `budget_exceeded`: what was spent against it, in USD.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spent_usd: Option<f64>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                message_id: self.message_id,
                budget: self.budget.as_ref().map(|b| b.budget),
                limit_usd: self.budget.as_ref().map(|b| b.limit_usd),
                spent_usd: self.budget.as_ref().map(|b| b.spent_usd),
            },
        };
        (self.status, Json(body)).into_response()
    }
}

/// The thread service's error in `/api`'s words: each carried error as it answers on its own;
/// a refusal by the thread's owner with the owner's status; a thread moving between nodes `503
/// not_owner`.
impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::Pipeline(err) => err.into(),
            ServiceError::Store(err) => err.into(),
            ServiceError::Page(err) => err.into(),
            ServiceError::Invalid(message) => ApiError::unprocessable(message),
            ServiceError::NotFound(message) => ApiError::not_found(message),
            ServiceError::Conflict(message) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", message)
            }
            ServiceError::Owner { status, message } => {
                ApiError::new(status, "owner_refused", message)
            }
            ServiceError::Moving(message) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_owner", message)
            }
        }
    }
}

/// `503 too_many_streams`: every stream the daemon allows is open.
impl From<crate::sync::StreamsFull> for ApiError {
    fn from(full: crate::sync::StreamsFull) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            full.to_string(),
        )
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::ThreadNotFound(id) => ApiError::new(
                StatusCode::NOT_FOUND,
                "thread_not_found",
                format!("thread {id} not found"),
            ),
            StoreError::MessageNotFound(id) => {
                ApiError::not_found(format!("message {id} not found"))
            }
            StoreError::LeaseLost(id) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "lease_lost",
                format!("another node took thread {id} over; retry"),
            ),
            other => ApiError::internal(&other),
        }
    }
}

/// How a failed turn is reported: the CLI missing → 503; the CLI failing → 502; too slow → 504.
pub fn turn_status(err: &TurnError) -> (StatusCode, &'static str) {
    match err {
        TurnError::Process(CliError::Spawn { .. }) => {
            (StatusCode::SERVICE_UNAVAILABLE, "cli_unavailable")
        }
        TurnError::Process(CliError::NotReady(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "cli_not_ready")
        }
        TurnError::Process(CliError::ProcessDied { .. }) => (StatusCode::BAD_GATEWAY, "cli_died"),
        TurnError::Process(CliError::Refused(_)) => (StatusCode::BAD_GATEWAY, "cli_error"),
        TurnError::Process(CliError::Unpaired { .. }) => (StatusCode::BAD_GATEWAY, "cli_unpaired"),
        TurnError::Process(CliError::StartupFailed(failure)) => match failure.class() {
            // The folder the caller's thread works in is gone: theirs to fix.
            StartupClass::Caller => (StatusCode::CONFLICT, "workspace_unavailable"),
            // A file or setting of the operator's (the message names it).
            StartupClass::Operator => (StatusCode::INTERNAL_SERVER_ERROR, "cli_misconfigured"),
            StartupClass::Policy => (StatusCode::FORBIDDEN, "cli_policy_refused"),
            StartupClass::Transient => (StatusCode::SERVICE_UNAVAILABLE, "cli_unavailable"),
        },
        TurnError::Cli(_) => (StatusCode::BAD_GATEWAY, "cli_error"),
        TurnError::ToolCallLimit(_) => (StatusCode::BAD_GATEWAY, "tool_call_limit"),
        TurnError::StructuredOutput(_) => (StatusCode::BAD_GATEWAY, "structured_output_failed"),
        TurnError::IdleTimeout(_) | TurnError::TurnTimeout(_) => {
            (StatusCode::GATEWAY_TIMEOUT, "turn_timeout")
        }
        TurnError::Interrupted => (StatusCode::CONFLICT, "interrupted"),
        TurnError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
        TurnError::WorkspaceUnavailable(_) => (StatusCode::CONFLICT, "workspace_unavailable"),
        TurnError::ProfileUnavailable(_) => (StatusCode::CONFLICT, "profile_unavailable"),
        TurnError::Files(_) => (StatusCode::INTERNAL_SERVER_ERROR, "files_unreadable"),
        TurnError::WallLimit(_) => (StatusCode::BAD_GATEWAY, "wall_limit"),
    }
}

impl From<WorkspaceError> for ApiError {
    fn from(err: WorkspaceError) -> Self {
        let (status, code) = match &err {
            WorkspaceError::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_workspace"),
            WorkspaceError::BranchExists(_) => (StatusCode::CONFLICT, "branch_exists"),
            WorkspaceError::Unavailable(_) => (StatusCode::CONFLICT, "workspace_unavailable"),
            WorkspaceError::NoDiff(_) => (StatusCode::CONFLICT, "no_diff"),
            WorkspaceError::Git(_) => (StatusCode::INTERNAL_SERVER_ERROR, "git_failed"),
        };
        ApiError::new(status, code, err.to_string())
    }
}

impl From<PageError> for ApiError {
    fn from(err: PageError) -> Self {
        match err {
            PageError::Invalid(message) => ApiError::unprocessable(message),
            PageError::Store(err) => err.into(),
        }
    }
}

impl From<FileError> for ApiError {
    fn from(err: FileError) -> Self {
        let (status, code) = match &err {
            FileError::Store(_) => {
                let FileError::Store(err) = err else {
                    return ApiError::internal(&err);
                };
                return err.into();
            }
            FileError::Unsupported(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            FileError::Mismatch { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "media_type_mismatch"),
            FileError::Block { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_content"),
            FileError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            FileError::NotFound(_) => (StatusCode::NOT_FOUND, "file_not_found"),
        };
        ApiError::new(status, code, err.to_string())
    }
}

impl From<PipelineError> for ApiError {
    fn from(err: PipelineError) -> Self {
        match err {
            PipelineError::InvalidInput(msg) => ApiError::unprocessable(msg),
            PipelineError::ThreadNotFound(id) => ApiError::new(
                StatusCode::NOT_FOUND,
                "thread_not_found",
                format!("thread {id} not found"),
            ),
            PipelineError::ClientIdConflict { ref message_id, .. } => ApiError {
                status: StatusCode::CONFLICT,
                code: "client_message_id_conflict",
                message_id: Some(message_id.clone()),
                message: err.to_string(),
                budget: None,
            },
            err @ PipelineError::QueueFull { .. } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", err.to_string())
            }
            PipelineError::Turn {
                message_id, error, ..
            } => {
                let (status, code) = turn_status(&error);
                ApiError {
                    status,
                    code,
                    message: error.to_string(),
                    message_id: Some(message_id),
                    budget: None,
                }
            }
            PipelineError::Process(error) => {
                let (status, code) = turn_status(&error);
                ApiError::new(status, code, error.to_string())
            }
            PipelineError::PreviousFailure {
                message_id,
                status,
                error,
            } => ApiError {
                status: StatusCode::BAD_GATEWAY,
                code: "turn_failed",
                message: format!(
                    "this message was already processed and ended as {status:?}: {error}"
                ),
                message_id: Some(message_id),
                budget: None,
            },
            PipelineError::BudgetExceeded {
                message_id,
                exceeded,
            } => ApiError {
                status: StatusCode::PAYMENT_REQUIRED,
                code: "budget_exceeded",
                message: exceeded.to_string(),
                message_id: Some(message_id),
                budget: Some(exceeded),
            },
            PipelineError::ShuttingDown => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "the daemon is shutting down",
            ),
            PipelineError::Store(err) => err.into(),
            PipelineError::Workspace(err) => err.into(),
            PipelineError::File(err) => err.into(),
            err @ PipelineError::Archived(_) => {
                ApiError::new(StatusCode::CONFLICT, "thread_archived", err.to_string())
            }
            err @ PipelineError::Profile(_) => {
                ApiError::new(StatusCode::CONFLICT, "profile_unavailable", err.to_string())
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let (status, code) = match &rejection {
            JsonRejection::JsonSyntaxError(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
            JsonRejection::JsonDataError(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
            JsonRejection::MissingJsonContentType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
            }
            other => (other.status(), "invalid_body"),
        };
        ApiError::new(status, code, rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_path",
            rejection.body_text(),
        )
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            rejection.body_text(),
        )
    }
}

/// Parses a JSON body read as bytes, with the same errors as [`super::ApiJson`]: 400 for bad JSON
/// (with its line and column), 422 for a missing or mistyped field (named by its path).
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Every body we take is an object: a list would fill a struct positionally, or stand for
    // `{}` where every field has a default.
    if let Err(err) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("Failed to parse the request body as JSON: {err}"),
        ));
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
            "the body must be a JSON object",
        ));
    }
    // axum's own parser: its errors carry the field's path (serde_path_to_error).
    axum::Json::<T>::from_bytes(bytes)
        .map(|axum::Json(value)| value)
        .map_err(ApiError::from)
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        if super::guard::is_too_slow(&rejection) {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                rejection.body_text(),
            );
        }
        let status = rejection.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "body_too_large"
        } else {
            "invalid_body"
        };
        ApiError::new(status, code, rejection.body_text())
    }
}
