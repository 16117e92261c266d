//! The end of a turn, owned by the bus: every ending (a reply, an error, a refusal, a message
//! withdrawn, an interrupt, shutdown, a crash found at start-up) is an [`Ending`] handed to
//! [`EventBus::end_turn`]. The bus's writer task runs it after every event queued before it, so
//! the terminal event comes after the turn's own, and calls [`Store::end_turn`]: the status, the
//! reply, the outcome row and the terminal event in one transaction. Then it publishes the
//! event like any other. The event and its webhook events are built before, as values
//! ([`announce`]): the store writes them, it does not call back. A takeover ends the old
//! owner's turns inside the lease's transaction with the same events ([`claim_lease`]); on
//! PostgreSQL every node's bus publishes what is stored.
//!
//! So a turn ends once (a second ending of the same run finds the message no longer `pending`
//! and writes nothing), and every ending has its outcome and its event.

use std::future::Future;

use tokio::sync::oneshot;
use tracing::warn;

use plugin_contract::{CliSessionId, ThreadId};

use super::{EventBus, Job};
use crate::api::events::{Audience, WebhookEvent};
use crate::budget::BudgetExceeded;
use crate::store::{
    Announcement, Claim, Claimed, EndCause, Fence, MessageId, NewReply, Outcome, RunRef, Store,
    StoreError, TakeoverEnd, TurnKey, Usage, TAKEOVER_REASON,
};
use crate::webhooks::Webhooks;

/// The event that announces an ending (`crate::api::events::announce`), and the webhook events
/// of it that an endpoint of `webhooks` wants ([`WebhookEvent::of_ending`]: `turn.finished` or
/// `turn.failed`, `schedule.run_finished` for a schedule's run, `budget.reached` for a refusal;
/// every type when the thread has its own endpoint, as `audience` says).
pub fn announce(
    webhooks: Option<&Webhooks>,
    ending: &harness_db::Ending<'_>,
    audience: &Audience<'_>,
    budget: Option<&BudgetExceeded>,
) -> Announcement {
    let mut announcement = crate::api::events::announce(ending, audience, budget);
    if let Some(webhooks) = webhooks {
        announcement.webhooks = WebhookEvent::of_ending(ending, audience, budget)
            .iter()
            .filter(|event| audience.callback || webhooks.wants(event.kind().as_str()))
            .map(WebhookEvent::draft)
            .collect();
    }
    announcement
}

/// What an ending's [`Audience`] needs from the store, read before the ending's transaction:
/// the schedule run of `message`, and whether `thread` has its own endpoint (only asked when
/// there are webhooks). Neither changes while the message waits for its end: a run is written
/// with its message, and an endpoint the thread gains or loses meanwhile is read again at
/// fan-out.
async fn ending_context(
    store: &Store,
    webhooks: Option<&Webhooks>,
    thread: &ThreadId,
    message: &MessageId,
) -> Result<(Option<RunRef>, bool), StoreError> {
    let run = store.schedule_run_of(message).await?;
    let callback = match webhooks {
        Some(_) => store.thread_callback(thread).await?.is_some(),
        None => false,
    };
    Ok((run, callback))
}

/// Takes the thread's lease for this node ([`Store::claim_lease`]); a takeover from a peer ends
/// the turns the old owner left pending, each announced as [`announce`] says (with what
/// `webhooks` want) in the lease's transaction. The announcements are built before it, for the
/// turns the store names as pending, and again when the old owner added one meanwhile.
pub async fn claim_lease(
    store: &Store,
    webhooks: Option<&Webhooks>,
    thread: &ThreadId,
) -> Result<Claim, StoreError> {
    let mut takeover = Vec::new();
    loop {
        let unannounced = match store.claim_lease(thread, &takeover).await? {
            Claimed::Done(claim) => return Ok(claim),
            Claimed::Unannounced(messages) => messages,
        };
        for message in unannounced {
            let (run, callback) = ending_context(store, webhooks, thread, &message).await?;
            let ending = harness_db::Ending::failed(EndCause::Takeover, TAKEOVER_REASON);
            let audience = Audience {
                turn: TurnKey {
                    thread,
                    message: &message,
                },
                run: run.as_ref(),
                callback,
            };
            let announcement = announce(webhooks, &ending, &audience, None);
            takeover.push(TakeoverEnd {
                message,
                announcement,
            });
        }
    }
}

/// How a turn ends, as its owner asks for it. Owned: it waits in the bus's queue; it lends the
/// store's borrowed form ([`Ending::as_stored`]) when its turn comes.
#[derive(Clone, Debug)]
pub struct Ending {
    pub cause: EndCause,
    /// Why, for every cause but [`EndCause::Done`].
    pub error: Option<String>,
    /// The reply, for [`EndCause::Done`].
    pub reply: Option<Reply>,
    /// The CLI session to resume from now on.
    pub session: Option<CliSessionId>,
    /// What the turn cost, when it reached the API.
    pub usage: Option<Usage>,
    /// What refused it, for [`EndCause::Refused`]: named in the event.
    pub budget: Option<BudgetExceeded>,
}

/// A reply to store.
#[derive(Clone, Debug)]
pub struct Reply {
    pub text: String,
    pub model: Option<String>,
    /// For a thread with an `outputSchema`: the reply's value, already validated.
    pub structured_output: Option<serde_json::Value>,
}

impl Ending {
    /// A turn that produced `reply`.
    pub fn done(reply: Reply, session: Option<CliSessionId>, usage: Option<Usage>) -> Self {
        Ending {
            cause: EndCause::Done,
            error: None,
            reply: Some(reply),
            session,
            usage,
            budget: None,
        }
    }

