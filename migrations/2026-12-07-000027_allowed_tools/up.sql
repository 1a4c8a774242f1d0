-- The MCP tools a key may see and call through the gateway: a JSON array of
-- `server/tool` or `server/*` entries; NULL = every tool, `[]` = none.
ALTER TABLE api_keys ADD COLUMN allowed_tools TEXT;
