DELETE FROM cost_rollups WHERE grain = 'a';
DROP INDEX cost_event_tags_lookup;
CREATE INDEX cost_event_tags_lookup ON cost_event_tags (org_id, tag_key, tag_value, created_at);
