-- Per-invocation costs of tool-protocol (MCP) tools, one row per (organization,
-- server, tool). Registered by discovery (source 'discovered'); an admin override
-- sets source 'manual', which later discoveries never overwrite. An MCP tool event
-- without an explicit cost is charged cost_microdollars.
CREATE TABLE tool_costs (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    server_name TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    cost_microdollars BIGINT NOT NULL,
    suggested_cost BIGINT,
    source TEXT NOT NULL,
    description TEXT,
    annotations TEXT,
    last_seen_at BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX tool_costs_tool ON tool_costs (org_id, server_name, tool_name);
