//! Money safety on the proxy: every call that reached a provider is charged once, a
//! stream counts as complete only on the provider's end marker, refusals leave a
//! record, holds are released by their owner, and a provider's key never reaches
//! another provider.

use std::time::Duration;

use serde_json::{json, Value};

use crate::proxy::{openai, setup, usage, Setup, MINI_COST, MINI_USAGE};

async fn events_where(s: &Setup, query: &str, at_least: usize) -> Vec<Value> {
    for _ in 0..100 {
        let r = s.owner.get(&format!("/api/cost-events?limit=100&{query}")).await;
        let data = r.body["data"].as_array().cloned().unwrap_or_default();
        if data.len() >= at_least {
            return data;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {at_least} events for {query}\n{}", s.app.server.logs());
}

#[tokio::test]
async fn calls_reusing_a_request_id_are_each_charged() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000_000 }))
        .await;
    let request_id = "0192f5e4-7b3a-7c1d-9e2f-3a4b5c6d7e8f";
    let body = openai(json!({ "mock": { "usage": usage(MINI_USAGE) } }));
    let headers = [("x-service-request-id", request_id)];
    let calls = (0..40).map(|_| s.send("/v1/chat/completions", &body, &headers));
    for r in futures_util::future::join_all(calls).await {
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("x-service-request-id"), Some(request_id));
    }
    assert_eq!(s.mock.count(), 40);
    let events = events_where(&s, &format!("requestId={request_id}"), 40).await;
    assert_eq!(events.len(), 40, "one event per call");
    for _ in 0..100 {
        if s.key_spend().await == (40 * MINI_COST, 40 * MINI_COST) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.key_spend().await, (40 * MINI_COST, 40 * MINI_COST), "every call charged, nothing reserved");
}

#[tokio::test]
async fn a_refused_call_leaves_a_denied_record() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 10 })).await;
    let r = s
        .send(
            "/v1/chat/completions",
            &openai(json!({})),
            &[("x-service-session", "run-7"), ("x-service-tags", r#"{"team":"ml"}"#)],
        )
        .await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");
    let denied = events_where(&s, "budgetStatus=denied", 1).await;
    assert_eq!(denied.len(), 1);
    let e = &denied[0];
    assert_eq!(e["costMicrodollars"], 0);
    assert_eq!(e["model"], "gpt-4o-mini");
    assert_eq!(e["provider"], "openai");
    assert_eq!(e["source"], "proxy");
    assert_eq!(e["sessionId"], "run-7");
    assert_eq!(e["tags"]["team"], "ml");
    assert_eq!(s.mock.count(), 0);
    assert_eq!(s.key_spend().await, (0, 0));
    let approved = s.owner.get("/api/cost-events?budgetStatus=approved").await;
    assert_eq!(approved.body["data"].as_array().map(Vec::len), Some(0));
}

/// The one recorded event of a call that had `mock` as its steering.
async fn only_event(s: &Setup) -> Value {
    s.events(1).await[0].clone()
}

fn assert_stream_error(e: &Value, at_least: i64) {
    assert_eq!(e["tags"]["_svc_estimated"], "true", "{e}");
    assert_eq!(e["tags"]["_svc_stream_error"], "true", "{e}");
    assert!(e["costMicrodollars"].as_i64().unwrap() >= at_least, "{e}");
}

#[tokio::test]
async fn an_anthropic_error_event_mid_stream_is_not_a_completed_call() {
    let s = setup().await;
    // message_start reports 100 input tokens (300 µ$ on claude-sonnet-4-5), then an error.
    let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true,
        "mock": { "error_after": 4, "usage": { "input": 100, "output": 50 } } });
    let r = s.send("/v1/messages", &body, &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.text.contains("overloaded_error") && !r.text.contains("message_stop"), "{}", r.text);
    assert_stream_error(&only_event(&s).await, 300);
}

#[tokio::test]
async fn a_stream_closed_before_its_end_marker_is_not_a_completed_call() {
    // OpenAI: the usage chunk came, `[DONE]` did not.
    let s = setup().await;
    let body = openai(json!({ "stream": true, "stream_options": { "include_usage": true },
        "mock": { "end_after": 6, "usage": usage(MINI_USAGE) } }));
    let r = s.chat(body).await;
    assert_eq!(r.status, 200);
    assert!(r.text.contains("\"usage\":{") && !r.text.contains("[DONE]"), "{}", r.text);
    assert_stream_error(&only_event(&s).await, MINI_COST);

    // Gemini: the chunk with `finishReason` never came.
    let s = setup().await;
    let body = json!({ "contents": [], "mock": { "end_after": 2, "usage": { "input": 100, "output": 50 } } });
    let r = s.send("/v1beta/models/gemini-2.5-flash:streamGenerateContent", &body, &[]).await;
    assert_eq!(r.status, 200);
    assert!(!r.text.contains("finishReason"), "{}", r.text);
    assert_stream_error(&only_event(&s).await, 1);

    // Anthropic: the connection closed normally before `message_stop`.
    let s = setup().await;
    let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true,
        "mock": { "end_after": 5, "usage": { "input": 100, "output": 50 } } });
    let r = s.send("/v1/messages", &body, &[]).await;
    assert_eq!(r.status, 200);
    assert_stream_error(&only_event(&s).await, 300);
}

