//! The `context` plugin: when a turn starts on a fresh `claude` process that has no resumable CLI
//! session (a new process after the transcript was lost, or after the session could not be
//! resumed), it puts the thread's earlier messages into the prompt, so the model never silently
//! loses history. On a warm or resumed process the CLI has the history already, and this adds
//! nothing.

use std::sync::Arc;

use plugin_contract::{async_trait, ContextProvider, HistoryMessage, Plugin, TurnContext};

pub struct ContextPlugin;

impl Plugin for ContextPlugin {
    fn name(&self) -> &str {
        "context"
    }

    fn context_provider(&self) -> Option<Arc<dyn ContextProvider>> {
        Some(Arc::new(HistoryContext))
    }
}

struct HistoryContext;

#[async_trait]
impl ContextProvider for HistoryContext {
    async fn context(&self, turn: &TurnContext) -> Result<Option<String>, String> {
        if !turn.start.needs_history() {
            return Ok(None);
        }
        let history = turn.store.history(&turn.thread_id).await?;
        Ok(render(&history))
    }
}

/// The history block put before the user's new message.
pub fn render(history: &[HistoryMessage]) -> Option<String> {
    if history.is_empty() {
        return None;
    }
    let mut out = String::from(
        "<conversation_history>\nThis conversation started earlier. Its messages so far, oldest first:\n",
    );
    for message in history {
        out.push_str(&format!("\n[{}]\n{}\n", message.role, message.content));
    }
    out.push_str("</conversation_history>\n\nThe user's new message follows.");
    Some(out)
}

#[cfg(test)]
mod tests {
    use plugin_contract::testing::StubStore;
    use plugin_contract::{SessionStart, ThreadId};

    use super::*;

    fn turn(start: SessionStart) -> TurnContext {
        let store = StubStore::default().with_history(
            "t",
            &[("user", "my name is Ada"), ("assistant", "hello Ada")],
        );
        TurnContext {
            thread_id: ThreadId::from_string("t"),
            start,
            store: Arc::new(store),
        }
    }

    #[tokio::test]
    async fn fresh_session_gets_history_in_order() {
        let text = HistoryContext
            .context(&turn(SessionStart::Fresh {
                resume_failed: true,
            }))
            .await
            .unwrap()
            .unwrap();
        let ada = text.find("my name is Ada").unwrap();
        let hello = text.find("hello Ada").unwrap();
        assert!(ada < hello, "oldest first: {text}");
        assert!(text.contains("[user]") && text.contains("[assistant]"));
    }

    #[tokio::test]
    async fn warm_and_resumed_sessions_get_nothing() {
        assert_eq!(
            HistoryContext
                .context(&turn(SessionStart::Warm))
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            HistoryContext
                .context(&turn(SessionStart::Resumed))
                .await
                .unwrap(),
            None
        );
    }

    #[test]
    fn empty_history_adds_nothing() {
        assert_eq!(render(&[]), None);
    }
}
