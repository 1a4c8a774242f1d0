-- Back to one dedup identity per (org, provider, requestId): calls that reused a
-- request id keep only their first row.
DELETE FROM cost_events WHERE id NOT IN (
    SELECT MIN(id) FROM cost_events GROUP BY org_id, provider, request_id
);
DROP INDEX cost_events_dedup;
ALTER TABLE cost_events DROP COLUMN dedup_key;
CREATE UNIQUE INDEX cost_events_request_unique ON cost_events (org_id, provider, request_id);
