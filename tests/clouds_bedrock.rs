//! Amazon Bedrock at `{proxy}/bedrock/model/{modelId}/converse` and `/invoke`: the
//! agent's spendgate key as a Bedrock API key (`Authorization: Bearer`) or in
//! `X-Service-Key` beside its own signature; spendgate signs each forwarded request
//! with SigV4 from the stored access key pair (the mock recomputes the signature with
//! `aws-sigv4`) or sends the stored Bedrock API key; model ids as Bedrock takes them
//! (cross-region profiles, URL-encoded ARNs); Converse and InvokeModel usage priced to
//! the microdollar; Bedrock's own errors passed back; a strict budget under 40
//! concurrent calls.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::mock::bedrock::Expect;
use crate::support::mock::{MockUpstream, Recorded};
use crate::support::{backend_is_postgres, create_key, read, Client, Resp, TestApp};

const PATH: &str = "/api/provider-credentials";
const AKID: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const TOKEN: &str = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN";
const API_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl";
const SONNET_PROFILE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

struct Setup {
    app: TestApp,
    mock: MockUpstream,
    owner: Client,
    raw: String,
    key_id: String,
}

async fn setup() -> Setup {
    let mock = MockUpstream::start();
    let mut env = Vec::new();
    if backend_is_postgres() {
        env.push(("SPENDGATE_SECRET_KEY", "test-secret-key-of-at-least-32-characters".to_owned()));
    }
    let app = TestApp::start_with(&env).await;
    let owner = app.owner().await;
    let (key_id, raw) = create_key(&owner, "agent").await;
    Setup { app, mock, owner, raw, key_id }
}

fn sigv4(secret: &str) -> Expect {
    Expect::SigV4 {
        access_key_id: AKID.to_owned(),
        secret_access_key: secret.to_owned(),
        session_token: Some(TOKEN.to_owned()),
        region: "us-east-1".to_owned(),
    }
}

impl Setup {
    async fn store(&self, mut secret: Value) {
        secret["endpoint"] = json!(self.mock.base);
        let r = self.owner.post(PATH, json!({ "upstream": "bedrock", "secret": secret })).await;
        assert_eq!(r.status, 201, "{r:?}");
    }

    async fn store_keys(&self) {
        self.store(json!({ "accessKeyId": AKID, "secretAccessKey": SECRET, "sessionToken": TOKEN, "region": "us-east-1" }))
            .await;
    }

    async fn call(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
        let mut r = self
            .app
            .proxy()
            .request(reqwest::Method::POST, path)
            .header("content-type", "application/json")
            .body(body.to_string());
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        read(r.send().await.expect("request")).await
    }

