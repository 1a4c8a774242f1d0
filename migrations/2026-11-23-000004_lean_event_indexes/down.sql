DROP INDEX cost_events_org_session;
DROP INDEX cost_events_org_trace;
DROP INDEX cost_events_org_customer;
CREATE INDEX cost_events_org_session ON cost_events (org_id, session_id, created_at);
CREATE INDEX cost_events_org_trace ON cost_events (org_id, trace_id);
CREATE INDEX cost_events_org_customer ON cost_events (org_id, customer_id);
