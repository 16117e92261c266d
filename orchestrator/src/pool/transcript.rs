//! Each process's transcript frames (`--session-mirror`): stored by a task of their own
//! ([`store_transcript`]), and a turn's [`TurnItem::Done`](super::TurnItem::Done) waits until the
//! frames before its `result` are stored. Before a `--resume` whose session file the CLI's
//! config dir lacks, the stored transcript is written back; only a session with nothing stored
//! falls back to a fresh one (history injected). The SQL is the store's; this file decides when.
//!
//! A frame is tried three times; one the store still refuses is held, in order, with every frame
//! behind it, and written first when the next frame comes ([`super::at_risk`]), never failing
//! the turn; a turn's `Done` waits for its frames at most 10 s (`TRANSCRIPT_WAIT`) and takes
//! what happened to them as notes (`transcript_at_risk`, `transcript_repaired`).

use std::sync::Arc;
use std::time::Duration;

use claude_cli::MirrorFrames;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use plugin_contract::{CliSessionId, ThreadId};

use super::at_risk::{AtRisk, Frame, TranscriptNote};
use super::entry::Entry;
use super::Pool;
use crate::api::events::EventKind;
use crate::launch::ProcessSpec;
use crate::store::Store;

/// How long a turn's end waits for the transcript frames before its `result` to be stored.
const TRANSCRIPT_WAIT: Duration = Duration::from_secs(10);
/// Waits before the second and third try to store a transcript frame (as the SDKs retry).
const TRANSCRIPT_RETRIES: [Duration; 2] = [Duration::from_millis(200), Duration::from_millis(800)];

/// Stores one process's transcript frames, in order, until its stdout ends; counts each frame
/// handled in `stored`, which a turn's end waits on. Each frame is queued behind the thread's
/// held ones (`at_risk`) and the queue is stored ([`store_held`]): a frame the store refuses is
/// held and noted, never skipped, and the turn is not failed for it.
pub(super) async fn store_transcript(
    thread: ThreadId,
    mut frames: MirrorFrames,
    store: Store,
    at_risk: Arc<AtRisk>,
    stored: watch::Sender<u64>,
) {
    while let Some(frame) = frames.recv().await {
        match (frame.session_id(), frame.project_relative_path()) {
            (Some(session), Some(file)) => {
                let session = CliSessionId::from_string(session);
                at_risk.push(&thread, Frame::new(session, file, frame.entries));
                store_held(&thread, &store, &at_risk).await;
            }
            _ => {
                warn!(file = %frame.file_path, "Skipped a transcript frame outside the CLI's projects folder.")
            }
        }
        stored.send_modify(|n| *n += 1);
    }
}

/// Stores `thread`'s queued frames in order: a new frame gets three tries, one the store refused
/// before gets one per pass. At the first refusal the rest goes back, held, to be tried again
/// before the thread's next frame. Held frames written are noted as repaired. One pass at a time
/// per thread (`AtRisk::writer`), so frames are stored in the order they were queued.
pub(super) async fn store_held(thread: &ThreadId, store: &Store, at_risk: &AtRisk) {
    let _writer = at_risk.writer(thread).await;
    let mut queue = at_risk.take(thread);
    let mut repaired = 0;
    while let Some(frame) = queue.front() {
        let tries = if frame.at_risk() { 1 } else { 3 };
        let mut waits = TRANSCRIPT_RETRIES.iter().take(tries - 1);
        let written = loop {
            let written = store
                .append_transcript(thread, &frame.session, &frame.file, &frame.entries)
                .await;
            match (written, waits.next()) {
                (Ok(_), _) => break Ok(()),
                (Err(_), Some(wait)) => tokio::time::sleep(*wait).await,
                (Err(err), None) => break Err(err),
            }
        };
        if let Err(err) = written {
            warn!(thread_id = %thread, session_id = %frame.session, frames = queue.len(), error = %err, "Could not store transcript frames; they are held and written before the next one.");
            at_risk.put_back(thread, queue, &err.to_string());
            break;
        }
        if let Some(frame) = queue.pop_front().filter(Frame::at_risk) {
            repaired += frame.entries.len() as u64;
        }
    }
    if repaired > 0 {
        info!(thread_id = %thread, entries = repaired, "Held transcript entries stored: the transcript is whole again.");
        at_risk.note(thread, TranscriptNote::Repaired { entries: repaired });
    }
}

