//! A message's turn as a handle: what a door that answers "started; ask again later" hands out
//! (an MCP task, an A2A task) and reads back. The handle is the user message's id, which is
//! random (`msg_` + a v4 UUID), so it cannot be guessed, and every read checks that the caller
//! sees its thread. Nothing is kept beside the thread: a [`TurnView`] is read from the message,
//! its reply and its pending permissions each time, so a handle outlives the connection that
//! made it and a restart of the daemon.
//!
//! - [`ThreadService::start`]: the message stored and its turn queued where the thread runs,
//!   without waiting; the turn's handle.
//! - [`ThreadService::turn`]: where that turn stands now.
//! - [`ThreadService::cancel`]: its message withdrawn or its turn interrupted.
//! - [`ThreadService::answer_permission`]: a person's answer to what the turn waits for.
//! - [`ThreadService::push_to`], [`ThreadService::pushed_to`]: where the turn's thread tells of
//!   it (its own webhook endpoint), for a door whose callers register one per turn (A2A).

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;

use super::{owner, SendMessage, ServiceError, ThreadService};
use crate::api;
use crate::api::threads::PostMessage;
use crate::approvals::{Answer, AnswerError};
use crate::caller::Caller;
use crate::pipeline::Stopped;
use crate::store::{MessageId, MessageRow, MessageStatus, PermissionRow, Role};

/// The most pending permissions a view lists (a turn waits for one at a time; parallel tool
/// calls can ask for a few).
const PENDING_SHOWN: i64 = 50;

/// One message's turn, as it stands.
#[derive(Debug, Clone)]
pub struct TurnView {
    pub thread: ThreadId,
    /// The user message: the handle.
    pub message: MessageId,
    pub client_message_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The last change seen: the message's, its reply's or its newest permission's.
    pub updated_at: DateTime<Utc>,
    pub state: TurnState,
}

/// Where a turn stands.
#[derive(Debug, Clone)]
pub enum TurnState {
    /// In its thread's line, or running.
    Working,
    /// Running, and waiting for a person to answer these permissions (oldest first).
    AwaitingApproval(Vec<api::Permission>),
    /// Ended with this reply.
    Replied(Box<MessageRow>),
    /// Ended without a reply: the turn failed (`error`), or a budget refused the message before
    /// the model saw it (`refused`).
    Failed {
        status: MessageStatus,
        error: String,
    },
    /// Stopped before it ended: an interrupt, a withdrawal, a restart.
    Stopped { error: String },
}

impl TurnState {
    /// Ended: nothing about it changes any more.
    pub fn is_final(&self) -> bool {
        !matches!(self, TurnState::Working | TurnState::AwaitingApproval(_))
    }
}

impl ThreadService {
    /// Stores the message and queues its turn where the thread runs (here, or with clustering at
    /// its owner), without waiting for it; its handle. A message without a `clientMessageId`
    /// gets one, so that it can be stopped by name.
    pub async fn start(
        &self,
        caller: &Caller,
        thread: ThreadId,
        mut body: PostMessage,
        traceparent: Option<String>,
    ) -> Result<TurnView, ServiceError> {
        self.check(caller, &thread).await?;
        body.client_message_id
            .get_or_insert_with(|| format!("turn-{}", uuid::Uuid::new_v4().simple()));
        let fence = match &self.cluster {
            None => None,
            Some(cluster) => match self.place(cluster, caller, &thread, &body).await? {
                owner::Accepted::Here(fence) => Some(fence),
                owner::Accepted::There { message, .. } => return self.turn(caller, &message).await,
            },
        };
        let message = SendMessage {
            thread,
            body,
            fence,
            traceparent,
        };
        let accepted = self.send(caller, message).await?;
        self.turn(caller, &accepted.message_id).await
    }

