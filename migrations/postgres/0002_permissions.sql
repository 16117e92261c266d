-- Tool permissions the CLI asked for (`can_use_tool`), each with its decision and who made it.
-- Stored beside the tool call by `tool_use_id`. As ../0002_permissions.sql.

CREATE TABLE permissions (
    -- The CLI's control request id: the id a person answers over the API.
    id           TEXT PRIMARY KEY NOT NULL,
    thread_id    TEXT NOT NULL REFERENCES threads(id),
    message_id   TEXT REFERENCES messages(id),
    tool_use_id  TEXT,
    tool_name    TEXT NOT NULL,
    input        TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'allowed', 'denied')),
    -- Who decided: 'rule', 'person', 'timeout', 'policy' (the mode), 'interrupt'.
    decided_by   TEXT CHECK (decided_by IN ('rule', 'person', 'timeout', 'policy', 'interrupt')),
    -- The rule that decided, or the person's message.
    reason       TEXT,
    created_at   TEXT NOT NULL,
    decided_at   TEXT
);
CREATE INDEX permissions_thread ON permissions(thread_id, created_at);
CREATE INDEX permissions_pending ON permissions(status) WHERE status = 'pending';
