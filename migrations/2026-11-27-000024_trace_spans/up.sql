-- The summary's top traces without ranking every trace row of the window (issue #25):
-- one row per trace with its all-time sums and the first and last time it was active,
-- kept by the fold with the rollups (src/db/trace_spans.rs).
--   first_at, last_at  earliest and latest created_at of the trace's events (a seeded
--                      row: the start of its first day and the end of its last one;
--                      never inside the true span)
--   span_class         how long the span is: 0 under an hour, 1 a day, 2 a week,
--                      3 five weeks, 4 a year (366 days), 5 longer
--   cost, event_count  all events; firm_cost, firm_count: without estimates (each cost
--                      a sum saturated at ±(2^63 - 1))
-- A trace that started at or after a window's start has all its events in a window
-- that runs to now, so its window sum is its all-time sum: the costliest of those are
-- an index walk by cost. The few traces that started before the window and were active
-- in it are found by span class (first_at within one class length before the start)
-- and summed from the rollups.
CREATE TABLE trace_spans (
    org_id TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    first_at BIGINT NOT NULL,
    last_at BIGINT NOT NULL,
    span_class BIGINT NOT NULL,
    cost BIGINT NOT NULL,
    event_count BIGINT NOT NULL,
    firm_cost BIGINT NOT NULL,
    firm_count BIGINT NOT NULL,
    PRIMARY KEY (org_id, trace_id)
);
CREATE INDEX trace_spans_by_cost ON trace_spans (org_id, cost DESC, trace_id);
CREATE INDEX trace_spans_by_firm_cost ON trace_spans (org_id, firm_cost DESC, trace_id);
CREATE INDEX trace_spans_by_start ON trace_spans (org_id, span_class, first_at);
-- The window sums of those few traces look their rows up by label, not by day.
CREATE INDEX cost_rollups_trace_labels ON cost_rollups (org_id, name, label1, grain, bucket)
    WHERE dim = 'trace';

-- Seeded from the trace day rows, which hold every event ever counted (retention
-- deletes raw events, never rollups). SUM over BIGINT is NUMERIC on PostgreSQL, so the
-- joined cost cannot overflow there before it is clamped.
INSERT INTO trace_spans (org_id, trace_id, first_at, last_at, span_class, cost, event_count, firm_cost, firm_count)
SELECT org_id, trace_id, first_at, last_at,
    CASE WHEN last_at - first_at < 3600000 THEN 0
         WHEN last_at - first_at < 86400000 THEN 1
         WHEN last_at - first_at < 604800000 THEN 2
         WHEN last_at - first_at < 3024000000 THEN 3
         WHEN last_at - first_at < 31622400000 THEN 4
         ELSE 5 END,
    CAST(CASE WHEN cost > 9223372036854775807 THEN 9223372036854775807
              WHEN cost < -9223372036854775807 THEN -9223372036854775807
              ELSE cost END AS BIGINT),
    event_count,
    CAST(CASE WHEN firm_cost > 9223372036854775807 THEN 9223372036854775807
              WHEN firm_cost < -9223372036854775807 THEN -9223372036854775807
              ELSE firm_cost END AS BIGINT),
    firm_count
FROM (
    SELECT org_id, label1 AS trace_id,
        MIN(bucket) * 86400000 AS first_at,
        (MAX(bucket) + 1) * 86400000 - 1 AS last_at,
        SUM(cost_hi) * 1000000 + SUM(cost_lo) AS cost,
        CAST(SUM(event_count) AS BIGINT) AS event_count,
        SUM(CASE WHEN estimated THEN 0 ELSE cost_hi END) * 1000000
            + SUM(CASE WHEN estimated THEN 0 ELSE cost_lo END) AS firm_cost,
        CAST(SUM(CASE WHEN estimated THEN 0 ELSE event_count END) AS BIGINT) AS firm_count
    FROM cost_rollups
    WHERE dim = 'trace' AND grain = 'd'
    GROUP BY org_id, label1
) AS seeded;
