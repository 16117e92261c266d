//! The operations on `turn_outcomes`, and the one way a turn ends.
//!
//! Every ending of a turn (a reply, an error, a budget's refusal, a message withdrawn while it
//! waited, an interrupt, shutdown, a crash found at start-up, a takeover by another node) is one
//! call of the database crates' `end_in` function, on its own ([`OutcomeQueries::end_turn`]) or
//! inside a lease's transaction (a takeover, [`crate::LeaseQueries::acquire_lease`]). In one
//! transaction it moves the user message from `pending` to its final status, stores the reply
//! when there is one, adds the usage, records the CLI session, appends the event that announces
//! the end (an [`Announcement`] the daemon built before, as values), and writes the outcome row
//! that names that event: the outbox that everything after
//! the turn (the event stream, webhooks, metrics, re-drive) reads. A message that is no longer
//! `pending` is not ended again, so each run of a message has at most one outcome and one
//! terminal event.

use chrono::{DateTime, Utc};
use plugin_contract::{CliSessionId, ThreadId};
use serde::{Deserialize, Serialize};

use crate::{
    EventRow, Fence, Message, MessageId, MessageRow, MessageStatus, NewReply, RunRef, StoreError,
    TurnKey, Usage,
};

/// How a turn ended: what `turn_outcomes.cause` holds. Stored as [`EndCause::as_str`]; serde and
/// sqlx both map the variants to the same lowercase names.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(rename_all = "lowercase")]
pub enum EndCause {
    /// The turn produced a reply.
    Done,
    /// The turn failed (the CLI, a timeout, the tool-call cap, the output schema, the store).
    Error,
    /// A budget stopped it before the CLI saw the message.
    Refused,
    /// Its caller withdrew the message while it waited in line; it never ran.
    Withdrawn,
    /// Someone interrupted it (the API, an MCP cancel, archiving the thread), or the CLI
    /// answered another message's turn instead.
    Interrupted,
    /// The daemon shut down while it ran or waited.
    Shutdown,
    /// The daemon died while it ran; found at the next start.
    Crash,
    /// The node running it stopped; another node took the thread over.
    Takeover,
}

impl EndCause {
    /// Every cause, in the order the schema lists them.
    pub const ALL: [EndCause; 8] = [
        EndCause::Done,
        EndCause::Error,
        EndCause::Refused,
        EndCause::Withdrawn,
        EndCause::Interrupted,
        EndCause::Shutdown,
        EndCause::Crash,
        EndCause::Takeover,
    ];

    /// The user message's status after such an ending.
    pub fn status(self) -> MessageStatus {
        match self {
            EndCause::Done => MessageStatus::Done,
            EndCause::Error => MessageStatus::Error,
            EndCause::Refused => MessageStatus::Refused,
            EndCause::Withdrawn
            | EndCause::Interrupted
            | EndCause::Shutdown
            | EndCause::Crash
            | EndCause::Takeover => MessageStatus::Interrupted,
        }
    }

    /// The value stored in `turn_outcomes.cause`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndCause::Done => "done",
            EndCause::Error => "error",
            EndCause::Refused => "refused",
            EndCause::Withdrawn => "withdrawn",
            EndCause::Interrupted => "interrupted",
            EndCause::Shutdown => "shutdown",
            EndCause::Crash => "crash",
            EndCause::Takeover => "takeover",
        }
    }

    /// Whether the turn was cut by the daemon's own life (shutdown, a crash, a takeover) rather
    /// than by what it did or by someone's request: such a turn did nothing wrong and may run
    /// again.
    pub fn is_cut(self) -> bool {
        matches!(
            self,
            EndCause::Shutdown | EndCause::Crash | EndCause::Takeover
        )
    }
}

