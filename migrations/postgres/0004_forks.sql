-- Forks: a thread made by POST /api/threads/{id}/fork keeps the CLI session it forked until its
-- first turn gives it one of its own (`--resume=<forked_session> --fork-session`).

ALTER TABLE threads ADD COLUMN forked_session TEXT;
