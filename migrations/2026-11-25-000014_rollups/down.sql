CREATE INDEX cost_event_tags_recent ON cost_event_tags (org_id, created_at);
DROP TABLE rollup_backfill;
DROP TABLE cost_rollups;
