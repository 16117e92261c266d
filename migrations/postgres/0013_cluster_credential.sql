-- The credential the nodes of a cluster share: a hash of the bearer token (or of "no token"),
-- written by the first node to start on the database. A node whose token hashes otherwise
-- refuses to start, so it never holds a lease nor is sent a request, nor its peers' token.
CREATE TABLE cluster_credential (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    hash        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
