-- Threads, their messages, turn events and tool calls.
-- Timestamps are RFC 3339 UTC strings written by the daemon.

CREATE TABLE threads (
    id              TEXT PRIMARY KEY NOT NULL,
    title           TEXT,
    model           TEXT,
    -- The CLI's latest session id for this thread; used for --resume, never as a key.
    cli_session_id  TEXT,
    parent_id       TEXT REFERENCES threads(id),
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE INDEX threads_parent ON threads(parent_id);

CREATE TABLE messages (
    id                  TEXT PRIMARY KEY NOT NULL,
    thread_id           TEXT NOT NULL REFERENCES threads(id),
    -- Arrival order within the daemon; orders a thread's messages.
    seq                 INTEGER NOT NULL,
    role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content             TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('pending', 'done', 'error', 'interrupted')),
    error               TEXT,
    client_message_id   TEXT,
    -- For an assistant message: the user message it answers.
    reply_to            TEXT REFERENCES messages(id),
    model               TEXT,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL
);
CREATE INDEX messages_thread ON messages(thread_id, seq);
CREATE UNIQUE INDEX messages_client_id ON messages(thread_id, client_message_id)
    WHERE client_message_id IS NOT NULL;
CREATE UNIQUE INDEX messages_reply_to ON messages(reply_to) WHERE reply_to IS NOT NULL;

CREATE TABLE events (
    -- Monotonic across the daemon; the SSE event id.
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id   TEXT NOT NULL REFERENCES threads(id),
    message_id  TEXT,
    kind        TEXT NOT NULL,
    data        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX events_thread ON events(thread_id, id);

CREATE TABLE tool_calls (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id    TEXT REFERENCES threads(id),
    tool         TEXT NOT NULL,
    tool_use_id  TEXT,
    input        TEXT NOT NULL,
    result       TEXT,
    is_error     INTEGER NOT NULL,
    duration_ms  INTEGER NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE INDEX tool_calls_thread ON tool_calls(thread_id, id);