    async fn events(&self, at_least: usize) -> Vec<Value> {
        for _ in 0..100 {
            let r = self.owner.get("/api/cost-events?limit=100").await;
            let mut data = r.body["data"].as_array().cloned().unwrap_or_default();
            // Denial records are left out.
            data.retain(|e| e["budgetStatus"] != "denied");
            if data.len() >= at_least {
                return data;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("fewer than {at_least} cost events\n{}", self.app.server.logs());
    }
}

fn converse(usage: Value) -> Value {
    json!({
        "messages": [{ "role": "user", "content": [{ "text": "hi" }] }],
        "inferenceConfig": { "maxTokens": 1000 },
        "mock": { "usage": usage },
    })
}

/// No header the upstream received carries a spendgate key or the client's own key.
fn no_agent_credential(req: &Recorded) {
    for (name, value) in &req.headers {
        assert!(!value.contains("svc_live_sk_"), "{name} carried a spendgate key");
        assert!(!value.contains("AKIACLIENT"), "{name} carried the client's signature");
    }
}

#[tokio::test]
async fn converse_is_signed_with_the_stored_keys_and_priced_by_the_profile() {
    let s = setup().await;
    s.mock.expect_bedrock(sigv4(SECRET));
    s.store_keys().await;
    let bearer = format!("Bearer {}", s.raw);
    let path = "/bedrock/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse";
    let usage = json!({ "input": 1000, "cached": 2000, "cache_write_5m": 100, "output": 500 });
    let r = s.call(path, &converse(usage), &[("authorization", &bearer)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["output"]["message"]["content"][0]["text"], "Hello from mock");
    let seen = s.mock.last();
    assert_eq!(seen.path, "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse");
    let auth = seen.header("authorization").unwrap();
    assert!(auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={AKID}/")), "{auth}");
    assert_eq!(seen.header("x-amz-security-token"), Some(TOKEN));
    no_agent_credential(&seen);

    let e = &s.events(1).await[0];
    assert_eq!((e["provider"].as_str(), e["model"].as_str()), (Some("bedrock"), Some(SONNET_PROFILE)));
    assert_eq!((e["cachedInputTokens"].as_i64(), e["outputTokens"].as_i64()), (Some(2000), Some(500)), "{e}");
    assert_eq!(e["inputTokens"], 3100, "the prompt, cache reads and writes included: {e}");
    // The `us.` profile of Sonnet 4.5: $3.30 in, $0.33 cache read, $4.125 write, $16.50 out.
    assert_eq!(e["costMicrodollars"], 3300 + 660 + 413 + 8250, "{e}");
}

#[tokio::test]
async fn invoke_with_an_api_key_credential_beside_the_clients_own_signature() {
    let s = setup().await;
    s.mock.expect_bedrock(Expect::ApiKey(API_KEY.to_owned()));
    s.store(json!({ "apiKey": API_KEY, "region": "us-east-1" })).await;
    // AnthropicBedrock signs with its own keys and adds X-Service-Key.
    let own = "AWS4-HMAC-SHA256 Credential=AKIACLIENT/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00";
    let arn =
        "arn%3Aaws%3Abedrock%3Aus-east-1%3A%3Afoundation-model%2Fanthropic.claude-3-5-haiku-20241022-v1%3A0";
    let body = json!({
        "anthropic_version": "bedrock-2023-05-31", "max_tokens": 1000,
        "messages": [{ "role": "user", "content": "hi" }],
        "mock": { "usage": { "input": 1000, "output": 500 } },
    });
    let headers =
        [("x-service-key", s.raw.as_str()), ("authorization", own), ("x-amz-date", "20261207T000000Z")];
    let r = s.call(&format!("/bedrock/model/{arn}/invoke"), &body, &headers).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["type"], "message", "Anthropic's message: {r:?}");
    let seen = s.mock.last();
    assert_eq!(seen.header("authorization"), Some(format!("Bearer {API_KEY}").as_str()));
    assert_eq!(seen.header("x-amz-date"), None, "the client's signing headers stay behind");
    no_agent_credential(&seen);
    let e = &s.events(1).await[0];
    assert_eq!(e["model"], "anthropic.claude-3-5-haiku-20241022-v1:0");
    // Haiku 3.5: $0.80 in, $4 out.
    assert_eq!(e["costMicrodollars"], 800 + 2000, "{e}");

    // Amazon Nova's InvokeModel body has Converse's shape.
    let r = s
        .call(
            "/bedrock/model/amazon.nova-lite-v1:0/invoke",
            &converse(json!({ "input": 1000, "output": 500 })),
            &[("x-service-key", &s.raw)],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let events = s.events(2).await;
    let e = events.iter().find(|e| e["model"] == "amazon.nova-lite-v1:0").expect("the Nova event");
    // Nova Lite: $0.06 in, $0.24 out.
    assert_eq!(e["costMicrodollars"], 60 + 120, "{e}");
}

#[tokio::test]
async fn a_refused_signature_is_bedrocks_own_error_and_costs_nothing() {
    let s = setup().await;
    let path = "/bedrock/model/amazon.nova-lite-v1:0/converse";
    let body = converse(json!({ "input": 10, "output": 5 }));
    let r = s.call(path, &body, &[("x-service-key", &s.raw)]).await;
    assert_eq!((r.status, r.code()), (400, "invalid_upstream"), "no stored credential: {r:?}");

    // The cloud computes another signature (it holds another secret for the key id).
    s.mock.expect_bedrock(sigv4("another-secret-access-key-0000000000000"));
    s.store_keys().await;
    let r = s.call(path, &body, &[("x-service-key", &s.raw)]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.text.contains("The request signature we calculated does not match"), "{}", r.text);
    assert!(
        r.header("x-amzn-errortype").unwrap_or_default().starts_with("InvalidSignatureException"),
        "{r:?}"
    );
    assert_eq!(s.mock.count(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let list = s.owner.get("/api/cost-events?limit=100").await;
    assert_eq!(list.body["data"].as_array().map(Vec::len), Some(0), "{list:?}");
}

#[tokio::test]
async fn a_strict_budget_on_a_bedrock_key_holds_under_40_concurrent_calls() {
    let s = setup().await;
    s.mock.expect_bedrock(sigv4(SECRET));
    s.store_keys().await;
    let limit = 2_000;
    let budget = json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": limit });
    let r = s.owner.post("/api/budgets", budget).await;
    assert_eq!(r.status, 201, "{r:?}");
    let path = "/bedrock/model/amazon.nova-lite-v1:0/converse";
    let body = converse(json!({ "input": 1000, "output": 500 }));
    let bearer = format!("Bearer {}", s.raw);
    let headers = [("authorization", bearer.as_str())];
    let calls = (0..40).map(|_| s.call(path, &body, &headers));
    let answers = futures_util::future::join_all(calls).await;
    let ok = answers.iter().filter(|r| r.status == 200).count();
    let denied = answers.iter().filter(|r| r.status == 429).count();
    assert_eq!(ok + denied, 40, "{answers:?}");
    assert!(ok >= 1 && denied >= 1, "ok {ok}, denied {denied}");
    let events = s.events(ok).await;
    let spent: i64 = events.iter().map(|e| e["costMicrodollars"].as_i64().unwrap()).sum();
    assert_eq!(spent, 180 * i64::try_from(ok).unwrap());
    assert!(spent <= limit, "spent {spent} over the limit {limit}");
    assert_eq!(s.mock.count(), ok, "only the admitted calls reached Bedrock");
}

/// The estimate of a Nova Lite call: every body byte a prompt token at $0.06, the
/// output bound at $0.24, rounded up, plus the rounding slack (as on the other routes).
fn nova_lite_estimate(body: &Value, max_output: u64) -> i64 {
    let input = u64::try_from(body.to_string().len() + 64).unwrap();
    i64::try_from((input * 60_000 + max_output * 240_000).div_ceil(1_000_000)).unwrap() + 5
}

#[tokio::test]
async fn event_streams_pass_through_and_are_charged_from_their_usage_or_the_estimate_when_cut() {
    let s = setup().await;
    s.mock.expect_bedrock(sigv4(SECRET));
    s.store_keys().await;
    let bearer = format!("Bearer {}", s.raw);
    let headers = [("authorization", bearer.as_str())];

    // ConverseStream: the metadata event's usage.
    let body = converse(json!({ "input": 1000, "output": 500 }));
    let r = s.call("/bedrock/model/amazon.nova-lite-v1:0/converse-stream", &body, &headers).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/vnd.amazon.eventstream"));
    assert!(r.text.contains("metadata") && r.text.contains("inputTokens"), "{}", r.text);
    assert_eq!(s.mock.last().path, "/model/amazon.nova-lite-v1:0/converse-stream");
    let e = &s.events(1).await[0];
    assert_eq!(e["costMicrodollars"], 60 + 120, "{e}");
    assert!(e["tags"].get("_svc_estimated").is_none(), "{e}");

    // InvokeModelWithResponseStream of a Claude model: the invocation metrics.
    let invoke = json!({ "anthropic_version": "bedrock-2023-05-31", "max_tokens": 1000,
        "messages": [{ "role": "user", "content": "hi" }], "mock": { "usage": { "input": 1000, "output": 500 } } });
    let path = "/bedrock/model/anthropic.claude-3-5-haiku-20241022-v1:0/invoke-with-response-stream";
    let r = s.call(path, &invoke, &headers).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text.contains("chunk"), "{}", r.text);
    let events = s.events(2).await;
    let e = events.iter().find(|e| e["model"] == "anthropic.claude-3-5-haiku-20241022-v1:0").expect("event");
    assert_eq!(e["costMicrodollars"], 800 + 2000, "{e}");

    // Cut after two frames: the estimate.
    let cut = converse(json!({ "input": 1000, "output": 500 }));
    let mut cut = cut;
    cut["mock"]["disconnect_after"] = json!(2);
    let _ = s
        .app
        .proxy()
        .request(reqwest::Method::POST, "/bedrock/model/amazon.nova-lite-v1:0/converse-stream")
        .header("content-type", "application/json")
        .header("authorization", &bearer)
        .body(cut.to_string())
        .send()
        .await
        .expect("request")
        .bytes()
        .await;
    let events = s.events(3).await;
    let e =
        events.iter().find(|e| e["tags"].get("_svc_stream_error").is_some()).expect("the cut stream's event");
    assert_eq!(e["tags"]["_svc_estimated"], "true", "{e}");
    assert_eq!(e["costMicrodollars"], nova_lite_estimate(&cut, 1000), "{e}");
}

/// boto3's `bedrock-runtime` client (`converse`, `converse_stream`, `invoke_model`,
/// `invoke_model_with_response_stream`) with `endpoint_url` at `{proxy}/bedrock`: over
/// plain http it signs with throwaway keys of its own and adds `X-Service-Key` from an
/// event hook (its bearer mode requires https); the proxy signs again with the stored
/// keys, which the mock checks.
#[tokio::test]
async fn boto3_bedrock_runtime_through_the_proxy() {
    let s = setup().await;
    s.mock.expect_bedrock(sigv4(SECRET));
    s.store_keys().await;
    let run =
        |case: &'static str| crate::support::python::run("bedrock_sdk.py", case, &s.app.server.proxy, &s.raw);
    let haiku = "anthropic.claude-3-5-haiku-20241022-v1:0";

    let out = run("converse").await;
    assert_eq!(out["text"], "Hello from mock", "{out}");
    assert_eq!(out["usage"], json!([10, 20]), "the mock's default usage");
    let out = run("converse_stream").await;
    assert_eq!((out["text"].as_str(), &out["usage"]), (Some("toktoktok"), &json!([10, 20])), "{out}");
    let out = run("invoke_model").await;
    assert_eq!((out["type"].as_str(), &out["usage"]), (Some("message"), &json!([1000, 500])), "{out}");
    let out = run("invoke_model_with_response_stream").await;
    assert_eq!(out["usage"], json!([1000, 500]), "{out}");
    assert_eq!(out["kinds"][0], "message_start", "{out}");

    for req in s.mock.requests() {
        let auth = req.header("authorization").unwrap_or_default();
        assert!(auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={AKID}/")), "{auth}");
        assert!(req.path.starts_with("/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/"), "{}", req.path);
        no_agent_credential(&req);
    }
    let events = s.events(4).await;
    assert!(events.iter().all(|e| e["model"] == haiku && e["provider"] == "bedrock"), "{events:?}");
    let mut costs: Vec<i64> = events.iter().map(|e| e["costMicrodollars"].as_i64().unwrap()).collect();
    costs.sort_unstable();
    // Haiku 3.5 at $0.80 / $4: 10 + 20 tokens twice, 1,000 + 500 twice.
    assert_eq!(costs, [88, 88, 2800, 2800], "{events:?}");
    assert!(events.iter().all(|e| e["tags"].get("_svc_estimated").is_none()), "{events:?}");
}
