//! The Responses API and embeddings routes over real HTTP against the mock upstream:
//! usage to the microdollar from a body and from each terminal stream event, the
//! estimate for a cut stream and a background answer, built-in tools charged per
//! call (or tagged unpriced), budgets enforced as on chat completions, and the
//! bookkeeping endpoints passed through with the key's authentication and no charge.

use serde_json::{json, Value};

use crate::proxy::{setup, usage, Setup, MINI_COST, MINI_USAGE};
use crate::support::read;

/// A Responses request for gpt-4o-mini with `extra` merged in.
pub(crate) fn responses(extra: Value) -> Value {
    let mut body =
        json!({ "model": "gpt-4o-mini", "input": "What is the weather?", "max_output_tokens": 100 });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

/// The estimate of a gpt-4o-mini call, a safe upper bound: a token per prompt byte (and
/// 64 bytes a clamp may add) at $0.15/1M and `max_output` tokens at $0.60/1M, rounded up,
/// plus the 5 µ$ its parts' rounding may add.
fn mini_estimate(prompt_bytes: usize, max_output: u64) -> i64 {
    let input = u64::try_from(prompt_bytes + 64).unwrap();
    i64::try_from((input * 150_000 + max_output * 600_000).div_ceil(1_000_000)).unwrap() + 5
}

async fn one_event(s: &Setup) -> Value {
    let events = s.events(1).await;
    assert_eq!(events.len(), 1, "{events:?}");
    events[0].clone()
}

fn tokens(e: &Value) -> (i64, i64, i64, i64) {
    let n = |k: &str| e[k].as_i64().unwrap_or(-1);
    (n("inputTokens"), n("cachedInputTokens"), n("outputTokens"), n("reasoningTokens"))
}

#[tokio::test]
async fn a_json_answer_passes_through_and_is_charged_exactly() {
    let s = setup().await;
    let body = responses(json!({ "mock": { "usage": usage(MINI_USAGE) } }));
    let r = s.send("/v1/responses", &body, &[("authorization", "Bearer sk-test")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["object"], "response");
    assert_eq!(r.body["usage"]["input_tokens"], 1000);
    assert!(r.header("x-request-id").unwrap().starts_with("req_"));
    let up = s.mock.last();
    assert_eq!((up.method.as_str(), up.path.as_str()), ("POST", "/v1/responses"));
    assert_eq!(up.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(up.header("x-service-key"), None);
    assert_eq!(up.body, body.to_string().into_bytes(), "byte for byte");
    let e = one_event(&s).await;
    assert_eq!(e["costMicrodollars"], MINI_COST, "{e}");
    assert_eq!((e["provider"].as_str(), e["model"].as_str()), (Some("openai"), Some("gpt-4o-mini")));
    assert_eq!(tokens(&e), (1000, 200, 500, 0));
    assert!(e["tags"].get("_svc_estimated").is_none(), "{e}");
}

#[tokio::test]
async fn a_stream_is_charged_from_response_completed_and_passes_unchanged() {
    let s = setup().await;
    let usage = json!({ "input": 1000, "cached": 200, "output": 500, "reasoning": 100 });
    let body = responses(json!({ "stream": true, "mock": { "usage": usage } }));
    let r = s.send("/v1/responses", &body, &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.header("content-type").unwrap().starts_with("text/event-stream"));
    assert!(r.text.starts_with("event: response.created\ndata: "), "{}", r.text);
    assert!(r.text.contains("event: response.completed\n"), "{}", r.text);
    // No `stream_options` splice on this route: the request goes up as sent.
    assert_eq!(s.mock.last().body, body.to_string().into_bytes());
    let e = one_event(&s).await;
    assert_eq!(e["costMicrodollars"], MINI_COST, "reasoning is part of output: {e}");
    assert_eq!(tokens(&e), (1000, 200, 500, 100));
}

#[tokio::test]
async fn a_truncated_answer_is_billed_for_what_it_used() {
    let s = setup().await;
    let body = responses(
        json!({ "stream": true, "mock": { "usage": usage(MINI_USAGE), "terminal": "incomplete" } }),
    );
    let r = s.send("/v1/responses", &body, &[]).await;
    assert!(r.text.contains("event: response.incomplete\n"), "{}", r.text);
    let e = one_event(&s).await;
    assert_eq!(e["costMicrodollars"], MINI_COST, "{e}");
    assert!(e["tags"].get("_svc_estimated").is_none(), "a complete call: {e}");
}

#[tokio::test]
async fn a_failed_answer_with_usage_is_billed_its_usage() {
    let s = setup().await;
    let body =
        responses(json!({ "stream": true, "mock": { "usage": usage(MINI_USAGE), "terminal": "failed" } }));
    s.send("/v1/responses", &body, &[]).await;
    let e = one_event(&s).await;
    assert_eq!(e["costMicrodollars"], MINI_COST, "{e}");
    assert_eq!(tokens(&e).0, 1000);
}

#[tokio::test]
async fn a_failed_answer_without_usage_is_charged_the_estimate() {
    let s = setup().await;
    let body = responses(json!({ "stream": true, "mock": { "no_usage": true, "terminal": "failed" } }));
    s.send("/v1/responses", &body, &[]).await;
    let e = one_event(&s).await;
    assert_eq!(e["costMicrodollars"], mini_estimate(body.to_string().len(), 100), "{e}");
    assert_eq!(e["tags"]["_svc_estimated"], "true");
    assert_eq!(e["tags"]["_svc_stream_error"], "true");
}

#[tokio::test]
async fn a_stream_cut_before_its_terminal_event_is_charged_the_estimate() {
    let s = setup().await;
    // created, in_progress, item added, part added, 3 deltas: no terminal event.
    let body = responses(json!({ "stream": true, "mock": { "usage": usage(MINI_USAGE), "end_after": 7 } }));
    let r = s.send("/v1/responses", &body, &[]).await;
    assert!(!r.text.contains("response.completed"), "{}", r.text);
    let e = one_event(&s).await;
    assert_eq!(e["costMicrodollars"], mini_estimate(body.to_string().len(), 100), "{e}");
    assert_eq!(e["tags"]["_svc_estimated"], "true");
    assert_eq!(e["tags"]["_svc_stream_error"], "true");
}

#[tokio::test]
async fn without_max_output_tokens_the_estimate_uses_the_models_maximum() {
    let s = setup().await;
    let body = json!({ "model": "gpt-4o-mini", "input": "hi", "stream": true,
                       "mock": { "usage": usage(MINI_USAGE), "end_after": 3 } });
    s.send("/v1/responses", &body, &[]).await;
    let e = one_event(&s).await;
    // gpt-4o-mini's maximum output is 16,384 tokens.
    assert_eq!(e["costMicrodollars"], mini_estimate(body.to_string().len(), 16_384), "{e}");
}

#[tokio::test]
async fn a_background_answer_is_charged_the_estimate() {
    let s = setup().await;
    let body = responses(json!({ "background": true, "max_output_tokens": 1000 }));
    let r = s.send("/v1/responses", &body, &[]).await;
    assert_eq!((r.status, r.body["status"].as_str()), (200, Some("queued")), "{r:?}");
    let e = one_event(&s).await;
    assert_eq!(e["costMicrodollars"], mini_estimate(body.to_string().len(), 1000), "{e}");
    assert_eq!(e["tags"]["_svc_estimated"], "true");
    assert_eq!(e["tags"]["_svc_background"], "true");
}

#[tokio::test]
async fn builtin_tools_are_counted_and_charged_per_call() {
    for stream in [false, true] {
        let s = setup().await;
        let tools = ["web_search_call", "web_search_call", "code_interpreter_call", "file_search_call"];
        let body = responses(
            json!({ "stream": stream, "mock": { "usage": usage(MINI_USAGE), "builtin_tools": tools } }),
        );
        let r = s.send("/v1/responses", &body, &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        let e = one_event(&s).await;
        // Two searches at $10/1K, one container at $0.03, one file search at $2.50/1K.
        assert_eq!(e["costMicrodollars"], MINI_COST + 2 * 10_000 + 30_000 + 2_500, "stream {stream}: {e}");
        assert_eq!(
            e["tags"]["_svc_builtin_tool_calls"],
            "code_interpreter_call:1,file_search_call:1,web_search_call:2",
            "{e}"
        );
        assert!(e["tags"].get("_svc_estimated").is_none(), "{e}");
    }
}

/// Models served only by the Responses API are charged their own published prices, and
/// a model the table does not know never less than the most expensive of its provider.
#[tokio::test]
async fn responses_only_models_are_charged_their_price_and_unknown_ones_no_less() {
    let s = setup().await;
    let call = |model: &str| {
        responses(json!({ "model": model, "mock": { "usage": { "input": 10_000, "output": 2_000 } } }))
    };
    let priced = [("o1-pro", 2_700_000), ("o3-pro-2025-06-10", 360_000), ("gpt-5-pro", 390_000)];
    for model in priced.iter().map(|p| p.0).chain(["o9-pro-unreleased"]) {
        let r = s.send("/v1/responses", &call(model), &[]).await;
        assert_eq!(r.status, 200, "{model}: {r:?}");
    }
    let events = s.events(4).await;
    let event =
        |model: &str| events.iter().find(|e| e["model"] == model).unwrap_or_else(|| panic!("{model}"));
    // o1-pro: 10,000 × $150 + 2,000 × $600 per million tokens; o3-pro $20 / $80; gpt-5-pro
    // $15 / $120.
    for (model, expected) in priced {
        let e = event(model);
        assert_eq!(e["costMicrodollars"], expected, "{model}: {e}");
        assert!(e["tags"].get("_svc_unknown_model").is_none(), "{model}: {e}");
    }
    let e = event("o9-pro-unreleased");
    assert_eq!(e["tags"]["_svc_unknown_model"], "true", "{e}");
    assert!(e["costMicrodollars"].as_i64().unwrap() >= 2_700_000, "never below o1-pro: {e}");
}

/// An answer of 100,000 provider-run tool items (each streamed, then again in the
/// terminal event), of 1,000 kinds whose names the upstream chose: every item charged
/// once, and the tag naming them stays within a tag value's bound.
#[tokio::test]
async fn an_answer_of_100_000_tool_items_is_charged_each_once_with_a_bounded_tag() {
    let mut kinds = vec!["web_search_call".to_owned()];
    kinds.extend((1..1_000).map(|i| format!("x{i:03}_{}_call", "t".repeat(40))));
    for stream in [false, true] {
        let s = setup().await;
        let mock = json!({ "usage": usage(MINI_USAGE), "builtin_tools": kinds, "builtin_tools_repeat": 100 });
        let r = s.send("/v1/responses", &responses(json!({ "stream": stream, "mock": mock })), &[]).await;
        assert_eq!(r.status, 200, "stream {stream}");
        let e = one_event(&s).await;
        // 100 searches at $10/1K; the 99,900 others have no price and are tagged so.
        assert_eq!(e["costMicrodollars"], MINI_COST + 100 * 10_000, "stream {stream}: {e}");
        assert_eq!(e["tags"]["_svc_unpriced_builtin_tool"], "true", "{e}");
        assert_eq!(e["inputTokens"], 1000, "the usage was read, not estimated: {e}");
        let tag = e["tags"]["_svc_builtin_tool_calls"].as_str().unwrap();
        assert!(tag.len() <= 256 && tag.starts_with("web_search_call:100,x001_"), "{tag}");
        assert!(tag.split(',').all(|entry| entry.ends_with("_call:100")), "whole entries only: {tag}");
    }
}

#[tokio::test]
async fn an_unpriced_builtin_tool_is_tagged_never_silently_free() {
    let s = setup().await;
    let body = responses(
        json!({ "mock": { "usage": usage(MINI_USAGE), "builtin_tools": ["image_generation_call"] } }),
    );
    s.send("/v1/responses", &body, &[]).await;
    let e = one_event(&s).await;
    assert_eq!(e["costMicrodollars"], MINI_COST, "{e}");
    assert_eq!(e["tags"]["_svc_estimated"], "true", "{e}");
    assert_eq!(e["tags"]["_svc_unpriced_builtin_tool"], "true", "{e}");
    assert_eq!(e["tags"]["_svc_builtin_tool_calls"], "image_generation_call:1");
}

#[tokio::test]
async fn a_budget_refuses_a_responses_call_before_the_provider() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 10 })).await;
    let r = s.send("/v1/responses", &responses(json!({})), &[]).await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");
    assert_eq!(r.header("x-service-denied"), Some("1"));
    assert_eq!(s.mock.count(), 0, "nothing forwarded");
}

