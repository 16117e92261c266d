-- Which thread delegated to which: a delegated child's turns count against its parent's budgets
-- (and their parents'), so a thread's budget covers the tree of delegations under it. A fork,
-- which also has a parent_id, is not here: its spending is its own.
CREATE TABLE delegations (
    child   TEXT PRIMARY KEY NOT NULL REFERENCES threads(id),
    parent  TEXT NOT NULL REFERENCES threads(id)
);
CREATE INDEX delegations_parent ON delegations(parent);
