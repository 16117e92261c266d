-- Leases: which node owns a thread (the same change as migrations/0007_leases.sql; see there).

CREATE TABLE leases (
    thread_id   TEXT PRIMARY KEY REFERENCES threads(id),
    owner       TEXT NOT NULL,
    owner_url   TEXT NOT NULL,
    epoch       BIGINT NOT NULL,
    expires_at  TEXT NOT NULL
);
CREATE INDEX leases_owner ON leases(owner);
