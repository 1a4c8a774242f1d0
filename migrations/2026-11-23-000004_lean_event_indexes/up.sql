-- Most events carry no session, trace or customer: index only the rows that do.
-- Every query on these columns filters on equality or IS NOT NULL, which both
-- backends match to the partial index. Fewer B-tree entries per event is fewer
-- dirty pages per commit.
DROP INDEX cost_events_org_session;
DROP INDEX cost_events_org_trace;
DROP INDEX cost_events_org_customer;
CREATE INDEX cost_events_org_session ON cost_events (org_id, session_id, created_at) WHERE session_id IS NOT NULL;
CREATE INDEX cost_events_org_trace ON cost_events (org_id, trace_id) WHERE trace_id IS NOT NULL;
CREATE INDEX cost_events_org_customer ON cost_events (org_id, customer_id) WHERE customer_id IS NOT NULL;
