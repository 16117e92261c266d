//! The operations on `tool_calls`.

use plugin_contract::ThreadId;

use crate::{Fence, NewToolCall, StoreError, ToolCallRow};

#[allow(async_fn_in_trait)]
pub trait ToolCallQueries {
    /// Records a finished tool call; its id. [`StoreError::ThreadNotFound`] for an unknown
    /// thread, [`StoreError::LeaseLost`] when `fence` no longer holds the thread.
    async fn record_tool_call(
        &self,
        fence: Option<&Fence>,
        call: &NewToolCall,
    ) -> Result<i64, StoreError>;

    /// The thread's tool calls, oldest first.
    async fn tool_calls(&self, thread: &ThreadId) -> Result<Vec<ToolCallRow>, StoreError>;
}

/// `tool_call_queries!(Backend)`: the [`ToolCallQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module, which hold that database's SQL. The
/// wiring (which writes open a fenced `ThreadTx`, and commit it) is written once, here.
#[macro_export]
macro_rules! tool_call_queries {
    ($backend:ty) => {
        impl $crate::ToolCallQueries for $backend {
            async fn record_tool_call(
                &self,
                fence: Option<&Fence>,
                call: &NewToolCall,
            ) -> Result<i64, StoreError> {
                // A call outside any thread has no fence to pass.
                let Some(thread) = &call.thread_id else {
                    let mut conn = self.pool().acquire().await?;
                    return insert(&mut conn, call).await;
                };
                let mut tx = ThreadTx::single(self.pool(), thread, fence).await?;
                let id = insert(tx.conn(), call).await?;
                tx.commit().await?;
                Ok(id)
            }

            async fn tool_calls(&self, thread: &ThreadId) -> Result<Vec<ToolCallRow>, StoreError> {
                of_thread(self.pool(), thread).await
            }
        }
    };
}
