"""Drives the proxy with the official OpenAI Python SDK and the OpenAI Agents SDK.

Run by the Rust integration suite (tests/sdk_python.rs) as
`python openai_sdk.py <case>`, with SPENDGATE_PROXY_URL (the proxy's base URL) and
SPENDGATE_KEY (a spendgate key) in the environment. The provider key is a dummy: the
mock upstream behind the proxy does not check it. Prints one JSON object describing
what the SDK returned, and exits non-zero on any error.
"""

import asyncio
import json
import os
import sys

from openai import AsyncOpenAI, OpenAI

PROXY = os.environ["SPENDGATE_PROXY_URL"].rstrip("/") + "/v1"
KEY = os.environ["SPENDGATE_KEY"]
HEADERS = {"X-Service-Key": KEY}
# Steers the mock upstream (tests/support/mock.rs): the usage it reports.
MOCK = {"mock": {"usage": {"input": 1000, "cached": 200, "output": 500, "reasoning": 100}}}


def client():
    return OpenAI(base_url=PROXY, api_key="sk-provider-dummy", default_headers=HEADERS, max_retries=0)


def usage_of(u):
    return {
        "input_tokens": u.input_tokens,
        "cached_tokens": u.input_tokens_details.cached_tokens,
        "output_tokens": u.output_tokens,
        "reasoning_tokens": u.output_tokens_details.reasoning_tokens,
    }


def responses_create():
    r = client().responses.create(model="gpt-4o-mini", input="Say hello.", extra_body=MOCK)
    return {"id": r.id, "text": r.output_text, "usage": usage_of(r.usage)}


def responses_stream():
    kinds = []
    with client().responses.stream(model="gpt-4o-mini", input="Say hello.", extra_body=MOCK) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_response()
    return {"id": final.id, "text": final.output_text, "events": kinds, "usage": usage_of(final.usage)}


def embeddings_create():
    extra = {"mock": {"usage": {"input": 2500}}}
    r = client().embeddings.create(model="text-embedding-3-small", input=["one", "two"], extra_body=extra)
    return {"count": len(r.data), "dims": len(r.data[0].embedding), "prompt_tokens": r.usage.prompt_tokens}


def agents_turn():
    from agents import Agent, ModelSettings, Runner, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    set_default_openai_client(
        AsyncOpenAI(base_url=PROXY, api_key="sk-provider-dummy", default_headers=HEADERS, max_retries=0),
        use_for_tracing=False,
    )
    agent = Agent(
        name="Assistant",
        instructions="Answer in one word.",
        model="gpt-4o-mini",
        model_settings=ModelSettings(extra_body=MOCK),
    )
    result = asyncio.run(Runner.run(agent, "Say hello."))
    usage = result.context_wrapper.usage
    return {
        "final_output": result.final_output,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }


CASES = {f.__name__: f for f in [responses_create, responses_stream, embeddings_create, agents_turn]}

if __name__ == "__main__":
    print(json.dumps(CASES[sys.argv[1]]()))
