DROP INDEX cost_rollups_trace_labels;
DROP TABLE trace_spans;
