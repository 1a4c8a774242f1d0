//! The enforcement proxy over real HTTP: every provider route in both stream modes
//! against the mock upstreams, metering to the microdollar, header rules, every budget
//! rule, key policy, plan cap, cancellation and concurrency.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::mock::MockUpstream;
use crate::support::{create_key, read, Client, Resp, TestApp};

/// A server whose three upstreams point at one mock, an owner and a key.
pub(crate) struct Setup {
    pub app: TestApp,
    pub mock: MockUpstream,
    pub owner: Client,
    pub key_id: String,
    pub raw: String,
}

pub(crate) async fn setup_with(extra: &[(&'static str, String)]) -> Setup {
    let mock = MockUpstream::start();
    let mut env = vec![
        ("SPENDGATE_UPSTREAM_OPENAI", mock.base.clone()),
        ("SPENDGATE_UPSTREAM_ANTHROPIC", mock.base.clone()),
        ("SPENDGATE_UPSTREAM_GEMINI", mock.base.clone()),
    ];
    env.extend(extra.iter().cloned());
    let app = TestApp::start_with(&env).await;
    let owner = app.owner().await;
    crate::support::subscribe_all(&owner).await;
    let (key_id, raw) = create_key(&owner, "agent").await;
    Setup { app, mock, owner, key_id, raw }
}

pub(crate) async fn setup() -> Setup {
    setup_with(&[]).await
}

impl Setup {
    pub(crate) fn post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.app
            .proxy()
            .request(reqwest::Method::POST, path)
            .header("x-service-key", &self.raw)
            .header("content-type", "application/json")
            .body(body.to_string())
    }

    pub(crate) async fn send(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
        let mut r = self.post(path, body);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        read(r.send().await.expect("request")).await
    }

    pub(crate) async fn chat(&self, body: Value) -> Resp {
        self.send("/v1/chat/completions", &body, &[]).await
    }

    pub(crate) async fn budget(&self, body: Value) -> Value {
        let r = self.owner.post("/api/budgets", body).await;
        assert_eq!(r.status, 201, "{r:?}");
        r.body["data"].clone()
    }

    /// The cost events of calls that went through, recorded so far (recording happens
    /// after the response, so poll). Denial records are left out.
    pub(crate) async fn events(&self, at_least: usize) -> Vec<Value> {
        for _ in 0..100 {
            let r = self.owner.get("/api/cost-events?limit=100").await;
            let mut data = r.body["data"].as_array().cloned().unwrap_or_default();
            data.retain(|e| e["budgetStatus"] != "denied");
            if data.len() >= at_least {
                return data;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let r = self.owner.get("/api/cost-events?limit=100").await;
        let seen: Vec<String> =
            r.body["data"].as_array().unwrap().iter().map(|e| e["tags"].to_string()).collect();
        panic!("expected {at_least} cost events, have {}: {seen:?}\n{}", seen.len(), self.app.server.logs());
    }

    pub(crate) async fn user_id(&self) -> String {
        let r = self.owner.get("/api/auth/session").await;
        r.body["data"]["user"]["id"].as_str().unwrap().to_owned()
    }

    /// Spend (with reservations) of the key entity per `/api/budgets/status`, and the
    /// settled spend of the same budget from the database.
    pub(crate) async fn key_spend(&self) -> (i64, i64) {
        let status = self.app.control().get_with_key("/api/budgets/status", &self.raw).await;
        let live = status.body["entities"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["entityType"] == "api_key")
            .map(|e| e["spendMicrodollars"].as_i64().unwrap())
            .unwrap_or(0);
        let list = self.owner.get("/api/budgets").await;
        let settled = list.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["entityType"] == "api_key")
            .map(|b| b["spendMicrodollars"].as_i64().unwrap())
            .unwrap_or(0);
        (live, settled)
    }
}

pub(crate) fn openai(extra: Value) -> Value {
    let mut body = json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 100 });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

/// gpt-4o-mini at 1000 prompt (200 cached) + 500 output tokens: 120 + 15 + 300 µ$.
pub(crate) const MINI_USAGE: &str = r#"{"input":1000,"cached":200,"output":500}"#;
pub(crate) const MINI_COST: i64 = 435;

pub(crate) fn usage(u: &str) -> Value {
    serde_json::from_str(u).unwrap()
}

#[tokio::test]
async fn openai_json_passes_through_and_is_charged_exactly() {
    let s = setup().await;
    let body = openai(json!({ "mock": { "usage": usage(MINI_USAGE) } }));
    let r = s
        .send(
            "/v1/chat/completions",
            &body,
            &[("authorization", "Bearer sk-test"), ("openai-organization", "org-1")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["object"], "chat.completion");
    assert_eq!(r.body["usage"]["prompt_tokens"], 1000);
    // Upstream headers passed back, ours added.
    assert!(r.header("x-request-id").unwrap().starts_with("req_"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("9999"));
    assert!(r.header("x-service-trace-id").is_some_and(|t| t.len() == 32));
    assert!(r.header("x-service-request-id").is_some());
    assert_eq!(r.header("service-version"), Some("2026-04-01"));
    assert!(r.header("x-service-overhead-ms").unwrap().parse::<f64>().is_ok());
    // The provider's length passes through: a JSON answer is not re-framed in chunks.
    assert_eq!(r.header("content-length"), Some(r.text.len().to_string().as_str()));
    assert_eq!(r.header("transfer-encoding"), None);
    let timing = r.header("server-timing").unwrap();
    for step in ["preflight", "body", "budget", "overhead", "upstream", "total"] {
        assert!(timing.contains(&format!("{step};dur=")), "{timing}");
    }
    // Forwarded exactly: provider credentials yes, ours no; the body byte for byte.
    let up = s.mock.last();
    assert_eq!(up.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(up.header("openai-organization"), Some("org-1"));
    assert_eq!(up.header("x-service-key"), None);
    assert_eq!(up.body, body.to_string().into_bytes());

    let events = s.events(1).await;
    let e = &events[0];
    assert_eq!(e["costMicrodollars"], MINI_COST, "{e}");
    assert_eq!(e["source"], "proxy");
    assert_eq!(e["provider"], "openai");
    assert_eq!(e["model"], "gpt-4o-mini");
    assert_eq!(
        (e["inputTokens"].as_i64(), e["outputTokens"].as_i64(), e["cachedInputTokens"].as_i64()),
        (Some(1000), Some(500), Some(200))
    );
    assert_eq!(e["traceId"].as_str(), r.header("x-service-trace-id"));
    assert_eq!(e["requestId"].as_str(), r.header("x-service-request-id"));
    assert_eq!(e["budgetStatus"], "skipped");
    let b = &e["costBreakdown"];
    assert_eq!(
        b["input"].as_i64().unwrap()
            + b["output"].as_i64().unwrap()
            + b["cached"].as_i64().unwrap()
            + b["reasoning"].as_i64().unwrap_or(0),
        MINI_COST
    );
    assert_eq!(s.app.outbox_count("cost_event.created").await, 1);
    // The outbox row refers to the event (the webhook object is built from it).
    let refs = s
        .app
        .query_n(
            "SELECT COUNT(*) AS n FROM event_outbox o JOIN cost_events c \
             ON o.payload = '{\"cost_event_id\":\"' || c.id || '\"}' WHERE o.event_type = 'cost_event.created'",
        )
        .await;
    assert_eq!(refs, 1);
}

#[tokio::test]
async fn openai_stream_gets_usage_added_upstream_and_hidden_from_the_client() {
    let s = setup().await;
    let r = s.chat(openai(json!({ "stream": true, "mock": { "usage": usage(MINI_USAGE) } }))).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.header("content-type").unwrap().starts_with("text/event-stream"));
    assert!(r.text.ends_with("data: [DONE]\n\n"), "{}", r.text);
    assert!(!r.text.contains("\"usage\":{"), "the added usage chunk must not reach the client: {}", r.text);
    let sent = s.mock.last().json();
    assert_eq!(sent["stream_options"]["include_usage"], true);
    let e = &s.events(1).await[0];
    assert_eq!(e["costMicrodollars"], MINI_COST);

    // A client that asked for usage gets it, and the body goes up unchanged.
    let body = openai(
        json!({ "stream": true, "stream_options": { "include_usage": true }, "mock": { "usage": usage(MINI_USAGE) } }),
    );
    let r = s.chat(body.clone()).await;
    assert!(r.text.contains("\"prompt_tokens\":1000"), "{}", r.text);
    assert_eq!(s.mock.last().body, body.to_string().into_bytes());
    let events = s.events(2).await;
    assert!(events.iter().all(|e| e["costMicrodollars"] == MINI_COST));
}

#[tokio::test]
async fn anthropic_json_and_stream_with_cache_writes() {
    let s = setup().await;
    // claude-sonnet-4-5: 100 uncached × 3 + 1000 cache reads × 0.3 + 200 × 3.75 (5m)
    // + 100 × 6 (1h) + 50 output × 15 = 300 + 300 + 750 + 600 + 750.
    let mock = json!({ "usage": { "input": 100, "cached": 1000, "cache_write_5m": 200, "cache_write_1h": 100, "output": 50 } });
    let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{ "role": "user", "content": "hi" }], "mock": mock });
    let r = s.send("/v1/messages", &body, &[("x-api-key", "ak-test")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["type"], "message");
    let up = s.mock.last();
    assert_eq!(up.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(up.header("x-api-key"), Some("ak-test"));

    let mut stream = body.clone();
    stream["stream"] = json!(true);
    let r = s.send("/v1/messages", &stream, &[("anthropic-version", "2024-01-01")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text.contains("event: message_stop"));
    assert_eq!(s.mock.last().header("anthropic-version"), Some("2024-01-01"));
    let events = s.events(2).await;
    for e in &events {
        assert_eq!(e["costMicrodollars"], 2700, "{e}");
        assert_eq!(e["provider"], "anthropic");
    }
}

#[tokio::test]
async fn gemini_routes_meter_thinking_and_keep_the_response_id() {
    let s = setup().await;
    // gemini-2.5-flash: 600 uncached × 0.3 + 400 cached × 0.03 + 200 output × 2.5
    // + 300 thinking × 2.5 = 180 + 12 + 500 + 750.
    let body = json!({ "contents": [{ "parts": [{ "text": "hi" }] }],
        "mock": { "usage": { "input": 1000, "cached": 400, "output": 200, "reasoning": 300 } } });
    let r = s
        .send("/v1beta/models/gemini-2.5-flash:generateContent", &body, &[("authorization", "Bearer g-key")])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let up = s.mock.last();
    assert_eq!(up.header("x-goog-api-key"), Some("g-key"));
    assert_eq!(up.header("authorization"), None);
    let request_id = r.header("x-request-id").unwrap().to_owned();
    assert_eq!(r.header("x-service-request-id"), Some(request_id.as_str()));

    let r = s.send("/v1beta/models/gemini-2.5-flash:streamGenerateContent", &body, &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(s.mock.last().query.contains("alt=sse"));
    assert!(r.text.starts_with("data: "), "{}", r.text);
    let events = s.events(2).await;
    for e in &events {
        assert_eq!(e["costMicrodollars"], 1442, "{e}");
        assert_eq!(e["provider"], "google");
        assert_eq!(e["model"], "gemini-2.5-flash");
        assert_eq!(e["tags"]["_svc_thinking_tokens"], "300", "{e}");
        assert!(e["tags"]["_svc_google_response_id"].as_str().is_some_and(|id| !id.is_empty()), "{e}");
    }
    assert_eq!(s.send("/v1beta/models/gemini-2.5-flash:countTokens", &body, &[]).await.code(), "not_found");
}

#[tokio::test]
async fn unknown_models_and_missing_usage_are_charged_their_estimate() {
    let s = setup().await;
    let r =
        s.chat(openai(json!({ "model": "gpt-unreleased-9", "mock": { "usage": usage(MINI_USAGE) } }))).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.header("x-ratelimit-limit").is_some(), "per-key rate-limit headers: {r:?}");
    let r = s.chat(openai(json!({ "mock": { "no_usage": true } }))).await;
    assert_eq!(r.status, 200, "{r:?}");
    let events = s.events(2).await;
    let unknown = events.iter().find(|e| e["model"] == "gpt-unreleased-9").unwrap();
    assert_eq!(unknown["tags"]["_svc_unknown_model"], "true", "{unknown}");
    assert_eq!(unknown["tags"]["_svc_estimated"], "true");
    assert!(unknown["costMicrodollars"].as_i64().unwrap() > 0, "never silently $0: {unknown}");
    let no_usage = events.iter().find(|e| e["model"] == "gpt-4o-mini").unwrap();
    assert_eq!(no_usage["tags"]["_svc_no_usage"], "true", "{no_usage}");
    assert!(no_usage["costMicrodollars"].as_i64().unwrap() > 0);
    let metrics = s.app.proxy().get("/health/metrics").await;
    assert!(metrics.text.contains("proxy_estimated_total"), "{}", metrics.text);
    // Both events went through the accounting writer.
    let committed = metrics.body["spendgate_accounting_total"]
        .as_array()
        .and_then(|v| v.iter().find(|m| m["labels"]["figure"] == "events"))
        .and_then(|m| m["value"].as_f64());
    assert!(committed.is_some_and(|n| n >= 2.0), "{}", metrics.text);
    assert!(metrics.body["spendgate_accounting_queue_depth"].is_array(), "{}", metrics.text);
}

#[tokio::test]
async fn request_errors_and_unknown_routes() {
    let s = setup().await;
    let proxy = s.app.proxy();
    let r = read(
        proxy
            .request(reqwest::Method::POST, "/v1/chat/completions")
            .json(&openai(json!({})))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    assert!(r.header("x-service-trace-id").is_some());
    let r = read(
        proxy
            .request(reqwest::Method::POST, "/v1/chat/completions")
            .header("x-service-key", "svc_live_sk_nope")
            .json(&openai(json!({})))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    let r = read(
        proxy
            .request(reqwest::Method::GET, "/v1/chat/completions")
            .header("x-service-key", &s.raw)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    assert_eq!(s.send("/v1/audio/speech", &json!({}), &[]).await.code(), "not_found");
    let r = read(s.post("/v1/chat/completions", &json!({})).body("{not json").send().await.unwrap()).await;
    assert_eq!((r.status, r.code()), (400, "invalid_json"));
    let r = s.chat(json!({ "messages": [] })).await;
    assert_eq!(r.issue_paths(), vec![json!(["model"])]);
    let big = "x".repeat(1_048_577);
    let r = read(s.post("/v1/chat/completions", &json!({})).body(big).send().await.unwrap()).await;
    assert_eq!((r.status, r.code()), (413, "payload_too_large"));
    let r = s
        .send(
            "/v1/chat/completions",
            &openai(json!({})),
            &[("x-service-upstream", "https://evil.example.com")],
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_upstream"));
    // The configured base counts as the default it replaces.
    let r = s.send("/v1/chat/completions", &openai(json!({})), &[("x-service-upstream", &s.mock.base)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.mock.count(), 1, "nothing refused reached upstream");
}

#[tokio::test]
async fn request_headers_follow_their_rules() {
    let s = setup().await;
    let r =
        s.owner.patch(&format!("/api/keys/{}", s.key_id), json!({ "defaultTags": { "team": "core" } })).await;
    assert_eq!(r.status, 200, "{r:?}");
    let long = "s".repeat(257);
    let r = s.send("/v1/chat/completions", &openai(json!({})), &[("x-service-session", &long)]).await;
    assert_eq!(r.status, 400, "{r:?}");

    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = s
        .send(
            "/v1/chat/completions",
            &openai(json!({})),
            &[
                ("x-service-tags", r#"{"feature":"search","bad key":"x","_svc_estimated":"true"}"#),
                ("x-service-customer", "not a customer!"),
                ("x-service-session", "sess-1"),
                ("x-service-request-id", "01ARZ3NDEKTSV4RRFFQ69G5FAV"),
                ("traceparent", traceparent),
                ("tracestate", "vendor=1"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let tags: Value = serde_json::from_str(r.header("x-service-effective-tags").unwrap()).unwrap();
    assert_eq!(tags, json!({ "feature": "search", "team": "core" }));
    assert_eq!(r.header("x-service-warning"), Some("invalid_customer"));
    assert_eq!(r.header("x-service-session"), Some("sess-1"));
    assert_eq!(r.header("x-service-request-id"), Some("01ARZ3NDEKTSV4RRFFQ69G5FAV"));
    assert_eq!(r.header("x-service-trace-id"), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
    let up = s.mock.last();
    assert_eq!(up.header("traceparent"), Some(traceparent));
    assert_eq!(up.header("tracestate"), Some("vendor=1"));
    let e = &s.events(1).await[0];
    assert_eq!(e["sessionId"], "sess-1");
    assert_eq!(e["tags"]["feature"], "search");
    assert!(e["tags"].get("_svc_estimated").is_none(), "callers cannot set internal tags: {e}");

    let r = s
        .send(
            "/v1/chat/completions",
            &openai(json!({})),
            &[("x-service-request-id", "nope"), ("service-version", "2026-01-15")],
        )
        .await;
    assert_ne!(r.header("x-service-request-id"), Some("nope"));
    assert_eq!(r.header("service-version"), Some("2026-01-15"));
}

#[tokio::test]
async fn upstream_errors_pass_through_and_release_the_reservation() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000_000 }))
        .await;
    let r = s.chat(openai(json!({ "mock": { "status": 429 } }))).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(r.body["error"]["type"], "rate_limit_error", "the provider's body, untouched: {r:?}");
    assert!(r.header("x-service-denied").is_none());
    let r = s.chat(openai(json!({ "mock": { "status": 500 } }))).await;
    assert_eq!(r.status, 500);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(s.key_spend().await, (0, 0));
    assert_eq!(s.app.outbox_count("cost_event.created").await, 0);
}

#[tokio::test]
async fn strict_budget_denies_with_headers_and_events() {
    let s = setup().await;
    // gpt-4o-mini, 100 max tokens: the estimate is about 65 µ$; the call costs 435.
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 900 })).await;
    let ok = s.chat(openai(json!({ "mock": { "usage": usage(MINI_USAGE) } }))).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(ok.header("x-service-budget-limit"), Some("900"));
    assert_eq!(ok.header("x-service-budget-entity"), Some(format!("api_key:{}", s.key_id).as_str()));
    assert!(ok.header("x-service-budget-finalization-reserve").is_none());
    s.events(1).await;
    s.chat(openai(json!({ "mock": { "usage": usage(MINI_USAGE) } }))).await;
    s.events(2).await;
    // 870 spent: the next estimate no longer fits.
    let r = s.chat(openai(json!({}))).await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");
    assert_eq!(r.header("x-service-denied"), Some("1"));
    assert_eq!(r.header("x-service-budget-spent"), Some("870"));
    assert_eq!(r.body["error"]["details"]["budget_entity_id"], json!(s.key_id));
    assert_eq!(s.mock.count(), 2);
    assert_eq!(s.app.outbox_count("budget.exceeded").await, 1);
    assert_eq!(s.app.outbox_count("request.blocked").await, 1);
    let e = &s.events(2).await[0];
    assert_eq!(e["budgetStatus"], "approved");
}

#[tokio::test]
async fn tag_customer_session_and_finalization_rules() {
    let s = setup().await;
    s.budget(json!({ "entityType": "tag", "entityId": "team=core", "maxBudgetMicrodollars": 10 })).await;
    let r =
        s.send("/v1/chat/completions", &openai(json!({})), &[("x-service-tags", r#"{"team":"core"}"#)]).await;
    assert_eq!((r.status, r.code()), (429, "tag_budget_exceeded"), "{r:?}");
    assert_eq!(s.app.outbox_count("tag_budget.exceeded").await, 1);

    s.budget(json!({ "entityType": "customer", "entityId": "acme", "maxBudgetMicrodollars": 10 })).await;
    let r = s.send("/v1/chat/completions", &openai(json!({})), &[("x-service-customer", "acme")]).await;
    assert_eq!((r.status, r.code()), (429, "customer_budget_exceeded"), "{r:?}");
    assert_eq!(r.body["error"]["details"]["customer_id"], "acme");
    // The customer tag is the fallback.
    let r = s
        .send("/v1/chat/completions", &openai(json!({})), &[("x-service-tags", r#"{"customer":"acme"}"#)])
        .await;
    assert_eq!(r.code(), "customer_budget_exceeded");
    assert_eq!(s.app.outbox_count("customer_budget.exceeded").await, 2);

    let user = s.user_id().await;
    s.budget(json!({ "entityType": "user", "entityId": user, "maxBudgetMicrodollars": 1_000_000,
        "sessionLimitMicrodollars": 500, "finalizationReserveMicrodollars": 999_600 }))
        .await;
    // 400 µ$ of room before the reserve: the first call fits, and its 435 µ$ take the
    // budget into the reserve zone.
    let mini = openai(json!({ "mock": { "usage": usage(MINI_USAGE) } }));
    let r = s.send("/v1/chat/completions", &mini, &[("x-service-session", "s0")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-service-budget-finalization-reserve"), Some("999600"));
    assert!(r.header("x-service-budget-effective-remaining").is_some());
    s.events(1).await;
    let r = s.send("/v1/chat/completions", &mini, &[("x-service-session", "s1")]).await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");
    // In the reserve zone, X-Service-Finalize passes.
    let r = s
        .send("/v1/chat/completions", &mini, &[("x-service-session", "s1"), ("x-service-finalize", "1")])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    s.events(2).await;
    let r = s
        .send("/v1/chat/completions", &mini, &[("x-service-session", "s1"), ("x-service-finalize", "1")])
        .await;
    assert_eq!((r.status, r.code()), (429, "session_limit_exceeded"), "{r:?}");
    let d = &r.body["error"]["details"];
    assert_eq!((d["session_id"].as_str(), d["session_limit_microdollars"].as_i64()), (Some("s1"), Some(500)));
    assert_eq!(d["session_spend_microdollars"], MINI_COST);
    assert_eq!(s.app.outbox_count("session.limit_exceeded").await, 1);
}

#[tokio::test]
async fn velocity_breaker_and_loop_detection() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 10_000_000,
        "velocityLimitMicrodollars": 500, "velocityWindowSeconds": 60, "velocityCooldownSeconds": 30 }))
        .await;
    let r = s.chat(openai(json!({ "mock": { "usage": usage(MINI_USAGE) } }))).await;
    assert_eq!(r.status, 200);
    s.events(1).await;
    let r = s.chat(openai(json!({ "mock": { "usage": usage(MINI_USAGE) } }))).await;
    assert_eq!((r.status, r.code()), (429, "velocity_exceeded"), "{r:?}");
    let retry: i64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    assert_eq!(r.header("x-service-denied"), Some("1"));
    assert_eq!(s.app.outbox_count("velocity.exceeded").await, 1);

    let user = s.user_id().await;
    s.budget(json!({ "entityType": "user", "entityId": user, "maxBudgetMicrodollars": 10_000_000, "loopMaxCalls": 2, "loopWindowSeconds": 60 })).await;
    // The key is blocked by velocity; a second key of the same user meets the loop rule.
    let (_, raw2) = create_key(&s.owner, "agent-2").await;
    let body = openai(json!({ "messages": [{ "role": "user", "content": "same again" }] }));
    let mut codes = Vec::new();
    for _ in 0..3 {
        let r = read(
            s.app
                .proxy()
                .request(reqwest::Method::POST, "/v1/chat/completions")
                .header("x-service-key", &raw2)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        codes.push(r.code().to_owned());
    }
    assert_eq!(codes, vec!["", "", "loop_detected"]);
    assert_eq!(s.app.outbox_count("loop.detected").await, 1);
}

#[tokio::test]
async fn key_policy_and_plan_cap() {
    let s = setup_with(&[("SPENDGATE_GOVERNED_REQUESTS_FREE", "3".to_owned())]).await;
    let r = s
        .owner
        .patch(
            &format!("/api/keys/{}", s.key_id),
            json!({ "allowedModels": ["gpt-4o-mini"], "allowedCustomers": ["acme"] }),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.chat(openai(json!({ "model": "gpt-4o" }))).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    assert_eq!(r.header("x-service-denied"), Some("1"));
    let r = s.send("/v1/messages", &json!({ "model": "claude-sonnet-4-5", "max_tokens": 5 }), &[]).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    let r = s.send("/v1/chat/completions", &openai(json!({})), &[("x-service-customer", "globex")]).await;
    assert_eq!((r.status, r.code()), (403, "customer_not_allowed"));
    let r = s.owner.patch(&format!("/api/keys/{}", s.key_id), json!({ "requireCustomerId": true })).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.chat(openai(json!({}))).await;
    assert_eq!((r.status, r.code()), (403, "mandate_violation"));
    assert_eq!(s.mock.count(), 0);
    assert_eq!(s.app.outbox_count("request.blocked").await, 4);

    // Free tier, cap 3 governed requests a month (the refused ones above counted none
    // past the policy check, which comes first).
    for _ in 0..3 {
        let r = s.send("/v1/chat/completions", &openai(json!({})), &[("x-service-customer", "acme")]).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let r = s.send("/v1/chat/completions", &openai(json!({})), &[("x-service-customer", "acme")]).await;
    assert_eq!((r.status, r.code()), (429, "plan_limit_exceeded"), "{r:?}");
    assert_eq!(r.body["error"]["details"]["block_at"], 3);
    assert_eq!(r.body["error"]["details"]["tier"], "free");
    assert_eq!(r.header("x-service-denied"), Some("1"));
    assert_eq!(s.app.outbox_count("plan_limit.exceeded").await, 1);
}

#[tokio::test]
async fn cancelled_stream_is_aborted_upstream_and_charged_the_estimate() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000_000 }))
        .await;
    let body = openai(json!({ "stream": true, "mock": { "stall_after": 2 } }));
    let mut resp = s.post("/v1/chat/completions", &body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await.unwrap();
    assert!(first.is_some());
    drop(resp);
    // The client's departure shows at the next keep-alive write (about 1 s of
    // silence); a loaded host may take a few seconds more.
    for _ in 0..500 {
        if s.mock.cancelled_streams() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s.mock.cancelled_streams(), 1, "the upstream request is aborted");
    let e = &s.events(1).await[0];
    assert_eq!(e["tags"]["_svc_estimated"], "true", "{e}");
    assert_eq!(e["tags"]["_svc_cancelled"], "true", "{e}");
    let estimate = e["costMicrodollars"].as_i64().unwrap();
    assert!(estimate > 0);
    // The actor settles just after the commit that stored the event.
    let mut spend = s.key_spend().await;
    for _ in 0..250 {
        if spend == (estimate, estimate) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        spend = s.key_spend().await;
    }
    assert_eq!(spend, (estimate, estimate), "nothing stays reserved");
}

#[tokio::test]
async fn a_stream_outliving_the_timers_is_charged_its_actual_cost() {
    // Idle timeout 1 s between chunks; the stream lasts about 3 s in all.
    let s = setup_with(&[("SPENDGATE_UPSTREAM_TIMEOUT_SECS", "1".to_owned())]).await;
    let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true,
        "mock": { "chunks": 5, "chunk_delay_ms": 500, "usage": { "input": 100, "output": 50 } } });
    let r = s.send("/v1/messages", &body, &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.text.contains("message_stop"));
    let e = &s.events(1).await[0];
    assert_eq!(e["costMicrodollars"], 300 + 750, "{e}");
    assert!(e["tags"].get("_svc_estimated").is_none(), "{e}");
}

#[tokio::test]
async fn concurrent_requests_never_reserve_past_a_strict_limit() {
    let s = setup().await;
    // Each call costs 435 µ$ and reserves about 70: room for at most 4 calls.
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 2_000 })).await;
    let body = openai(json!({ "mock": { "usage": usage(MINI_USAGE), "delay_ms": 50 } }));
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let req = s.post("/v1/chat/completions", &body);
        tasks.push(tokio::spawn(async move { read(req.send().await.unwrap()).await }));
    }
    let mut ok = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            200 => ok += 1,
            429 => assert_eq!(r.code(), "budget_exceeded"),
            other => panic!("unexpected {other}: {r:?}"),
        }
    }
    assert!(ok >= 1);
    let events = s.events(ok).await;
    let spent: i64 = events.iter().map(|e| e["costMicrodollars"].as_i64().unwrap()).sum();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (live, settled) = s.key_spend().await;
    assert_eq!((live, settled), (spent, spent), "nothing stays reserved");
    // Every admitted estimate fitted under the limit when it was reserved.
    assert!(u64::try_from(ok).unwrap() * 70 <= 2_000 + 435 * 4, "{ok} admitted");
}

#[tokio::test]
async fn a_storm_of_mixed_outcomes_leaves_nothing_reserved() {
    let s = setup().await;
    let user = s.user_id().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 100_000_000 }))
        .await;
    s.budget(json!({ "entityType": "user", "entityId": user, "maxBudgetMicrodollars": 100_000_000 })).await;
    s.budget(json!({ "entityType": "tag", "entityId": "team=storm", "maxBudgetMicrodollars": 100_000_000 }))
        .await;
    let mut tasks = Vec::new();
    for i in 0..30 {
        let mock = match i % 5 {
            0 => json!({ "status": 500 }),
            1 => json!({ "stall_after": 1 }),
            2 => json!({ "disconnect_after": 2, "chunk_delay_ms": 20 }),
            _ => json!({ "usage": { "input": 10, "output": 10 } }),
        };
        let stream = i % 2 == 0 || i % 5 == 1 || i % 5 == 2;
        let body = openai(
            json!({ "stream": stream, "mock": mock, "messages": [{ "role": "user", "content": format!("call {i}") }] }),
        );
        let req = s.post("/v1/chat/completions", &body).header("x-service-tags", r#"{"team":"storm"}"#);
        let cancel = i % 5 == 1;
        tasks.push(tokio::spawn(async move {
            let resp = req.send().await.unwrap();
            if cancel {
                let mut resp = resp;
                let _ = tokio::time::timeout(Duration::from_millis(300), resp.chunk()).await;
                drop(resp);
            } else {
                let _ = resp.bytes().await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // 30 calls: 6 upstream errors record nothing; the other 24 record one event each.
    let events = s.events(24).await;
    let spent: i64 = events.iter().map(|e| e["costMicrodollars"].as_i64().unwrap()).sum();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.key_spend().await, (spent, spent));
    let status = s.app.control().get_with_key("/api/budgets/status", &s.raw).await;
    for e in status.body["entities"].as_array().unwrap() {
        assert_eq!(e["spendMicrodollars"], spent, "{e}");
    }
    let list = s.owner.get("/api/budgets").await;
    for b in list.body["data"].as_array().unwrap() {
        assert_eq!(b["spendMicrodollars"], spent, "{b}");
    }
}

#[tokio::test]
async fn policy_documents_on_both_surfaces() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 5_000, "resetInterval": "monthly" })).await;
    let r = s.app.proxy().get_with_key("/v1/policy", &s.raw).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["budget"]["max_microdollars"], 5_000);
    assert_eq!(r.body["budget"]["entity_type"], "api_key");
    assert!(r.body["budget"]["period_end"].as_str().is_some());
    assert_eq!(r.body["restrictions_active"], false);
    assert_eq!(r.body["allowed_providers"], json!(["openai", "anthropic", "google", "azure", "bedrock"]));
    assert!(r.body["cheapest_overall"]["input_per_mtok"].as_i64().is_some());
    let same = s.app.control().get_with_key("/api/policy", &s.raw).await;
    assert_eq!(same.status, 200, "{same:?}");
    assert_eq!(same.body, r.body);

    let r = s.owner.patch(&format!("/api/keys/{}", s.key_id), json!({ "allowedProviders": ["anthropic"], "allowedModels": ["claude-sonnet-4-5", "claude-haiku-4-5"] })).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.app.proxy().get_with_key("/v1/policy", &s.raw).await;
    assert_eq!(r.body["restrictions_active"], true);
    assert_eq!(r.body["allowed_providers"], json!(["anthropic"]));
    let per: Vec<&String> = r.body["cheapest_per_provider"].as_object().unwrap().keys().collect();
    assert_eq!(per, vec!["anthropic"]);
    assert_eq!(r.body["cheapest_overall"]["provider"], "anthropic");
    assert_eq!(s.app.proxy().get("/v1/policy").await.code(), "unauthorized");
}

