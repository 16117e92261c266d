-- Usage and budgets: what each turn cost, a budget per thread, and the day's totals the daily
-- budget checks.
--
-- A message refused by a budget is kept with status 'refused'. SQLite cannot change a CHECK
-- constraint in place, so `messages` is rebuilt inside the migration's transaction, with foreign
-- keys on (they cannot be turned off inside a transaction): the rows of `permissions`, the one
-- table that references `messages`, wait in a temporary table while the old `messages` is
-- dropped; the new table names itself in its `reply_to` reference, which the rename turns into
-- `messages`; checks wait for the commit, so rows may be copied in any order.
PRAGMA defer_foreign_keys = ON;

CREATE TEMP TABLE permissions_kept AS SELECT * FROM permissions;
DELETE FROM permissions;

CREATE TABLE messages_new (
    id                  TEXT PRIMARY KEY NOT NULL,
    thread_id           TEXT NOT NULL REFERENCES threads(id),
    -- Arrival order within the daemon; orders a thread's messages.
    seq                 INTEGER NOT NULL,
    role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content             TEXT NOT NULL,
    -- 'refused': a budget stopped the turn before the CLI saw the message.
    status              TEXT NOT NULL
                        CHECK (status IN ('pending', 'done', 'error', 'interrupted', 'refused')),
    error               TEXT,
    client_message_id   TEXT,
    -- For an assistant message: the user message it answers.
    reply_to            TEXT REFERENCES messages_new(id),
    model               TEXT,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    structured_output   TEXT,
    -- What the turn cost, from the CLI's `result` line: on the assistant message of a turn that
    -- replied, on the user message of one that failed after reaching the API; NULL elsewhere.
    input_tokens        INTEGER,
    output_tokens       INTEGER,
    cache_read_tokens   INTEGER,
    cache_write_tokens  INTEGER,
    cost_usd            REAL,
    -- Time the turn spent in Messages API requests.
    api_ms              INTEGER
);
INSERT INTO messages_new (rowid, id, thread_id, seq, role, content, status, error,
                          client_message_id, reply_to, model, created_at, updated_at,
                          structured_output)
    SELECT rowid, id, thread_id, seq, role, content, status, error, client_message_id, reply_to,
           model, created_at, updated_at, structured_output
    FROM messages;
DROP TABLE messages;
ALTER TABLE messages_new RENAME TO messages;
CREATE INDEX messages_thread ON messages(thread_id, seq);
CREATE UNIQUE INDEX messages_client_id ON messages(thread_id, client_message_id)
    WHERE client_message_id IS NOT NULL;
CREATE UNIQUE INDEX messages_reply_to ON messages(reply_to) WHERE reply_to IS NOT NULL;

INSERT INTO permissions SELECT * FROM permissions_kept;
DROP TABLE permissions_kept;

-- Most USD the thread's turns may cost together; NULL: no limit of its own.
ALTER TABLE threads ADD COLUMN max_budget_usd REAL;

-- Totals per UTC day, written with each turn's usage: what `budget.daily_usd` is checked against.
CREATE TABLE usage_days (
    day                 TEXT PRIMARY KEY NOT NULL,  -- YYYY-MM-DD, UTC
    turns               INTEGER NOT NULL,
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cache_read_tokens   INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    cost_usd            REAL NOT NULL
);
