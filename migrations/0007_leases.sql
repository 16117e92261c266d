-- Leases: which node owns a thread when several nodes share one database (`docs/scale-out.md`).
-- Only written when clustering is on (`cluster.advertise`, PostgreSQL); SQLite has the table so
-- that both schemas stay the same.

CREATE TABLE leases (
    thread_id   TEXT PRIMARY KEY REFERENCES threads(id),
    -- The owning node's id (`node_…`, new at every start).
    owner       TEXT NOT NULL,
    -- Where its peers forward the thread's requests.
    owner_url   TEXT NOT NULL,
    -- +1 at every change of owner; the owner's writes carry it and are refused once it moved on.
    epoch       BIGINT NOT NULL,
    -- RFC 3339 UTC text of fixed width, like every timestamp: text order is time order.
    expires_at  TEXT NOT NULL
);
CREATE INDEX leases_owner ON leases(owner);
