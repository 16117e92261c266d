-- The gateway is the meter of record (`orchestrator::gateway`, `orchestrator::budget`).
-- `key_id`: the API key a model request was charged to (the key of its turn, or of the thread's
-- last turn for a request between turns); NULL for the operator's. `alone`: its cost is in no
-- turn's stored cost (a request between turns, or one that ended after its turn was stored), so
-- it counts on its own in what a thread, a key and a day spent.
ALTER TABLE model_requests ADD COLUMN key_id TEXT;
ALTER TABLE model_requests ADD COLUMN alone BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX model_requests_alone ON model_requests(alone, thread_id);

-- A schedule acts as the API key that made it (its budget, turns at once, rate and revocation);
-- NULL: made by the operator (or before schedules kept their maker), and acts as the operator.
ALTER TABLE schedules ADD COLUMN created_by TEXT;
