//! The end of a turn, owned by the bus: every ending (a reply, an error, a refusal, a message
//! withdrawn, an interrupt, shutdown, a crash found at start-up) is a [`TurnEnding`] handed to
//! [`EventBus::end_turn`]. The bus's writer task runs it after every event queued before it, so
//! the terminal event comes after the turn's own, and calls [`Store::end_turn`]: the status, the
//! reply, the outcome row and the terminal event in one transaction. Then it publishes the
//! event like any other. A takeover ends the old owner's turns inside the lease's transaction
//! with the same event ([`announce`]); on PostgreSQL every node's bus publishes what is stored.
//!
//! So a turn ends once (a second ending of the same run finds the message no longer `pending`
//! and writes nothing), and every ending has its outcome and its event.

use std::future::Future;

use tokio::sync::oneshot;
use tracing::warn;

use plugin_contract::{CliSessionId, ThreadId};

use super::{EventBus, Job};
use crate::budget::BudgetExceeded;
use crate::store::{
    EndCause, Ended, Ending, EventDraft, Fence, MessageId, NewReply, Store, StoreError, TurnEnd,
    TurnKey, Usage, WebhookDraft,
};
use crate::webhooks::Webhooks;

/// The event that announces an ending (`crate::api::events::announce`), and the webhook events
/// of it that an endpoint of `webhooks` wants: `turn.finished` or `turn.failed`,
/// `budget.reached` for a refusal, `schedule.run_finished` for a schedule's run (every kind when
/// the thread has its own endpoint). Thin: ids, status and cause; the receiver fetches the rest.
pub fn announce(
    webhooks: Option<&Webhooks>,
    ending: &Ending<'_>,
    budget: Option<&BudgetExceeded>,
) -> EventDraft {
    let mut draft = crate::api::events::announce(ending, budget);
    let kind = match ending.cause {
        EndCause::Done => "turn.finished",
        _ => "turn.failed",
    };
    let Some(webhooks) = webhooks else {
        return draft;
    };
    // A thread's own endpoint hears every kind.
    let wants = |kind| ending.callback || webhooks.wants(kind);
    let wanted = wants(kind);
    let refused = budget.filter(|_| wants("budget.reached"));
    let run = ending.run.filter(|_| wants("schedule.run_finished"));
    if !wanted && refused.is_none() && run.is_none() {
        return draft;
    }
    let mut data = serde_json::json!({
        "threadId": ending.thread,
        "messageId": ending.message,
        "status": ending.cause.status(),
        "cause": ending.cause,
    });
    if let Some(reply) = ending.reply {
        data["replyId"] = serde_json::json!(reply.id);
    }
    if wanted {
        draft.webhooks.push(WebhookDraft {
            kind,
            data: data.clone(),
        });
    }
    if let Some(run) = run {
        let mut data = data.clone();
        data["scheduleId"] = serde_json::json!(run.schedule_id);
        data["runId"] = serde_json::json!(run.run_id);
        draft.webhooks.push(WebhookDraft {
            kind: "schedule.run_finished",
            data,
        });
    }
    if let Some(budget) = refused {
        data["budget"] = serde_json::json!(budget);
        draft.webhooks.push(WebhookDraft {
            kind: "budget.reached",
            data,
        });
    }
    draft
}

/// How a turn ends, as its owner asks for it. Owned: it waits in the bus's queue.
#[derive(Clone, Debug)]
pub struct TurnEnding {
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

impl TurnEnding {
    /// A turn that produced `reply`.
    pub fn done(reply: Reply, session: Option<CliSessionId>, usage: Option<Usage>) -> Self {
        TurnEnding {
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
        TurnEnding {
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
        TurnEnding {
            budget: Some(exceeded.clone()),
            ..TurnEnding::failed(EndCause::Refused, exceeded.to_string())
        }
    }

    /// A turn a budget stopped half-way: the model gateway refused its next model request.
    pub fn stopped(exceeded: BudgetExceeded) -> Self {
        let error = format!(
            "{} ran out during the turn ({:.6} of {} USD spent); the model gateway refused its next model request",
            exceeded.budget, exceeded.spent_usd, exceeded.limit_usd
        );
        TurnEnding {
            budget: Some(exceeded),
            ..TurnEnding::failed(EndCause::Refused, error)
        }
    }

    /// With what the turn cost and the session it kept.
    pub fn with_spending(mut self, session: Option<CliSessionId>, usage: Option<Usage>) -> Self {
        self.session = session;
        self.usage = usage;
        self
    }
}

/// An ending waiting in the bus's queue.
pub(super) struct EndJob {
    thread: ThreadId,
    message: MessageId,
    ending: TurnEnding,
    fence: Option<Fence>,
    done: oneshot::Sender<Result<Option<Ended>, StoreError>>,
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
    ) -> Result<Option<Ended>, StoreError> {
        let reply_id = MessageId::generate();
        let ending = &self.ending;
        let end = TurnEnd {
            cause: ending.cause,
            error: ending.error.as_deref(),
            reply: ending.reply.as_ref().map(|reply| NewReply {
                id: &reply_id,
                text: &reply.text,
                model: reply.model.as_deref(),
                structured_output: reply.structured_output.as_ref(),
            }),
            session: ending.session.as_ref(),
            usage: ending.usage.as_ref(),
        };
        let turn = TurnKey {
            thread: &self.thread,
            message: &self.message,
        };
        let budget = ending.budget.as_ref();
        let announce = |e: &Ending<'_>| announce(webhooks, e, budget);
        store
            .end_turn(turn, end, self.fence.as_ref(), &announce)
            .await
    }

    pub(super) fn answer(self, result: Result<Option<Ended>, StoreError>) {
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
        ending: TurnEnding,
        fence: Option<&Fence>,
    ) -> impl Future<Output = Result<Option<Ended>, StoreError>> + Send + 'static {
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
                let ending = TurnEnding::failed(cause, error);
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
