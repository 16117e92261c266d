-- API keys and tenants (`orchestrator::keys`). A key is stored as the SHA-256 of the whole key
-- (the key itself is shown once, when it is made); `scopes` is a comma-separated list; the
-- limits are NULL where the key has none. A revoked key keeps its row (`revoked_at`), so the
-- audit log and the messages it sent still name it.
CREATE TABLE api_keys (
    id                    TEXT PRIMARY KEY NOT NULL,
    hash                  TEXT NOT NULL UNIQUE,
    tenant                TEXT NOT NULL,
    scopes                TEXT NOT NULL,
    daily_usd             DOUBLE PRECISION,
    max_concurrent_turns  BIGINT,
    rpm                   BIGINT,
    created_at            TEXT NOT NULL,
    revoked_at            TEXT
);

-- The tenant a thread (and a schedule) belongs to; NULL: the operator's.
ALTER TABLE threads ADD COLUMN tenant TEXT;
CREATE INDEX threads_tenant ON threads(tenant);
ALTER TABLE schedules ADD COLUMN tenant TEXT;

-- What each caller's turns cost per UTC day, written with each turn's usage: what a key's
-- daily budget is checked against.
CREATE TABLE caller_usage_days (
    subject   TEXT NOT NULL,
    day       TEXT NOT NULL,
    turns     BIGINT NOT NULL,
    cost_usd  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (subject, day)
);
