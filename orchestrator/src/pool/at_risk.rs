//! A thread's transcript frames on their way to the store, and those the store refused: history
//! at risk, since a session is restored from the store alone. A frame is queued behind the
//! thread's held ones and the queue is stored in order ([`super::transcript`] does the IO), so a
//! refused frame is never skipped: it stays first in line, and is written again before the next
//! frame (of this process or of the thread's next). What happened on the way is kept as
//! [`TranscriptNote`]s, which the turn's end takes ([`AtRisk::take_notes`]) to record as thread
//! events. Held frames live in this daemon's memory only: after a restart they are gone, which
//! the event log's unrepaired `transcript_at_risk` says.
//!
//! One writer per thread ([`AtRisk::writer`]): a pass that stores a thread's queue holds it, so
//! two passes (a replaced process's store task still writing, and the next process's) never
//! write a thread's frames out of order; the second takes the queue once the first is done.
//!
//! Without IO: tested without processes or a store.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use plugin_contract::{CliSessionId, ThreadId};
use serde_json::Value;

use crate::api::events::{ThreadEvent, TranscriptAtRisk, TranscriptRepaired, TranscriptUnrepaired};
use crate::sync::lock;

/// One transcript frame: `entries` of `file` (relative to the CLI's project folder) in `session`.
#[derive(Debug)]
pub(super) struct Frame {
    pub session: CliSessionId,
    pub file: String,
    pub entries: Vec<Value>,
    /// The store refused it after its tries (it was reported at risk).
    at_risk: bool,
}

impl Frame {
    pub fn new(session: CliSessionId, file: String, entries: Vec<Value>) -> Frame {
        Frame {
            session,
            file,
            entries,
            at_risk: false,
        }
    }

    /// Whether it was refused before: a frame at risk is tried once per pass, a new one as many
    /// times as the caller tries a frame.
    pub fn at_risk(&self) -> bool {
        self.at_risk
    }

    fn count(&self) -> u64 {
        self.entries.len() as u64
    }
}

/// What became of a thread's transcript, for its turn's events (`transcript_*`).
#[derive(Clone, Debug, PartialEq)]
pub enum TranscriptNote {
    /// The store refused `entries` of `session` after their tries: the daemon holds them and
    /// writes them first, before the thread's next frame.
    AtRisk {
        session: CliSessionId,
        entries: u64,
        error: String,
    },
    /// Held entries were written to the store: its transcript is whole again.
    Repaired { entries: u64 },
    /// `session`'s stored transcript misses entries that no one holds any longer (the daemon
    /// restarted) or that cannot be written now: it is not resumed, and the turn runs in a
    /// fresh session with the history injected.
    Unrepaired {
        session: CliSessionId,
        reason: String,
    },
}

/// The threads' queued frames and notes, under one lock; and each thread's writer.
#[derive(Debug, Default)]
pub(super) struct AtRisk(Mutex<HashMap<ThreadId, Held>>, Writers);

/// The writer lock of each thread a pass is storing (or waiting to store) for.
#[derive(Debug, Default)]
struct Writers(Mutex<HashMap<ThreadId, Arc<tokio::sync::Mutex<()>>>>);

/// The writer of one thread's queue, held for a pass ([`AtRisk::writer`]).
pub(super) struct Writer<'a> {
    writers: &'a Writers,
    thread: ThreadId,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        // Forgotten when no other pass holds or waits for it: under the map's lock no one can
        // take a new handle meanwhile.
        let mut writers = lock(&self.writers.0);
        if writers
            .get(&self.thread)
            .is_some_and(|w| Arc::strong_count(w) == 1)
        {
            writers.remove(&self.thread);
        }
    }
}

#[derive(Debug, Default)]
struct Held {
    frames: VecDeque<Frame>,
    notes: Vec<TranscriptNote>,
}

