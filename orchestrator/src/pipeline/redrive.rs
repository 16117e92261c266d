//! Re-drive: on a thread whose `onInterrupt` is `retry`, a turn the daemon's own life cut (a
//! crash found at start-up, a shutdown, a takeover: `EndCause::is_cut`) runs again by itself.
//!
//! The store says which messages (`Store::redrivable`: `interrupted`, the last run cut, at most
//! `turn.redrive_attempts` runs cut), in `seq` order; each is put back to `pending` by the same
//! fenced write a repeated `clientMessageId` uses, under the thread's insert lock, and joins the
//! thread's line like a new message: so the re-driven turns run in their order, ahead of what
//! arrives after, and a message that someone or something already ran again is not claimed a
//! second time. A message whose reply was stored is `done`, never `interrupted`: it never runs
//! twice. When the cut run had reached a process, the prompt tells the model that its previous
//! attempt was cut (the CLI session keeps what that attempt did); a message cut while it waited
//! in line goes as sent. Each run has its own outcome row and terminal event, and
//! `turn_redriven` says which attempt starts.

use tracing::{info, warn, Instrument};

use plugin_contract::{ContentBlock, ThreadId, UserContent};

use super::plan::{InLine, Source};
use super::{Nesting, NewMessage, Pipeline, PipelineError};
use crate::api::events::{ThreadEvent, TurnRedriven};
use crate::store::{EndCause, Fence, MessageId, OnInterrupt, ThreadRow};

impl Pipeline {
    /// Runs again, in `seq` order, the turns of `thread` that cuts left `interrupted` (at most
    /// `max_cuts` cuts each). `fence`: this node's lease on the thread, when clustered. Returns
    /// how many were put back in line.
    pub async fn redrive(
        &self,
        thread: &ThreadId,
        fence: Option<Fence>,
        max_cuts: u32,
    ) -> Result<usize, PipelineError> {
        if self.is_shutting_down() {
            return Ok(0);
        }
        let inner = &self.inner;
        let row = inner.parts.store.require_thread(thread).await?;
        if row.on_interrupt != OnInterrupt::Retry || row.archived_at.is_some() {
            return Ok(0);
        }
        let mut started = 0;
        for id in inner.parts.store.redrivable(thread, max_cuts).await? {
            match self.redrive_one(&row, &id, fence.clone()).await {
                Ok(true) => started += 1,
                Ok(false) => {}
                Err(err) => {
                    // The next sweep tries again; the ones after it wait for it.
                    warn!(thread_id = %thread, message_id = %id, error = %err, "Could not re-drive a cut turn.");
                    break;
                }
            }
        }
        Ok(started)
    }

