-- A thread's own webhook endpoint (`callbackUrl` at creation): every webhook event of the thread
-- goes there too, signed with the thread's own secret (returned once, when the thread was made;
-- kept here because signing needs it).
CREATE TABLE thread_callbacks (
    thread_id   TEXT PRIMARY KEY NOT NULL REFERENCES threads(id),
    url         TEXT NOT NULL,
    secret      TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
