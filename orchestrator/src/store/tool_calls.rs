//! A record of every tool call the in-process MCP server served: what was asked, what went back,
//! how long it took. Written once per call after it finished; read for inspection and tests.

use plugin_contract::ThreadId;

use super::{on_db, Db, NewToolCall, Store, StoreError, ToolCallQueries, ToolCallRow};

impl Store {
    /// Records a finished tool call and returns its id. [`StoreError::ThreadNotFound`] when
    /// `thread_id` names an unknown thread; [`StoreError::LeaseLost`] when it names one whose
    /// lease this node does not hold (`leases.rs`).
    pub async fn record_tool_call(&self, call: NewToolCall) -> Result<i64, StoreError> {
        let _timer = self.metrics.time("record_tool_call");
        let fence = match &call.thread_id {
            Some(thread) => self.fence(thread, None)?,
            None => None,
        };
        on_db!(self, db => db.record_tool_call(fence.as_ref(), &call).await)
    }

    /// The thread's tool calls, oldest first (ascending id).
    pub async fn tool_calls(&self, thread: &ThreadId) -> Result<Vec<ToolCallRow>, StoreError> {
        let _timer = self.metrics.time("tool_calls");
        on_db!(self, db => db.tool_calls(thread).await)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::store_tests;
    use super::super::NewThread;
    use super::*;

    fn call(thread: Option<&ThreadId>, tool: &str) -> NewToolCall {
        NewToolCall {
            thread_id: thread.cloned(),
            tool: tool.into(),
            tool_use_id: Some(format!("toolu_{tool}")),
            input: json!({"tz": "Europe/Paris"}),
            result: Some(json!({"text": "12:00"})),
            is_error: false,
            duration_ms: 17,
        }
    }

    store_tests! {
        async fn tool_calls_round_trip_in_order(store: sqlite_memory) {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let other = store.create_thread(NewThread::default()).await.unwrap().id;

            let first = store
                .record_tool_call(call(Some(&t), "time__now"))
                .await
                .unwrap();
            store
                .record_tool_call(call(Some(&other), "elsewhere"))
                .await
                .unwrap();
            store
                .record_tool_call(call(None, "no_thread"))
                .await
                .unwrap();
            let failed = NewToolCall {
                tool_use_id: None,
                result: None,
                is_error: true,
                duration_ms: u64::MAX,
                ..call(Some(&t), "delegation__ask")
            };
            let second = store.record_tool_call(failed).await.unwrap();
            assert!(second > first);

            let rows = store.tool_calls(&t).await.unwrap();
            assert_eq!(rows.len(), 2);
            let r = &rows[0];
            assert_eq!(r.id, first);
            assert_eq!(r.thread_id.as_ref(), Some(&t));
            assert_eq!(r.tool, "time__now");
            assert_eq!(r.tool_use_id.as_deref(), Some("toolu_time__now"));
            assert_eq!(r.input, json!({"tz": "Europe/Paris"}));
            assert_eq!(r.result, Some(json!({"text": "12:00"})));
            assert!(!r.is_error);
            assert_eq!(r.duration_ms, 17);

            let r = &rows[1];
            assert_eq!(r.id, second);
            assert_eq!(r.tool, "delegation__ask");
            assert_eq!(r.tool_use_id, None);
            assert_eq!(r.result, None);
            assert!(r.is_error);
            assert_eq!(r.duration_ms, i64::MAX);

            let no_thread = store
                .test_count("SELECT COUNT(*) FROM tool_calls WHERE thread_id IS NULL")
                .await;
            assert_eq!(no_thread, 1);
        }
    }

    store_tests! {
        async fn tool_call_for_unknown_thread_is_thread_not_found(store: sqlite_memory) {
            let unknown = ThreadId::from_string("thr_nope");
            let err = store
                .record_tool_call(call(Some(&unknown), "x"))
                .await
                .unwrap_err();
            assert!(
                matches!(err, StoreError::ThreadNotFound(ref id) if *id == unknown),
                "{err:?}"
            );
        }
    }
}
