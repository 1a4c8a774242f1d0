-- Long-window reads (issue #25). Two changes:
--
-- 1. An all-time grain, 'a' (bucket 0), for the dimensions read over all time: the
--    margins' cost per customer tag value (tag_model) and a budget's spend sources
--    without a reset (spend_key, spend_user, spend_customer, spend_tag). One row per
--    label for ever, so those reads add up one row per label (and model or source)
--    instead of one per label and day. Seeded here from the day rows, which hold
--    every event ever counted (retention deletes raw events, never rollups); from now
--    on the accounting keeps it with the others (src/db/rollups.rs, GRAINS).
-- 2. The tag lookup index gains event_id, so the event list filtered by a tag walks
--    it newest first in the list's (created_at, id) order and stops at the page size,
--    instead of walking the organization's events until enough carry the tag.
INSERT INTO cost_rollups (org_id, dim, name, grain, bucket, label1, label2, estimated,
    event_count, cost_hi, cost_lo, input_hi, input_lo, output_hi, output_lo, cached_hi, cached_lo, reasoning_hi, reasoning_lo, duration_hi, duration_lo, duration_count, bd_input_hi, bd_input_lo, bd_output_hi, bd_output_lo, bd_cached_hi, bd_cached_lo, bd_reasoning_hi, bd_reasoning_lo)
SELECT org_id, dim, name, 'a', 0, label1, label2, estimated,
    CAST(SUM(event_count) AS BIGINT),
    CAST(SUM(cost_hi) AS BIGINT),
    CAST(SUM(cost_lo) AS BIGINT),
    CAST(SUM(input_hi) AS BIGINT),
    CAST(SUM(input_lo) AS BIGINT),
    CAST(SUM(output_hi) AS BIGINT),
    CAST(SUM(output_lo) AS BIGINT),
    CAST(SUM(cached_hi) AS BIGINT),
    CAST(SUM(cached_lo) AS BIGINT),
    CAST(SUM(reasoning_hi) AS BIGINT),
    CAST(SUM(reasoning_lo) AS BIGINT),
    CAST(SUM(duration_hi) AS BIGINT),
    CAST(SUM(duration_lo) AS BIGINT),
    CAST(SUM(duration_count) AS BIGINT),
    CAST(SUM(bd_input_hi) AS BIGINT),
    CAST(SUM(bd_input_lo) AS BIGINT),
    CAST(SUM(bd_output_hi) AS BIGINT),
    CAST(SUM(bd_output_lo) AS BIGINT),
    CAST(SUM(bd_cached_hi) AS BIGINT),
    CAST(SUM(bd_cached_lo) AS BIGINT),
    CAST(SUM(bd_reasoning_hi) AS BIGINT),
    CAST(SUM(bd_reasoning_lo) AS BIGINT)
FROM cost_rollups
WHERE grain = 'd' AND dim IN ('tag_model', 'spend_key', 'spend_user', 'spend_customer', 'spend_tag')
GROUP BY org_id, dim, name, label1, label2, estimated;

DROP INDEX cost_event_tags_lookup;
CREATE INDEX cost_event_tags_lookup ON cost_event_tags (org_id, tag_key, tag_value, created_at, event_id);
