//! The model gateway's record of each model request (`model_requests`).

use super::{
    on_db, Db, MessageId, ModelRequestQueries, ModelRequestRow, NewModelRequest, Store, StoreError,
};

impl Store {
    /// Stores one model request as the gateway saw it; its id.
    pub async fn insert_model_request(&self, request: &NewModelRequest) -> Result<i64, StoreError> {
        let _timer = self.metrics.time("insert_model_request");
        on_db!(self, db => db.insert_model_request(request).await)
    }

    /// The model requests of one turn (by its user message), oldest first.
    pub async fn model_requests_of(
        &self,
        message: &MessageId,
    ) -> Result<Vec<ModelRequestRow>, StoreError> {
        let _timer = self.metrics.time("model_requests_of");
        on_db!(self, db => db.model_requests_of(message).await)
    }
}
