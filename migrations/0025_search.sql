-- Search over thread titles and message text (`GET /api/threads?q=`, `threads__list` `q`):
-- FTS5, one row per message (its rowid) and per thread title (minus the thread's rowid), kept
-- by the triggers below.
CREATE VIRTUAL TABLE thread_search USING fts5(thread_id UNINDEXED, body);
INSERT INTO thread_search (rowid, thread_id, body) SELECT rowid, thread_id, content FROM messages;
INSERT INTO thread_search (rowid, thread_id, body)
    SELECT -rowid, id, title FROM threads WHERE title IS NOT NULL;

CREATE TRIGGER messages_search_new AFTER INSERT ON messages BEGIN
    INSERT INTO thread_search (rowid, thread_id, body) VALUES (NEW.rowid, NEW.thread_id, NEW.content);
END;
CREATE TRIGGER messages_search_changed AFTER UPDATE OF content ON messages BEGIN
    DELETE FROM thread_search WHERE rowid = OLD.rowid;
    INSERT INTO thread_search (rowid, thread_id, body) VALUES (NEW.rowid, NEW.thread_id, NEW.content);
END;
CREATE TRIGGER messages_search_gone AFTER DELETE ON messages BEGIN
    DELETE FROM thread_search WHERE rowid = OLD.rowid;
END;
CREATE TRIGGER threads_search_new AFTER INSERT ON threads WHEN NEW.title IS NOT NULL BEGIN
    INSERT INTO thread_search (rowid, thread_id, body) VALUES (-NEW.rowid, NEW.id, NEW.title);
END;
CREATE TRIGGER threads_search_renamed AFTER UPDATE OF title ON threads BEGIN
    DELETE FROM thread_search WHERE rowid = -OLD.rowid;
    INSERT INTO thread_search (rowid, thread_id, body)
        SELECT -NEW.rowid, NEW.id, NEW.title WHERE NEW.title IS NOT NULL;
END;
CREATE TRIGGER threads_search_gone AFTER DELETE ON threads BEGIN
    DELETE FROM thread_search WHERE rowid = -OLD.rowid;
END;
