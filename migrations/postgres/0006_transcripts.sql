-- Transcripts: the CLI's own session files as `--session-mirror` copies them to stdout (the same
-- change as migrations/0006_transcripts.sql; see there).

CREATE TABLE transcript_entries (
    -- Arrival order across the daemon: the order the entries are written back in.
    id          BIGSERIAL PRIMARY KEY,
    -- No foreign key: a spare's process runs before the thread it is reserved for exists.
    thread_id   TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    file        TEXT NOT NULL,
    uuid        TEXT,
    entry       TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX transcript_entries_session ON transcript_entries(session_id, id);
CREATE INDEX transcript_entries_thread ON transcript_entries(thread_id, id);
CREATE UNIQUE INDEX transcript_entries_uuid ON transcript_entries(session_id, uuid)
    WHERE uuid IS NOT NULL;
