"""A local MCP server built with the official `mcp` SDK (streamable HTTP), for the
gateway tests (tests/mcp_gateway.rs).

Usage: mcp_server.py <executions-log> <required-authorization>

Binds 127.0.0.1 on an ephemeral port and prints `PORT <n>` once listening. Every
request must carry `Authorization: <required-authorization>` (the header the gateway
stores for the server), otherwise 401. Every tool execution appends the tool's name
to <executions-log>, so the test counts what actually ran on the server.
"""

import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

LOG, REQUIRED = sys.argv[1], sys.argv[2]

server = MCPServer("gateway-test")


def executed(name: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(name + "\n")


@server.tool(description="Searches the web (a priced tool).")
def search(query: str) -> str:
    executed("search")
    return f"results for {query}"


@server.tool(description="Echoes its text.")
def echo(text: str) -> str:
    executed("echo")
    return text


@server.tool(description="Deletes a row.", annotations=ToolAnnotations(destructiveHint=True))
def delete_row(row: int) -> str:
    executed("delete_row")
    return f"deleted {row}"


def guarded(app):
    """Refuses any request without the stored header, as a real server would."""

    async def wrapper(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization", b"").decode() != REQUIRED:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
            if b"x-service-key" in headers or b"svc_live_sk_" in headers.get(b"authorization", b""):
                await send({"type": "http.response.start", "status": 400, "headers": []})
                await send({"type": "http.response.body", "body": b"spendgate key forwarded"})
                return
        await app(scope, receive, send)

    return wrapper


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = guarded(server.streamable_http_app())
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