#[tokio::test]
async fn mcp_check_and_events_count_against_budgets() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000 })).await;
    let check = |estimate: i64| json!({ "estimateMicrodollars": estimate, "toolName": "search" });
    let r = s.send("/v1/mcp/budget/check", &check(900), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (r.body["allowed"].as_bool(), r.body["budget"]["remaining_microdollars"].as_i64()),
        (Some(true), Some(1_000))
    );
    let event =
        json!({ "toolName": "search", "toolServer": "web", "costMicrodollars": 800, "requestId": "tool-1" });
    let r = s.send("/v1/mcp/events", &event, &[]).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["data"]["budgetStatus"], "approved");
    let r = s.send("/v1/mcp/budget/check", &check(300), &[]).await;
    assert_eq!(
        (r.body["allowed"].as_bool(), r.body["code"].as_str()),
        (Some(false), Some("budget_exceeded"))
    );
    let r = s
        .send(
            "/v1/mcp/events",
            &json!({ "toolName": "search", "toolServer": "web", "costMicrodollars": 300 }),
            &[],
        )
        .await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");
    assert_eq!(r.header("x-service-denied"), Some("1"));
    let bad = s
        .send("/v1/mcp/events", &json!({ "toolName": "", "toolServer": "web", "costMicrodollars": -1 }), &[])
        .await;
    assert_eq!(bad.issue_paths().len(), 2);
    let e = &s.events(1).await[0];
    assert_eq!(
        (e["source"].as_str(), e["costMicrodollars"].as_i64(), e["toolName"].as_str()),
        (Some("mcp"), Some(800), Some("search"))
    );
    assert_eq!(s.key_spend().await, (800, 800));
}

