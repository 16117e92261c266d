-- When the thread was archived: it takes no more messages, and its worktree went as
-- `workspaces.on_archive` says. NULL: a live thread. Nothing is deleted.
ALTER TABLE threads ADD COLUMN archived_at TEXT;
