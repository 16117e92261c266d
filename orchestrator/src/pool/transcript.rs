//! Each process's transcript frames (`--session-mirror`): stored by a task of their own
//! ([`store_transcript`]), and a turn's [`TurnItem::Done`](super::TurnItem::Done) waits until the
//! frames before its `result` are stored. Before a `--resume` whose session file the CLI's
//! config dir lacks, the stored transcript is written back; only a session with nothing stored
//! falls back to a fresh one (history injected). The SQL is the store's; this file decides when.
//!
//! A frame is tried three times and then logged and skipped, never failing the turn (a later
//! restore misses it); a turn's `Done` waits for its frames at most 10 s (`TRANSCRIPT_WAIT`).

use std::time::Duration;

use claude_cli::MirrorFrames;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use plugin_contract::{CliSessionId, ThreadId};

use super::entry::Entry;
use super::Pool;
use crate::launch::ProcessSpec;
use crate::store::Store;

/// How long a turn's end waits for the transcript frames before its `result` to be stored.
const TRANSCRIPT_WAIT: Duration = Duration::from_secs(10);
/// Waits before the second and third try to store a transcript frame (as the SDKs retry).
const TRANSCRIPT_RETRIES: [Duration; 2] = [Duration::from_millis(200), Duration::from_millis(800)];

/// Stores one process's transcript frames, in order, until its stdout ends; counts each frame
/// handled in `stored`, which a turn's end waits on. A frame that cannot be stored after three
/// tries is logged and skipped: the turn is not failed for it (a later restore misses it, and
/// with nothing stored the fallback injects the history).
pub(super) async fn store_transcript(
    thread: ThreadId,
    mut frames: MirrorFrames,
    store: Store,
    stored: watch::Sender<u64>,
) {
    while let Some(frame) = frames.recv().await {
        match (frame.session_id(), frame.project_relative_path()) {
            (Some(session), Some(file)) => {
                let session = CliSessionId::from_string(session);
                let mut waits = TRANSCRIPT_RETRIES.iter();
                loop {
                    match store
                        .append_transcript(&thread, &session, &file, &frame.entries)
                        .await
                    {
                        Ok(_) => break,
                        Err(err) => match waits.next() {
                            Some(wait) => tokio::time::sleep(*wait).await,
                            None => {
                                warn!(session_id = %session, entries = frame.entries.len(), error = %err, "Could not store a transcript frame; a restore of the session will miss it.");
                                break;
                            }
                        },
                    }
                }
            }
            _ => {
                warn!(file = %frame.file_path, "Skipped a transcript frame outside the CLI's projects folder.")
            }
        }
        stored.send_modify(|n| *n += 1);
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

impl Pool {
    /// Makes `session` resumable by `thread`'s processes when the CLI's config dir does not have
    /// it (another node, a wiped `data_dir/claude`, a fork whose parent's file is gone): writes
    /// the stored transcript back. With nothing stored, or on failure, the resume fails as
    /// before and the fresh session with injected history follows.
    ///
    /// With clustering the copy here may also be older than the stored one: the thread moved to
    /// a peer, went on there, and came back. It is rewritten when it lacks the last entry stored
    /// for its file.
    pub(super) async fn restore_session(&self, spec: &ProcessSpec, session: &CliSessionId) {
        let inner = &self.inner;
        let thread = &spec.thread;
        let here = inner.launcher.has_session(spec, session);
        if here && inner.store.node_id().is_none() {
            return;
        }
        let entries = match inner.store.session_transcript(session).await {
            Ok(entries) if entries.is_empty() => {
                debug!(thread_id = %thread, session_id = %session, "No stored transcript for the session.");
                return;
            }
            Ok(entries) => entries,
            Err(err) => {
                warn!(thread_id = %thread, session_id = %session, error = %err, "Could not read the stored transcript.");
                return;
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
    }
}
