//! The clouds' credential shapes (`bedrock`, `vertex`, `azure` through
//! `POST /api/provider-credentials`: checked field by field, listed without their
//! secrets) and Azure OpenAI at `{proxy}/azure/openai/...`: deployment and v1 paths,
//! the spendgate key in `api-key`, the stored key sent upstream as `api-key` to the
//! credential's endpoint, priced by the model the answer names or the credential's
//! deployment map, and Azure's own errors passed back.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::mock::{MockUpstream, Recorded};
use crate::support::{backend_is_postgres, create_key, read, Client, Resp, TestApp};

const PATH: &str = "/api/provider-credentials";
const AZURE_KEY: &str = "azure0123456789abcdef0123456789ab";
const API_VERSION: &str = "2024-10-21";
const SA_KEY: &str =
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n";

struct Setup {
    app: TestApp,
    mock: MockUpstream,
    owner: Client,
    raw: String,
}

async fn setup() -> Setup {
    let mock = MockUpstream::start();
    let mut env = Vec::new();
    if backend_is_postgres() {
        env.push(("SPENDGATE_SECRET_KEY", "test-secret-key-of-at-least-32-characters".to_owned()));
    }
    let app = TestApp::start_with(&env).await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "agent").await;
    Setup { app, mock, owner, raw }
}

