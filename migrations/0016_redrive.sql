-- What happens to a turn cut by the daemon's own life (a crash, a shutdown, a takeover):
-- `mark` leaves it `interrupted` (the default); `retry` runs it again by itself, at most
-- `turns.redrive_attempts` times (counted from its `turn_outcomes`).
ALTER TABLE threads ADD COLUMN on_interrupt TEXT NOT NULL DEFAULT 'mark'
    CHECK (on_interrupt IN ('mark', 'retry'));
-- The sweep for turns to re-drive reads only the messages that are not settled.
CREATE INDEX messages_unsettled ON messages(thread_id) WHERE status IN ('pending', 'interrupted');