    /// Where the turn of the user message `message` stands; 404 when there is no such message
    /// or the caller does not see its thread.
    pub async fn turn(
        &self,
        caller: &Caller,
        message: &MessageId,
    ) -> Result<TurnView, ServiceError> {
        let not_found = || ServiceError::NotFound(format!("there is no turn {message}"));
        let row = match self.store.get_message(message).await? {
            Some(row) if row.role == Role::User => row,
            _ => return Err(not_found()),
        };
        if self.check(caller, &row.thread_id).await.is_err() {
            return Err(not_found());
        }
        let mut updated_at = row.updated_at;
        let state = match row.status {
            MessageStatus::Pending => {
                let pending = self.pending_of(&row).await?;
                match pending.iter().map(|p| p.created_at).max() {
                    Some(newest) => {
                        updated_at = updated_at.max(newest);
                        TurnState::AwaitingApproval(pending.into_iter().map(Into::into).collect())
                    }
                    None => TurnState::Working,
                }
            }
            MessageStatus::Done => match self.store.reply_for(&row.id).await? {
                Some(reply) => {
                    updated_at = updated_at.max(reply.updated_at);
                    TurnState::Replied(Box::new(reply))
                }
                // A turn that ended without text (a structured-output turn stores one anyway).
                None => TurnState::Failed {
                    status: MessageStatus::Error,
                    error: "the turn ended without a reply".into(),
                },
            },
            status @ (MessageStatus::Error | MessageStatus::Refused) => TurnState::Failed {
                status,
                error: row.error.clone().unwrap_or_default(),
            },
            MessageStatus::Interrupted => TurnState::Stopped {
                error: row.error.clone().unwrap_or_default(),
            },
        };
        Ok(TurnView {
            thread: row.thread_id,
            message: row.id,
            client_message_id: row.client_message_id,
            created_at: row.created_at,
            updated_at,
            state,
        })
    }

    /// Stops the turn of `message`: withdrawn while it waits in line, interrupted once it runs;
    /// a turn that has ended is left as it is. Then where it stands (a stop takes effect soon
    /// after, not always before this returns).
    pub async fn cancel(
        &self,
        caller: &Caller,
        message: &MessageId,
    ) -> Result<(Stopped, TurnView), ServiceError> {
        let view = self.turn(caller, message).await?;
        let stopped = match (&view.state, &view.client_message_id) {
            (state, Some(client)) if !state.is_final() => {
                self.stop_message(caller, &view.thread, client).await?
            }
            _ => Stopped::Neither,
        };
        Ok((stopped, self.turn(caller, message).await?))
    }

    /// A person's answer to the permission `request_id` of `thread`, where the thread runs.
    /// 404 when there is no such request; a conflict when it was decided already.
    pub async fn answer_permission(
        &self,
        caller: &Caller,
        thread: &ThreadId,
        request_id: &str,
        answer: Answer,
    ) -> Result<api::Permission, ServiceError> {
        self.check(caller, thread).await?;
        if let Some(cluster) = &self.cluster {
            if let Some(row) = self
                .answer_at_owner(cluster, caller, thread, request_id, &answer)
                .await?
            {
                return Ok(row);
            }
        }
        match self
            .pipeline
            .approvals()
            .answer(thread, request_id, answer)
            .await
        {
            Ok(row) => Ok(row.into()),
            Err(err @ AnswerError::NotFound { .. }) => Err(ServiceError::NotFound(err.to_string())),
            Err(err @ AnswerError::AlreadyDecided { .. }) => {
                Err(ServiceError::Conflict(err.to_string()))
            }
            Err(AnswerError::Store(err)) => Err(err.into()),
        }
    }

    /// Makes `url` the thread's own webhook endpoint, signed with `secret`
    /// (`webhooks::a2a_callback_secret` for an A2A caller's): it replaces the thread's
    /// `callbackUrl`, and hears of every later turn of the thread too. Checked as a
    /// `callbackUrl` is.
    pub async fn push_to(
        &self,
        caller: &Caller,
        thread: &ThreadId,
        url: &str,
        secret: &str,
    ) -> Result<(), ServiceError> {
        self.check(caller, thread).await?;
        self.store.require_thread(thread).await?;
        self.webhooks
            .check_callback(url)
            .map_err(|err| ServiceError::Invalid(format!("url: {err}")))?;
        self.store.set_thread_callback(thread, url, secret).await?;
        tracing::info!(thread_id = %thread, "Thread endpoint set by a door.");
        Ok(())
    }

    /// The thread's own webhook endpoint, if it has one.
    pub async fn pushed_to(
        &self,
        caller: &Caller,
        thread: &ThreadId,
    ) -> Result<Option<String>, ServiceError> {
        self.check(caller, thread).await?;
        Ok(self.store.thread_callback(thread).await?.map(|c| c.url))
    }

    /// The permissions `message`'s turn waits for, oldest first.
    async fn pending_of(&self, message: &MessageRow) -> Result<Vec<PermissionRow>, ServiceError> {
        let rows = self
            .store
            .permission_page(&message.thread_id, true, None, Some(PENDING_SHOWN))
            .await?;
        Ok(rows
            .into_iter()
            .filter(|p| p.message_id.as_ref() == Some(&message.id))
            .collect())
    }
}
