-- The audit log: every change a caller asked for over HTTP (a `POST`, `PATCH` or `DELETE`),
-- written by the node the client reached: who (subject, tenant), what (the method and route),
-- which thread, the answer's status, from where, when. Kept `audit.keep_days`: the only rows
-- the daemon deletes.
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         TEXT NOT NULL,
    subject    TEXT NOT NULL,
    tenant     TEXT,
    action     TEXT NOT NULL,
    path       TEXT NOT NULL,
    thread_id  TEXT,
    status     INTEGER NOT NULL,
    remote     TEXT
);
CREATE INDEX audit_log_at ON audit_log(at);
