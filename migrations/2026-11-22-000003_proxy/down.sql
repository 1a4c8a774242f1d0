DROP TABLE cost_event_bodies;
ALTER TABLE cost_events DROP COLUMN tool_definition_tokens;
ALTER TABLE cost_events DROP COLUMN tool_calls_requested;
