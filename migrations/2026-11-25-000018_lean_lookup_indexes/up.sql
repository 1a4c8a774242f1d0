-- Fewer B-tree entries per event (issue #13). `cost_events_org_key` served only the
-- event list filtered by API key, which SQLite already answered by walking the
-- organization's (org_id, created_at, id) index newest first to skip a sort (as for
-- the model, provider and source filters), and the gate charges of a request, which
-- belong on the request-id index. Every aggregate by key reads the rollups.
--
-- The lookups by request id, trace and customer order by (created_at, id). Without
-- those columns in their index, SQLite's planner preferred the same walk of the
-- whole organization (hundreds of ms at 1M events; see 000015 for the session
-- index): each index now ends in (created_at, id), so those lookups stay
-- index-backed, and the number of indexes written per event goes down by one.
DROP INDEX cost_events_org_key;
DROP INDEX cost_events_org_request;
CREATE INDEX cost_events_org_request ON cost_events (org_id, request_id, created_at, id);
DROP INDEX cost_events_org_trace;
CREATE INDEX cost_events_org_trace ON cost_events (org_id, trace_id, created_at, id) WHERE trace_id IS NOT NULL;
DROP INDEX cost_events_org_customer;
CREATE INDEX cost_events_org_customer ON cost_events (org_id, customer_id, created_at, id) WHERE customer_id IS NOT NULL;
