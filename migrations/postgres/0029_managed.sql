-- The Managed Agents door (`orchestrator::managed`). An agent or an environment is one row of
-- `managed_objects`: `body` is its configuration as JSON (the door owns its shape), `owner` the
-- tenant it belongs to ('' for the operator's), `version` its latest version (an
-- environment's stays 1). Every version of an agent, the first included, is a row of
-- `managed_agent_versions`, so a session runs on the version it pinned; they go with their
-- agent.
CREATE TABLE managed_objects (
    id           TEXT PRIMARY KEY NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('agent', 'environment')),
    owner        TEXT NOT NULL,
    version      BIGINT NOT NULL,
    body         TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    archived_at  TEXT
);
-- A listing: one kind, one owner (or all), newest first.
CREATE INDEX managed_objects_list ON managed_objects(kind, owner, created_at, id);

CREATE TABLE managed_agent_versions (
    agent_id    TEXT NOT NULL REFERENCES managed_objects(id) ON DELETE CASCADE,
    version     BIGINT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (agent_id, version)
);

-- A session is a thread: what the thread does not hold (the agent version it runs, its
-- environment, the session's own fields as JSON). Its tenant, title and archiving are the
-- thread's; it goes with its thread.
CREATE TABLE managed_sessions (
    thread_id       TEXT PRIMARY KEY NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    agent_id        TEXT NOT NULL,
    agent_version   BIGINT NOT NULL,
    environment_id  TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE INDEX managed_sessions_created ON managed_sessions(created_at, thread_id);
