-- Schedules: a prompt sent on a cron, to one thread or to a fresh thread per run (`template`).
-- `next_run_at` is the next tick due (UTC, fixed-width RFC 3339 text: text order is time order);
-- a node runs a tick only by moving it forward from the value it read, in the transaction that
-- writes the run, so each tick runs on one node. `schedule_runs` is the history: every run with
-- its trigger (`cron`, `manual`, `catch_up`), and the ticks skipped (`status` = 'skipped').
CREATE TABLE schedules (
    id           TEXT PRIMARY KEY NOT NULL,
    name         TEXT,
    cron         TEXT NOT NULL,
    timezone     TEXT NOT NULL,
    thread_id    TEXT REFERENCES threads(id),
    template     TEXT,
    prompt       TEXT NOT NULL,
    overlap      TEXT NOT NULL CHECK (overlap IN ('skip', 'queue')),
    catch_up     TEXT NOT NULL CHECK (catch_up IN ('skip', 'once')),
    enabled      INTEGER NOT NULL,
    next_run_at  TEXT NOT NULL,
    deleted      INTEGER NOT NULL DEFAULT 0,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    CHECK ((thread_id IS NULL) <> (template IS NULL))
);
CREATE INDEX schedules_due ON schedules(enabled, deleted, next_run_at);

CREATE TABLE schedule_runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id  TEXT NOT NULL REFERENCES schedules(id),
    trigger      TEXT NOT NULL CHECK (trigger IN ('cron', 'manual', 'catch_up')),
    due_at       TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('started', 'skipped', 'failed')),
    reason       TEXT,
    thread_id    TEXT REFERENCES threads(id),
    message_id   TEXT REFERENCES messages(id),
    node         TEXT NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE INDEX schedule_runs_schedule ON schedule_runs(schedule_id, id);
-- A turn's end looks up the run its message was sent for.
CREATE INDEX schedule_runs_message ON schedule_runs(message_id);
-- A tick of the cron is run (or skipped) once, whichever node claims it.
CREATE UNIQUE INDEX schedule_runs_tick ON schedule_runs(schedule_id, due_at)
    WHERE trigger <> 'manual';