impl Setup {
    async fn store_azure(&self, key: &str) {
        let secret =
            json!({ "apiKey": key, "endpoint": self.mock.base, "deployments": { "prod": "gpt-4o-mini" } });
        let r = self.owner.post(PATH, json!({ "upstream": "azure", "secret": secret })).await;
        assert_eq!(r.status, 201, "{r:?}");
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

/// The upstream saw the stored Azure key in `api-key` and no spendgate key anywhere.
fn saw_stored_key_only(req: &Recorded) {
    assert_eq!(req.header("api-key"), Some(AZURE_KEY), "{req:?}");
    assert_eq!(req.header("authorization"), None, "{req:?}");
    for (name, value) in &req.headers {
        assert!(!value.contains("svc_live_sk_"), "{name} carried a spendgate key");
    }
}

fn chat(model: &str, answer_model: &str, stream: bool) -> Value {
    json!({
        "model": model, "stream": stream, "max_tokens": 1000,
        "messages": [{ "role": "user", "content": "hi" }],
        "mock": { "usage": { "input": 1000, "output": 500 }, "answer_model": answer_model },
    })
}

#[tokio::test]
async fn cloud_credentials_are_checked_by_field_and_listed_without_their_secrets() {
    let s = setup().await;
    let bedrock = json!({ "accessKeyId": "AKIAIOSFODNN7EXAMPLE", "secretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "region": "us-east-1", "endpoint": s.mock.base });
    let r = s.owner.post(PATH, json!({ "upstream": "bedrock", "secret": bedrock })).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["data"]["secretPrefix"], "wJalrXUt");
    assert_eq!(r.body["data"]["details"]["accessKeyId"], "AKIAIOSFODNN7EXAMPLE");
    assert_eq!(r.body["data"]["details"]["region"], "us-east-1");
    let sa = json!({ "type": "service_account", "client_email": "gw@proj.iam.gserviceaccount.com",
        "private_key": SA_KEY, "private_key_id": "0123456789abcdef0123", "project_id": "proj" });
    let r = s.owner.post(PATH, json!({ "upstream": "vertex", "secret": { "serviceAccount": sa } })).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["data"]["details"]["serviceAccountEmail"], "gw@proj.iam.gserviceaccount.com");
    s.store_azure(AZURE_KEY).await;

    let list = s.owner.get(PATH).await;
    assert_eq!(list.status, 200, "{list:?}");
    assert_eq!(list.body["data"].as_array().unwrap().len(), 3, "{list:?}");
    for secret in ["wJalrXUtnFEMI/K7MDENG", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", AZURE_KEY] {
        assert!(!list.text.contains(secret), "{}", list.text);
    }
    let azure =
        list.body["data"].as_array().unwrap().iter().find(|c| c["upstream"] == "azure").unwrap().clone();
    assert_eq!(azure["details"]["endpoint"], s.mock.base.as_str());
    assert_eq!(azure["details"]["deployments"]["prod"], "gpt-4o-mini");

    // Every problem named by its field; nothing stored.
    let bad = [
        (
            "bedrock",
            json!({ "accessKeyId": "AKIA", "region": "nowhere" }),
            vec![json!(["secret", "region"]), json!(["secret", "secretAccessKey"])],
        ),
        (
            "bedrock",
            json!({ "apiKey": "k", "region": "us-east-1", "endpoint": "ftp://x" }),
            vec![json!(["secret", "endpoint"])],
        ),
        (
            "vertex",
            json!({ "serviceAccount": { "client_email": "a@b" } }),
            vec![json!(["secret", "serviceAccount", "private_key"])],
        ),
        ("azure", json!({ "apiKey": "k" }), vec![json!(["secret", "endpoint"])]),
        ("azure", json!("just-a-key"), vec![json!(["secret"])]),
        ("openai", json!({ "apiKey": "k" }), vec![json!(["secret"])]),
    ];
    for (upstream, secret, paths) in bad {
        let r = s.owner.post(PATH, json!({ "upstream": upstream, "secret": secret })).await;
        let got = r.issue_paths();
        for p in paths {
            assert!(got.contains(&p), "{upstream}: {p} not in {got:?}");
        }
    }
    assert_eq!(s.owner.get(PATH).await.body["data"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn azure_deployment_call_goes_out_with_the_stored_key_priced_by_the_answers_model() {
    let s = setup().await;
    s.mock.expect_azure_key(AZURE_KEY);
    s.store_azure(AZURE_KEY).await;
    let path = format!("/azure/openai/deployments/prod/chat/completions?api-version={API_VERSION}");
    let r = s.call(&path, &chat("prod", "gpt-4o-2024-08-06", false), &[("api-key", &s.raw)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = s.mock.last();
    assert_eq!(seen.path, "/openai/deployments/prod/chat/completions");
    assert_eq!(seen.query, format!("api-version={API_VERSION}"));
    saw_stored_key_only(&seen);

    let e = &s.events(1).await[0];
    assert_eq!(e["provider"], "azure");
    assert_eq!(e["model"], "gpt-4o-2024-08-06");
    assert_eq!((e["inputTokens"].as_i64(), e["outputTokens"].as_i64()), (Some(1000), Some(500)));
    // azure/gpt-4o-2024-08-06: $2.50 in, $10 out per million.
    assert_eq!(e["costMicrodollars"], 1000 * 5 / 2 + 500 * 10);
}

#[tokio::test]
async fn azure_v1_stream_is_priced_by_the_deployment_map_when_the_answer_names_no_known_model() {
    let s = setup().await;
    s.store_azure(AZURE_KEY).await;
    let bearer = format!("Bearer {}", s.raw);
    let r = s
        .call(
            "/azure/openai/v1/chat/completions",
            &chat("prod", "custom-finetune", true),
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text.contains("[DONE]"), "{}", r.text);
    let seen = s.mock.last();
    assert_eq!(seen.path, "/openai/v1/chat/completions");
    saw_stored_key_only(&seen);
    assert_eq!(seen.json()["stream_options"]["include_usage"], true, "usage asked for");

    let e = &s.events(1).await[0];
    assert_eq!(e["model"], "gpt-4o-mini");
    assert!(e["tags"].get("_svc_estimated").is_none(), "{e}");
    // azure/gpt-4o-mini: $0.15 in, $0.60 out per million.
    assert_eq!(e["costMicrodollars"], 150 + 300);

    // Embeddings on a deployment path.
    let body = json!({ "model": "emb", "input": "hello", "mock": { "usage": { "input": 2000 }, "answer_model": "text-embedding-3-small" } });
    let path = format!("/azure/openai/deployments/emb/embeddings?api-version={API_VERSION}");
    let r = s.call(&path, &body, &[("x-service-key", &s.raw)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let events = s.events(2).await;
    let e = events.iter().find(|e| e["model"] == "text-embedding-3-small").expect("embeddings event");
    assert_eq!(e["costMicrodollars"], 40, "2,000 tokens at $0.02 per million");
}

#[tokio::test]
async fn azure_errors_are_passed_back_and_a_missing_credential_is_refused() {
    let s = setup().await;
    let path = format!("/azure/openai/deployments/prod/chat/completions?api-version={API_VERSION}");
    let r = s.call(&path, &chat("prod", "gpt-4o", false), &[("api-key", &s.raw)]).await;
    assert_eq!((r.status, r.code()), (400, "invalid_upstream"), "{r:?}");
    assert_eq!(s.mock.count(), 0, "nothing forwarded");

    // The cloud refuses the stored key: its own 401, nothing charged.
    s.mock.expect_azure_key("the-right-key");
    s.store_azure(AZURE_KEY).await;
    let r = s.call(&path, &chat("prod", "gpt-4o", false), &[("api-key", &s.raw)]).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.text.contains("Access denied due to invalid subscription key"), "{}", r.text);
    // Without api-version, Azure's 404.
    s.mock.expect_azure_key(AZURE_KEY);
    let r = s
        .call(
            "/azure/openai/deployments/prod/chat/completions",
            &chat("prod", "gpt-4o", false),
            &[("api-key", &s.raw)],
        )
        .await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(r.text.contains("Resource not found"), "{}", r.text);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = s.owner.get("/api/cost-events?limit=100").await;
    assert_eq!(r.body["data"].as_array().map(Vec::len), Some(0), "{r:?}");

    // The agent's own Azure key is never forwarded.
    let r = s
        .call(
            &path,
            &chat("prod", "gpt-4o", false),
            &[("x-service-key", &s.raw), ("api-key", "agents-own-key")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.mock.last().header("api-key"), Some(AZURE_KEY));
}

/// The official `AzureOpenAI` client (the `openai` package) with `azure_endpoint` at
/// `{proxy}/azure` and the spendgate key as its `api_key`.
#[tokio::test]
async fn azure_openai_sdk_through_the_proxy() {
    let s = setup().await;
    s.mock.expect_azure_key(AZURE_KEY);
    s.store_azure(AZURE_KEY).await;
    let run =
        |case: &'static str| crate::support::python::run("azure_sdk.py", case, &s.app.server.proxy, &s.raw);

    let out = run("chat_create").await;
    assert_eq!(out["usage"], json!([1000, 500]), "{out}");
    assert_eq!(out["model"], "gpt-4o-2024-08-06");
    let seen = s.mock.last();
    assert_eq!(seen.path, "/openai/deployments/prod/chat/completions");
    assert!(seen.query.contains("api-version=2024-10-21"), "{}", seen.query);
    saw_stored_key_only(&seen);
    let e = &s.events(1).await[0];
    assert_eq!((e["provider"].as_str(), e["model"].as_str()), (Some("azure"), Some("gpt-4o-2024-08-06")));
    assert_eq!(e["costMicrodollars"], 1000 * 5 / 2 + 500 * 10);

    let out = run("chat_stream").await;
    assert_eq!(out["text"], "toktoktok", "{out}");
    saw_stored_key_only(&s.mock.last());
    let events = s.events(2).await;
    assert!(events.iter().all(|e| e["costMicrodollars"] == 1000 * 5 / 2 + 500 * 10), "{events:?}");
    assert!(events.iter().all(|e| e["tags"].get("_svc_estimated").is_none()), "{events:?}");

    let out = run("embeddings_create").await;
    assert_eq!(out["prompt_tokens"], 2000, "{out}");
    assert_eq!(s.mock.last().path, "/openai/deployments/emb/embeddings");
    let events = s.events(3).await;
    let e = events.iter().find(|e| e["model"] == "text-embedding-3-small").expect("embeddings event");
    assert_eq!(e["costMicrodollars"], 40);
}

/// Responses on a deployment path, and the key policies on the Azure route:
/// `allowedProviders` names `azure`, and a budget refuses as on the other routes.
#[tokio::test]
async fn azure_responses_and_key_policies() {
    let s = setup().await;
    s.store_azure(AZURE_KEY).await;
    let body =
        json!({ "model": "prod", "input": "hi", "mock": { "usage": { "input": 1000, "output": 500 } } });
    let path = format!("/azure/openai/deployments/prod/responses?api-version={API_VERSION}");
    let r = s.call(&path, &body, &[("api-key", &s.raw)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.mock.last().path, "/openai/deployments/prod/responses");
    saw_stored_key_only(&s.mock.last());
    let e = &s.events(1).await[0];
    // The mock names the request's model ("prod"), unknown: the deployment map's gpt-4o-mini.
    assert_eq!((e["model"].as_str(), e["costMicrodollars"].as_i64()), (Some("gpt-4o-mini"), Some(450)));

    let key_id = s.owner.get("/api/keys").await.body["data"][0]["id"].as_str().unwrap().to_owned();
    let r = s.owner.patch(&format!("/api/keys/{key_id}"), json!({ "allowedProviders": ["openai"] })).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.call(&path, &body, &[("api-key", &s.raw)]).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    let r = s.owner.patch(&format!("/api/keys/{key_id}"), json!({ "allowedProviders": ["azure"] })).await;
    assert_eq!(r.status, 200, "{r:?}");
    let budget = json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": 100 });
    let r = s.owner.post("/api/budgets", budget).await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = s.call(&path, &body, &[("api-key", &s.raw)]).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.header("x-service-denied"), Some("1"), "{r:?}");
    assert_eq!(s.mock.count(), 1, "the refused calls were not forwarded");
}
