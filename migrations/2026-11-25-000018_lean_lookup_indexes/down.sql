DROP INDEX cost_events_org_customer;
CREATE INDEX cost_events_org_customer ON cost_events (org_id, customer_id) WHERE customer_id IS NOT NULL;
DROP INDEX cost_events_org_trace;
CREATE INDEX cost_events_org_trace ON cost_events (org_id, trace_id) WHERE trace_id IS NOT NULL;
DROP INDEX cost_events_org_request;
CREATE INDEX cost_events_org_request ON cost_events (org_id, request_id);
CREATE INDEX cost_events_org_key ON cost_events (org_id, api_key_id, created_at);
