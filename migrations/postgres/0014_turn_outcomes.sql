-- How each turn ended: one row per run of a user message, written in the transaction that
-- moved the message from `pending` to its final status, together with the event that announced
-- it (`event_id`). What reads a turn's end (the event stream, webhooks, metrics, re-drive) reads
-- it from here.
CREATE TABLE turn_outcomes (
    id          BIGSERIAL PRIMARY KEY,
    thread_id   TEXT NOT NULL REFERENCES threads(id),
    message_id  TEXT NOT NULL REFERENCES messages(id),
    status      TEXT NOT NULL CHECK (status IN ('done', 'error', 'interrupted', 'refused')),
    cause       TEXT NOT NULL CHECK (cause IN ('done', 'error', 'refused', 'withdrawn',
                                               'interrupted', 'shutdown', 'crash', 'takeover')),
    error       TEXT,
    reply_id    TEXT REFERENCES messages(id),
    event_id    BIGINT NOT NULL REFERENCES events(id),
    created_at  TEXT NOT NULL
);
CREATE INDEX turn_outcomes_message ON turn_outcomes(message_id, id);
CREATE INDEX turn_outcomes_thread ON turn_outcomes(thread_id, id);
