-- Retention (`orchestrator::retention`): a thread's events older than `retention.events_days`
-- are compacted away, a whole turn at a time.
--
-- `events_compacted_through`: the id of the newest event of the thread that was removed (0:
-- none). A replay that starts before it is told so (`log_compacted`) instead of skipping silently.
ALTER TABLE threads ADD COLUMN events_compacted_through BIGINT NOT NULL DEFAULT 0;

-- A turn's outcome outlives the events of its turn: `event_id` is the id its end was announced
-- under, no longer a reference to a row that must stay.
ALTER TABLE turn_outcomes DROP CONSTRAINT turn_outcomes_event_id_fkey;
