//! The official Python SDKs through the proxy to the mock upstream: the `openai`
//! package's `responses.create`, `responses.stream` and `embeddings.create`, and one
//! OpenAI Agents SDK turn, each checked against the cost event it left, tokens and
//! cost to the microdollar. The SDKs are installed by `support::python`.

use serde_json::{json, Value};

use crate::proxy::{setup, Setup, MINI_COST};
use crate::support::python;

/// The mock usage the scripts ask for: 1,000 prompt (200 cached), 500 output (100 of
/// them reasoning); MINI_COST at gpt-4o-mini's prices.
const TOKENS: (i64, i64, i64, i64) = (1000, 200, 500, 100);

async fn run(s: &Setup, case: &str) -> Value {
    python::run("openai_sdk.py", case, &s.app.server.proxy, &s.raw).await
}

async fn only_event(s: &Setup) -> Value {
    let events = s.events(1).await;
    assert_eq!(events.len(), 1, "{events:?}");
    events[0].clone()
}

fn tokens(e: &Value) -> (i64, i64, i64, i64) {
    let n = |k: &str| e[k].as_i64().unwrap_or(-1);
    (n("inputTokens"), n("cachedInputTokens"), n("outputTokens"), n("reasoningTokens"))
}

fn sdk_usage() -> Value {
    json!({ "input_tokens": 1000, "cached_tokens": 200, "output_tokens": 500, "reasoning_tokens": 100 })
}

#[tokio::test]
async fn openai_sdk_responses_create() {
    let s = setup().await;
    let out = run(&s, "responses_create").await;
    assert_eq!(out["text"], "Hello from mock", "{out}");
    assert_eq!(out["usage"], sdk_usage());
    let e = only_event(&s).await;
    assert_eq!((e["costMicrodollars"].as_i64(), tokens(&e)), (Some(MINI_COST), TOKENS), "{e}");
    assert_eq!(e["model"], "gpt-4o-mini");
    assert_eq!(s.mock.last().header("authorization"), Some("Bearer sk-provider-dummy"));
}

#[tokio::test]
async fn openai_sdk_responses_stream() {
    let s = setup().await;
    let out = run(&s, "responses_stream").await;
    assert_eq!(out["text"], "toktoktok", "{out}");
    assert_eq!(out["usage"], sdk_usage());
    let kinds: Vec<&str> = out["events"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert!(kinds.contains(&"response.output_text.delta"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"response.completed"));
    let e = only_event(&s).await;
    assert_eq!((e["costMicrodollars"].as_i64(), tokens(&e)), (Some(MINI_COST), TOKENS), "{e}");
    assert!(e["tags"].get("_svc_estimated").is_none(), "{e}");
}

#[tokio::test]
async fn openai_sdk_embeddings_create() {
    let s = setup().await;
    let out = run(&s, "embeddings_create").await;
    assert_eq!(out, json!({ "count": 2, "dims": 3, "prompt_tokens": 2500 }));
    let e = only_event(&s).await;
    // 2,500 tokens of text-embedding-3-small at $0.02 per 1M.
    assert_eq!((e["costMicrodollars"].as_i64(), tokens(&e)), (Some(50), (2500, 0, 0, 0)), "{e}");
    assert_eq!(e["model"], "text-embedding-3-small");
}

#[tokio::test]
async fn openai_agents_sdk_runs_one_turn() {
    let s = setup().await;
    let out = run(&s, "agents_turn").await;
    assert_eq!(out["final_output"], "Hello from mock", "{out}");
    assert_eq!((out["input_tokens"].as_i64(), out["output_tokens"].as_i64()), (Some(1000), Some(500)));
    let e = only_event(&s).await;
    assert_eq!((e["costMicrodollars"].as_i64(), tokens(&e)), (Some(MINI_COST), TOKENS), "{e}");
    assert_eq!(s.mock.last().path, "/v1/responses", "the Agents SDK speaks the Responses API");
}
