//! The one error of the thread service. Each door maps it to its own words: `/api` to a status
//! and a JSON body (`http::error`), `/mcp` to a tool error (`http::mcp_endpoint::threads`). The
//! variants keep the errors they carry, so neither door loses a detail it answered with before.

use axum::http::StatusCode;

use crate::api::pages::PageError;
use crate::pipeline::PipelineError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// What the pipeline refused or could not do (a budget, a conflict, a failed turn, …).
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// What the store could not do; `ThreadNotFound` is also the answer for a thread the caller
    /// does not see, so that a key cannot learn that it exists.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A page that was not served: a bad filter or cursor (the caller's), or the store.
    #[error(transparent)]
    Page(#[from] PageError),
    /// A field the caller got wrong: `/api` answers 422, `/mcp` an invalid input.
    #[error("{0}")]
    Invalid(String),
    /// Something the caller named that is not there (a thread's message): 404.
    #[error("{0}")]
    NotFound(String),
    /// What the caller asked for was done already (a permission decided): 409.
    #[error("{0}")]
    Conflict(String),
    /// The thread's owner refused the operation it was forwarded: its status and its message.
    #[error("{message}")]
    Owner { status: StatusCode, message: String },
    /// The thread is moving between nodes, or its owner stopped answering: retry.
    #[error("{0}")]
    Moving(String),
}