#[tokio::test]
async fn a_complete_stream_is_charged_its_usage_untagged() {
    let s = setup().await;
    let body = openai(json!({ "stream": true, "mock": { "usage": usage(MINI_USAGE) } }));
    assert_eq!(s.chat(body).await.status, 200);
    let e = only_event(&s).await;
    assert_eq!(e["costMicrodollars"], MINI_COST, "{e}");
    assert!(e["tags"].get("_svc_estimated").is_none(), "{e}");
}

#[tokio::test]
async fn the_upstream_override_is_for_the_openai_route_only() {
    let s = setup().await;
    let anthropic = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [] });
    let headers = [("x-service-upstream", "https://api.openai.com"), ("x-api-key", "sk-ant-secret")];
    let r = s.send("/v1/messages", &anthropic, &headers).await;
    assert_eq!((r.status, r.code()), (400, "invalid_upstream"), "{r:?}");
    let headers = [("x-service-upstream", "https://api.anthropic.com"), ("x-goog-api-key", "AIza-secret")];
    let r =
        s.send("/v1beta/models/gemini-2.5-flash:generateContent", &json!({ "contents": [] }), &headers).await;
    assert_eq!((r.status, r.code()), (400, "invalid_upstream"), "{r:?}");
    assert_eq!(s.mock.count(), 0, "nothing forwarded anywhere");
}

#[tokio::test]
async fn a_client_gone_mid_call_leaves_nothing_held() {
    let s = setup().await;
    // Room for two estimates (about 65 µ$ each), not three.
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 200 })).await;
    let stalled = openai(json!({ "stream": true, "mock": { "stall_after": 2 } }));
    let mut resp = s.post("/v1/chat/completions", &stalled).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.chunk().await.unwrap().is_some());
    drop(resp);
    for _ in 0..100 {
        if s.mock.cancelled_streams() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The cancelled call is charged its estimate; nothing else stays held, on the
    // actors or (shared budgets) in the database.
    let estimate = s.events(1).await[0]["costMicrodollars"].as_i64().unwrap();
    let r = s.chat(openai(json!({ "mock": { "usage": { "input": 10, "output": 5 } } }))).await;
    assert_eq!(r.status, 200, "admitted at once: {r:?}");
    s.events(2).await;
    let (live, settled) = s.key_spend().await;
    assert_eq!(live, settled, "nothing reserved");
    assert!(settled >= estimate);
    if crate::support::backend_is_postgres() {
        assert_eq!(
            s.app.query_n("SELECT COUNT(*) AS n FROM budget_reservations").await,
            0,
            "no database hold left"
        );
    }
}

#[tokio::test]
async fn a_client_gone_before_the_answer_is_settled_at_once() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000_000 }))
        .await;
    // The provider takes 10 s to answer; the client gives up after 300 ms.
    let slow = openai(json!({ "mock": { "delay_ms": 10_000, "usage": usage(MINI_USAGE) } }));
    let gone = s.post("/v1/chat/completions", &slow).timeout(Duration::from_millis(300)).send().await;
    assert!(gone.is_err(), "the client gave up first: {:?}", gone.map(|r| r.status()));
    // Within a second (not after the provider's 10 s): charged its estimate, nothing held.
    let e = tokio::time::timeout(Duration::from_secs(2), s.events(1)).await.expect("recorded at once");
    let e = &e[0];
    assert_eq!(e["tags"]["_svc_cancelled"], "true", "{e}");
    let estimate = e["costMicrodollars"].as_i64().unwrap();
    assert!(estimate > 0 && estimate < MINI_COST, "{e}");
    assert_eq!(s.key_spend().await, (estimate, estimate), "nothing stays reserved");
    if crate::support::backend_is_postgres() {
        assert_eq!(s.app.query_n("SELECT COUNT(*) AS n FROM budget_reservations").await, 0);
    }
}

