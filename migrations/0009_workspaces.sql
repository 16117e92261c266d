-- Where a thread's processes work when it is not their own folder: a folder, or a git worktree
-- made for the thread (JSON, `harness_db::Workspace`). Set once, at creation.
ALTER TABLE threads ADD COLUMN workspace TEXT;
