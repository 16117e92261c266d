-- Who started a turn: `user` (a message sent over the API) or `cli` (the CLI started the turn by
-- itself: a cron, a wake-up, a background task's notice; only with `claude.scheduling_tools`).
-- Both messages of a turn, the one that starts it and its reply, carry it.

ALTER TABLE messages ADD COLUMN origin TEXT NOT NULL DEFAULT 'user' CHECK (origin IN ('user', 'cli'));
