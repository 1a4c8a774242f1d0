DROP INDEX cost_events_org_session;
CREATE INDEX cost_events_org_session ON cost_events (org_id, session_id, created_at) WHERE session_id IS NOT NULL;
