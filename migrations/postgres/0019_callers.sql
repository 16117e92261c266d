-- Who called (`orchestrator::caller`): the subject and tenant a user message was sent by, and
-- the subject that answered a permission. NULL: stored before callers were kept, or written by
-- the daemon itself (a reply, a rule's decision).
ALTER TABLE messages ADD COLUMN caller_subject TEXT;
ALTER TABLE messages ADD COLUMN caller_tenant TEXT;
ALTER TABLE permissions ADD COLUMN answered_by TEXT;
