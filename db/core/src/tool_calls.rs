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