impl AtRisk {
    /// Waits until no other pass stores `thread`'s queue, and holds that role until the
    /// [`Writer`] is dropped: take, write, put back under it.
    pub async fn writer(&self, thread: &ThreadId) -> Writer<'_> {
        let handle = lock(&self.1 .0).entry(thread.clone()).or_default().clone();
        Writer {
            writers: &self.1,
            thread: thread.clone(),
            guard: Some(handle.lock_owned().await),
        }
    }

    /// Queues `frame` behind `thread`'s held frames.
    pub fn push(&self, thread: &ThreadId, frame: Frame) {
        let mut threads = lock(&self.0);
        threads
            .entry(thread.clone())
            .or_default()
            .frames
            .push_back(frame);
    }

    /// `thread`'s queued frames, in order, to store; [`AtRisk::put_back`] returns what was not
    /// stored.
    pub fn take(&self, thread: &ThreadId) -> VecDeque<Frame> {
        let mut threads = lock(&self.0);
        let Some(held) = threads.get_mut(thread) else {
            return VecDeque::new();
        };
        let frames = std::mem::take(&mut held.frames);
        // Nothing left to say either: the thread keeps no entry (one per thread ever would grow).
        if held.notes.is_empty() {
            threads.remove(thread);
        }
        frames
    }

    /// `frames`, which the store just refused with `error`, go back to the front of `thread`'s
    /// queue, every one at risk now; those newly at risk are noted.
    pub fn put_back(&self, thread: &ThreadId, mut frames: VecDeque<Frame>, error: &str) {
        let mut notes = Vec::new();
        for frame in frames.iter_mut().filter(|frame| !frame.at_risk) {
            frame.at_risk = true;
            notes.push(TranscriptNote::AtRisk {
                session: frame.session.clone(),
                entries: frame.count(),
                error: error.to_owned(),
            });
        }
        let mut threads = lock(&self.0);
        let held = threads.entry(thread.clone()).or_default();
        frames.append(&mut held.frames);
        held.frames = frames;
        for note in notes {
            held.note(note);
        }
    }

    /// Adds `note` to `thread`'s.
    pub fn note(&self, thread: &ThreadId, note: TranscriptNote) {
        lock(&self.0).entry(thread.clone()).or_default().note(note);
    }

    /// True while `thread` has frames the store refused.
    pub fn holds(&self, thread: &ThreadId) -> bool {
        lock(&self.0)
            .get(thread)
            .is_some_and(|held| held.frames.iter().any(|frame| frame.at_risk))
    }

    /// `thread`'s notes since the last call, in the order they happened.
    pub fn take_notes(&self, thread: &ThreadId) -> Vec<TranscriptNote> {
        let mut threads = lock(&self.0);
        let Some(held) = threads.get_mut(thread) else {
            return Vec::new();
        };
        let notes = std::mem::take(&mut held.notes);
        if held.frames.is_empty() {
            threads.remove(thread);
        }
        notes
    }
}

impl Held {
    /// A note of the same kind (and session) as the last one adds to it: one event per kind and
    /// turn.
    fn note(&mut self, note: TranscriptNote) {
        use TranscriptNote::{AtRisk, Repaired};
        match (self.notes.last_mut(), note) {
            (
                Some(AtRisk {
                    session,
                    entries,
                    error,
                }),
                AtRisk {
                    session: same,
                    entries: more,
                    error: last,
                },
            ) if *session == same => {
                *entries += more;
                *error = last;
            }
            (Some(Repaired { entries }), Repaired { entries: more }) => *entries += more,
            (_, note) => self.notes.push(note),
        }
    }
}

