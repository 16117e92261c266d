//! Context for a turn: once the lease says how the session started, the context providers
//! (plugins) may add text before the prompt (earlier messages for a fresh session, say).

use std::sync::Arc;

use tracing::warn;

use plugin_contract::{ContextProvider, SessionStart, ThreadId, ThreadStore, TurnContext};

/// The prompt with what the providers add, in their order; a provider that fails is skipped.
pub(super) async fn prepare_prompt(
    providers: &[Arc<dyn ContextProvider>],
    store: Arc<dyn ThreadStore>,
    thread: &ThreadId,
    start: SessionStart,
    prompt: &str,
) -> String {
    let turn = TurnContext {
        thread_id: thread.clone(),
        start,
        store,
    };
    let mut parts = Vec::new();
    for provider in providers {
        match provider.context(&turn).await {
            Ok(Some(text)) if !text.is_empty() => parts.push(text),
            Ok(_) => {}
            Err(err) => {
                warn!(thread_id = %thread, error = %err, "A context provider failed; going on without it.")
            }
        }
    }
    if parts.is_empty() {
        return prompt.to_owned();
    }
    parts.push(prompt.to_owned());
    parts.join("\n\n")
}
