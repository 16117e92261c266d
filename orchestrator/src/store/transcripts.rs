//! The CLI's transcripts, as its processes mirror them (`--session-mirror`): every entry of every
//! frame, in arrival order, an entry with a `uuid` stored once per session. Written while a turn
//! runs, before the turn is stored as done; read when a session must be written back into the
//! CLI's config dir to be `--resume`d (the pool's restore).
//!
//! Does not know where the CLI keeps its files or what the entries mean: an entry is an opaque
//! JSON object, and `file` is the path the CLI gave, relative to its project folder.

use plugin_contract::{CliSessionId, ThreadId};
use serde_json::Value;

use super::{now_text, Db, Store, StoreError};

/// One stored transcript entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranscriptEntry {
    /// The CLI session the entry's file belongs to.
    pub session_id: CliSessionId,
    /// The file inside the CLI's project folder (`<session>.jsonl`, or a sub-agent's under
    /// `<session>/`).
    pub file: String,
    /// The entry's own id, when it has one; what duplicates are recognised by.
    pub uuid: Option<String>,
    /// The entry as one compact JSON line (no newline), as it is written back.
    pub line: String,
}

/// A `transcript_entries` row as the SQLite queries read it.
struct EntryRecord {
    session_id: String,
    file: String,
    uuid: Option<String>,
    entry: String,
}

impl From<EntryRecord> for TranscriptEntry {
    fn from(row: EntryRecord) -> Self {
        TranscriptEntry {
            session_id: CliSessionId::from_string(row.session_id),
            file: row.file,
            uuid: row.uuid,
            line: row.entry,
        }
    }
}

impl Store {
    /// Appends one mirrored frame of `thread`'s process: `entries`, in order, of `file` in
    /// `session`. An entry whose `uuid` the session already has is skipped. Returns how many
    /// entries were new. One transaction: a frame is stored whole or not at all.
    /// [`StoreError::LeaseLost`] on a node that does not hold the thread's lease (`leases.rs`).
    pub async fn append_transcript(
        &self,
        thread: &ThreadId,
        session: &CliSessionId,
        file: &str,
        entries: &[Value],
    ) -> Result<u64, StoreError> {
        let _timer = self.metrics.time("append_transcript");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::append(pool, thread, session, file, entries, self.fencing(None))
                    .await
            }
        };
        let thread = thread.as_str();
        let session = session.as_str();
        let now = now_text();
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        super::leases::check_fence_sqlite(&mut tx, thread, self.fencing(None)).await?;
        let mut added = 0;
        for entry in entries {
            let uuid = entry.get("uuid").and_then(Value::as_str);
            let line = entry.to_string();
            let done = sqlx::query!(
                "INSERT INTO transcript_entries (thread_id, session_id, file, uuid, entry, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT DO NOTHING",
                thread,
                session,
                file,
                uuid,
                line,
                now,
            )
            .execute(&mut *tx)
            .await?;
            added += done.rows_affected();
        }
        tx.commit().await?;
        Ok(added)
    }

    /// Every stored entry of `session`, in arrival order: what a restore writes back.
    pub async fn session_transcript(
        &self,
        session: &CliSessionId,
    ) -> Result<Vec<TranscriptEntry>, StoreError> {
        let _timer = self.metrics.time("session_transcript");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::entries(pool, "session_id", session.as_str()).await
            }
        };
        let session = session.as_str();
        let rows = sqlx::query_as!(
            EntryRecord,
            "SELECT session_id, file, uuid, entry FROM transcript_entries
             WHERE session_id = ?1 ORDER BY id",
            session,
        )
        .fetch_all(pool)
        .await?;
        Ok(rows.into_iter().map(TranscriptEntry::from).collect())
    }

    /// Every stored entry that `thread`'s processes wrote, in arrival order (all its sessions).
    pub async fn thread_transcript(
        &self,
        thread: &ThreadId,
    ) -> Result<Vec<TranscriptEntry>, StoreError> {
        let _timer = self.metrics.time("thread_transcript");
        let pool = match &self.db {
            Db::Sqlite(pool) => pool,
            Db::Postgres(pool) => {
                return postgres::entries(pool, "thread_id", thread.as_str()).await
            }
        };
        let thread = thread.as_str();
        let rows = sqlx::query_as!(
            EntryRecord,
            "SELECT session_id, file, uuid, entry FROM transcript_entries
             WHERE thread_id = ?1 ORDER BY id",
            thread,
        )
        .fetch_all(pool)
        .await?;
        Ok(rows.into_iter().map(TranscriptEntry::from).collect())
    }
}

mod postgres {
    use plugin_contract::{CliSessionId, ThreadId};
    use serde_json::Value;
    use sqlx::{PgPool, Row};

    use super::super::{now_text, StoreError};
    use super::TranscriptEntry;

    pub(super) async fn append(
        pool: &PgPool,
        thread: &ThreadId,
        session: &CliSessionId,
        file: &str,
        entries: &[Value],
        fencing: super::super::leases::Fencing<'_>,
    ) -> Result<u64, StoreError> {
        let now = now_text();
        let mut tx = pool.begin().await?;
        super::super::leases::check_fence_pg(&mut tx, thread.as_str(), fencing).await?;
        let mut added = 0;
        for entry in entries {
            let done = sqlx::query(
                "INSERT INTO transcript_entries (thread_id, session_id, file, uuid, entry, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT DO NOTHING",
            )
            .bind(thread.as_str())
            .bind(session.as_str())
            .bind(file)
            .bind(entry.get("uuid").and_then(Value::as_str))
            .bind(entry.to_string())
            .bind(&now)
            .execute(&mut *tx)
            .await?;
            added += done.rows_affected();
        }
        tx.commit().await?;
        Ok(added)
    }

    /// The entries whose `column` (`session_id` or `thread_id`, never input) is `value`, in
    /// arrival order.
    pub(super) async fn entries(
        pool: &PgPool,
        column: &'static str,
        value: &str,
    ) -> Result<Vec<TranscriptEntry>, StoreError> {
        let sql = format!(
            "SELECT session_id, file, uuid, entry FROM transcript_entries
             WHERE {column} = $1 ORDER BY id"
        );
        sqlx::query(&sql)
            .bind(value)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| {
                Ok(TranscriptEntry {
                    session_id: CliSessionId::from_string(row.try_get::<String, _>("session_id")?),
                    file: row.try_get("file")?,
                    uuid: row.try_get("uuid")?,
                    line: row.try_get("entry")?,
                })
            })
            .collect()
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
    }
}