#[tokio::test]
async fn bodies_are_kept_on_paid_tiers_only() {
    let s = setup_with(&[("SPENDGATE_DEFAULT_PLAN", "pro".to_owned())]).await;
    let r = s.chat(openai(json!({ "tool_calls_hint": 1, "mock": { "tool_calls": true } }))).await;
    assert_eq!(r.status, 200, "{r:?}");
    let e = &s.events(1).await[0];
    let id = e["id"].as_str().unwrap();
    let b = s.owner.get(&format!("/api/cost-events/{id}/bodies")).await;
    assert_eq!(b.status, 200, "{b:?}");
    assert!(b.body["data"]["requestBody"].as_str().unwrap().contains("tool_calls_hint"));
    assert!(b.body["data"]["responseBody"].as_str().unwrap().contains("get_weather"));
    assert_eq!(b.body["data"]["responseTruncated"], false);

    let free = setup().await;
    free.chat(openai(json!({}))).await;
    let e = &free.events(1).await[0];
    let b = free.owner.get(&format!("/api/cost-events/{}/bodies", e["id"].as_str().unwrap())).await;
    assert_eq!((b.status, b.code()), (403, "forbidden"));
}

/// A self-hosted install puts new organizations on a tier without limits; the
/// operator command moves an organization to another tier, and a running server
/// applies it (its key cache carries the tier) without a restart.
#[tokio::test]
async fn operator_sets_the_plan_of_a_running_server() {
    let s = setup_with(&[("SPENDGATE_GOVERNED_REQUESTS_FREE", "1".to_owned())]).await;
    let org = s.owner.get("/api/auth/session").await.body["data"]["org"].clone();
    assert_eq!(org["plan"], "free", "the suite pins Free explicitly");
    assert_eq!(s.chat(openai(json!({}))).await.status, 200);
    let r = s.chat(openai(json!({}))).await;
    assert_eq!((r.status, r.code()), (429, "plan_limit_exceeded"), "{r:?}");

    let name = org["name"].as_str().unwrap();
    let (ok, out) = s.app.cli(&["org", "set-plan", "--org", name, "--plan", "pro"]);
    assert!(ok, "{out}");
    assert!(out.contains("pro"), "{out}");
    // The server drops the organization's cached keys at its next change-feed poll.
    let mut status = 0;
    for _ in 0..200 {
        status = s.chat(openai(json!({}))).await.status;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(status, 200, "the running server applies the new plan");
    assert_eq!(s.owner.get("/api/auth/session").await.body["data"]["org"]["plan"], "pro");

    let (ok, out) = s.app.cli(&["org", "set-plan", "--org", name, "--plan", "gold"]);
    assert!(!ok && out.contains("--plan"), "{out}");
    let (ok, out) = s.app.cli(&["org", "set-plan", "--org", "no such org", "--plan", "pro"]);
    assert!(!ok && out.contains("no organization"), "{out}");
}

#[tokio::test]
async fn a_self_hosted_install_defaults_to_a_tier_without_limits() {
    let app = TestApp::start_with(&[("SPENDGATE_DEFAULT_PLAN", String::new())]).await;
    let owner = app.owner().await;
    assert_eq!(owner.get("/api/auth/session").await.body["data"]["org"]["plan"], "enterprise");
}

async fn keyless_from(s: &Setup, forwarded_for: &str) -> u16 {
    let r = s
        .app
        .proxy()
        .request(reqwest::Method::POST, "/v1/chat/completions")
        .header("content-type", "application/json")
        .header("x-forwarded-for", forwarded_for)
        .body("{}")
        .send()
        .await
        .unwrap();
    r.status().as_u16()
}

/// The per-IP limit is on the connection's address unless the peer is a trusted
/// proxy: a forged `X-Forwarded-For` does not escape it, and behind a trusted proxy
/// the forwarded address is the one limited.
#[tokio::test]
async fn per_ip_limit_believes_forwarded_for_only_from_trusted_proxies() {
    let s = setup_with(&[("SPENDGATE_RATE_LIMIT_IP_PER_MINUTE", "2".to_owned())]).await;
    // Keyless requests pass the IP limit (then 401) until it is spent.
    assert_eq!(keyless_from(&s, "198.51.100.1").await, 401);
    assert_eq!(keyless_from(&s, "198.51.100.2").await, 401);
    assert_eq!(keyless_from(&s, "198.51.100.3").await, 429);

    let s = setup_with(&[
        ("SPENDGATE_RATE_LIMIT_IP_PER_MINUTE", "2".to_owned()),
        ("SPENDGATE_TRUSTED_PROXIES", "127.0.0.1".to_owned()),
    ])
    .await;
    for _ in 0..2 {
        assert_eq!(keyless_from(&s, "198.51.100.1").await, 401);
    }
    assert_eq!(keyless_from(&s, "198.51.100.1").await, 429, "the forwarded address is limited");
    assert_eq!(keyless_from(&s, "198.51.100.2").await, 401, "another forwarded address is not");
}

/// With `durable_answers` on, a process killed (-9) under proxied load, JSON and
/// streamed calls alike, leaves no call that a client saw answered whole without its
/// cost event. A long linger keeps each record well behind its call, so without the
/// setting answered calls would be lost.
#[tokio::test]
async fn durable_answers_leave_no_answered_call_unrecorded_by_a_kill() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let mut s = setup_with(&[
        ("SPENDGATE_DURABLE_ANSWERS", "1".to_owned()),
        ("SPENDGATE_ACCOUNTING_LINGER_MS", "20".to_owned()),
    ])
    .await;
    let answered: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..16 {
        let (proxy, raw) = (s.app.proxy(), s.raw.clone());
        let (answered, stop) = (answered.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut n = i;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let stream = n % 2 == 0;
                let body = openai(json!({ "stream": stream, "mock": { "usage": usage(MINI_USAGE) } }));
                let sent = proxy
                    .request(reqwest::Method::POST, "/v1/chat/completions")
                    .header("x-service-key", &raw)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await;
                let Ok(resp) = sent else { continue };
                let id = resp.headers().get("x-service-request-id").and_then(|v| v.to_str().ok());
                let Some(id) = id.map(str::to_owned).filter(|_| resp.status() == 200) else { continue };
                // Answered whole: the body read to its end, without a transport error.
                let Ok(text) = resp.text().await else { continue };
                let whole = if stream {
                    text.contains("data: [DONE]")
                } else {
                    serde_json::from_str::<Value>(&text).is_ok()
                };
                if whole {
                    answered.lock().unwrap().push((id, stream));
                }
            }
        }));
    }
    for _ in 0..600 {
        if answered.lock().unwrap().len() >= 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.app.server.kill();
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    let answered = answered.lock().unwrap().clone();
    assert!(answered.len() >= 200, "only {} calls answered before the kill", answered.len());
    assert!(answered.iter().any(|(_, stream)| *stream) && answered.iter().any(|(_, stream)| !*stream));

    s.app.restart();
    let ids: Vec<String> = answered.iter().map(|(id, _)| format!("'{id}'")).collect();
    let recorded = s
        .app
        .query_n(&format!(
            "SELECT COUNT(DISTINCT request_id) AS n FROM cost_events WHERE request_id IN ({})",
            ids.join(", ")
        ))
        .await;
    assert_eq!(recorded, answered.len() as i64, "answered calls without a cost event after the kill");
}

