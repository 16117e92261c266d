-- Retention (`orchestrator::retention`): a thread's events older than `retention.events_days`
-- are compacted away, a whole turn at a time.
--
-- `events_compacted_through`: the id of the newest event of the thread that was removed (0:
-- none). A replay that starts before it is told so (`log_compacted`) instead of skipping silently.
ALTER TABLE threads ADD COLUMN events_compacted_through INTEGER NOT NULL DEFAULT 0;

-- A turn's outcome outlives the events of its turn: `event_id` is the id its end was announced
-- under, no longer a reference to a row that must stay. SQLite drops a foreign key by rebuilding
-- the table.
CREATE TABLE turn_outcomes_kept (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id   TEXT NOT NULL REFERENCES threads(id),
    message_id  TEXT NOT NULL REFERENCES messages(id),
    status      TEXT NOT NULL CHECK (status IN ('done', 'error', 'interrupted', 'refused')),
    cause       TEXT NOT NULL CHECK (cause IN ('done', 'error', 'refused', 'withdrawn',
                                               'interrupted', 'shutdown', 'crash', 'takeover')),
    error       TEXT,
    reply_id    TEXT REFERENCES messages(id),
    event_id    INTEGER NOT NULL,
    created_at  TEXT NOT NULL
);
INSERT INTO turn_outcomes_kept (id, thread_id, message_id, status, cause, error, reply_id,
                                event_id, created_at)
    SELECT id, thread_id, message_id, status, cause, error, reply_id, event_id, created_at
    FROM turn_outcomes;
DROP TABLE turn_outcomes;
ALTER TABLE turn_outcomes_kept RENAME TO turn_outcomes;
CREATE INDEX turn_outcomes_message ON turn_outcomes(message_id, id);
CREATE INDEX turn_outcomes_thread ON turn_outcomes(thread_id, id);