impl std::fmt::Display for EndCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a turn ended, as the store writes it ([`OutcomeQueries::end_turn`]) and its
/// announcement reads it: the [`EndCause`], why, the reply, the session and what it cost.
/// Borrowed; the daemon's owned form, which waits in its event bus's queue, lends one.
#[derive(Clone, Copy, Debug)]
pub struct Ending<'a> {
    pub cause: EndCause,
    /// Why, for every cause but [`EndCause::Done`]: the user message's `error`.
    pub error: Option<&'a str>,
    /// The reply, stored `done` next in the thread, for [`EndCause::Done`].
    pub reply: Option<NewReply<'a>>,
    /// The CLI session to resume from now on, when the turn started or kept one.
    pub session: Option<&'a CliSessionId>,
    /// What the turn cost, when it reached the API: on the reply, or added to the user
    /// message's (an earlier run of it may have cost something too), and to the day's.
    pub usage: Option<&'a Usage>,
}

impl<'a> Ending<'a> {
    /// The user message's `error` after this ending: none for [`EndCause::Done`], else why
    /// (a generic reason when the caller gave none).
    pub fn error_text(&self) -> Option<&'a str> {
        match self.cause {
            EndCause::Done => None,
            _ => Some(self.error.unwrap_or("the turn ended")),
        }
    }

    /// The id the reply will be stored under, for an ending with one.
    pub fn reply_id(&self) -> Option<&'a MessageId> {
        self.reply.map(|reply| reply.id)
    }

    /// An ending without a reply, usage or session: for `cause`, because of `error`.
    pub fn failed(cause: EndCause, error: &'a str) -> Self {
        Ending {
            cause,
            error: Some(error),
            reply: None,
            session: None,
            usage: None,
        }
    }
}

/// The event that announces an ending and the webhook events that go with it, as values the
/// daemon builds before the ending's transaction (its API types say what they look like). The
/// transaction adds only what it decides itself: the stored reply (its `seq`, its `origin`),
/// under [`Announcement::reply_key`].
#[derive(Clone, Debug, PartialEq)]
pub struct Announcement {
    /// The event's kind (the SSE event name): `turn_finished` or `turn_failed`.
    pub kind: &'static str,
    /// Its payload: complete for an ending without a reply; without the reply for one with.
    pub data: serde_json::Value,
    /// For an ending with a reply: the field of `data` that holds the reply as stored, shown
    /// as the API shows it ([`Message`]).
    pub reply_key: Option<&'static str>,
    /// What goes in the webhook outbox with the event.
    pub webhooks: Vec<WebhookDraft>,
}

impl Announcement {
    /// The event's payload, with `reply` (the row the transaction stored) where
    /// [`Announcement::reply_key`] says.
    pub fn data_with(&self, reply: Option<&MessageRow>) -> serde_json::Value {
        let mut data = self.data.clone();
        if let (Some(key), Some(reply), Some(fields)) =
            (self.reply_key, reply, data.as_object_mut())
        {
            let shown = serde_json::to_value(Message::from(reply.clone()));
            // A message is a struct of plain values; serializing one cannot fail.
            fields.insert(key.to_owned(), shown.unwrap_or_default());
        }
        data
    }
}

/// A webhook event to write in the outbox (`webhook_events`), in the same transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookDraft {
    /// `turn.finished`, `turn.failed`, …
    pub kind: &'static str,
    /// The thin payload's `data`.
    pub data: serde_json::Value,
}

/// An outcome as stored (`turn_outcomes`).
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct OutcomeRow {
    pub id: i64,
    pub thread_id: ThreadId,
    pub message_id: MessageId,
    /// The user message's status it left.
    pub status: MessageStatus,
    pub cause: EndCause,
    pub error: Option<String>,
    /// The reply, for [`EndCause::Done`].
    pub reply_id: Option<MessageId>,
    /// The terminal event (`turn_finished` or `turn_failed`) written with it.
    pub event_id: i64,
    pub created_at: DateTime<Utc>,
}

/// The outcome of a turn ended by this call, as stored: its row, its reply (when it has one),
/// and the event that announced it, for the caller to publish.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub outcome: OutcomeRow,
    pub reply: Option<MessageRow>,
    pub event: EventRow,
}

/// A user message still `pending` ([`OutcomeQueries::pending_turns`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTurn {
    pub thread_id: ThreadId,
    pub message_id: MessageId,
}

