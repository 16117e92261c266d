-- Threads by the hundred thousand (`orchestrator::pipeline::threads`, `http::threads`).
--
-- `last_activity_at`: the newest change to the thread row or any of its messages, kept by the
-- triggers below on every write path; the thread list sorts and pages by it (with `id`), on an
-- index, instead of computing it per thread.
ALTER TABLE threads ADD COLUMN last_activity_at TEXT;
UPDATE threads SET last_activity_at = COALESCE(
    (SELECT MAX(m.updated_at) FROM messages m WHERE m.thread_id = threads.id), updated_at);
CREATE INDEX threads_activity ON threads(last_activity_at, id);
CREATE INDEX threads_tenant_activity ON threads(tenant, last_activity_at, id);

CREATE FUNCTION harness_thread_activity() RETURNS trigger AS $$
BEGIN
    IF TG_TABLE_NAME = 'threads' THEN
        UPDATE threads SET last_activity_at = NEW.updated_at
        WHERE id = NEW.id AND (last_activity_at IS NULL OR last_activity_at < NEW.updated_at);
    ELSE
        UPDATE threads SET last_activity_at = NEW.updated_at
        WHERE id = NEW.thread_id
          AND (last_activity_at IS NULL OR last_activity_at < NEW.updated_at);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER threads_activity_new AFTER INSERT ON threads
    FOR EACH ROW EXECUTE FUNCTION harness_thread_activity();
CREATE TRIGGER threads_activity_changed AFTER UPDATE OF updated_at ON threads
    FOR EACH ROW EXECUTE FUNCTION harness_thread_activity();
CREATE TRIGGER messages_activity AFTER INSERT OR UPDATE OF updated_at ON messages
    FOR EACH ROW EXECUTE FUNCTION harness_thread_activity();

-- A thread's tags (`PATCH /api/threads/{id}` `tags`), a filter of the thread list.
CREATE TABLE thread_tags (
    thread_id  TEXT NOT NULL REFERENCES threads(id),
    tag        TEXT NOT NULL,
    PRIMARY KEY (thread_id, tag)
);
CREATE INDEX thread_tags_tag ON thread_tags(tag, thread_id);
