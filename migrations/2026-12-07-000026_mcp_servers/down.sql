DROP TABLE mcp_server_changes;
DROP TABLE mcp_servers;
