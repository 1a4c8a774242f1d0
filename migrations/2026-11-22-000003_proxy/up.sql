-- What the proxy records beyond an SDK event: tool calls the model asked for, the
-- tokens spent on tool definitions, and (Pro and above) request/response bodies.

ALTER TABLE cost_events ADD COLUMN tool_calls_requested TEXT;
ALTER TABLE cost_events ADD COLUMN tool_definition_tokens BIGINT NOT NULL DEFAULT 0;

CREATE TABLE cost_event_bodies (
    event_id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    request_body TEXT,
    response_body TEXT,
    request_truncated BOOLEAN NOT NULL DEFAULT FALSE,
    response_truncated BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL
);
