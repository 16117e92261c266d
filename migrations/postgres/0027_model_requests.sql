-- The model gateway's record of each model request (`orchestrator::gateway`): the thread and
-- turn it was for, what it cost, how long it took and how it ended. Deleting a thread deletes
-- its rows.
CREATE TABLE model_requests (
    id                 BIGSERIAL PRIMARY KEY,
    thread_id          TEXT NOT NULL REFERENCES threads(id),
    message_id         TEXT REFERENCES messages(id),
    model              TEXT,
    status             BIGINT NOT NULL,
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    cost_usd           DOUBLE PRECISION NOT NULL,
    first_byte_ms      BIGINT NOT NULL,
    ms                 BIGINT NOT NULL,
    created_at         TEXT NOT NULL
);
CREATE INDEX model_requests_message ON model_requests(message_id, id);
CREATE INDEX model_requests_thread ON model_requests(thread_id, id);
