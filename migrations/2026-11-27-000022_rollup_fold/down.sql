DROP TABLE fold_marks;
DROP INDEX cost_events_fold_seq;
ALTER TABLE cost_events DROP COLUMN fold_seq;
