-- PostgreSQL: threads, their messages, turn events and tool calls. The same tables as
-- ../0001_init.sql (SQLite); each migration here matches the SQLite one of the same number.
-- Timestamps are RFC 3339 UTC text of fixed width written by the daemon, as on SQLite, so text
-- order is time order and the store reads them the same way. JSON columns are TEXT, as on SQLite.

CREATE TABLE threads (
    id              TEXT PRIMARY KEY NOT NULL,
    -- Insertion order, which SQLite keeps in its implicit rowid: breaks ties between equal times.
    rowid           BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
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
    rowid               BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    thread_id           TEXT NOT NULL REFERENCES threads(id),
    -- Arrival order within the daemon; orders a thread's messages.
    seq                 BIGINT NOT NULL,
    role                TEXT NOT NULL CONSTRAINT messages_role CHECK (role IN ('user', 'assistant')),
    content             TEXT NOT NULL,
    status              TEXT NOT NULL
                        CONSTRAINT messages_status
                        CHECK (status IN ('pending', 'done', 'error', 'interrupted')),
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
    -- Monotonic across the daemon; the SSE event id. (One writer task appends events, so ids
    -- are also in commit order.)
    id          BIGSERIAL PRIMARY KEY,
    thread_id   TEXT NOT NULL REFERENCES threads(id),
    message_id  TEXT,
    kind        TEXT NOT NULL,
    data        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX events_thread ON events(thread_id, id);

CREATE TABLE tool_calls (
    id           BIGSERIAL PRIMARY KEY,
    thread_id    TEXT REFERENCES threads(id),
    tool         TEXT NOT NULL,
    tool_use_id  TEXT,
    input        TEXT NOT NULL,
    result       TEXT,
    is_error     BOOLEAN NOT NULL,
    duration_ms  BIGINT NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE INDEX tool_calls_thread ON tool_calls(thread_id, id);
