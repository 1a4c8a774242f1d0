-- What a tool call through the MCP gateway does when the organization has no cost for
-- the tool: `allow` (charged 0 and tagged `_svc_unpriced_tool`) or `block`.
ALTER TABLE organizations ADD COLUMN unpriced_tools TEXT NOT NULL DEFAULT 'allow';
