-- The allow rules a person added to one thread by allowing a tool request "always"
-- (`approvals`): each in the CLI's rule syntax (`Bash(npm test)`, `Edit(//w/src/main.rs)`),
-- the narrowest that names the request answered (`request_id`), consulted after the profile's
-- deny and allow rules. `added_by` is the answering caller's subject. They go with their thread.
CREATE TABLE thread_rules (
    id          TEXT PRIMARY KEY NOT NULL,
    thread_id   TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    rule        TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    added_by    TEXT,
    created_at  TEXT NOT NULL
);
CREATE UNIQUE INDEX thread_rules_rule ON thread_rules(thread_id, rule);
