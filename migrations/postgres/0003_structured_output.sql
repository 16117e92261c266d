-- Structured output: a thread's JSON Schema (`--json-schema`), and each reply's validated value.

ALTER TABLE threads ADD COLUMN output_schema TEXT;
ALTER TABLE messages ADD COLUMN structured_output TEXT;
