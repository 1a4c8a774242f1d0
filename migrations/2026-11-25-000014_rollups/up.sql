-- Rollups: per organization, UTC day and UTC hour, the sums of the cost events under
-- one dimension value, kept by the accounting commit in the same transaction as the
-- events. Dashboard reads (summary, attribution, tag keys) add these rows up instead
-- of scanning raw events (see docs/architecture.md, "Reads at scale").
--
-- `dim` names the dimension and what the labels hold:
--   total     (no labels)                       cost, count, tokens, cost breakdown
--   model     label1 provider, label2 model
--   key_model label1 API key id ('' = none), label2 model
--   source    label1 source
--   tool      label1 tool name (or model)       durations
--   trace     label1 trace id
--   tag_model name tag key, label1 tag value, label2 model
--   tag_key   name tag key
-- `grain` is 'd' (bucket = days since the epoch) or 'h' (hours since the epoch).
-- Every sum is kept as two parts, Σ x / 10^6 and Σ x % 10^6 (see src/db/exact_sum.rs),
-- so no sum can overflow and every read stays exact.
CREATE TABLE cost_rollups (
    org_id TEXT NOT NULL,
    dim TEXT NOT NULL,
    name TEXT NOT NULL,
    grain TEXT NOT NULL,
    bucket BIGINT NOT NULL,
    label1 TEXT NOT NULL,
    label2 TEXT NOT NULL,
    estimated BOOLEAN NOT NULL,
    event_count BIGINT NOT NULL,
    cost_hi BIGINT NOT NULL,
    cost_lo BIGINT NOT NULL,
    input_hi BIGINT NOT NULL,
    input_lo BIGINT NOT NULL,
    output_hi BIGINT NOT NULL,
    output_lo BIGINT NOT NULL,
    cached_hi BIGINT NOT NULL,
    cached_lo BIGINT NOT NULL,
    reasoning_hi BIGINT NOT NULL,
    reasoning_lo BIGINT NOT NULL,
    duration_hi BIGINT NOT NULL,
    duration_lo BIGINT NOT NULL,
    duration_count BIGINT NOT NULL,
    bd_input_hi BIGINT NOT NULL,
    bd_input_lo BIGINT NOT NULL,
    bd_output_hi BIGINT NOT NULL,
    bd_output_lo BIGINT NOT NULL,
    bd_cached_hi BIGINT NOT NULL,
    bd_cached_lo BIGINT NOT NULL,
    bd_reasoning_hi BIGINT NOT NULL,
    bd_reasoning_lo BIGINT NOT NULL,
    PRIMARY KEY (org_id, dim, name, grain, bucket, label1, label2, estimated)
);

-- The back-fill from existing events: the cost breakdown is JSON, which the two
-- backends spell differently, so the server rebuilds the rollups in Rust at start
-- while this row says it is pending (src/db/rollups.rs, `backfill_if_pending`).
CREATE TABLE rollup_backfill (
    id BIGINT PRIMARY KEY,
    done_at BIGINT
);
INSERT INTO rollup_backfill (id, done_at) VALUES (1, NULL);

-- Lean event rows: the tag keys of recent events come from the rollups now.
DROP INDEX cost_event_tags_recent;
