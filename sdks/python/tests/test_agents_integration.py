"""The README's OpenAI Agents SDK example against a fake OpenAI upstream behind the
real proxy: the tool runs only after a human approved it from the dashboard."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Iterator, Tuple

import pytest
from agents import Runner, set_tracing_disabled

from examples.agents_approval import OUTBOX, build_agent, proxied_openai
from spendgate import AsyncSpendgate

from .support import Dashboard, Recorder, Server, fake_openai

TOOL_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{
        "id": "call_1",
        "type": "function",
        "function": {"name": "send_email", "arguments": json.dumps(
            {"to": "ada@example.com", "subject": "Build", "body": "The build is green."})},
    }],
}
FINAL = {"role": "assistant", "content": "Done: Ada knows the build is green."}


@pytest.fixture()
def stack() -> Iterator[Tuple[Server, Dashboard, str, Recorder]]:
    upstream = fake_openai([TOOL_CALL, FINAL])
    server = Server({"SPENDGATE_UPSTREAM_OPENAI": upstream.url})
    try:
        owner = Dashboard(server, "agents@example.com")
        _, raw = owner.create_key("agent")
        yield server, owner, raw, upstream
    finally:
        server.stop()
        upstream.close()


def approve_next(owner: Dashboard, approve: bool) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pending = owner.http.get("/api/actions", params={"status": "pending"}).json()["data"]
            if pending:
                (owner.approve if approve else owner.reject)(pending[0]["id"])
                return
            time.sleep(0.1)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def run_agent(server: Server, raw: str) -> str:
    set_tracing_disabled(True)

    async def go() -> str:
        async with AsyncSpendgate(raw, base_url=server.control, proxy_url=server.proxy) as sg, \
                proxied_openai(sg, "sk-test-not-real") as openai_client:
            result = await Runner.run(build_agent(sg, openai_client), "Tell ada@example.com the build is green")
            return str(result.final_output)

    return asyncio.run(go())


def test_agent_tool_runs_after_approval_and_its_calls_are_costed(
        stack: Tuple[Server, Dashboard, str, Recorder]) -> None:
    server, owner, raw, upstream = stack
    OUTBOX.clear()
    helper = approve_next(owner, approve=True)
    assert run_agent(server, raw) == "Done: Ada knows the build is green."
    helper.join()
    assert OUTBOX == [{"to": "ada@example.com", "subject": "Build", "body": "The build is green."}]
    executed = owner.http.get("/api/actions", params={"status": "executed"}).json()["data"]
    assert [a["payload"]["to"] for a in executed] == ["ada@example.com"]
    assert len(upstream.requests) == 2, "both model turns went through the proxy"
    assert upstream.requests[0][2]["authorization"] == "Bearer sk-test-not-real"
    proxied = owner.http.get("/api/cost-events", params={"source": "proxy"}).json()["data"]
    assert len(proxied) == 2 and all(e["costMicrodollars"] > 0 for e in proxied)


def test_rejected_tool_call_never_sends_and_the_model_is_told(
        stack: Tuple[Server, Dashboard, str, Recorder]) -> None:
    server, owner, raw, upstream = stack
    OUTBOX.clear()
    helper = approve_next(owner, approve=False)
    run_agent(server, raw)
    helper.join()
    assert OUTBOX == []
    second_turn = json.loads(upstream.requests[1][3])
    tool_message = [m for m in second_turn["messages"] if m.get("role") == "tool"][0]
    assert "a human rejected this email" in str(tool_message["content"])
