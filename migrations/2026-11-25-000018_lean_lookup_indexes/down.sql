DROP INDEX cost_events_org_request;
CREATE INDEX cost_events_org_request ON cost_events (org_id, request_id);
CREATE INDEX cost_events_org_key ON cost_events (org_id, api_key_id, created_at);