    /// A turn that ended without a reply, for `cause`, because of `error`.
    pub fn failed(cause: EndCause, error: impl Into<String>) -> Self {
        Ending {
            cause,
            error: Some(error.into()),
            reply: None,
            session: None,
            usage: None,
            budget: None,
        }
    }

    /// A turn a budget refused.
    pub fn refused(exceeded: BudgetExceeded) -> Self {
        Ending {
            budget: Some(exceeded.clone()),
            ..Ending::failed(EndCause::Refused, exceeded.to_string())
        }
    }

    /// A turn a budget stopped half-way: the model gateway refused its next model request.
    pub fn stopped(exceeded: BudgetExceeded) -> Self {
        let error = format!(
            "{} ran out during the turn ({:.6} of {} USD spent); the model gateway refused its next model request",
            exceeded.budget, exceeded.spent_usd, exceeded.limit_usd
        );
        Ending {
            budget: Some(exceeded),
            ..Ending::failed(EndCause::Refused, error)
        }
    }

    /// With what the turn cost and the session it kept.
    pub fn with_spending(mut self, session: Option<CliSessionId>, usage: Option<Usage>) -> Self {
        self.session = session;
        self.usage = usage;
        self
    }

    /// This ending as the store writes it, its reply (if any) to be stored as `reply_id`.
    pub fn as_stored<'a>(&'a self, reply_id: &'a MessageId) -> harness_db::Ending<'a> {
        harness_db::Ending {
            cause: self.cause,
            error: self.error.as_deref(),
            reply: self.reply.as_ref().map(|reply| NewReply {
                id: reply_id,
                text: &reply.text,
                model: reply.model.as_deref(),
                structured_output: reply.structured_output.as_ref(),
            }),
            session: self.session.as_ref(),
            usage: self.usage.as_ref(),
        }
    }
}

/// An ending waiting in the bus's queue.
pub(super) struct EndJob {
    thread: ThreadId,
    message: MessageId,
    ending: Ending,
    fence: Option<Fence>,
    done: oneshot::Sender<Result<Option<Outcome>, StoreError>>,
}

impl EndJob {
    pub(super) fn thread(&self) -> &ThreadId {
        &self.thread
    }

    /// Writes the ending ([`Store::end_turn`]), with what `webhooks` want of it.
    pub(super) async fn run(
        &self,
        store: &Store,
        webhooks: Option<&Webhooks>,
    ) -> Result<Option<Outcome>, StoreError> {
        let reply_id = MessageId::generate();
        let ending = self.ending.as_stored(&reply_id);
        let turn = TurnKey {
            thread: &self.thread,
            message: &self.message,
        };
        let (run, callback) = ending_context(store, webhooks, turn.thread, turn.message).await?;
        let audience = Audience {
            turn,
            run: run.as_ref(),
            callback,
        };
        let announcement = announce(webhooks, &ending, &audience, self.ending.budget.as_ref());
        store
            .end_turn(turn, ending, self.fence.as_ref(), &announcement)
            .await
    }

    pub(super) fn answer(self, result: Result<Option<Outcome>, StoreError>) {
        let _ = self.done.send(result);
    }
}

impl EventBus {
    /// Ends the turn of `message` (of `thread`) as `ending` says, once every event queued
    /// before is stored; see the module's documentation. Queued at once (so a caller that is
    /// cancelled after the call still ends the turn); the future says how it went: what was
    /// written, `None` when the turn had already ended.
    pub fn end_turn(
        &self,
        thread: &ThreadId,
        message: &MessageId,
        ending: Ending,
        fence: Option<&Fence>,
    ) -> impl Future<Output = Result<Option<Outcome>, StoreError>> + Send + 'static {
        let (done, result) = oneshot::channel();
        let job = EndJob {
            thread: thread.clone(),
            message: message.clone(),
            ending,
            fence: fence.cloned(),
            done,
        };
        let queued = self.tx.send(Job::End(job)).is_ok();
        async move {
            match (queued, result.await) {
                (true, Ok(result)) => result,
                // The writer is gone: the daemon is past its end.
                _ => Err(StoreError::Db(sqlx::Error::WorkerCrashed)),
            }
        }
    }

    /// Ends every turn still `pending` for `cause` (a crash found at start-up, shutdown), with
    /// `error`: on a single node every one; on a node of a cluster those of the threads it
    /// holds (a peer's pending turns are running). Returns how many it ended.
    pub async fn end_left_pending(&self, cause: EndCause, error: &str) -> Result<u64, StoreError> {
        let threads: Vec<(Option<ThreadId>, Option<Fence>)> = match self.store.held_leases() {
            Some(held) => held
                .into_iter()
                .map(|(thread, fence)| (Some(thread), Some(fence)))
                .collect(),
            None => vec![(None, None)],
        };
        let mut ended = 0;
        for (thread, fence) in threads {
            for pending in self.store.pending_turns(thread.as_ref()).await? {
                let ending = Ending::failed(cause, error);
                let result = self
                    .end_turn(
                        &pending.thread_id,
                        &pending.message_id,
                        ending,
                        fence.as_ref(),
                    )
                    .await;
                match result {
                    Ok(Some(_)) => ended += 1,
                    Ok(None) => {}
                    // A peer has it now: its turns are the peer's to end.
                    Err(StoreError::LeaseLost(_)) => break,
                    Err(err) => {
                        warn!(thread_id = %pending.thread_id, message_id = %pending.message_id, error = %err, "Could not end a turn left pending.");
                    }
                }
            }
        }
        Ok(ended)
    }
}
