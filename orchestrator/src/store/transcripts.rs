//! The CLI's transcripts, as its processes mirror them (`--session-mirror`): every entry of every
//! frame, in arrival order, an entry with a `uuid` stored once per session. Written while a turn
//! runs, before the turn is stored as done; read when a session must be written back into the
//! CLI's config dir to be `--resume`d (the pool's restore).
//!
//! Does not know where the CLI keeps its files or what the entries mean: an entry is an opaque
//! JSON object, and `file` is the path the CLI gave, relative to its project folder.

use plugin_contract::{CliSessionId, ThreadId};
use serde_json::Value;

use super::{on_db, Db, Store, StoreError, TranscriptEntry, TranscriptQueries};

impl Store {
    /// Appends one mirrored frame of `thread`'s process: `entries`, in order, of `file` in
    /// `session`. An entry whose `uuid` the session already has is skipped. Returns how many
    /// entries were new. One statement: a frame is stored whole or not at all, in one round
    /// trip to the database whatever its size (a turn's end waits for its frames).
    /// [`StoreError::LeaseLost`] on a node that does not hold the thread's lease (`leases.rs`).
    pub async fn append_transcript(
        &self,
        thread: &ThreadId,
        session: &CliSessionId,
        file: &str,
        entries: &[Value],
    ) -> Result<u64, StoreError> {
        let _timer = self.metrics.time("append_transcript");
        let fence = self.fence(thread, None)?;
        on_db!(self, db => {
            db.append_transcript(fence.as_ref(), thread, session, file, entries)
                .await
        })
    }

    /// Every stored entry of `session`, in arrival order: what a restore writes back.
    pub async fn session_transcript(
        &self,
        session: &CliSessionId,
    ) -> Result<Vec<TranscriptEntry>, StoreError> {
        let _timer = self.metrics.time("session_transcript");
        on_db!(self, db => db.session_transcript(session).await)
    }

    /// Every stored entry that `thread`'s processes wrote, in arrival order (all its sessions).
    pub async fn thread_transcript(
        &self,
        thread: &ThreadId,
    ) -> Result<Vec<TranscriptEntry>, StoreError> {
        let _timer = self.metrics.time("thread_transcript");
        on_db!(self, db => db.thread_transcript(thread).await)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ids(entries: &[TranscriptEntry]) -> Vec<Value> {
        entries
            .iter()
            .map(|e| {
                let entry: Value = serde_json::from_str(&e.line).unwrap();
                entry.get("uuid").or(entry.get("type")).cloned().unwrap()
            })
            .collect()
    }

    crate::store::tests::store_tests! {
    async fn entries_keep_arrival_order_and_a_uuid_is_stored_once_per_session(store: sqlite_memory) {
        let thread = ThreadId::from_string("t1");
        let session = CliSessionId::from_string("s1");
        let file = "s1.jsonl";
        let first = [
            json!({"type": "queue-operation", "operation": "enqueue"}),
            json!({"type": "user", "uuid": "u1", "message": {"content": "hi"}}),
            json!({"type": "assistant", "uuid": "a1"}),
        ];
        assert_eq!(
            store
                .append_transcript(&thread, &session, file, &first)
                .await
                .unwrap(),
            3
        );
        // The same entries again (a re-mirrored batch), then new ones: only the new and the
        // uuid-less ones are added.
        let second = [
            json!({"type": "assistant", "uuid": "a1"}),
            json!({"type": "queue-operation", "operation": "enqueue"}),
            json!({"type": "user", "uuid": "u2"}),
            json!({"type": "cost-state"}),
        ];
        assert_eq!(
            store
                .append_transcript(&thread, &session, file, &second)
                .await
                .unwrap(),
            3
        );
        let stored = store.session_transcript(&session).await.unwrap();
        assert_eq!(
            ids(&stored),
            [
                "queue-operation",
                "u1",
                "a1",
                "queue-operation",
                "u2",
                "cost-state"
            ]
        );
        assert!(stored
            .iter()
            .all(|e| e.file == file && e.session_id == session));
        assert_eq!(stored[1].uuid.as_deref(), Some("u1"));
        assert!(!stored[1].line.contains('\n'), "one line");
        assert_eq!(
            serde_json::from_str::<Value>(&stored[1].line).unwrap(),
            first[1]
        );

        // Another session may hold the same uuid (a fork copies its parent's entries).
        let fork = CliSessionId::from_string("s2");
        let other = ThreadId::from_string("t2");
        let copied = [json!({"type": "user", "uuid": "u1"})];
        assert_eq!(
            store
                .append_transcript(&other, &fork, "s2.jsonl", &copied)
                .await
                .unwrap(),
            1
        );
        assert_eq!(store.session_transcript(&fork).await.unwrap().len(), 1);
        assert_eq!(store.thread_transcript(&thread).await.unwrap().len(), 6);
        assert_eq!(store.thread_transcript(&other).await.unwrap().len(), 1);
        assert!(store
            .session_transcript(&CliSessionId::from_string("none"))
            .await
            .unwrap()
            .is_empty());
    }

    async fn a_line_is_stored_as_written_and_only_a_string_uuid_counts(store: sqlite_memory) {
        let thread = ThreadId::from_string("t1");
        let session = CliSessionId::from_string("s1");
        let frame = [
            json!({"type": "user", "uuid": "u1", "message": {"content": "a \"quoted\"\nline, é ✓ 😀 \\ \u{1}"}}),
            // The same uuid twice in one frame: the first is kept.
            json!({"type": "assistant", "uuid": "u1"}),
            json!({"type": "odd", "uuid": 7}),
            json!({"type": "empty", "n": 1.5e300, "list": [null, true, {}]}),
        ];
        assert_eq!(
            store
                .append_transcript(&thread, &session, "s1.jsonl", &frame)
                .await
                .unwrap(),
            3
        );
        let stored = store.session_transcript(&session).await.unwrap();
        let lines: Vec<&str> = stored.iter().map(|e| e.line.as_str()).collect();
        let written = [&frame[0], &frame[2], &frame[3]].map(Value::to_string);
        assert_eq!(lines, written);
        let uuids: Vec<Option<&str>> = stored.iter().map(|e| e.uuid.as_deref()).collect();
        assert_eq!(uuids, [Some("u1"), None, None]);
        assert_eq!(
            store
                .append_transcript(&thread, &session, "s1.jsonl", &[])
                .await
                .unwrap(),
            0
        );
    }
    }
}
