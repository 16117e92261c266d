-- The thread's agent profile (`[profiles.NAME]`, or the built-in `standard`/`lean`); NULL: the
-- daemon's default profile (`claude.profile`). Set once, at creation.
ALTER TABLE threads ADD COLUMN profile TEXT;
