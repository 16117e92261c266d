//! The `context` plugin: when a turn starts on a fresh `claude` process that has no resumable CLI
//! session (a new process after the transcript was lost, or after the session could not be
//! resumed), it puts the thread's earlier messages into the prompt, so the model never silently
//! loses history. On a warm or resumed process the CLI has the history already, and this adds
//! nothing. Images and documents of earlier messages come back as themselves (their blocks, in
//! place), not as placeholders.

use std::sync::Arc;

use plugin_contract::{
    async_trait, ContentBlock, ContextProvider, HistoryMessage, Plugin, TurnContext, UserContent,
};

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
    async fn context(&self, turn: &TurnContext) -> Result<Option<UserContent>, String> {
        if !turn.start.needs_history() {
            return Ok(None);
        }
        let history = turn.store.history(&turn.thread_id).await?;
        Ok(render(&history))
    }
}

/// The history put before the user's new message: one text block while the messages are text,
/// each image or document in place between them.
pub fn render(history: &[HistoryMessage]) -> Option<UserContent> {
    if history.is_empty() {
        return None;
    }
    let mut blocks = Vec::new();
    let mut text = String::from(
        "<conversation_history>\nThis conversation started earlier. Its messages so far, oldest first:\n",
    );
    for message in history {
        text.push_str(&format!("\n[{}]\n", message.role));
        for block in message.content.blocks().iter() {
            match block {
                ContentBlock::Text { text: part } => {
                    text.push_str(part);
                    text.push('\n');
                }
                media => {
                    blocks.push(ContentBlock::Text {
                        text: std::mem::take(&mut text),
                    });
                    blocks.push(media.clone());
                    text.push('\n');
                }
            }
        }
    }
    text.push_str("</conversation_history>\n\nThe user's new message follows.");
    blocks.push(ContentBlock::Text { text });
    Some(match blocks.as_slice() {
        [ContentBlock::Text { text }] => UserContent::Text(text.clone()),
        _ => UserContent::Blocks(blocks),
    })
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
        let content = HistoryContext
            .context(&turn(SessionStart::Fresh {
                resume_failed: true,
            }))
            .await
            .unwrap()
            .unwrap();
        let text = content.text();
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

    #[test]
    fn images_and_documents_come_back_in_place() {
        let image = ContentBlock::Image {
            source: plugin_contract::MediaSource::File {
                file_id: "file_1".into(),
                media_type: Some("image/png".into()),
                bytes: None,
            },
        };
        let history = [
            HistoryMessage {
                role: "user".into(),
                content: UserContent::Blocks(vec![
                    ContentBlock::Text {
                        text: "what is this?".into(),
                    },
                    image.clone(),
                ]),
            },
            HistoryMessage {
                role: "assistant".into(),
                content: "a cat".into(),
            },
        ];
        let Some(UserContent::Blocks(blocks)) = render(&history) else {
            panic!("blocks expected");
        };
        assert_eq!(blocks.len(), 3, "{blocks:?}");
        assert_eq!(blocks[1], image);
        let ContentBlock::Text { text: before } = &blocks[0] else {
            panic!("text first");
        };
        let ContentBlock::Text { text: after } = &blocks[2] else {
            panic!("text last");
        };
        assert!(before.contains("what is this?") && !before.contains("a cat"));
        assert!(after.contains("[assistant]\na cat"));
    }
}
