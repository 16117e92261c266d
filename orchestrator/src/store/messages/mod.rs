//! Messages and the life of a turn: a user message is stored `pending` before the turn runs, then
//! either [`Store::complete_turn`] writes the assistant reply and marks it `done`, or
//! [`Store::fail_turn`] marks it `error`/`interrupted`. [`Store::interrupt_pending`] cleans up after
//! a crash; [`Store::history`] feeds a fresh CLI session the finished exchanges.
//!
//! A turn's writes belong to its thread: each checks the thread's lease fence in its own
//! transaction (the query crates' `messages` modules say how `seq` stays distinct under
//! concurrent writers).

use plugin_contract::{CliSessionId, HistoryMessage, ThreadId};

use super::{
    on_db, Db, Fence, Inserted, MessageId, MessageQueries, MessageRow, MessageStatus, NewReply,
    NewUserMessage, Store, StoreError, TurnKey, Usage,
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

    /// Ends a turn that produced a reply, in one transaction: inserts the assistant message
    /// (`done`, answering the user message `turn` names, next in its thread), marks that message
    /// `done`, records the CLI session to resume when `session` is set, and adds `usage` to the
    /// day's totals. Returns the assistant message.
    ///
    /// [`StoreError::MessageNotFound`] when `turn` names no user message of its thread;
    /// [`StoreError::LeaseLost`] when `fence` (when set; else this node's, when clustered) no
    /// longer holds the thread's lease, checked inside the transaction: nothing written.
    #[allow(clippy::too_many_arguments)]
    pub async fn complete_turn(
        &self,
        turn: TurnKey<'_>,
        reply_text: &str,
        model: Option<&str>,
        structured_output: Option<&serde_json::Value>,
        session: Option<&CliSessionId>,
        usage: Option<&Usage>,
        fence: Option<&Fence>,
    ) -> Result<MessageRow, StoreError> {
        let _timer = self.metrics.time("complete_turn");
        let fence = self.fence(turn.thread, fence)?;
        let id = MessageId::generate();
        let reply = NewReply {
            id: &id,
            text: reply_text,
            model,
            structured_output,
        };
        on_db!(self, db => {
            db.complete_turn(fence.as_ref(), turn.thread, turn.message, reply, session, usage)
                .await
        })
    }

    /// Ends a turn that produced no reply: sets the user message's status (meant for
    /// [`MessageStatus::Error`] or [`MessageStatus::Interrupted`]) and error text, adds `usage`
    /// (a failed turn that reached the API) to the message's and the day's, and records the CLI
    /// session to resume when `session` is set (a failed turn may still have started one).
    ///
    /// [`StoreError::MessageNotFound`] when `turn` names no user message of its thread;
    /// [`StoreError::LeaseLost`] as for [`Store::complete_turn`].
    pub async fn fail_turn(
        &self,
        turn: TurnKey<'_>,
        status: MessageStatus,
        error: &str,
        session: Option<&CliSessionId>,
        usage: Option<&Usage>,
        fence: Option<&Fence>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("fail_turn");
        let fence = self.fence(turn.thread, fence)?;
        on_db!(self, db => {
            db.fail_turn(fence.as_ref(), turn.thread, turn.message, status, error, session, usage)
                .await
        })
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

    /// Crash recovery at start-up, before any turn runs: every user message still `pending` (its
    /// turn died with the previous daemon) becomes `interrupted` with `reason` as its error.
    /// Returns how many.
    pub async fn interrupt_pending(&self, reason: &str) -> Result<u64, StoreError> {
        let _timer = self.metrics.time("interrupt_pending");
        let count = on_db!(self, db => db.interrupt_pending(reason).await)?;
        if count > 0 {
            tracing::info!(
                count,
                "Marked turns left pending by the previous run as interrupted."
            );
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests;
