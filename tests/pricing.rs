//! Pricing coverage over real HTTP: one model per provider added to the table in issue
//! #15 charged to the microdollar, Claude Sonnet 4's long-context tier, the unknown-model
//! rule (reported usage at the provider's fallback price; the estimate without usage),
//! the operator's view (metric, log line, `GET /v1/policy`, `spendgate pricing check`)
//! and `SPENDGATE_PRICING_FILE`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::mock::MockUpstream;
use crate::support::{create_key, read, Client, Resp, TestApp};

struct Setup {
    app: TestApp,
    _mock: MockUpstream,
    owner: Client,
    raw: String,
}

async fn setup_with(extra: &[(&'static str, String)]) -> Setup {
    let mock = MockUpstream::start();
    let mut env = vec![
        ("SPENDGATE_UPSTREAM_OPENAI", mock.base.clone()),
        ("SPENDGATE_UPSTREAM_ANTHROPIC", mock.base.clone()),
        ("SPENDGATE_UPSTREAM_GEMINI", mock.base.clone()),
    ];
    env.extend(extra.iter().cloned());
    let app = TestApp::start_with(&env).await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "agent").await;
    Setup { app, _mock: mock, owner, raw }
}

impl Setup {
    async fn send(&self, path: &str, body: &Value) -> Resp {
        let r = self
            .app
            .proxy()
            .request(reqwest::Method::POST, path)
            .header("x-service-key", &self.raw)
            .header("content-type", "application/json")
            .body(body.to_string());
        let r = read(r.send().await.expect("request")).await;
        assert_eq!(r.status, 200, "{r:?}");
        r
    }

    /// The cost events of `model`, once `n` of them are recorded.
    async fn events_of(&self, model: &str, n: usize) -> Vec<Value> {
        for _ in 0..200 {
            let r = self.owner.get("/api/cost-events?limit=100").await;
            let of: Vec<Value> = r.body["data"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e["model"] == model)
                .collect();
            if of.len() >= n {
                return of;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no {n} cost events of {model}\n{}", self.app.server.logs());
    }

    /// The one cost event of `model`, checked to be charged at a known price.
    async fn priced(&self, model: &str) -> i64 {
        let events = self.events_of(model, 1).await;
        let e = &events[0];
        assert!(
            e["tags"].get("_svc_unknown_model").is_none() && e["tags"].get("_svc_estimated").is_none(),
            "{e}"
        );
        e["costMicrodollars"].as_i64().unwrap()
    }
}

fn anthropic(model: &str, usage: Value) -> Value {
    json!({ "model": model, "max_tokens": 100, "messages": [{ "role": "user", "content": "hi" }], "mock": { "usage": usage } })
}

fn openai(model: &str, mock: Value) -> Value {
    json!({ "model": model, "max_tokens": 100, "messages": [{ "role": "user", "content": "hi" }], "mock": mock })
}

#[tokio::test]
async fn anthropic_sonnet_4_is_priced_with_its_long_context_tier() {
    let s = setup_with(&[]).await;
    // 1,000 uncached × $3 + 2,000 reads × $0.30 + 300 5m writes × $3.75 + 500 × $15.
    let usage = json!({ "input": 1000, "cached": 2000, "cache_write_5m": 300, "output": 500 });
    s.send("/v1/messages", &anthropic("claude-sonnet-4-20250514", usage)).await;
    assert_eq!(s.priced("claude-sonnet-4-20250514").await, 3_000 + 600 + 1_125 + 7_500);

    // A 200,000-token prompt (cache reads included) stays flat; one token more is billed
    // at $6 / $0.60 / $22.50 throughout.
    let usage = json!({ "input": 180_000, "cached": 20_000, "output": 100 });
    s.send("/v1/messages", &anthropic("claude-sonnet-4-0", usage)).await;
    assert_eq!(s.priced("claude-sonnet-4-0").await, 540_000 + 6_000 + 1_500);
    let usage = json!({ "input": 180_001, "cached": 20_000, "output": 100 });
    let mut body = anthropic("claude-sonnet-4-5-20250929", usage);
    body["stream"] = json!(true);
    s.send("/v1/messages", &body).await;
    assert_eq!(s.priced("claude-sonnet-4-5-20250929").await, 1_080_006 + 12_000 + 2_250);
}

#[tokio::test]
async fn openai_gpt_5_4_long_context_and_gemini_2_0_flash_are_priced() {
    let s = setup_with(&[]).await;
    // gpt-5.4 above 272,000 prompt tokens: 200,001 uncached × $5 + 72,000 cached × $0.50
    // + 1,000 output (500 of them reasoning) × $22.50.
    let usage = json!({ "usage": { "input": 272_001, "cached": 72_000, "output": 1000, "reasoning": 500 } });
    s.send("/v1/chat/completions", &openai("gpt-5.4-2026-03-05", usage)).await;
    assert_eq!(s.priced("gpt-5.4-2026-03-05").await, 1_000_005 + 36_000 + 22_500);
    // gpt-4.1-mini: 800 uncached × $0.40 + 200 cached × $0.10 + 500 × $1.60.
    s.send(
        "/v1/chat/completions",
        &openai("gpt-4.1-mini", json!({ "usage": { "input": 1000, "cached": 200, "output": 500 } })),
    )
    .await;
    assert_eq!(s.priced("gpt-4.1-mini").await, 320 + 20 + 800);

    // 800 uncached × $0.10 + 200 cached × $0.025 + (500 + 100 thinking) × $0.40.
    let body = json!({ "contents": [{ "parts": [{ "text": "hi" }] }],
        "mock": { "usage": { "input": 1000, "cached": 200, "output": 500, "reasoning": 100 } } });
    s.send("/v1beta/models/gemini-2.0-flash:generateContent", &body).await;
    assert_eq!(s.priced("gemini-2.0-flash").await, 80 + 5 + 240);
}

/// The OpenAI fallback: o1-pro's $150 input and $600 output, the provider's highest.
const OPENAI_FALLBACK: (i64, i64) = (150, 600_000_000);

#[tokio::test]
async fn unknown_models_are_charged_reported_usage_at_the_fallback_and_listed() {
    let s = setup_with(&[]).await;
    // With usage: 1,000 input × $150 + 500 output × $600, whatever the request's size.
    s.send(
        "/v1/chat/completions",
        &openai("gpt-unreleased-9", json!({ "usage": { "input": 1000, "output": 500 } })),
    )
    .await;
    // Without usage: the reservation estimate, at the same prices.
    let no_usage = openai("gpt-unreleased-9", json!({ "no_usage": true }));
    s.send("/v1/chat/completions", &no_usage).await;
    let events = s.events_of("gpt-unreleased-9", 2).await;
    let with = events.iter().find(|e| e["inputTokens"] == 1000).unwrap();
    assert_eq!(with["costMicrodollars"], 150_000 + 300_000, "{with}");
    assert_eq!(with["tags"]["_svc_unknown_model"], "true");
    assert_eq!(with["tags"]["_svc_estimated"], "true");
    let without = events.iter().find(|e| e["inputTokens"] == 0).unwrap();
    // The estimate bounds the prompt (a token per byte, and 64 bytes a clamp may add) and
    // the output at the highest prices the fallback can charge (its long-context tier
    // included): at least the normal tier's figure, at most twice it.
    let prompt_tokens = i64::try_from(no_usage.to_string().len() + 64).unwrap();
    let normal = prompt_tokens * OPENAI_FALLBACK.0 + 100 * OPENAI_FALLBACK.1 / 1_000_000 + 5;
    let charged = without["costMicrodollars"].as_i64().unwrap();
    assert!((normal..=2 * normal).contains(&charged), "{normal}: {without}");
    assert_eq!(without["tags"]["_svc_no_usage"], "true");
    assert_eq!(
        without["tags"]["_svc_unknown_model"], "true",
        "an unknown model is tagged whatever else happened"
    );

    // Counted and logged once per process.
    let metrics = s.app.proxy().get("/health/metrics").await;
    let first_seen = metrics.body["spendgate_unpriced_models_total"]
        .as_array()
        .and_then(|v| v.iter().find(|m| m["labels"]["provider"] == "openai"))
        .and_then(|m| m["value"].as_f64());
    assert_eq!(first_seen, Some(1.0), "{}", metrics.text);
    let logs = s.app.server.logs();
    assert_eq!(logs.matches("model not in the price table").count(), 1, "{logs}");
    assert!(logs.contains("gpt-unreleased-9"), "{logs}");

    // The policy document lists it with the table's age.
    let r = s.app.proxy().get_with_key("/v1/policy", &s.raw).await;
    let pricing = &r.body["pricing"];
    assert_eq!(pricing["unpriced_models"][0]["model"], "gpt-unreleased-9", "{}", r.body);
    assert_eq!(pricing["unpriced_models"][0]["provider"], "openai");
    assert_eq!(pricing["unpriced_models"][0]["calls"], 2);
    assert!(pricing["checked_at"].as_str().is_some() && pricing["age_days"].as_i64().is_some(), "{pricing}");
    // Another organization's key sees none of it.
    let other = s.app.user_in_org("other@example.com", "Other Co", "owner").await;
    let (_, other_key) = create_key(&other, "theirs").await;
    let r = s.app.proxy().get_with_key("/v1/policy", &other_key).await;
    assert_eq!(r.body["pricing"]["unpriced_models"], json!([]), "{}", r.body);

    // So does the CLI, a separate process on the same database.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spendgate"))
        .args(["pricing", "check"])
        .env_clear()
        .env("SPENDGATE_DATABASE_URL", &s.app.db.url)
        .env("SPENDGATE_LOG", "warn")
        .output()
        .expect("run spendgate pricing check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("pricing table: ") && stdout.contains("prices checked "), "{stdout}");
    let line = stdout.lines().find(|l| l.contains("gpt-unreleased-9")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.trim_start().starts_with("openai") && line.contains(" 2 "), "{line}");
}

#[tokio::test]
async fn a_pricing_file_prices_a_model_and_long_context_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prices.json");
    std::fs::write(
        &file,
        json!({ "models": {
            "openai/gpt-unreleased-9": { "input": 1_000_000, "output": 2_000_000,
                "long_context_threshold": 1_000, "input_long_context": 3_000_000, "output_long_context": 4_000_000 }
        } })
        .to_string(),
    )
    .unwrap();
    let s = setup_with(&[("SPENDGATE_PRICING_FILE", file.display().to_string())]).await;
    s.send(
        "/v1/chat/completions",
        &openai("gpt-unreleased-9", json!({ "usage": { "input": 1000, "output": 10 } })),
    )
    .await;
    s.send(
        "/v1/chat/completions",
        &openai("gpt-unreleased-9", json!({ "usage": { "input": 1001, "output": 10 } })),
    )
    .await;
    let events = s.events_of("gpt-unreleased-9", 2).await;
    let mut costs: Vec<i64> = events.iter().map(|e| e["costMicrodollars"].as_i64().unwrap()).collect();
    costs.sort_unstable();
    assert_eq!(costs, [1_000 + 20, 3_003 + 40]);
    assert!(events.iter().all(|e| e["tags"].get("_svc_unknown_model").is_none()));
    let r = s.app.proxy().get_with_key("/v1/policy", &s.raw).await;
    assert_eq!(r.body["pricing"]["unpriced_models"], json!([]), "{}", r.body);
}