#[tokio::test]
async fn a_body_that_is_not_a_responses_request_is_refused() {
    let s = setup().await;
    let r = s.send("/v1/responses", &json!({ "model": "gpt-4o-mini", "stream": "yes" }), &[]).await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
    let r = s.send("/v1/responses", &json!({ "input": "hi" }), &[]).await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "model is required: {r:?}");
    assert_eq!(s.mock.count(), 0);
}

#[tokio::test]
async fn embeddings_are_charged_from_prompt_tokens() {
    let s = setup().await;
    let body = json!({ "model": "text-embedding-3-large", "input": ["a", "b"], "mock": { "usage": { "input": 10_000 } } });
    let r = s.send("/v1/embeddings", &body, &[("authorization", "Bearer sk-test")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"].as_array().map(Vec::len), Some(2));
    assert_eq!(s.mock.last().path, "/v1/embeddings");
    assert_eq!(s.mock.last().header("authorization"), Some("Bearer sk-test"));
    let e = one_event(&s).await;
    // 10,000 tokens at $0.13 per 1M.
    assert_eq!(e["costMicrodollars"], 1_300, "{e}");
    assert_eq!(tokens(&e), (10_000, 0, 0, 0));
}

#[tokio::test]
async fn embeddings_without_usage_are_charged_the_input_estimate() {
    let s = setup().await;
    let input = "x".repeat(4_000_000 / 1000);
    let body = json!({ "model": "text-embedding-3-small", "input": input, "mock": { "no_usage": true } });
    s.send("/v1/embeddings", &body, &[]).await;
    let e = one_event(&s).await;
    // The `input` value (4,002 bytes with its quotes) at a token per byte, $0.02/1M,
    // plus the 5 µ$ of rounding slack.
    let expected = i64::try_from((4_002u64 * 20_000).div_ceil(1_000_000)).unwrap() + 5;
    assert_eq!(e["costMicrodollars"], expected, "{e}");
    assert_eq!(e["tags"]["_svc_no_usage"], "true");
}

#[tokio::test]
async fn bookkeeping_endpoints_pass_through_uncharged() {
    let s = setup().await;
    let proxy = s.app.proxy();
    let calls = [
        (reqwest::Method::GET, "/v1/responses/resp_1?include=x", None),
        (reqwest::Method::DELETE, "/v1/responses/resp_1", None),
        (reqwest::Method::POST, "/v1/responses/resp_1/cancel", None),
        (reqwest::Method::GET, "/v1/responses/resp_1/input_items?limit=5", None),
        (
            reqwest::Method::POST,
            "/v1/responses/input_tokens",
            Some(json!({ "model": "gpt-4o-mini", "input": "hi" })),
        ),
    ];
    for (method, path, body) in calls {
        let mut req = proxy.request(method.clone(), path).header("authorization", "Bearer sk-test");
        let unauthenticated = read(req.try_clone().unwrap().send().await.unwrap()).await;
        assert_eq!((unauthenticated.status, unauthenticated.code()), (401, "unauthorized"), "{path}");
        req = req.header("x-service-key", &s.raw);
        if let Some(body) = &body {
            req = req.header("content-type", "application/json").body(body.to_string());
        }
        let r = read(req.send().await.unwrap()).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_eq!(r.body["object"], "mock.bookkeeping", "{path}");
        assert_eq!(r.body["method"], method.as_str());
        assert_eq!(r.header("service-version"), Some("2026-04-01"));
        let up = s.mock.last();
        assert_eq!(
            format!(
                "{}{}",
                up.path,
                if up.query.is_empty() { String::new() } else { format!("?{}", up.query) }
            ),
            path
        );
        assert_eq!(up.header("authorization"), Some("Bearer sk-test"));
        assert_eq!(up.header("x-service-key"), None, "the spendgate key never goes upstream");
        if let Some(body) = &body {
            assert_eq!(up.body, body.to_string().into_bytes());
        }
    }
    assert_eq!(s.mock.count(), 5, "unauthenticated calls never reached the provider");
    for odd in ["/v1/responses/%2E%2E", "/v1/responses/%2E%2E/cancel", "/v1/responses/a%2Fb/input_items"] {
        let method = if odd.ends_with("cancel") { reqwest::Method::POST } else { reqwest::Method::GET };
        let r = read(proxy.request(method, odd).header("x-service-key", &s.raw).send().await.unwrap()).await;
        // Refused by the id check, or not even routed: in the error envelope either way.
        let refused = [(400, "validation_error"), (404, "not_found")];
        assert!(refused.contains(&(r.status, r.code())), "{odd}: {r:?}");
    }
    let r = read(
        proxy
            .request(reqwest::Method::GET, "/v1/responses/...")
            .header("x-service-key", &s.raw)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
    assert_eq!(s.mock.count(), 5, "an odd id never reaches the provider");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let listed = s.owner.get("/api/cost-events?limit=100").await;
    assert_eq!(listed.body["data"].as_array().map(Vec::len), Some(0), "no cost event: {listed:?}");
}

#[tokio::test]
async fn key_policy_applies_to_responses_and_embeddings() {
    let s = setup().await;
    let patch = json!({ "allowedModels": ["gpt-4o-mini"], "allowedCustomers": ["acme"] });
    let r = s.owner.patch(&format!("/api/keys/{}", s.key_id), patch).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.send("/v1/responses", &responses(json!({ "model": "gpt-4.1" })), &[]).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    assert_eq!(r.header("x-service-denied"), Some("1"));
    let r = s.send("/v1/embeddings", &json!({ "model": "text-embedding-3-small", "input": "x" }), &[]).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    let r = s.send("/v1/responses", &responses(json!({})), &[("x-service-customer", "globex")]).await;
    assert_eq!((r.status, r.code()), (403, "customer_not_allowed"), "{r:?}");
    assert_eq!(s.mock.count(), 0, "nothing forwarded");
    // Allowed: tags, session and customer reach the cost event.
    let headers = [
        ("x-service-customer", "acme"),
        ("x-service-session", "run-1"),
        ("x-service-tags", r#"{"team":"ml"}"#),
    ];
    let r = s
        .send("/v1/responses", &responses(json!({ "mock": { "usage": usage(MINI_USAGE) } })), &headers)
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-service-session"), Some("run-1"));
    let e = one_event(&s).await;
    assert_eq!((e["customerId"].as_str(), e["sessionId"].as_str()), (Some("acme"), Some("run-1")), "{e}");
    assert_eq!(e["tags"]["team"], "ml");
}