impl From<TranscriptNote> for ThreadEvent {
    fn from(note: TranscriptNote) -> Self {
        match note {
            TranscriptNote::AtRisk {
                session,
                entries,
                error,
            } => ThreadEvent::TranscriptAtRisk(TranscriptAtRisk {
                session_id: Some(session.as_str().to_owned()),
                entries,
                error,
                held: true,
            }),
            TranscriptNote::Repaired { entries } => {
                ThreadEvent::TranscriptRepaired(TranscriptRepaired { entries })
            }
            TranscriptNote::Unrepaired { session, reason } => {
                ThreadEvent::TranscriptUnrepaired(TranscriptUnrepaired {
                    session_id: session.as_str().to_owned(),
                    reason,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn frame(n: usize) -> Frame {
        let entries = (0..n).map(|i| json!({ "uuid": format!("e{i}") })).collect();
        Frame::new(CliSessionId::from_string("s"), "s.jsonl".into(), entries)
    }

    /// A second pass waits for the first to finish, and the writer of a thread is forgotten
    /// once nobody holds or waits for it.
    #[tokio::test]
    async fn one_pass_at_a_time_writes_a_thread() {
        let at_risk = Arc::new(AtRisk::default());
        let (thread, other) = (ThreadId::generate(), ThreadId::generate());
        let first = at_risk.writer(&thread).await;
        let _elsewhere = at_risk.writer(&other).await;
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let waiting = {
            let (at_risk, thread) = (at_risk.clone(), thread.clone());
            tokio::spawn(async move {
                let _second = at_risk.writer(&thread).await;
                let _ = tx.send(());
            })
        };
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "the second pass waits");
        drop(first);
        waiting.await.unwrap();
        assert!(rx.try_recv().is_ok());
        assert!(!lock(&at_risk.1 .0).contains_key(&thread), "forgotten");
        assert!(lock(&at_risk.1 .0).contains_key(&other), "still held");
    }

    #[test]
    fn refused_frames_stay_first_in_line_and_are_noted_once() {
        let at_risk = AtRisk::default();
        let t = ThreadId::from_string("t");
        at_risk.push(&t, frame(2));
        assert!(!at_risk.holds(&t), "queued, not refused");
        let taken = at_risk.take(&t);
        // Meanwhile another frame came.
        at_risk.push(&t, frame(3));
        at_risk.put_back(&t, taken, "forced");
        assert!(at_risk.holds(&t));
        let queue = at_risk.take(&t);
        let sizes: Vec<(usize, bool)> =
            queue.iter().map(|f| (f.entries.len(), f.at_risk)).collect();
        assert_eq!(sizes, [(2, true), (3, false)], "the refused frame first");
        // Refused again: only the newly refused are counted, into the same note.
        at_risk.put_back(&t, queue, "again");
        assert_eq!(
            at_risk.take_notes(&t),
            [TranscriptNote::AtRisk {
                session: CliSessionId::from_string("s"),
                entries: 5,
                error: "again".into()
            }]
        );
        assert!(at_risk.take_notes(&t).is_empty());
        assert!(at_risk.holds(&t), "notes taken, frames still held");
    }

    #[test]
    fn notes_keep_their_order_and_a_thread_with_nothing_left_is_forgotten() {
        let at_risk = AtRisk::default();
        let t = ThreadId::from_string("t");
        at_risk.put_back(&t, VecDeque::from([frame(1)]), "e1");
        at_risk.take(&t);
        at_risk.note(&t, TranscriptNote::Repaired { entries: 1 });
        at_risk.note(&t, TranscriptNote::Repaired { entries: 2 });
        at_risk.put_back(&t, VecDeque::from([frame(4)]), "e2");
        assert_eq!(
            at_risk.take_notes(&t),
            [
                TranscriptNote::AtRisk {
                    session: CliSessionId::from_string("s"),
                    entries: 1,
                    error: "e1".into()
                },
                TranscriptNote::Repaired { entries: 3 },
                TranscriptNote::AtRisk {
                    session: CliSessionId::from_string("s"),
                    entries: 4,
                    error: "e2".into()
                },
            ]
        );
        at_risk.take(&t);
        assert!(at_risk.take_notes(&t).is_empty());
        assert!(lock(&at_risk.0).is_empty(), "nothing kept for the thread");
    }

    #[test]
    fn the_pool_notes_and_a_mirror_error_are_the_transcript_events() {
        let event = |e: ThreadEvent| (e.kind().as_str(), e.data());
        let at_risk = TranscriptNote::AtRisk {
            session: CliSessionId::from_string("s1"),
            entries: 3,
            error: "refused".into(),
        };
        assert_eq!(
            event(at_risk.into()),
            (
                "transcript_at_risk",
                json!({"sessionId": "s1", "entries": 3, "error": "refused", "held": true})
            )
        );
        // An SDK host's line: at risk, but nothing held to write.
        let mirror = claude_cli::TurnEvent::MirrorError(claude_cli::MirrorError {
            error: "disk full".into(),
            session_id: Some("s2".into()),
            subpath: None,
        });
        assert_eq!(
            event(mirror.into()),
            (
                "transcript_at_risk",
                json!({"sessionId": "s2", "entries": 0, "error": "disk full", "held": false})
            )
        );
        assert_eq!(
            event(TranscriptNote::Repaired { entries: 3 }.into()),
            ("transcript_repaired", json!({"entries": 3}))
        );
        let unrepaired = TranscriptNote::Unrepaired {
            session: CliSessionId::from_string("s1"),
            reason: "gone".into(),
        };
        assert_eq!(
            event(unrepaired.into()),
            (
                "transcript_unrepaired",
                json!({"sessionId": "s1", "reason": "gone"})
            )
        );
    }
}
