-- The built-in authorization server (`orchestrator::oauth::authorize`, `[oauth] builtin`):
-- the clients that registered (RFC 7591), the authorization codes (used once), and the access
-- and refresh tokens. Codes and tokens are stored as the SHA-256 of what was handed out; a
-- refresh token is spent when used, and a token's `family` (one per authorization) is revoked
-- whole when a spent one comes back. A `client_id` is a registered client's, or the URL of a
-- client's own metadata document (no row in `oauth_clients`).
CREATE TABLE oauth_clients (
    id             TEXT PRIMARY KEY NOT NULL,
    name           TEXT,
    redirect_uris  TEXT NOT NULL,
    created_at     TEXT NOT NULL
);

CREATE TABLE oauth_codes (
    hash          TEXT PRIMARY KEY NOT NULL,
    client_id     TEXT NOT NULL,
    redirect_uri  TEXT NOT NULL,
    challenge     TEXT NOT NULL,
    tenant        TEXT NOT NULL,
    scopes        TEXT NOT NULL,
    resource      TEXT,
    expires_at    TEXT NOT NULL,
    used          INTEGER NOT NULL
);

CREATE TABLE oauth_tokens (
    hash        TEXT PRIMARY KEY NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
    family      TEXT NOT NULL,
    client_id   TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    scopes      TEXT NOT NULL,
    resource    TEXT,
    expires_at  TEXT NOT NULL,
    spent_at    TEXT,
    revoked_at  TEXT
);
CREATE INDEX oauth_tokens_family ON oauth_tokens(family);
