-- A cost event's dedup identity is no longer (org, provider, requestId) for every
-- event. A client's request id on a proxied call or an MCP tool event is a correlation
-- id: forty calls that reuse one are forty calls, each charged. Only ingested events
-- (SDK, API) keep deduplicating on their requestId, as the spec says. `dedup_key` holds
-- that identity: the requestId for ingested events, `call:<event id>` for proxied calls,
-- tool events and denial records, which therefore never collide with anything but a
-- retried commit of themselves.
--
-- SQLite cannot drop a table's UNIQUE constraint, so the table is rebuilt (the same
-- statements serve PostgreSQL).
CREATE TABLE cost_events_v7 (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    api_key_id TEXT,
    user_id TEXT,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens BIGINT NOT NULL DEFAULT 0,
    cost_microdollars BIGINT NOT NULL,
    duration_ms BIGINT,
    upstream_duration_ms BIGINT,
    session_id TEXT,
    trace_id TEXT,
    event_type TEXT NOT NULL,
    tool_name TEXT,
    tool_server TEXT,
    tags TEXT NOT NULL,
    customer_id TEXT,
    cost_breakdown TEXT,
    source TEXT NOT NULL,
    budget_status TEXT NOT NULL,
    action_id TEXT,
    estimated BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL,
    tool_calls_requested TEXT,
    tool_definition_tokens BIGINT NOT NULL DEFAULT 0,
    dedup_key TEXT NOT NULL
);
INSERT INTO cost_events_v7 (
    id, org_id, request_id, api_key_id, user_id, provider, model, input_tokens, output_tokens,
    cached_input_tokens, reasoning_tokens, cost_microdollars, duration_ms, upstream_duration_ms,
    session_id, trace_id, event_type, tool_name, tool_server, tags, customer_id, cost_breakdown,
    source, budget_status, action_id, estimated, created_at, tool_calls_requested,
    tool_definition_tokens, dedup_key)
SELECT
    id, org_id, request_id, api_key_id, user_id, provider, model, input_tokens, output_tokens,
    cached_input_tokens, reasoning_tokens, cost_microdollars, duration_ms, upstream_duration_ms,
    session_id, trace_id, event_type, tool_name, tool_server, tags, customer_id, cost_breakdown,
    source, budget_status, action_id, estimated, created_at, tool_calls_requested,
    tool_definition_tokens,
    CASE WHEN source IN ('proxy', 'mcp') THEN 'call:' || id ELSE request_id END
FROM cost_events;
DROP TABLE cost_events;
ALTER TABLE cost_events_v7 RENAME TO cost_events;
CREATE UNIQUE INDEX cost_events_dedup ON cost_events (org_id, provider, dedup_key);
CREATE INDEX cost_events_org_created ON cost_events (org_id, created_at, id);
CREATE INDEX cost_events_org_key ON cost_events (org_id, api_key_id, created_at);
CREATE INDEX cost_events_org_request ON cost_events (org_id, request_id);
CREATE INDEX cost_events_org_session ON cost_events (org_id, session_id, created_at) WHERE session_id IS NOT NULL;
CREATE INDEX cost_events_org_trace ON cost_events (org_id, trace_id) WHERE trace_id IS NOT NULL;
CREATE INDEX cost_events_org_customer ON cost_events (org_id, customer_id) WHERE customer_id IS NOT NULL;
