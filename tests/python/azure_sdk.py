"""Drives the proxy's Azure OpenAI route with the official `AzureOpenAI` client.

Run by the Rust integration suite (tests/clouds_azure.rs) as `python azure_sdk.py
<case>`, with SPENDGATE_PROXY_URL and SPENDGATE_KEY in the environment. The client's
`azure_endpoint` is `{proxy}/azure` and its `api_key` the spendgate key (sent as
`api-key`, as the client sends an Azure key). Prints one JSON object describing what
the SDK returned, and exits non-zero on any error.
"""

import json
import os
import sys

from openai import AzureOpenAI

PROXY = os.environ["SPENDGATE_PROXY_URL"].rstrip("/")
KEY = os.environ["SPENDGATE_KEY"]
# Steers the mock upstream (tests/support/mock.rs): the usage it reports and the model
# Azure's answer names.
MOCK = {"mock": {"usage": {"input": 1000, "output": 500}, "answer_model": "gpt-4o-2024-08-06"}}


def client():
    return AzureOpenAI(azure_endpoint=PROXY + "/azure", api_key=KEY, api_version="2024-10-21", max_retries=0)


def chat_create():
    r = client().chat.completions.create(
        model="prod", messages=[{"role": "user", "content": "Say hello."}], extra_body=MOCK
    )
    return {"model": r.model, "text": r.choices[0].message.content, "usage": [r.usage.prompt_tokens, r.usage.completion_tokens]}


def chat_stream():
    text = []
    stream = client().chat.completions.create(
        model="prod", messages=[{"role": "user", "content": "Say hello."}], stream=True, extra_body=MOCK
    )
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta and choice.delta.content:
                text.append(choice.delta.content)
    return {"text": "".join(text)}


def embeddings_create():
    extra = {"mock": {"usage": {"input": 2000}, "answer_model": "text-embedding-3-small"}}
    r = client().embeddings.create(model="emb", input=["one", "two"], extra_body=extra)
    return {"count": len(r.data), "prompt_tokens": r.usage.prompt_tokens}


CASES = {"chat_create": chat_create, "chat_stream": chat_stream, "embeddings_create": embeddings_create}

if __name__ == "__main__":
    print(json.dumps(CASES[sys.argv[1]]()))