#[allow(async_fn_in_trait)]
pub trait OutcomeQueries {
    /// Ends the turn of `turn` as `ending` says, in one transaction (see the module's
    /// documentation), with the event and webhook events of `announcement`. `None` when the message is not
    /// `pending` (its turn already ended): nothing is written. [`StoreError::MessageNotFound`]
    /// when `turn` names no user message of its thread, [`StoreError::LeaseLost`] when `fence`
    /// no longer holds the thread.
    async fn end_turn(
        &self,
        fence: Option<&Fence>,
        turn: TurnKey<'_>,
        ending: Ending<'_>,
        announcement: &Announcement,
    ) -> Result<Option<Outcome>, StoreError>;

    /// The schedule run the user message `message` was sent for, if any: an ending's
    /// `schedule.run_finished` webhook names it.
    async fn schedule_run_of(&self, message: &MessageId) -> Result<Option<RunRef>, StoreError>;

    /// The user messages still `pending`, of `thread` or of every thread, oldest first.
    async fn pending_turns(
        &self,
        thread: Option<&ThreadId>,
    ) -> Result<Vec<PendingTurn>, StoreError>;

    /// The outcomes of the user message `message`, oldest first (one per run).
    async fn outcomes_of(&self, message: &MessageId) -> Result<Vec<OutcomeRow>, StoreError>;

    /// The live threads with `on_interrupt = 'retry'` that have a turn to re-drive: a user
    /// message left `interrupted` by a cut ([`EndCause::is_cut`]) at most `max_cuts` times, or
    /// one still `pending` under a lease that expired before `now` (its node died; taking the
    /// lease over ends it as a takeover).
    async fn redrive_threads(&self, max_cuts: i64, now: &str) -> Result<Vec<ThreadId>, StoreError>;

    /// The user messages of `thread` a re-drive runs again, in `seq` order: `interrupted`, the
    /// last run cut, at most `max_cuts` runs cut.
    async fn redrivable(
        &self,
        thread: &ThreadId,
        max_cuts: i64,
    ) -> Result<Vec<MessageId>, StoreError>;
}

/// `outcome_queries!(Backend)`: the [`OutcomeQueries`] of a database crate's `Backend`, calling
/// the functions of the same names in the invoking module, which hold that database's SQL. The
/// wiring (which writes open a fenced `ThreadTx`, and commit it) is written once, here.
#[macro_export]
macro_rules! outcome_queries {
    ($backend:ty) => {
        impl $crate::OutcomeQueries for $backend {
            async fn end_turn(
                &self,
                fence: Option<&Fence>,
                turn: TurnKey<'_>,
                ending: Ending<'_>,
                announcement: &Announcement,
            ) -> Result<Option<Outcome>, StoreError> {
                let mut tx = ThreadTx::begin(self.pool(), turn.thread, fence).await?;
                let ended = end_in(tx.conn(), turn, ending, announcement).await?;
                if ended.is_some() {
                    tx.commit().await?;
                }
                Ok(ended)
            }

            async fn schedule_run_of(
                &self,
                message: &MessageId,
            ) -> Result<Option<$crate::RunRef>, StoreError> {
                schedule_run_of(self.pool(), message).await
            }

            async fn pending_turns(
                &self,
                thread: Option<&ThreadId>,
            ) -> Result<Vec<PendingTurn>, StoreError> {
                pending_turns(self.pool(), thread).await
            }

            async fn outcomes_of(
                &self,
                message: &MessageId,
            ) -> Result<Vec<OutcomeRow>, StoreError> {
                outcomes_of(self.pool(), message).await
            }

            async fn redrive_threads(
                &self,
                max_cuts: i64,
                now: &str,
            ) -> Result<Vec<ThreadId>, StoreError> {
                redrive_threads(self.pool(), max_cuts, now).await
            }

            async fn redrivable(
                &self,
                thread: &ThreadId,
                max_cuts: i64,
            ) -> Result<Vec<MessageId>, StoreError> {
                redrivable(self.pool(), thread, max_cuts).await
            }
        }
    };
}
