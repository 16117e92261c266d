-- Search over thread titles and message text (`GET /api/threads?q=`, `threads__list` `q`):
-- PostgreSQL's full-text search (the `simple` configuration: no stemming, any language), on
-- GIN indexes of the same expressions the search uses.
CREATE INDEX messages_search ON messages USING GIN (to_tsvector('simple', content));
CREATE INDEX threads_search ON threads USING GIN (to_tsvector('simple', COALESCE(title, '')));
