-- The model gateway's record of each model request (`orchestrator::gateway`): the thread and
-- turn it was for, what it cost, how long it took and how it ended. Deleting a thread deletes
-- its rows.
CREATE TABLE model_requests (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id          TEXT NOT NULL REFERENCES threads(id),
    message_id         TEXT REFERENCES messages(id),
    model              TEXT,
    status             INTEGER NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_usd           REAL NOT NULL,
    first_byte_ms      INTEGER NOT NULL,
    ms                 INTEGER NOT NULL,
    created_at         TEXT NOT NULL
);
CREATE INDEX model_requests_message ON model_requests(message_id, id);
CREATE INDEX model_requests_thread ON model_requests(thread_id, id);
