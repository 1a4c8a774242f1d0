-- MCP servers an organization reaches through the gateway (`{proxy}/mcp/{name}`).
-- `header_names` is the JSON array of the names of the headers sent to the server on
-- every request; their values are one AES-256-GCM ciphertext of the JSON object of
-- headers (like provider credentials: under secret_key, the organization id as
-- associated data), NULL when the server has no headers.
CREATE TABLE mcp_servers (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    header_names TEXT NOT NULL,
    encrypted_headers TEXT,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX mcp_servers_org_name ON mcp_servers (org_id, name);

-- MCP server changes (create, delete), for every instance's server cache.
CREATE TABLE mcp_server_changes (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    name TEXT NOT NULL,
    changed_at BIGINT NOT NULL
);
CREATE INDEX mcp_server_changes_at ON mcp_server_changes (changed_at);
