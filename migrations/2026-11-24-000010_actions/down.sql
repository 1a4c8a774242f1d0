DROP INDEX cost_events_action;
DROP TABLE actions;
