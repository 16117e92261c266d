//! [`TurnEnder`]: the end of one run of a user message, held by the task that runs it. The turn
//! ends exactly once, through the event bus (`crate::events`, which writes the status, the
//! outcome and the terminal event in one transaction): by [`TurnEnder::end`], or on drop (the
//! task panicked or was cancelled) as an error, so no message stays `pending` and no client of
//! the stream waits forever for a turn that is over.

use tracing::warn;

use plugin_contract::ThreadId;

use super::Pipeline;
use crate::events::Ending;
use crate::store::{EndCause, Fence, MessageId, MessageRow, Outcome, StoreError};

pub(super) struct TurnEnder {
    pipeline: Pipeline,
    thread: ThreadId,
    message: MessageId,
    /// The fence the turn's request was routed with.
    fence: Option<Fence>,
    ended: bool,
}

impl TurnEnder {
    pub(super) fn new(pipeline: &Pipeline, user: &MessageRow, fence: Option<&Fence>) -> Self {
        Self {
            pipeline: pipeline.clone(),
            thread: user.thread_id.clone(),
            message: user.id.clone(),
            fence: fence.cloned(),
            ended: false,
        }
    }

    /// Ends the turn as `ending` says: what was written, `None` when the turn had already ended
    /// (shutdown ended it meanwhile). Queued at once: a caller cancelled while it waits still
    /// ends the turn.
    pub(super) async fn end(&mut self, ending: Ending) -> Result<Option<Outcome>, StoreError> {
        self.ended = true;
        let events = &self.pipeline.inner.parts.events;
        events
            .end_turn(&self.thread, &self.message, ending, self.fence.as_ref())
            .await
    }

    /// Whether [`Self::end`] was called.
    pub(super) fn is_ended(&self) -> bool {
        self.ended
    }
}

impl Drop for TurnEnder {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        warn!(thread_id = %self.thread, message_id = %self.message, "A turn ended without an outcome.");
        let ending = Ending::failed(EndCause::Error, "the turn ended unexpectedly");
        // Queued now; the writer runs it whether or not anyone waits.
        drop(self.pipeline.inner.parts.events.end_turn(
            &self.thread,
            &self.message,
            ending,
            self.fence.as_ref(),
        ));
    }
}
