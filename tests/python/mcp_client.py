"""Drives an MCP server through the spendgate gateway with the official `mcp` client
(streamable HTTP + ClientSession), for tests/mcp_gateway.rs.

Usage: mcp_client.py <case>, with SPENDGATE_PROXY_URL the gateway's `{proxy}/mcp/{name}`
URL and SPENDGATE_KEY the spendgate key (sent as `Authorization: Bearer`).
Prints one JSON object.

Cases:
- `basic`: initialize, list the tools, call `search` and `echo`.
- `call:<tool>`: initialize and call one tool.
- `burst:<n>`: initialize and call `search` n times at once.
- `restricted`: initialize, list the tools, call `delete_row` (expected refused with a
  JSON-RPC error, whose message is printed).
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL = os.environ["SPENDGATE_PROXY_URL"]
KEY = os.environ["SPENDGATE_KEY"]


def result_of(r) -> dict:
    texts = [c.text for c in r.content if getattr(c, "type", None) == "text"]
    meta = r.meta if getattr(r, "meta", None) else None
    return {"isError": bool(r.is_error), "text": "\n".join(texts), "meta": meta}


async def call(session: ClientSession, tool: str) -> dict:
    args = {"query": "spend"} if tool == "search" else {"text": "hi"} if tool == "echo" else {"row": 7}
    return result_of(await session.call_tool(tool, args))


async def run(case: str) -> dict:
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
    async with client, streamable_http_client(URL, http_client=client) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out = {"server": init.server_info.name if hasattr(init, "server_info") else init.serverInfo.name}
            if case == "basic":
                tools = await session.list_tools()
                out["tools"] = sorted(t.name for t in tools.tools)
                out["search"] = await call(session, "search")
                out["echo"] = await call(session, "echo")
            elif case.startswith("call:"):
                out["result"] = await call(session, case.split(":", 1)[1])
            elif case == "restricted":
                tools = await session.list_tools()
                out["tools"] = sorted(t.name for t in tools.tools)
                try:
                    out["result"] = await call(session, "delete_row")
                except MCPError as e:
                    out["error"] = {"code": e.error.code, "message": e.error.message}
            elif case.startswith("burst:"):
                n = int(case.split(":", 1)[1])
                results = await asyncio.gather(*(call(session, "search") for _ in range(n)))
                out["ok"] = sum(1 for r in results if not r["isError"])
                out["refused"] = sum(1 for r in results if r["isError"])
                out["codes"] = sorted({(r["meta"] or {}).get("spendgate/denial", {}).get("code", "") for r in results})
            return out


print(json.dumps(asyncio.run(run(sys.argv[1]))))
