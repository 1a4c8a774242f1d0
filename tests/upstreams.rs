//! Operator-defined upstreams: reached by the `/upstreams/{name}` prefix and by their
//! base URL in `X-Service-Upstream`, only on routes of their wire format, priced from
//! the operator's pricing file under their name (unknown models by the unknown-model
//! rule), their key moved into their key header, and `allowedProviders` by name.

use serde_json::{json, Value};

use crate::proxy::{setup_with, Setup};
use crate::support::mock::MockUpstream;
use crate::support::{read, Resp};

/// A server whose built-in upstreams are one mock and whose `openrouter` (openai
/// format), `azure` (openai format, key in `api-key`), `claude-gw` (anthropic) and
/// `gem` (gemini) are another, with `openrouter/acme-1` priced at $2 / $8 per million tokens.
async fn start() -> (Setup, MockUpstream, tempfile::TempDir) {
    let named = MockUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    let doc = json!({ "models": { "openrouter/acme-1": { "input": 2_000_000, "output": 8_000_000 } } });
    std::fs::write(&prices, doc.to_string()).unwrap();
    let upstreams = format!(
        "name=openrouter,format=openai,base_url={b}/or;name=azure,format=openai,base_url={b}/az,key_header=api-key;\
         name=claude-gw,format=anthropic,base_url={b};name=gem,format=gemini,base_url={b}/gm",
        b = named.base
    );
    let s = setup_with(&[
        ("SPENDGATE_UPSTREAMS", upstreams),
        ("SPENDGATE_PRICING_FILE", prices.display().to_string()),
        ("SPENDGATE_DEFAULT_PLAN", String::new()),
    ])
    .await;
    (s, named, dir)
}

fn chat(model: &str) -> Value {
    json!({ "model": model, "max_tokens": 50, "messages": [{ "role": "user", "content": "hi" }],
            "mock": { "usage": { "input": 1000, "output": 100 } } })
}

