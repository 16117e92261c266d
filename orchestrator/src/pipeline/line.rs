//! Stopping one caller's message, not the thread's: a message sent with a `clientMessageId`
//! can be withdrawn while it waits in its thread's line (it never runs, and the turn ahead of it
//! goes on), or interrupted once it runs ([`Pipeline::stop_message`]). An MCP client's cancel of
//! its `threads__send` uses this; interrupting the thread stopped whichever turn ran, another
//! caller's included.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;
use tracing::info;

use plugin_contract::ThreadId;

use super::end::TurnEnder;
use super::queue::QueueTicket;
use super::{Pipeline, PipelineError, TurnReply};
use crate::events::TurnEnding;
use crate::store::{EndCause, MessageRow, MessageStatus};
use crate::sync::lock;
use crate::turn_error::TurnError;

/// The messages sent with a `clientMessageId`: those waiting in their thread's line, and the
/// one running, by thread.
#[derive(Debug, Default)]
pub(super) struct Lines {
    waiting: HashMap<(ThreadId, String), CancellationToken>,
    running: HashMap<ThreadId, String>,
}

/// What [`Pipeline::stop_message`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It waited in line: it will not run.
    Withdrawn,
    /// It ran: its turn was interrupted.
    Interrupted,
    /// It neither waits nor runs (done, or not sent yet).
    Neither,
}

impl Pipeline {
    /// Stops the message `client` (its `clientMessageId`) of `thread`: withdrawn from the line,
    /// or its running turn interrupted; never another message's turn.
    pub async fn stop_message(
        &self,
        thread: &ThreadId,
        client: &str,
    ) -> Result<Stopped, PipelineError> {
        let running = {
            let lines = lock(&self.inner.lines);
            if let Some(token) = lines.waiting.get(&(thread.clone(), client.to_owned())) {
                token.cancel();
                return Ok(Stopped::Withdrawn);
            }
            lines.running.get(thread).is_some_and(|c| c == client)
        };
        if running && self.interrupt(thread).await? {
            return Ok(Stopped::Interrupted);
        }
        Ok(Stopped::Neither)
    }

    /// Waits for `ticket`'s turn; false when the caller withdrew the message (`client`, its
    /// `clientMessageId`) meanwhile.
    pub(super) async fn wait_turn(
        &self,
        thread: &ThreadId,
        client: Option<&str>,
        ticket: &mut QueueTicket,
    ) -> bool {
        let Some(client) = client else {
            ticket.wait_turn().await;
            return true;
        };
        let withdraw = self.line_up(thread, client);
        let runs = tokio::select! {
            () = ticket.wait_turn() => true,
            () = withdraw.cancelled() => false,
        };
        self.left_line(thread, client, runs);
        runs
    }

    /// Ends a message its caller withdrew while it waited in line: `interrupted`, and never run.
    pub(super) async fn withdrawn(
        &self,
        user: &MessageRow,
        end: &mut TurnEnder,
    ) -> Result<TurnReply, PipelineError> {
        let reason = "withdrawn by its caller while it waited in line";
        end.end(TurnEnding::failed(EndCause::Withdrawn, reason))
            .await?;
        info!(thread_id = %user.thread_id, message_id = %user.id, "Message withdrawn before its turn.");
        Err(PipelineError::Turn {
            message_id: user.id.clone(),
            status: MessageStatus::Interrupted,
            error: TurnError::Interrupted,
        })
    }

    /// The message `client` of `thread` joins the line: cancelled, it is withdrawn.
    fn line_up(&self, thread: &ThreadId, client: &str) -> CancellationToken {
        let token = CancellationToken::new();
        let key = (thread.clone(), client.to_owned());
        lock(&self.inner.lines).waiting.insert(key, token.clone());
        token
    }

    /// The message `client` of `thread` left the line; `runs`: its turn starts now.
    fn left_line(&self, thread: &ThreadId, client: &str, runs: bool) {
        let mut lines = lock(&self.inner.lines);
        lines.waiting.remove(&(thread.clone(), client.to_owned()));
        if runs {
            lines.running.insert(thread.clone(), client.to_owned());
        }
    }

    /// The running turn of `thread` ended.
    pub(super) fn turn_ended(&self, thread: &ThreadId) {
        lock(&self.inner.lines).running.remove(thread);
    }
}
