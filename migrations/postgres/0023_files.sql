-- Images and documents of user messages (`orchestrator::files`): uploaded with `POST /api/files`,
-- or sent as base64 blocks of a message and stored here on arrival. One row per owner (the
-- tenant; '' for the operator) and content: `id` is derived from both, so the same bytes from
-- the same owner are stored once.
CREATE TABLE files (
    id          TEXT PRIMARY KEY NOT NULL,
    owner       TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    media_type  TEXT NOT NULL,
    bytes       BIGINT NOT NULL,
    data        BYTEA NOT NULL,
    created_at  TEXT NOT NULL
);

-- A user message sent as content blocks: the blocks as JSON, images and documents as file
-- references (never their bytes); `content` stays the message's text. NULL: plain text.
ALTER TABLE messages ADD COLUMN blocks TEXT;
