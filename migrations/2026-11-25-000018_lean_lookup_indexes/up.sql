-- One index fewer written per event (issue #13). `cost_events_org_key` served only
-- the event list filtered by API key, which SQLite already answered by walking the
-- organization's (org_id, created_at, id) index newest first to skip a sort (as for
-- the model, provider and source filters; PostgreSQL does the same), and the gate
-- charges of a request (`src/db/refunds.rs`), which belong on the request-id index.
-- Every aggregate by key reads the rollups.
--
-- The request-id index gains `created_at`: the gate charges are read oldest first,
-- and without it SQLite's planner walked the whole organization by
-- (org_id, created_at, id) to skip that sort (EXPLAIN QUERY PLAN). Not `id` too,
-- nor (created_at, id) on the trace and customer indexes: measured at the SQLite
-- level with random request ids, those wider keys cost more per event than the
-- dropped index saves.
DROP INDEX cost_events_org_key;
DROP INDEX cost_events_org_request;
CREATE INDEX cost_events_org_request ON cost_events (org_id, request_id, created_at);
