//! The operations on `model_requests`: the model gateway's record of each model request.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;

use crate::{MessageId, StoreError};

/// One model request as the gateway saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct NewModelRequest {
    /// The thread whose process made it.
    pub thread_id: ThreadId,
    /// The turn it was part of, when one was running.
    pub message_id: Option<MessageId>,
    /// The model that answered (the response's `model`), when it answered.
    pub model: Option<String>,
    /// The HTTP status the gateway answered with (its own refusals included).
    pub status: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    /// What it cost at the gateway's prices.
    pub cost_usd: f64,
    /// From the request's arrival to the first byte of the response's body.
    pub first_byte_ms: i64,
    /// From the request's arrival to the response's last byte.
    pub ms: i64,
    /// The API key it was charged to (its turn's, or the thread's last turn's); `None`: the
    /// operator's.
    pub key_id: Option<String>,
    /// Its cost is in no turn's stored cost (a request between turns, or one that ended after
    /// its turn was stored): storing it also adds its cost to what its key and the day spent,
    /// and a thread's spending counts it.
    pub alone: bool,
}

/// A model request as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequestRow {
    pub id: i64,
    pub thread_id: ThreadId,
    pub message_id: Option<MessageId>,
    pub model: Option<String>,
    pub status: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    pub first_byte_ms: i64,
    pub ms: i64,
    pub key_id: Option<String>,
    pub alone: bool,
    pub created_at: DateTime<Utc>,
}

#[allow(async_fn_in_trait)]
pub trait ModelRequestQueries {
    /// Stores one request; its id. One [`NewModelRequest::alone`] is added to its key's and
    /// the day's spending in the same transaction.
    async fn insert_model_request(&self, request: &NewModelRequest) -> Result<i64, StoreError>;

    /// The requests of one turn, oldest first.
    async fn model_requests_of(
        &self,
        message: &MessageId,
    ) -> Result<Vec<ModelRequestRow>, StoreError>;
}

/// `model_request_queries!(Backend)`: the [`ModelRequestQueries`] of a database crate's
/// `Backend`, calling the functions of the same names in the invoking module.
#[macro_export]
macro_rules! model_request_queries {
    ($backend:ty) => {
        impl $crate::ModelRequestQueries for $backend {
            async fn insert_model_request(
                &self,
                request: &$crate::NewModelRequest,
            ) -> Result<i64, StoreError> {
                insert(self.pool(), request).await
            }

            async fn model_requests_of(
                &self,
                message: &MessageId,
            ) -> Result<Vec<$crate::ModelRequestRow>, StoreError> {
                of_message(self.pool(), message).await
            }
        }
    };
}
