//! The operations on `turn_outcomes`, and the one way a turn ends.
//!
//! Every ending of a turn (a reply, an error, a budget's refusal, a message withdrawn while it
//! waited, an interrupt, shutdown, a crash found at start-up, a takeover by another node) is one
//! call of the database crates' `end_in` function, on its own ([`OutcomeQueries::end_turn`]) or
//! inside a lease's transaction (a takeover, [`crate::LeaseQueries::acquire_lease`]). In one
//! transaction it moves the user message from `pending` to its final status, stores the reply
//! when there is one, adds the usage, records the CLI session, appends the event that announces
//! the end, and writes the outcome row that names that event: the outbox that everything after
//! the turn (the event stream, webhooks, metrics, re-drive) reads. A message that is no longer
//! `pending` is not ended again, so each run of a message has at most one outcome and one
//! terminal event.

use chrono::{DateTime, Utc};
use plugin_contract::{CliSessionId, ThreadId};
use serde::{Deserialize, Serialize};

use crate::{
    EventRow, Fence, MessageId, MessageRow, MessageStatus, NewReply, StoreError, TurnKey, Usage,
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

/// What ends a turn ([`OutcomeQueries::end_turn`]).
#[derive(Clone, Copy, Debug)]
pub struct TurnEnd<'a> {
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

impl<'a> TurnEnd<'a> {
    /// An ending without a reply, usage or session: for `cause`, because of `error`.
    pub fn failed(cause: EndCause, error: &'a str) -> Self {
        TurnEnd {
            cause,
            error: Some(error),
            reply: None,
            session: None,
            usage: None,
        }
    }
}

/// An ending as the event that announces it sees it, inside the ending's transaction.
#[derive(Clone, Copy, Debug)]
pub struct Ending<'a> {
    pub thread: &'a ThreadId,
    pub message: &'a MessageId,
    pub cause: EndCause,
    pub error: Option<&'a str>,
    /// The reply just stored, for [`EndCause::Done`].
    pub reply: Option<&'a MessageRow>,
    /// The schedule run the message was sent for, if any.
    pub run: Option<&'a crate::RunRef>,
    /// The thread has its own webhook endpoint (`thread_callbacks`).
    pub callback: bool,
}

/// An event to append: its kind (the SSE event name) and payload; and, when webhooks are to
/// hear of it, what goes in the webhook outbox with it.
#[derive(Clone, Debug, PartialEq)]
pub struct EventDraft {
    pub kind: &'static str,
    pub data: serde_json::Value,
    pub webhooks: Vec<WebhookDraft>,
}

/// A webhook event to write in the outbox (`webhook_events`), in the same transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookDraft {
    /// `turn.finished`, `turn.failed`, …
    pub kind: &'static str,
    /// The thin payload's `data`.
    pub data: serde_json::Value,
}

/// Builds the event that announces an ending (the daemon's API types say what it looks like).
pub type Announce<'a> = &'a (dyn Fn(&Ending<'_>) -> EventDraft + Sync);

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

/// A turn ended by this call: its outcome, its reply (when it has one), and the event that
/// announced it, for the caller to publish.
#[derive(Clone, Debug)]
pub struct Ended {
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
    /// Ends the turn of `turn` as `end` says, in one transaction (see the module's
    /// documentation), with the event `announce` builds. `None` when the message is not
    /// `pending` (its turn already ended): nothing is written. [`StoreError::MessageNotFound`]
    /// when `turn` names no user message of its thread, [`StoreError::LeaseLost`] when `fence`
    /// no longer holds the thread.
    async fn end_turn(
        &self,
        fence: Option<&Fence>,
        turn: TurnKey<'_>,
        end: TurnEnd<'_>,
        announce: Announce<'_>,
    ) -> Result<Option<Ended>, StoreError>;

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
                end: TurnEnd<'_>,
                announce: Announce<'_>,
            ) -> Result<Option<Ended>, StoreError> {
                let mut tx = ThreadTx::begin(self.pool(), turn.thread, fence).await?;
                let ended = end_in(tx.conn(), turn, end, announce).await?;
                if ended.is_some() {
                    tx.commit().await?;
                }
                Ok(ended)
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
