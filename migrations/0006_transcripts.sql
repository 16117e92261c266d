-- Transcripts: the CLI's own session files as `--session-mirror` copies them to stdout, so a
-- thread's session can be written back and `--resume`d where `data_dir/claude` no longer has it
-- (another node, a wiped folder).

CREATE TABLE transcript_entries (
    -- Arrival order across the daemon: the order the entries are written back in.
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The thread whose process wrote the entry. No foreign key: a spare's process runs before
    -- the thread it is reserved for exists.
    thread_id   TEXT NOT NULL,
    -- The CLI session the file belongs to (a restore looks entries up by it).
    session_id  TEXT NOT NULL,
    -- The file inside the CLI's project folder: `<session>.jsonl`, or a sub-agent's under
    -- `<session>/`.
    file        TEXT NOT NULL,
    -- The entry's own `uuid`; several kinds have none (`queue-operation`, `cost-state`, …).
    uuid        TEXT,
    -- The entry as one compact JSON line, exactly as it is written back.
    entry       TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX transcript_entries_session ON transcript_entries(session_id, id);
CREATE INDEX transcript_entries_thread ON transcript_entries(thread_id, id);
-- An entry the CLI mirrors twice is stored once; entries without a uuid are kept as they come.
CREATE UNIQUE INDEX transcript_entries_uuid ON transcript_entries(session_id, uuid)
    WHERE uuid IS NOT NULL;
