"""Drives the proxy's Bedrock route with boto3's `bedrock-runtime` client.

Run by the Rust integration suite (tests/clouds_bedrock.rs) as `python bedrock_sdk.py
<case>`, with SPENDGATE_PROXY_URL and SPENDGATE_KEY in the environment. The client's
`endpoint_url` is `{proxy}/bedrock`. boto3 sends a Bedrock API key (bearer) only over
https, so over the suite's plain http the client signs with SigV4 using throwaway keys
of its own, and an event hook adds the spendgate key as `X-Service-Key`; the proxy drops
the client's signature and signs again with the stored credential. Prints one JSON
object describing what the SDK returned, and exits non-zero on any error.
"""

import json
import os
import sys

import boto3
from botocore.config import Config

PROXY = os.environ["SPENDGATE_PROXY_URL"].rstrip("/")
KEY = os.environ["SPENDGATE_KEY"]
HAIKU = "anthropic.claude-3-5-haiku-20241022-v1:0"
MESSAGES = [{"role": "user", "content": [{"text": "Say hello."}]}]
# Steers the mock upstream (tests/support/mock.rs) where the body is free-form.
MOCK = {"usage": {"input": 1000, "output": 500}}

for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
    os.environ.pop(name, None)


def client():
    c = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=PROXY + "/bedrock",
        aws_access_key_id="AKIACLIENT0000000000",
        aws_secret_access_key="client-own-secret-never-forwarded",
        config=Config(retries={"max_attempts": 1}),
    )

    def add_key(request, **_):
        request.headers["X-Service-Key"] = KEY

    c.meta.events.register("before-send.bedrock-runtime.*", add_key)
    return c


def converse():
    r = client().converse(modelId=HAIKU, messages=MESSAGES, inferenceConfig={"maxTokens": 100})
    u = r["usage"]
    return {"text": r["output"]["message"]["content"][0]["text"], "usage": [u["inputTokens"], u["outputTokens"]]}


def converse_stream():
    r = client().converse_stream(modelId=HAIKU, messages=MESSAGES, inferenceConfig={"maxTokens": 100})
    text, usage = [], None
    for event in r["stream"]:
        if "contentBlockDelta" in event:
            text.append(event["contentBlockDelta"]["delta"]["text"])
        if "metadata" in event:
            u = event["metadata"]["usage"]
            usage = [u["inputTokens"], u["outputTokens"]]
    return {"text": "".join(text), "usage": usage}


def invoke_body():
    return json.dumps({
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 1000,
        "messages": [{"role": "user", "content": "Say hello."}],
        "mock": MOCK,
    })


def invoke_model():
    r = client().invoke_model(modelId=HAIKU, body=invoke_body(), contentType="application/json")
    answer = json.loads(r["body"].read())
    return {"type": answer["type"], "usage": [answer["usage"]["input_tokens"], answer["usage"]["output_tokens"]]}


def invoke_model_with_response_stream():
    r = client().invoke_model_with_response_stream(modelId=HAIKU, body=invoke_body(), contentType="application/json")
    kinds, metrics = [], None
    for event in r["body"]:
        inner = json.loads(event["chunk"]["bytes"])
        kinds.append(inner["type"])
        metrics = inner.get("amazon-bedrock-invocationMetrics", metrics)
    return {"kinds": kinds, "usage": [metrics["inputTokenCount"], metrics["outputTokenCount"]]}


CASES = {
    "converse": converse,
    "converse_stream": converse_stream,
    "invoke_model": invoke_model,
    "invoke_model_with_response_stream": invoke_model_with_response_stream,
}

if __name__ == "__main__":
    print(json.dumps(CASES[sys.argv[1]]()))
