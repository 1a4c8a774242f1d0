"""An OpenAI Agents SDK agent whose ``send_email`` tool runs only after a human
approved it in spendgate, and whose model calls go through spendgate's proxy.

Run against a real deployment with ``SPENDGATE_API_KEY`` and ``OPENAI_API_KEY`` set::

    python -m examples.agents_approval "Tell ada@example.com the build is green"
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Dict, List

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from spendgate import ActionExpiredBeforeDecisionError, ActionRejectedError, AsyncSpendgate

OUTBOX: List[Dict[str, str]] = []
"""Stands in for a mail service in this example."""


def proxied_openai(sg: AsyncSpendgate, openai_api_key: str) -> AsyncOpenAI:
    """The official OpenAI client, pointed at spendgate's proxy: the one changed line."""
    proxy = sg.openai_settings()
    return AsyncOpenAI(api_key=openai_api_key, base_url=proxy.base_url, default_headers=proxy.default_headers)


def build_agent(sg: AsyncSpendgate, client: AsyncOpenAI, model: str = "gpt-4o-mini") -> Agent:
    """The agent: its model is reached through ``client``, its tool asks first."""

    @function_tool
    async def send_email(to: str, subject: str, body: str) -> str:
        """Send an email. A human approves every email first.

        Args:
            to: recipient address.
            subject: subject line.
            body: message text.
        """

        async def deliver() -> Dict[str, str]:
            OUTBOX.append({"to": to, "subject": subject, "body": body})
            return {"delivered": to}

        try:
            await sg.run_approved(deliver, agent_id="mail-agent", action_type="send_email",
                                  payload={"to": to, "subject": subject, "body": body}, timeout=600)
        except ActionRejectedError:
            return "a human rejected this email: do not send it again"
        except ActionExpiredBeforeDecisionError:
            return "nobody approved this email in time: it was not sent"
        return f"email to {to} sent"

    return Agent(
        name="mail-agent",
        instructions="You send short status emails with the send_email tool.",
        tools=[send_email],
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
    )


async def main(task: str) -> None:
    set_tracing_disabled(True)
    async with AsyncSpendgate() as sg, proxied_openai(sg, os.environ["OPENAI_API_KEY"]) as openai_client:
        result = await Runner.run(build_agent(sg, openai_client), task)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "Tell ada@example.com the build is green"))