impl Entry {
    /// Waits until every transcript frame the process has written so far is stored: called at
    /// a turn's `result`, it makes the turn's transcript durable before the turn is.
    pub(super) async fn transcript_stored(&self) {
        let written = self.process.mirror_frames_received();
        let mut stored = self.transcript_stored.clone();
        // An error means the store task ended: the frames ran out, every one was handled.
        let waited =
            tokio::time::timeout(TRANSCRIPT_WAIT, stored.wait_for(|n| *n >= written)).await;
        if waited.is_err() {
            warn!(thread_id = %self.spec.thread, pid = self.process.pid(), written, "Transcript frames not stored in time; the turn ends without waiting for them.");
        }
    }
}

/// Whether a session may be resumed from what the CLI's config dir and the store hold.
#[derive(Debug, PartialEq)]
pub(super) enum Resumable {
    Yes,
    /// The stored transcript it would be restored from misses entries, for the reason given.
    No(String),
}

impl Pool {
    /// Makes `session` resumable by `thread`'s processes when the CLI's config dir does not have
    /// it (another node, a wiped `data_dir/claude`, a fork whose parent's file is gone): writes
    /// the stored transcript back. With nothing stored, or on failure, the resume fails as
    /// before and the fresh session with injected history follows.
    ///
    /// Held frames (`at_risk`) are written first. When the stored transcript is needed and
    /// misses entries (held ones the store still refuses, or, by the event log, ones held by a
    /// daemon that has stopped since), the session is [`Resumable::No`].
    ///
    /// With clustering the copy here may also be older than the stored one: the thread moved to
    /// a peer, went on there, and came back. It is rewritten when it lacks the last entry stored
    /// for its file.
    pub(super) async fn restore_session(
        &self,
        spec: &ProcessSpec,
        session: &CliSessionId,
    ) -> Resumable {
        let inner = &self.inner;
        let thread = &spec.thread;
        store_held(thread, &inner.store, &inner.at_risk).await;
        let here = inner.launcher.has_session(spec, session);
        if here && inner.store.node_id().is_none() {
            return Resumable::Yes;
        }
        if let Some(reason) = self.missing_entries(thread, session).await {
            return Resumable::No(reason);
        }
        let entries = match inner.store.session_transcript(session).await {
            Ok(entries) if entries.is_empty() => {
                debug!(thread_id = %thread, session_id = %session, "No stored transcript for the session.");
                return Resumable::Yes;
            }
            Ok(entries) => entries,
            Err(err) => {
                warn!(thread_id = %thread, session_id = %session, error = %err, "Could not read the stored transcript.");
                return Resumable::Yes;
            }
        };
        let count = entries.len();
        let (launcher, spec, id) = (inner.launcher.clone(), spec.clone(), session.clone());
        // Files of up to megabytes, synced: off the async workers.
        let written = tokio::task::spawn_blocking(move || {
            if here {
                let main = format!("{}.jsonl", id.as_str());
                let last = entries.iter().rev().find(|e| e.file == main);
                match last.and_then(|e| e.uuid.as_deref()) {
                    Some(uuid) if !launcher.session_has_entry(&spec, &id, uuid)? => {}
                    // Up to date (or nothing to tell by): kept as it is.
                    _ => return Ok(None),
                }
            }
            let lines = entries.iter().map(|e| (e.file.as_str(), e.line.as_str()));
            launcher.restore_transcript(&spec, lines).map(Some)
        })
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string())));
        match written {
            Ok(None) => {}
            Ok(Some(files)) => {
                inner.metrics.transcript_restored();
                info!(thread_id = %thread, session_id = %session, entries = count, files, "Session restored from the stored transcript.");
            }
            Err(err) => {
                warn!(thread_id = %thread, session_id = %session, error = %err, "Could not write the stored transcript back.");
            }
        }
        Resumable::Yes
    }

    /// Why `session`'s stored transcript misses entries, if it does: `thread` holds frames of
    /// it the store still refuses, or the thread's last word on its transcript is a
    /// `transcript_at_risk` of this session that this daemon holds nothing of (it restarted).
    async fn missing_entries(&self, thread: &ThreadId, session: &CliSessionId) -> Option<String> {
        let inner = &self.inner;
        if inner.at_risk.holds(thread) {
            return Some("the store still refuses the held transcript entries".to_owned());
        }
        let marks = [
            EventKind::TranscriptAtRisk,
            EventKind::TranscriptRepaired,
            EventKind::TranscriptUnrepaired,
        ]
        .map(EventKind::as_str);
        let last = match inner.store.last_event_of(thread, &marks).await {
            Ok(last) => last?,
            Err(err) => {
                warn!(thread_id = %thread, error = %err, "Could not read the transcript's marks; the stored transcript is taken as whole.");
                return None;
            }
        };
        let of_session = last.data["sessionId"].as_str() == Some(session.as_str());
        (last.kind == EventKind::TranscriptAtRisk.as_str() && of_session).then(|| {
            "transcript entries the store refused were held by a daemon that has stopped since"
                .to_owned()
        })
    }
}
