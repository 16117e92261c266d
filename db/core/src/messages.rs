//! The operations on `messages`: a user message stored `pending` (its turn ends through
//! [`crate::OutcomeQueries`]), the reads, and a retry putting it back.

use plugin_contract::{HistoryMessage, ThreadId, UserContent};

use crate::{Fence, Inserted, MessageId, MessageRow, NewUserMessage, Role, StoreError};

/// One finished exchange as history: the user message (its stored text and `blocks` column) and
/// the reply's text.
pub fn history_pair(
    user_text: String,
    user_blocks: Option<String>,
    reply: String,
) -> [HistoryMessage; 2] {
    let content = user_blocks
        .and_then(|blocks| serde_json::from_str(&blocks).ok())
        .map(UserContent::Blocks)
        .unwrap_or(UserContent::Text(user_text));
    [
        HistoryMessage {
            role: Role::User.as_str().to_owned(),
            content,
        },
        HistoryMessage {
            role: Role::Assistant.as_str().to_owned(),
            content: UserContent::Text(reply),
        },
    ]
}

/// The assistant message that ends a turn ([`crate::Ending::reply`]).
#[derive(Clone, Copy, Debug)]
pub struct NewReply<'a> {
    /// The reply's id, chosen by the caller.
    pub id: &'a MessageId,
    pub text: &'a str,
    /// The model that answered, when the CLI said.
    pub model: Option<&'a str>,
    /// For a thread with an `outputSchema`: the reply's value, already validated against it.
    pub structured_output: Option<&'a serde_json::Value>,
}

#[allow(async_fn_in_trait)]
pub trait MessageQueries {
    /// Stores `new` as a `pending` user message with `id`, next in its thread; or, when the
    /// thread already has a message with its `client_message_id`, inserts nothing and returns
    /// that first message ([`Inserted::Duplicate`]). [`StoreError::ThreadNotFound`] for an
    /// unknown thread, [`StoreError::LeaseLost`] when `fence` no longer holds it.
    async fn insert_user_message(
        &self,
        fence: Option<&Fence>,
        id: &MessageId,
        new: &NewUserMessage,
    ) -> Result<Inserted, StoreError>;

    /// The thread of the user message `id`; `None` when there is no such user message. The
    /// thread's fence guards the end of the message's turn.
    async fn user_message_thread(&self, id: &MessageId) -> Result<Option<ThreadId>, StoreError>;

    /// The message, or `None`.
    async fn get_message(&self, id: &MessageId) -> Result<Option<MessageRow>, StoreError>;

    /// The thread's messages in `seq` order; none for an unknown thread.
    async fn list_messages(&self, thread: &ThreadId) -> Result<Vec<MessageRow>, StoreError>;

    /// The assistant message answering `user_message`, or `None`.
    async fn reply_for(&self, user_message: &MessageId) -> Result<Option<MessageRow>, StoreError>;

    /// The thread's `done` user messages each followed by its `done` reply, oldest first.
    async fn history(&self, thread: &ThreadId) -> Result<Vec<HistoryMessage>, StoreError>;

    /// Puts the user message `id` (of `thread`) back to `pending` when it is `interrupted` or
    /// `refused`; the message when this call did it, else `None`. [`StoreError::LeaseLost`]
    /// when `fence` no longer holds the thread.
    async fn retry_interrupted(
        &self,
        fence: Option<&Fence>,
        thread: &ThreadId,
        id: &MessageId,
    ) -> Result<Option<MessageRow>, StoreError>;
}

/// `message_queries!(Backend)`: the [`MessageQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module, which hold that database's SQL. The
/// wiring (which writes open a fenced `ThreadTx`, and commit it) is written once, here.
#[macro_export]
macro_rules! message_queries {
    ($backend:ty) => {
        impl $crate::MessageQueries for $backend {
            async fn insert_user_message(
                &self,
                fence: Option<&Fence>,
                id: &MessageId,
                new: &NewUserMessage,
            ) -> Result<Inserted, StoreError> {
                insert_user_message(self.pool(), fence, id, new).await
            }

            async fn user_message_thread(
                &self,
                id: &MessageId,
            ) -> Result<Option<ThreadId>, StoreError> {
                user_message_thread(self.pool(), id).await
            }

            async fn get_message(&self, id: &MessageId) -> Result<Option<MessageRow>, StoreError> {
                get_message(self.pool(), id).await
            }

            async fn list_messages(
                &self,
                thread: &ThreadId,
            ) -> Result<Vec<MessageRow>, StoreError> {
                list_messages(self.pool(), thread).await
            }

            async fn reply_for(
                &self,
                user_message: &MessageId,
            ) -> Result<Option<MessageRow>, StoreError> {
                reply_for(self.pool(), user_message).await
            }

            async fn history(&self, thread: &ThreadId) -> Result<Vec<HistoryMessage>, StoreError> {
                history(self.pool(), thread).await
            }

            async fn retry_interrupted(
                &self,
                fence: Option<&Fence>,
                thread: &ThreadId,
                id: &MessageId,
            ) -> Result<Option<MessageRow>, StoreError> {
                let mut tx = ThreadTx::begin(self.pool(), thread, fence).await?;
                let row = retry_interrupted(&mut tx, thread, id).await?;
                tx.commit().await?;
                Ok(row)
            }
        }
    };
}
