//! A repeated `clientMessageId`: the same content answers with the first run's outcome (waiting
//! for it if it still runs); other content is a conflict; a message a crash, a shutdown or an
//! interrupt cut short, or a budget refused, runs again.

use tracing::info;

use super::runtime::QueueTicket;
use super::{NewMessage, PipelineError, TurnReply};
use crate::api::events::EventKind;
use crate::events::EventBus;
use crate::store::{Inserted, MessageRow, MessageStatus, NewUserMessage, Store};

/// What a stored message does next.
pub(super) enum Admitted {
    /// Its turn runs (a new message, or the retry of an interrupted one).
    Run(MessageRow),
    /// A repeat of a message that ran or runs: answer with that run's outcome.
    Wait(MessageRow),
}

impl Admitted {
    pub(super) fn message(&self) -> &MessageRow {
        match self {
            Admitted::Run(message) | Admitted::Wait(message) => message,
        }
    }
}

/// Stores the message under the thread's insert lock and decides what it does; a message that
/// runs joins the thread's line here, so turns run in `seq` order.
pub(super) async fn admit(
    store: &Store,
    msg: &NewMessage,
    mut ticket: QueueTicket,
) -> Result<(Admitted, QueueTicket), PipelineError> {
    let _in_order = ticket.lock_order().await;
    let inserted = store
        .insert_user_message(
            NewUserMessage {
                thread_id: msg.thread_id.clone(),
                content: msg.content.clone(),
                client_message_id: msg.client_message_id.clone(),
                model: msg.model.clone(),
                origin: crate::store::Origin::User,
                caller: Some(msg.caller.id()),
            },
            msg.fence.as_ref(),
        )
        .await?;
    let admitted = match inserted {
        Inserted::New(message) => Admitted::Run(message),
        Inserted::Duplicate(first) => {
            // Images and documents are references to files whose ids hash their bytes: comparing
            // the content compares the bytes' hashes.
            if first.user_content() != msg.content || first.model != msg.model {
                return Err(PipelineError::ClientIdConflict {
                    client_message_id: msg.client_message_id.clone().unwrap_or_default(),
                    message_id: first.id,
                });
            }
            let retried = match first.status {
                // Cut short, or refused by a budget that may have been raised since.
                MessageStatus::Interrupted | MessageStatus::Refused => {
                    store.retry_interrupted(&first.id).await?
                }
                _ => None,
            };
            match retried {
                Some(message) => {
                    info!(thread_id = %message.thread_id, message_id = %message.id, "Retry of an interrupted message; running it again.");
                    Admitted::Run(message)
                }
                None => Admitted::Wait(first),
            }
        }
    };
    if matches!(admitted, Admitted::Run(_)) {
        ticket.join_line();
    }
    drop(_in_order);
    Ok((admitted, ticket))
}

/// Waits until a message first sent earlier has finished, and answers with its outcome.
pub(super) async fn wait_for_outcome(
    store: &Store,
    events: &EventBus,
    first: &MessageRow,
) -> Result<TurnReply, PipelineError> {
    let mut follow = events.follow_from_now(&first.thread_id).await?;
    loop {
        let message = store
            .get_message(&first.id)
            .await?
            .unwrap_or_else(|| first.clone());
        match message.status {
            MessageStatus::Done => {
                let reply = store.reply_for(&message.id).await?;
                let thread = store.require_thread(&message.thread_id).await?;
                if let Some(reply) = reply {
                    return Ok(TurnReply {
                        message: reply,
                        thread_id: thread.id,
                        session_id: thread.cli_session_id,
                        user_message_id: message.id,
                    });
                }
            }
            MessageStatus::Pending => {}
            status => {
                return Err(PipelineError::PreviousFailure {
                    message_id: message.id,
                    status,
                    error: message.error.unwrap_or_default(),
                })
            }
        }
        // Wait for the thread's next turn to end, then look again.
        loop {
            match follow.next().await? {
                Some(event) if is_terminal(&event.kind) => break,
                Some(_) => continue,
                None => return Err(PipelineError::ShuttingDown),
            }
        }
    }
}

fn is_terminal(kind: &str) -> bool {
    EventKind::parse(kind).is_some_and(EventKind::is_terminal)
}
