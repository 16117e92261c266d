-- Usage and budgets: what each turn cost, a budget per thread, and the day's totals the daily
-- budget checks. (SQLite rebuilds `messages` for the new status; PostgreSQL alters the CHECK.)

-- 'refused': a budget stopped the turn before the CLI saw the message.
ALTER TABLE messages DROP CONSTRAINT messages_status;
ALTER TABLE messages ADD CONSTRAINT messages_status
    CHECK (status IN ('pending', 'done', 'error', 'interrupted', 'refused'));

-- What the turn cost, from the CLI's `result` line: on the assistant message of a turn that
-- replied, on the user message of one that failed after reaching the API; NULL elsewhere.
ALTER TABLE messages
    ADD COLUMN input_tokens        BIGINT,
    ADD COLUMN output_tokens       BIGINT,
    ADD COLUMN cache_read_tokens   BIGINT,
    ADD COLUMN cache_write_tokens  BIGINT,
    ADD COLUMN cost_usd            DOUBLE PRECISION,
    -- Time the turn spent in Messages API requests.
    ADD COLUMN api_ms              BIGINT;

-- Most USD the thread's turns may cost together; NULL: no limit of its own.
ALTER TABLE threads ADD COLUMN max_budget_usd DOUBLE PRECISION;

-- Totals per UTC day, written with each turn's usage: what `budget.daily_usd` is checked against.
CREATE TABLE usage_days (
    day                 TEXT PRIMARY KEY NOT NULL,  -- YYYY-MM-DD, UTC
    turns               BIGINT NOT NULL,
    input_tokens        BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    cache_read_tokens   BIGINT NOT NULL,
    cache_write_tokens  BIGINT NOT NULL,
    cost_usd            DOUBLE PRECISION NOT NULL
);
