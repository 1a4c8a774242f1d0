DROP TABLE trace_spans;
