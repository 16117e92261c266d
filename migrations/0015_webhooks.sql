-- Webhooks. `webhook_events` is the outbox: a row is written in the transaction that wrote what
-- it announces (a turn's outcome), so none is lost and none is sent for what did not happen.
-- A node fans each one out once (`fanned_out`) into `webhook_deliveries`, one per endpoint;
-- a delivery's id is the `webhook-id` its receiver sees on every attempt. Every attempt is in
-- `webhook_attempts`. A delivery's `created_at` is its event's: when what it announces happened.
-- `claimed_by`/`claimed_until`: the node sending it now, so that on a
-- cluster each delivery is sent by one node at a time.
CREATE TABLE webhook_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    type        TEXT NOT NULL,
    thread_id   TEXT NOT NULL REFERENCES threads(id),
    data        TEXT NOT NULL,
    fanned_out  INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL
);
CREATE INDEX webhook_events_waiting ON webhook_events(fanned_out, id);

CREATE TABLE webhook_deliveries (
    id               TEXT PRIMARY KEY NOT NULL,
    event_id         INTEGER NOT NULL REFERENCES webhook_events(id),
    endpoint         TEXT NOT NULL,
    url              TEXT NOT NULL,
    type             TEXT NOT NULL,
    thread_id        TEXT NOT NULL REFERENCES threads(id),
    data             TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT NOT NULL,
    claimed_by       TEXT,
    claimed_until    TEXT,
    last_error       TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    UNIQUE (event_id, endpoint)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(status, next_attempt_at);
CREATE INDEX webhook_deliveries_created ON webhook_deliveries(created_at, id);

CREATE TABLE webhook_attempts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id  TEXT NOT NULL REFERENCES webhook_deliveries(id),
    node         TEXT NOT NULL,
    status_code  INTEGER,
    error        TEXT,
    ms           INTEGER NOT NULL,
    at           TEXT NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts(delivery_id, id);