/// A short prompt is bounded at the prices it can reach: not the long-context tier
/// (200,000 tokens away) nor a cache write it does not ask for. Claude Sonnet 4.5, a
/// 135-byte body (+64) and 17 output tokens: 199 × $3 + 17 × $15 = 857 µ$ with the
/// slack, where the tier's $6 / $22.50 made it 1,582. The same call with a
/// `cache_control` block may be billed the 1-hour write ($6): 1,628 µ$ for its 228
/// bytes. A 1,000 µ$ budget admits the first and refuses the second.
#[tokio::test]
async fn a_short_prompt_is_bounded_at_the_prices_it_can_reach() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000,
        "policy": "strict_block" }))
        .await;
    let cached = json!({ "model": "claude-sonnet-4-5", "max_tokens": 17,
        "system": [{ "type": "text", "text": "x", "cache_control": { "type": "ephemeral" } }],
        "messages": [{ "role": "user", "content": "hi" }] });
    let r = s.send("/v1/messages", &cached, &[]).await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");
    assert_eq!(r.body["error"]["details"]["reserved_microdollars"], 1_628, "{r:?}");
    let plain = json!({ "model": "claude-sonnet-4-5", "max_tokens": 17,
        "messages": [{ "role": "user", "content": "Say hi" }], "mock": { "usage": { "input": 20, "output": 17 } } });
    let r = s.send("/v1/messages", &plain, &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.events(1).await[0]["costMicrodollars"], 20 * 3 + 17 * 15);
}

/// A refusal says what to do: the largest output bound the room pays for after the
/// prompt, and `exactCeiling` on a strict budget without it. Sending that bound passes.
/// (Claude Sonnet 4.5 on a 1,000 µ$ budget: a 137-byte body asking 1,000 output tokens;
/// after its 201 prompt tokens at $3, 995 − 603 µ$ pays for 26 tokens at $15.)
#[tokio::test]
async fn a_refusal_names_the_output_bound_the_room_pays_for() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000,
        "policy": "strict_block" }))
        .await;
    let call = |max_tokens: u32| {
        json!({ "model": "claude-sonnet-4-5", "max_tokens": max_tokens,
            "messages": [{ "role": "user", "content": "Say hi" }], "mock": { "usage": { "input": 20, "output": 17 } } })
    };
    let r = s.send("/v1/messages", &call(1_000), &[]).await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");
    let details = &r.body["error"]["details"];
    assert_eq!(
        details["suggestions"],
        json!([{ "type": "max_output_tokens", "maxOutputTokens": 26 }, { "type": "exact_ceiling" }]),
        "{r:?}"
    );
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("send max_tokens ≤ 26") && message.contains("exactCeiling"), "{message}");
    let r = s.send("/v1/messages", &call(26), &[]).await;
    assert_eq!(r.status, 200, "the suggested bound fits: {r:?}");
}

/// A tool call that costs nothing fits a strict budget that just refused a priced one
/// (on PostgreSQL the budget's lease has no room left, and a free call must not ask it
/// for any).
#[tokio::test]
async fn a_free_tool_call_passes_a_budget_that_refused_a_priced_one() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000,
        "policy": "strict_block" }))
        .await;
    let tool = |cost: i64| json!({ "toolName": "search", "toolServer": "web", "costMicrodollars": cost });
    assert_eq!(s.send("/v1/mcp/events", &tool(800), &[]).await.status, 201);
    let refused = s.send("/v1/mcp/events", &tool(800), &[]).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    let free = s.send("/v1/mcp/events", &tool(0), &[]).await;
    assert_eq!(free.status, 201, "a call that costs nothing fits: {free:?}");
    assert_eq!(s.key_spend().await, (800, 800));
}

#[tokio::test]
async fn mcp_routes_authenticate_before_reading_the_body() {
    let s = setup().await;
    for path in ["/v1/mcp/events", "/v1/mcp/budget/check"] {
        let r = s
            .app
            .proxy()
            .request(reqwest::Method::POST, path)
            .header("content-type", "text/plain")
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let r = s
            .app
            .proxy()
            .request(reqwest::Method::POST, path)
            .header("x-service-key", "sk_live_not-a-key")
            .header("content-type", "application/json")
            .body("{")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
}

#[tokio::test]
async fn mcp_events_reusing_a_request_id_are_each_charged() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000_000 }))
        .await;
    let event = json!({ "toolName": "search", "toolServer": "web", "costMicrodollars": 700, "requestId": "tool-call-1" });
    for _ in 0..2 {
        let r = s.send("/v1/mcp/events", &event, &[]).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    assert_eq!(s.key_spend().await, (1_400, 1_400));
    let absurd = json!({ "toolName": "search", "toolServer": "web", "costMicrodollars": i64::MAX });
    let r = s.send("/v1/mcp/events", &absurd, &[]).await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
    assert_eq!(s.key_spend().await, (1_400, 1_400));
}
