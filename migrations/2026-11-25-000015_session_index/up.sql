-- The session lookups (the event list filtered by session, newest first, and the
-- session detail, oldest first) order by (created_at, id). Without `id` in the
-- index, SQLite's planner preferred walking the organization's whole
-- (org_id, created_at, id) index to skip a sort: hundreds of ms at 1M events.
DROP INDEX cost_events_org_session;
CREATE INDEX cost_events_org_session ON cost_events (org_id, session_id, created_at, id) WHERE session_id IS NOT NULL;
