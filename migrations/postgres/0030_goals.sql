-- A thread's goals (`orchestrator::goals`): a task with a rubric, worked on and graded until
-- the grader is satisfied or the iterations run out (the Managed Agents API's outcomes).
-- `state` is `working` or `grading` while it runs (iteration `iteration`, from 0), then its
-- result: `satisfied`, `failed`, `max_iterations_reached` or `interrupted`; `finished_at` is set
-- with the result. A thread has at most one unfinished goal. They go with their thread.
CREATE TABLE goals (
    id              TEXT PRIMARY KEY NOT NULL,
    thread_id       TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    description     TEXT NOT NULL,
    rubric          TEXT NOT NULL,
    max_iterations  BIGINT NOT NULL,
    iteration       BIGINT NOT NULL,
    state           TEXT NOT NULL,
    explanation     TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    finished_at     TEXT
);
CREATE INDEX goals_thread ON goals(thread_id, created_at);
CREATE UNIQUE INDEX goals_unfinished ON goals(thread_id) WHERE finished_at IS NULL;
