//! Following a thread: its events as every subscriber sees them (the SSE stream, an idempotent
//! retry waiting for the first run's end, `/mcp` progress). A [`Follow`] hands out the stored
//! events after a point, then the live ones, each once and in id order, whatever the live
//! channel drops. It owns the order of the steps, so no subscriber writes them again:
//!
//! 1. Subscribe to the live channel first, so nothing stored from then on can fall between.
//! 2. Read the stored events after the point, a page at a time (`Store::events_after`); the
//!    compaction cut, when past the point, comes first as a `log_compacted` row.
//! 3. Then the live channel, skipping every id at or below the last one handed out (the
//!    replay's last page and the channel overlap).
//! 4. When the channel drops events (`RecvError::Lagged`: this subscriber fell more than the
//!    channel's capacity behind), read the store again from the last id handed out.
//!
//! A follow of the stored events only ([`super::EventBus::stored`]) has no live channel: it ends
//! after step 2.
//!
//! No task: the subscriber's own task polls it, so it lives and dies with the subscriber.

use std::collections::VecDeque;

use futures::Stream;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use plugin_contract::ThreadId;

use crate::api::events::{LogCompacted, ThreadEvent};
use crate::store::{EventRow, Store, StoreError};

/// Stored events read per query.
const PAGE: u32 = 500;

/// One thread's events, stored then live ([`super::EventBus::follow`]); see the module's
/// documentation.
pub struct Follow {
    thread: ThreadId,
    store: Store,
    /// `None`: the stored events only, and the follow ends after them.
    live: Option<broadcast::Receiver<EventRow>>,
    /// The id of the last event handed out (or where the follow starts): every event handed out
    /// next is past it.
    last: i64,
    /// Stored events read and not yet handed out, in id order.
    page: VecDeque<EventRow>,
    /// The store holds events the live channel will not bring (at the start, and after it
    /// dropped some): read it until a page comes back short.
    replaying: bool,
}

impl Follow {
    /// A follow of `thread` on `live` (already subscribed; `None`: none, the stored events
    /// only), from after `after`; `replay`: read the store first.
    pub(super) fn new(
        thread: &ThreadId,
        store: Store,
        live: Option<broadcast::Receiver<EventRow>>,
        after: i64,
        replay: bool,
    ) -> Follow {
        Follow {
            thread: thread.clone(),
            store,
            live,
            last: after,
            page: VecDeque::new(),
            replaying: replay,
        }
    }

    /// The next event; `Ok(None)` once the bus has closed (the daemon is past its end), or, with
    /// no live channel, after the newest stored event. A store error leaves the follow where it
    /// was: calling again retries the read.
    pub async fn next(&mut self) -> Result<Option<EventRow>, StoreError> {
        loop {
            if let Some(row) = self.page.pop_front() {
                self.last = row.id;
                return Ok(Some(row));
            }
            if self.replaying {
                self.read_page().await?;
                continue;
            }
            let Some(live) = &mut self.live else {
                return Ok(None);
            };
            match live.recv().await {
                Ok(row) if row.id > self.last => {
                    self.last = row.id;
                    return Ok(Some(row));
                }
                // Already handed out by the replay.
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => self.replaying = true,
                Err(RecvError::Closed) => return Ok(None),
            }
        }
    }

    /// The follow as a stream that ends when `stop` is cancelled, when the bus closes, or at a
    /// store error (logged).
    pub fn into_stream(self, stop: CancellationToken) -> impl Stream<Item = EventRow> + Send {
        futures::stream::unfold((self, stop), |(mut follow, stop)| async move {
            let next = tokio::select! {
                next = follow.next() => next,
                () = stop.cancelled() => return None,
            };
            match next {
                Ok(Some(row)) => Some((row, (follow, stop))),
                Ok(None) => None,
                Err(err) => {
                    warn!(thread_id = %follow.thread, error = %err, "Could not read stored events.");
                    None
                }
            }
        })
    }

    /// Reads the next page of stored events after the last one handed out, and the compaction
    /// cut: when retention removed events past that point, a `log_compacted` row says so first
    /// and the page goes on after the cut.
    async fn read_page(&mut self) -> Result<(), StoreError> {
        let rows = self
            .store
            .events_after(&self.thread, self.last, PAGE)
            .await?;
        // Read after the page: a compaction that removed part of what the page would have held
        // has recorded its cut by then (the two are one transaction).
        let through = self.store.compacted_through(&self.thread).await?;
        let full = rows.len() == PAGE as usize;
        if through > self.last {
            self.page.push_back(compacted_marker(&self.thread, through));
        }
        self.page
            .extend(rows.into_iter().filter(|row| row.id > through));
        if !full {
            self.replaying = false;
        }
        Ok(())
    }
}

/// The `log_compacted` row: never stored; its id is the newest event removed.
fn compacted_marker(thread: &ThreadId, through: i64) -> EventRow {
    let event = ThreadEvent::LogCompacted(LogCompacted {
        compacted_through: through,
    });
    EventRow {
        id: through,
        thread_id: thread.clone(),
        message_id: None,
        kind: event.kind().as_str().to_owned(),
        data: event.data(),
        created_at: chrono::Utc::now(),
    }
}
