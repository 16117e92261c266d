//! Messages: a user message is stored `pending` before its turn runs, and the turn's end
//! ([`Store::end_turn`], `super::outcomes`) gives it its final status and its reply;
//! [`Store::history`] feeds a fresh CLI session the finished exchanges.
//!
//! A turn's writes belong to its thread: each checks the thread's lease fence in its own
//! transaction (the query crates' `messages` modules say how `seq` stays distinct under
//! concurrent writers).

use plugin_contract::{HistoryMessage, ThreadId};

use super::{
    on_db, Db, Fence, Inserted, MessageId, MessageQueries, MessageRow, NewUserMessage, Store,
    StoreError,
};

impl Store {
    /// Stores a user message as `pending`, at the end of its thread.
    ///
    /// When `client_message_id` is set and the thread already has a message with it, nothing is
    /// inserted and the first message comes back as [`Inserted::Duplicate`]: a client retry must
    /// not run the turn twice. [`StoreError::ThreadNotFound`] for an unknown thread.
    ///
    /// Succeeds only while `fence` (when set; else this node's, when clustered) still holds the
    /// thread's lease, checked in the inserting transaction: [`StoreError::LeaseLost`]
    /// otherwise, nothing written.
    pub async fn insert_user_message(
        &self,
        new: NewUserMessage,
        fence: Option<&Fence>,
    ) -> Result<Inserted, StoreError> {
        let _timer = self.metrics.time("insert_user_message");
        let fence = self.fence(&new.thread_id, fence)?;
        let id = MessageId::generate();
        let inserted = on_db!(self, db => db.insert_user_message(fence.as_ref(), &id, &new).await)?;
        if let (Inserted::Duplicate(first), Some(client_id)) = (&inserted, &new.client_message_id) {
            tracing::debug!(
                thread_id = %new.thread_id,
                message_id = %first.id,
                client_message_id = %client_id,
                "Client resent a message; returning the first one."
            );
        }
        Ok(inserted)
    }

    /// The message, or `None` when we do not have it.
    pub async fn get_message(&self, id: &MessageId) -> Result<Option<MessageRow>, StoreError> {
        let _timer = self.metrics.time("get_message");
        on_db!(self, db => db.get_message(id).await)
    }

    /// Every message of the thread in `seq` order, whatever its status. An unknown thread has no
    /// messages.
    pub async fn list_messages(&self, thread: &ThreadId) -> Result<Vec<MessageRow>, StoreError> {
        let _timer = self.metrics.time("list_messages");
        on_db!(self, db => db.list_messages(thread).await)
    }

    /// The assistant message answering `user_message`, or `None` while there is none (the turn is
    /// running or failed). A duplicate `client_message_id` uses it to return the first reply.
    pub async fn reply_for(
        &self,
        user_message: &MessageId,
    ) -> Result<Option<MessageRow>, StoreError> {
        let _timer = self.metrics.time("reply_for");
        on_db!(self, db => db.reply_for(user_message).await)
    }

    /// The thread's finished exchanges, oldest first: each `done` user message followed by the
    /// assistant reply that answered it. Pending, failed and interrupted turns are left out, so
    /// the turn being run never appears. An unknown thread has no history.
    pub async fn history(&self, thread: &ThreadId) -> Result<Vec<HistoryMessage>, StoreError> {
        let _timer = self.metrics.time("history");
        on_db!(self, db => db.history(thread).await)
    }

    /// Puts an `interrupted` or `refused` user message back to `pending`, so a client's retry
    /// runs it. Returns the message when this call did it; `None` when it was neither (any more):
    /// of two concurrent retries, exactly one gets it. Clustered, only the node holding the
    /// thread's lease may ([`StoreError::LeaseLost`]).
    pub async fn retry_interrupted(
        &self,
        id: &MessageId,
    ) -> Result<Option<MessageRow>, StoreError> {
        let _timer = self.metrics.time("retry_interrupted");
        let Some(thread) = on_db!(self, db => db.user_message_thread(id).await)? else {
            return Ok(None);
        };
        let fence = self.fence(&thread, None)?;
        on_db!(self, db => db.retry_interrupted(fence.as_ref(), &thread, id).await)
    }
}

#[cfg(test)]
mod tests;