    /// Puts one cut message back in its thread's line; false when another run took it first.
    async fn redrive_one(
        &self,
        row: &ThreadRow,
        id: &MessageId,
        fence: Option<Fence>,
    ) -> Result<bool, PipelineError> {
        let inner = &self.inner;
        let thread = &row.id;
        let outcomes = inner.parts.store.outcomes_of(id).await?;
        let cuts: Vec<EndCause> = outcomes
            .iter()
            .map(|o| o.cause)
            .filter(|c| c.is_cut())
            .collect();
        let Some(&cause) = cuts.last() else {
            return Ok(false);
        };
        let cut_run = outcomes.len().checked_sub(1).map(|last| {
            let since = last
                .checked_sub(1)
                .map_or(0, |prev| outcomes[prev].event_id);
            (since, outcomes[last].event_id)
        });
        let reached_cli = match cut_run {
            Some((since, until)) => self.reached_cli(thread, id, since, until).await?,
            None => false,
        };
        let limit = inner.parts.settings.queue_limit;
        let mut ticket =
            (inner.runtime)
                .enter(thread, limit)
                .ok_or_else(|| PipelineError::QueueFull {
                    thread: thread.clone(),
                    limit,
                })?;
        let in_order = ticket.lock_order().await;
        let Some(message) = inner.parts.store.retry_interrupted(id).await? else {
            return Ok(false);
        };
        ticket.join_line();
        drop(in_order);
        let attempt = u32::try_from(outcomes.len()).map_or(u32::MAX, |n| n.saturating_add(1));
        inner.parts.events.emit(
            thread,
            Some(id),
            ThreadEvent::TurnRedriven(TurnRedriven {
                message_id: id.clone(),
                attempt,
                cause,
            }),
        );
        info!(thread_id = %thread, message_id = %id, attempt, %cause, "Re-driving a cut turn.");
        let msg = NewMessage {
            thread_id: thread.clone(),
            // A message cut while it waited in line never reached the model: it goes as sent.
            content: match reached_cli {
                true => redrive_prompt(cause, message.user_content()),
                false => message.user_content(),
            },
            client_message_id: message.client_message_id.clone(),
            model: message.model.clone(),
            permission_mode: None,
            mcp_servers: None,
            timeout: None,
            fence,
            unattended: false,
            // The daemon runs it again for whoever sent it.
            caller: crate::caller::Caller::acting_for(message.caller()),
            traceparent: None,
        };
        let charged = self.charge(row, &msg.caller).await?;
        let plan = self.plan(row.clone(), message, msg, charged);
        let source = Source::Redrive(InLine {
            ticket,
            nesting: Nesting::TopLevel,
        });
        let pipeline = self.clone();
        let span = tracing::info_span!("message", thread_id = %thread, message_id = %id, attempt);
        inner.tasks.spawn(
            async move {
                // Nobody waits for the reply: it is stored, streamed and announced as any.
                let _ = pipeline.run(plan, source).await;
            }
            .instrument(span),
        );
        Ok(true)
    }
}

impl Pipeline {
    /// Whether the run of `message` whose events lie between `since` and `until` (event ids)
    /// reached a process (`process_ready`): read a page at a time, as SSE replays them.
    async fn reached_cli(
        &self,
        thread: &ThreadId,
        message: &MessageId,
        since: i64,
        until: i64,
    ) -> Result<bool, PipelineError> {
        let mut after = since;
        while after < until {
            let page = self
                .inner
                .parts
                .store
                .events_after(thread, after, 500)
                .await?;
            let Some(last) = page.last() else {
                return Ok(false);
            };
            after = last.id;
            let ready = page.iter().take_while(|e| e.id < until).any(|e| {
                e.message_id.as_ref() == Some(message)
                    && e.kind == crate::api::events::EventKind::ProcessReady.as_str()
            });
            if ready {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The prompt of a re-driven turn: what cut the previous attempt, then the message as sent.
fn redrive_prompt(cause: EndCause, content: UserContent) -> UserContent {
    let what = match cause {
        EndCause::Crash => "the daemon running it stopped unexpectedly",
        EndCause::Takeover => "the node running it stopped and another took the thread over",
        _ => "the daemon running it shut down",
    };
    let notice = format!(
        "[Harness: your previous attempt at this message was cut off before it finished \
         ({what}). Whatever that attempt already did is in this session; check it before \
         repeating anything with side effects, then finish the task. The message follows.]"
    );
    match content {
        UserContent::Text(text) => UserContent::Text(format!("{notice}\n\n{text}")),
        blocks => blocks.after(vec![ContentBlock::Text { text: notice }]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_names_the_cut_and_keeps_the_message() {
        let prompt = redrive_prompt(EndCause::Crash, "write the report".into())
            .text()
            .into_owned();
        assert!(prompt.contains("stopped unexpectedly"), "{prompt}");
        assert!(prompt.ends_with("\n\nwrite the report"), "{prompt}");
        let prompt = redrive_prompt(EndCause::Takeover, "x".into())
            .text()
            .into_owned();
        assert!(prompt.contains("another took the thread over"), "{prompt}");
        let image = ContentBlock::Image {
            source: plugin_contract::MediaSource::File {
                file_id: "file_1".into(),
                media_type: None,
                bytes: None,
            },
        };
        let UserContent::Blocks(blocks) =
            redrive_prompt(EndCause::Crash, UserContent::Blocks(vec![image.clone()]))
        else {
            panic!("blocks stay blocks");
        };
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[1], image, "the image is kept, after the notice");
    }
}
