//! How turns end: [`Store::end_turn`] is the only write that ends one. In one transaction it
//! moves the user message from `pending` to its final status, stores the reply, the usage and the
//! CLI session, appends the terminal event and writes the outcome row naming it
//! (`harness_db::OutcomeQueries`). A takeover ends the old owner's turns the same way, inside the
//! lease's transaction (`leases/`). The daemon calls it through the event bus
//! (`crate::events`), which publishes the event it wrote.

use plugin_contract::ThreadId;

use super::{
    on_db, Announcement, Db, Ending, Fence, MessageId, Outcome, OutcomeQueries, OutcomeRow,
    PendingTurn, RunRef, Store, StoreError, TurnKey,
};

impl Store {
    /// Ends the turn `turn` names as `ending` says, with the terminal event and webhook events of
    /// `announcement` (built before, `crate::events::announce`); the outcome, reply and event it
    /// wrote. `None` when the message is no longer `pending` (its
    /// turn already ended): nothing is written, so every run of a message ends once.
    ///
    /// [`StoreError::MessageNotFound`] when `turn` names no user message of its thread;
    /// [`StoreError::LeaseLost`] when `fence` (when set; else this node's, when clustered) no
    /// longer holds the thread's lease, checked inside the transaction: nothing written.
    pub async fn end_turn(
        &self,
        turn: TurnKey<'_>,
        ending: Ending<'_>,
        fence: Option<&Fence>,
        announcement: &Announcement,
    ) -> Result<Option<Outcome>, StoreError> {
        let _timer = self.metrics.time("end_turn");
        let fence = self.fence(turn.thread, fence)?;
        on_db!(self, db => db.end_turn(fence.as_ref(), turn, ending, announcement).await)
    }

    /// The schedule run the user message `message` was sent for, if any.
    pub async fn schedule_run_of(&self, message: &MessageId) -> Result<Option<RunRef>, StoreError> {
        let _timer = self.metrics.time("schedule_run_of");
        on_db!(self, db => db.schedule_run_of(message).await)
    }

    /// The user messages still `pending`, of `thread` or of every thread, oldest first: at
    /// start-up, what a crash left; at shutdown, what did not finish.
    pub async fn pending_turns(
        &self,
        thread: Option<&ThreadId>,
    ) -> Result<Vec<PendingTurn>, StoreError> {
        let _timer = self.metrics.time("pending_turns");
        on_db!(self, db => db.pending_turns(thread).await)
    }

    /// How each run of the user message `message` ended, oldest first.
    pub async fn outcomes_of(&self, message: &MessageId) -> Result<Vec<OutcomeRow>, StoreError> {
        let _timer = self.metrics.time("outcomes_of");
        on_db!(self, db => db.outcomes_of(message).await)
    }

    /// The threads with a turn to re-drive (`OutcomeQueries::redrive_threads`).
    pub async fn redrive_threads(&self, max_cuts: u32) -> Result<Vec<ThreadId>, StoreError> {
        let _timer = self.metrics.time("redrive_threads");
        let now = harness_db::now_text();
        on_db!(self, db => db.redrive_threads(i64::from(max_cuts), &now).await)
    }

    /// The thread's user messages to run again, in `seq` order.
    pub async fn redrivable(
        &self,
        thread: &ThreadId,
        max_cuts: u32,
    ) -> Result<Vec<MessageId>, StoreError> {
        let _timer = self.metrics.time("redrivable");
        on_db!(self, db => db.redrivable(thread, i64::from(max_cuts)).await)
    }
}

/// The tests' shorthands for ending a turn, with a bare event (the daemon's come from
/// `crate::events::announce`).
#[cfg(test)]
impl Store {
    /// Ends `turn` with a reply; the reply. Panics when the turn had already ended.
    #[allow(clippy::too_many_arguments)]
    pub async fn complete_turn(
        &self,
        turn: TurnKey<'_>,
        text: &str,
        model: Option<&str>,
        structured_output: Option<&serde_json::Value>,
        session: Option<&plugin_contract::CliSessionId>,
        usage: Option<&super::Usage>,
        fence: Option<&Fence>,
    ) -> Result<super::MessageRow, StoreError> {
        let id = MessageId::generate();
        let ending = Ending {
            cause: super::EndCause::Done,
            error: None,
            reply: Some(super::NewReply {
                id: &id,
                text,
                model,
                structured_output,
            }),
            session,
            usage,
        };
        let ended = self
            .end_turn(turn, ending, fence, &bare_event(turn.message, true))
            .await?;
        Ok(ended.and_then(|e| e.reply).expect("the turn was pending"))
    }

    /// Ends `turn` without a reply, as `status` says (error, interrupted, refused).
    #[allow(clippy::too_many_arguments)]
    pub async fn fail_turn(
        &self,
        turn: TurnKey<'_>,
        status: super::MessageStatus,
        error: &str,
        session: Option<&plugin_contract::CliSessionId>,
        usage: Option<&super::Usage>,
        fence: Option<&Fence>,
    ) -> Result<Option<Outcome>, StoreError> {
        let cause = match status {
            super::MessageStatus::Refused => super::EndCause::Refused,
            super::MessageStatus::Interrupted => super::EndCause::Interrupted,
            _ => super::EndCause::Error,
        };
        let ending = Ending {
            session,
            usage,
            ..Ending::failed(cause, error)
        };
        self.end_turn(turn, ending, fence, &bare_event(turn.message, false))
            .await
    }
}

/// A terminal event with only the message, for the store's tests; `replied`: with the reply.
#[cfg(test)]
pub(super) fn bare_event(message: &MessageId, replied: bool) -> Announcement {
    Announcement {
        kind: match replied {
            true => "turn_finished",
            false => "turn_failed",
        },
        data: serde_json::json!({ "messageId": message }),
        reply_key: replied.then_some("reply"),
        webhooks: Vec::new(),
    }
}
