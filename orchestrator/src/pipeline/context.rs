//! Context for a turn: once the lease says how the session started, the context providers
//! (plugins) may add to the prompt (earlier messages for a fresh session, say), each as leading
//! blocks of its own.

use std::sync::Arc;

use tracing::warn;

use plugin_contract::{
    ContextProvider, SessionStart, ThreadId, ThreadStore, TurnContext, UserContent,
};

/// The prompt after what the providers add, in their order; a provider that fails is skipped.
pub(super) async fn prepare_prompt(
    providers: &[Arc<dyn ContextProvider>],
    store: Arc<dyn ThreadStore>,
    thread: &ThreadId,
    start: SessionStart,
    prompt: &UserContent,
) -> UserContent {
    let turn = TurnContext {
        thread_id: thread.clone(),
        start,
        store,
    };
    let mut lead = Vec::new();
    for provider in providers {
        match provider.context(&turn).await {
            Ok(Some(context)) if !context.is_blank() => lead.extend(context.into_blocks()),
            Ok(_) => {}
            Err(err) => {
                warn!(thread_id = %thread, error = %err, "A context provider failed; going on without it.")
            }
        }
    }
    prompt.clone().after(lead)
}