async fn event_of(s: &Setup, request_id: &str) -> Value {
    for _ in 0..200 {
        let r = s.owner.get("/api/cost-events?limit=100").await;
        if let Some(e) = r.body["data"].as_array().unwrap().iter().find(|e| e["requestId"] == request_id) {
            return e.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no cost event {request_id}\n{}", s.app.server.logs());
}

fn ok(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{r:?}");
    r.header("x-service-request-id").unwrap().to_owned()
}

#[tokio::test]
async fn a_named_upstream_by_prefix_and_by_base_url_is_metered_under_its_name() {
    let (s, named, _dir) = start().await;
    // By path prefix: the named mock answers (its path keeps the base URL's own path).
    let id = ok(&s.send("/upstreams/openrouter/v1/chat/completions", &chat("acme-1"), &[]).await);
    assert_eq!(named.last().path, "/or/v1/chat/completions");
    assert_eq!(s.mock.count(), 0, "the built-in upstream must not be called");
    let e = event_of(&s, &id).await;
    assert_eq!(e["provider"], "openrouter");
    assert_eq!(e["model"], "acme-1");
    // 1,000 × $2 + 100 × $8 per million = 2,000 + 800 µ$.
    assert_eq!(e["costMicrodollars"], 2_800, "{e}");
    assert!(e["tags"].get("_svc_unknown_model").is_none(), "{e}");

    // By X-Service-Upstream on the built-in route, trailing slash and all.
    let base = format!("{}/or/", named.base);
    let id = ok(&s.send("/v1/chat/completions", &chat("acme-1"), &[("x-service-upstream", &base)]).await);
    assert_eq!(named.count(), 2);
    assert_eq!(event_of(&s, &id).await["provider"], "openrouter");

    // A model the operator did not price: the unknown-model rule (conservative price, tagged).
    let id = ok(&s.send("/upstreams/openrouter/v1/chat/completions", &chat("mystery-7b"), &[]).await);
    let e = event_of(&s, &id).await;
    assert_eq!(e["provider"], "openrouter");
    assert_eq!(e["tags"]["_svc_unknown_model"], "true", "{e}");
    assert!(e["costMicrodollars"].as_i64().unwrap() > 2_800, "{e}");
    // Counted under the upstream's name, as its cost events name it, not its wire format.
    let metrics = s.app.proxy().get("/health/metrics").await;
    let series = metrics.body["spendgate_unpriced_models_total"].as_array().cloned().unwrap_or_default();
    let count = |provider: &str| {
        series.iter().find(|m| m["labels"]["provider"] == provider).and_then(|m| m["value"].as_f64())
    };
    assert_eq!((count("openrouter"), count("openai")), (Some(1.0), None), "{}", metrics.text);

    // An anthropic-format upstream by prefix.
    let body =
        json!({ "model": "claude-x", "max_tokens": 10, "messages": [{ "role": "user", "content": "hi" }] });
    let id = ok(&s.send("/upstreams/claude-gw/v1/messages", &body, &[("x-api-key", "sk-ant")]).await);
    assert_eq!(named.last().path, "/v1/messages");
    assert_eq!(named.last().header("x-api-key"), Some("sk-ant"));
    assert_eq!(event_of(&s, &id).await["provider"], "claude-gw");

    // A gemini-format upstream by prefix, streaming: the model comes from the path.
    let body = json!({ "contents": [{ "parts": [{ "text": "hi" }] }] });
    let path = "/upstreams/gem/v1beta/models/gemini-x:streamGenerateContent";
    let id = ok(&s.send(path, &body, &[("x-goog-api-key", "g-key")]).await);
    let seen = named.last();
    assert_eq!(
        (seen.path.as_str(), seen.query.as_str()),
        ("/gm/v1beta/models/gemini-x:streamGenerateContent", "alt=sse")
    );
    assert_eq!(seen.header("x-goog-api-key"), Some("g-key"));
    let e = event_of(&s, &id).await;
    assert_eq!((e["provider"].as_str(), e["model"].as_str()), (Some("gem"), Some("gemini-x")));
    assert_eq!(s.mock.count(), 0);
}

#[tokio::test]
async fn unknown_names_and_other_formats_are_not_found_and_foreign_bases_refused() {
    let (s, named, _dir) = start().await;
    for path in [
        "/upstreams/nope/v1/chat/completions",
        "/upstreams/openrouter/v1/messages",
        "/upstreams/claude-gw/v1/chat/completions",
        "/upstreams/openrouter/v1beta/models/gemini-2.5-flash:generateContent",
        "/upstreams/OpenRouter/v1/chat/completions",
    ] {
        let r = s.send(path, &chat("acme-1"), &[]).await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{path}: {r:?}");
    }
    // A base URL nobody configured, and a configured one of another format.
    let claude_base = named.base.clone();
    for (path, upstream) in [
        ("/v1/chat/completions", "https://evil.example.com"),
        ("/v1/messages", named.base.as_str()),
        ("/upstreams/openrouter/v1/chat/completions", claude_base.as_str()),
    ] {
        let body = if path == "/v1/messages" {
            json!({ "model": "m", "max_tokens": 1, "messages": [] })
        } else {
            chat("acme-1")
        };
        let r = s.send(path, &body, &[("x-service-upstream", upstream)]).await;
        if path == "/v1/messages" {
            // The claude-gw upstream IS anthropic: its base URL is accepted there.
            assert_eq!(r.status, 200, "{r:?}");
        } else {
            assert_eq!((r.status, r.code()), (400, "invalid_upstream"), "{path} {upstream}: {r:?}");
        }
    }
    assert_eq!(s.mock.count(), 0);
    assert_eq!(named.count(), 1, "only the accepted messages call is forwarded");
}

#[tokio::test]
async fn a_key_header_upstream_gets_the_clients_key_there_alone() {
    let (s, named, _dir) = start().await;
    let mut body = chat("gpt-4o");
    body["mock"]["echo_headers"] = json!(true);
    let r =
        s.send("/upstreams/azure/v1/chat/completions", &body, &[("authorization", "Bearer az-secret")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = named.last();
    assert_eq!(seen.path, "/az/v1/chat/completions");
    assert_eq!(seen.header("api-key"), Some("az-secret"));
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(seen.header("x-service-key"), None);
}

#[tokio::test]
async fn allowed_providers_names_a_named_upstream_by_its_name() {
    let (s, named, _dir) = start().await;
    let r = s.owner.post("/api/keys", json!({ "name": "only-openai", "allowedProviders": ["openai"] })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let only_openai = r.body["data"]["rawKey"].as_str().unwrap().to_owned();
    let r = s.owner.post("/api/keys", json!({ "name": "or", "allowedProviders": ["openrouter"] })).await;
    assert_eq!(r.status, 201, "a configured upstream's name is a valid provider: {r:?}");
    let only_or = r.body["data"]["rawKey"].as_str().unwrap().to_owned();
    let r = s.owner.post("/api/keys", json!({ "name": "x", "allowedProviders": ["not-configured"] })).await;
    assert_eq!(r.issue_paths(), vec![json!(["allowedProviders", "0"])]);

    let call = |key: String| {
        let proxy = s.app.proxy();
        async move {
            read(
                proxy
                    .request(reqwest::Method::POST, "/upstreams/openrouter/v1/chat/completions")
                    .header("x-service-key", key)
                    .header("content-type", "application/json")
                    .body(chat("acme-1").to_string())
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        }
    };
    let r = call(only_openai).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    assert!(r.body["error"]["message"].as_str().unwrap().contains("openrouter"), "{r:?}");
    assert_eq!(named.count(), 0);
    assert_eq!(call(only_or).await.status, 200);
    assert_eq!(named.count(), 1);
}

#[tokio::test]
async fn budgets_refuse_a_named_upstream_call_as_any_other_and_record_its_name() {
    let (s, named, _dir) = start().await;
    let budget = json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1 });
    s.budget(budget).await;
    let r = s.send("/upstreams/openrouter/v1/chat/completions", &chat("acme-1"), &[]).await;
    assert_eq!((r.status, r.header("x-service-denied")), (429, Some("1")), "{r:?}");
    assert_eq!(named.count(), 0, "nothing was forwarded");
    let request_id = r.header("x-service-request-id").unwrap().to_owned();
    let denial = event_of(&s, &request_id).await;
    assert_eq!(
        (denial["provider"].as_str(), denial["budgetStatus"].as_str()),
        (Some("openrouter"), Some("denied"))
    );
}