/// With `durable_answers`, a stream's end marker (where the official SDKs stop
/// reading, without waiting for the body's end) reaches the client only once the
/// call's cost event is committed: read up to it and no further, the event is there.
/// A long linger keeps each record 300 ms behind its call, so without the hold it
/// would not be.
#[tokio::test]
async fn durable_answers_hold_a_streams_end_marker_until_its_record_is_in() {
    use futures_util::StreamExt;
    let s = setup_with(&[
        ("SPENDGATE_DURABLE_ANSWERS", "1".to_owned()),
        ("SPENDGATE_ACCOUNTING_LINGER_MS", "300".to_owned()),
    ])
    .await;
    let anthropic = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true,
        "messages": [{ "role": "user", "content": "hi" }], "mock": { "usage": { "input": 100, "output": 50 } } });
    let chat = openai(json!({ "stream": true, "mock": { "usage": usage(MINI_USAGE) } }));
    for (path, body, marker) in
        [("/v1/messages", anthropic, "message_stop"), ("/v1/chat/completions", chat, "data: [DONE]")]
    {
        let resp = s.post(path, &body).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let id = resp.headers()["x-service-request-id"].to_str().unwrap().to_owned();
        let (mut chunks, mut seen) = (resp.bytes_stream(), String::new());
        while !seen.contains(marker) {
            let chunk = chunks.next().await.expect("the stream reaches its end marker").unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        // Read at once, not polled: the record is in when the marker is.
        let sql = format!("SELECT COUNT(*) AS n FROM cost_events WHERE request_id = '{id}'");
        assert_eq!(s.app.query_n(&sql).await, 1, "{path}: its end marker came before its record");
    }
}
