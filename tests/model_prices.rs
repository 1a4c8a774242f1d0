//! Runtime model prices and the `unpricedModels` organization setting over real HTTP:
//! `block` refuses a call to a model without a price on every provider route with
//! nothing forwarded, a runtime price admits it and charges it to the microdollar
//! (on a second instance too, through the change feed), a DELETE returns to the
//! table's price or to unpriced; validation, roles, organizations kept apart, audit.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::mock::MockUpstream;
use crate::support::{create_key, read, Client, Resp, Server, TestApp};

const PRICES: &str = "/api/model-prices";

struct Setup {
    app: TestApp,
    mock: MockUpstream,
    owner: Client,
    raw: String,
}

fn env_for(mock: &MockUpstream) -> Vec<(&'static str, String)> {
    vec![
        ("SPENDGATE_UPSTREAM_OPENAI", mock.base.clone()),
        ("SPENDGATE_UPSTREAM_ANTHROPIC", mock.base.clone()),
        ("SPENDGATE_UPSTREAM_GEMINI", mock.base.clone()),
    ]
}

async fn setup() -> Setup {
    let mock = MockUpstream::start();
    let app = TestApp::start_with(&env_for(&mock)).await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "agent").await;
    Setup { app, mock, owner, raw }
}

async fn put(c: &Client, path: &str, body: Value) -> Resp {
    let r = c
        .request(reqwest::Method::PUT, path)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    read(r).await
}

async fn org_id(c: &Client) -> String {
    c.get("/api/auth/session").await.body["data"]["org"]["id"].as_str().unwrap().to_owned()
}

/// A chat completion of `model` whose answer reports 1,000 input and 500 output tokens.
fn chat(model: &str) -> Value {
    json!({ "model": model, "max_tokens": 100, "messages": [{ "role": "user", "content": "hi" }],
            "mock": { "usage": { "input": 1000, "output": 500 } } })
}

async fn send(proxy: &Client, raw: &str, path: &str, body: &Value) -> Resp {
    let r = proxy
        .request(reqwest::Method::POST, path)
        .header("x-service-key", raw)
        .header("content-type", "application/json")
        .body(body.to_string());
    read(r.send().await.expect("request")).await
}

/// The cost event of the call answered with `r`.
async fn event_of(owner: &Client, r: &Resp) -> Value {
    assert_eq!(r.status, 200, "{r:?}");
    let id = r.header("x-service-request-id").unwrap().to_owned();
    for _ in 0..200 {
        let list = owner.get("/api/cost-events?limit=100").await;
        if let Some(e) = list.body["data"].as_array().unwrap().iter().find(|e| e["requestId"] == id.as_str())
        {
            return e.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no cost event {id}");
}

fn unknown(e: &Value) -> bool {
    e["tags"].get("_svc_unknown_model").is_some()
}

async fn set_policy(owner: &Client, policy: &str) -> Resp {
    let org = org_id(owner).await;
    owner.patch(&format!("/api/orgs/{org}"), json!({ "unpricedModels": policy })).await
}

fn audit_actions(log: &Resp, resource_type: &str) -> Vec<String> {
    log.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["resourceType"] == resource_type)
        .map(|e| e["action"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn block_refuses_unpriced_models_on_every_route_with_nothing_forwarded() {
    let s = setup().await;
    let org = org_id(&s.owner).await;
    let r = s.owner.get(&format!("/api/orgs/{org}")).await;
    assert_eq!(r.body["data"]["unpricedModels"], "estimate", "{r:?}");
    let r = set_policy(&s.owner, "refuse").await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
    assert_eq!(r.issue_paths(), vec![json!(["unpricedModels"])], "{r:?}");
    let r = set_policy(&s.owner, "block").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["unpricedModels"], "block");
    assert_eq!(s.owner.get(&format!("/api/orgs/{org}")).await.body["data"]["unpricedModels"], "block");

    let proxy = s.app.proxy();
    let calls = [
        ("/v1/chat/completions", chat("gpt-mystery"), "openai", "gpt-mystery"),
        (
            "/v1/chat/completions",
            json!({ "model": "gpt-mystery", "stream": true, "messages": [{ "role": "user", "content": "hi" }] }),
            "openai",
            "gpt-mystery",
        ),
        ("/v1/responses", json!({ "model": "gpt-mystery", "input": "hi" }), "openai", "gpt-mystery"),
        ("/v1/embeddings", json!({ "model": "embed-mystery", "input": "hi" }), "openai", "embed-mystery"),
        (
            "/v1/messages",
            json!({ "model": "claude-mystery", "max_tokens": 10, "messages": [{ "role": "user", "content": "hi" }] }),
            "anthropic",
            "claude-mystery",
        ),
        (
            "/v1beta/models/gemini-mystery:generateContent",
            json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }] }),
            "google",
            "gemini-mystery",
        ),
    ];
    for (path, body, provider, model) in &calls {
        let r = send(&proxy, &s.raw, path, body).await;
        assert_eq!((r.status, r.code()), (400, "model_not_priced"), "{path}: {r:?}");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(model) && message.contains(&format!("PUT /api/model-prices/{provider}/{model}"))
        );
        assert_eq!(r.body["error"]["details"]["model"], *model);
        assert_eq!(r.header("x-service-denied"), Some("1"));
    }
    assert_eq!(s.mock.count(), 0, "nothing was forwarded");

    // A priced model is admitted as before.
    let r = send(&proxy, &s.raw, "/v1/chat/completions", &chat("gpt-4o-mini")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.mock.count(), 1);

    // Priced at run time, the next call goes through at exactly that price.
    let r = put(
        &s.owner,
        &format!("{PRICES}/openai/gpt-mystery"),
        json!({ "input": 2_000_000, "output": 3_000_000 }),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let e =
        event_of(&s.owner, &send(&proxy, &s.raw, "/v1/chat/completions", &chat("gpt-mystery")).await).await;
    assert_eq!(e["costMicrodollars"], 2_000 + 1_500, "{e}");
    assert!(!unknown(&e), "{e}");

    // Deleted: refused again; the refused models are listed as seen unpriced.
    assert_eq!(s.owner.delete(&format!("{PRICES}/openai/gpt-mystery")).await.status, 200);
    let r = send(&proxy, &s.raw, "/v1/chat/completions", &chat("gpt-mystery")).await;
    assert_eq!((r.status, r.code()), (400, "model_not_priced"), "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let p = s.owner.get("/api/pricing").await;
        assert_eq!(p.status, 200, "{p:?}");
        assert_eq!(p.body["data"]["unpricedModels"], "block");
        let seen: Vec<String> = p.body["data"]["unpriced"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| format!("{}/{}", m["provider"].as_str().unwrap(), m["model"].as_str().unwrap()))
            .collect();
        if seen.contains(&"openai/gpt-mystery".to_owned())
            && seen.contains(&"google/gemini-mystery".to_owned())
        {
            break;
        }
        assert!(Instant::now() < deadline, "refused models never listed: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = s.owner.get("/api/audit-log?limit=100").await;
    let org_actions = audit_actions(&log, "organization");
    assert!(org_actions.contains(&"org_unpriced_models.updated".to_owned()), "{org_actions:?}");
}

#[tokio::test]
async fn estimate_charges_the_fallback_and_runtime_prices_replace_table_prices() {
    let s = setup().await;
    let proxy = s.app.proxy();
    // Today's behaviour: charged at the fallback price and tagged.
    let e =
        event_of(&s.owner, &send(&proxy, &s.raw, "/v1/chat/completions", &chat("gpt-mystery")).await).await;
    assert!(unknown(&e), "{e}");
    assert!(e["costMicrodollars"].as_i64().unwrap() > 0);
    let listed = |policy: &Resp| {
        policy.body["pricing"]["unpriced_models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["model"] == "gpt-mystery")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !listed(&proxy.get_with_key("/v1/policy", &s.raw).await) {
        assert!(Instant::now() < deadline, "never listed as unpriced");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let r = put(
        &s.owner,
        &format!("{PRICES}/openai/gpt-mystery"),
        json!({ "input": 1_000_000, "output": 4_000_000, "cachedInput": 100_000, "reasoningOutput": 8_000_000 }),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = &r.body["data"];
    assert_eq!((d["provider"].as_str(), d["model"].as_str()), (Some("openai"), Some("gpt-mystery")), "{d}");
    assert_eq!(
        (d["input"].as_i64(), d["output"].as_i64(), d["cachedInput"].as_i64()),
        (Some(1_000_000), Some(4_000_000), Some(100_000))
    );
    assert!(d["cacheWrite5m"].is_null() && d["reasoningOutput"] == 8_000_000, "{d}");
    let e =
        event_of(&s.owner, &send(&proxy, &s.raw, "/v1/chat/completions", &chat("gpt-mystery")).await).await;
    assert_eq!(e["costMicrodollars"], 1_000 + 2_000, "{e}");
    assert!(!unknown(&e), "{e}");
    // The organization's policy document no longer lists it, and shows the runtime price;
    // `spendgate pricing check` lists the runtime price and marks the model.
    let policy = proxy.get_with_key("/v1/policy", &s.raw).await;
    assert!(!listed(&policy), "{}", policy.text);
    assert_eq!(policy.body["pricing"]["runtime_prices"][0]["model"], "gpt-mystery", "{}", policy.text);
    let (ok, out) = s.app.cli(&["pricing", "check"]);
    assert!(ok, "{out}");
    assert!(out.contains("1 runtime price(s)"), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("gpt-mystery") && l.contains("1000000"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("svc_org_") && line.contains("4000000"), "{line}");
    assert!(out.contains("(priced at run time by some organization)"), "{out}");

    // A table model priced at run time: the runtime price wins; deleted, the table's again.
    let table =
        event_of(&s.owner, &send(&proxy, &s.raw, "/v1/chat/completions", &chat("gpt-4o-mini")).await).await;
    assert_eq!(table["costMicrodollars"], 150 + 300, "gpt-4o-mini at $0.15 / $0.60: {table}");
    let r =
        put(&s.owner, &format!("{PRICES}/openai/gpt-4o-mini"), json!({ "input": 10_000_000, "output": 0 }))
            .await;
    assert_eq!(r.status, 200, "{r:?}");
    let e =
        event_of(&s.owner, &send(&proxy, &s.raw, "/v1/chat/completions", &chat("gpt-4o-mini")).await).await;
    assert_eq!(e["costMicrodollars"], 10_000, "{e}");
    let list = s.owner.get(PRICES).await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 2, "{list:?}");
    let pricing = s.owner.get("/api/pricing").await;
    let models = pricing.body["data"]["models"].as_array().unwrap();
    let entry = |m: &str| models.iter().find(|e| e["provider"] == "openai" && e["model"] == m).cloned();
    assert_eq!(entry("gpt-4o-mini").unwrap()["source"], "runtime");
    assert_eq!(entry("gpt-4o").unwrap()["source"], "builtin");
    assert_eq!(entry("gpt-mystery").unwrap()["cachedInput"], 100_000);

    let r = s.owner.delete(&format!("{PRICES}/openai/gpt-4o-mini")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["deleted"], true);
    let e =
        event_of(&s.owner, &send(&proxy, &s.raw, "/v1/chat/completions", &chat("gpt-4o-mini")).await).await;
    assert_eq!(e["costMicrodollars"], 450, "{e}");
    let r = s.owner.delete(&format!("{PRICES}/openai/gpt-mystery")).await;
    assert_eq!(r.status, 200, "{r:?}");
    let e =
        event_of(&s.owner, &send(&proxy, &s.raw, "/v1/chat/completions", &chat("gpt-mystery")).await).await;
    assert!(unknown(&e), "unpriced again: {e}");
    assert_eq!(s.owner.delete(&format!("{PRICES}/openai/gpt-mystery")).await.status, 404);
}

#[tokio::test]
async fn prices_are_validated_admin_only_per_organization_and_audited() {
    let s = setup().await;
    let path = format!("{PRICES}/anthropic/claude-mystery");
    let bad = [
        (json!({ "input": -1, "output": 1 }), "input"),
        (json!({ "input": 1, "output": 10_000_000_001_i64 }), "output"),
        (json!({ "input": 1.5, "output": 1 }), "input"),
        (json!({ "input": 1, "output": 1, "cacheWrite5m": -5 }), "cacheWrite5m"),
        (json!({ "input": 1, "output": 1, "ouput": 1 }), "ouput"),
        (json!({ "input": 1 }), "output"),
        (json!({ "input": "1", "output": 1 }), "input"),
    ];
    for (body, field) in bad {
        let r = put(&s.owner, &path, body.clone()).await;
        assert_eq!((r.status, r.code()), (400, "validation_error"), "{body}: {r:?}");
        assert!(r.text.contains(field), "{body}: {r:?}");
    }
    let r = put(&s.owner, &format!("{PRICES}/mistral/large"), json!({ "input": 1, "output": 1 })).await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
    assert_eq!(r.issue_paths(), vec![json!(["provider"])], "{r:?}");
    let r = put(&s.owner, &format!("{PRICES}/openai/%20spaced"), json!({ "input": 1, "output": 1 })).await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
    assert!(s.owner.get(PRICES).await.body["data"].as_array().unwrap().is_empty(), "nothing stored");

    // `gemini` names google; a model may contain `/`; the largest price is accepted.
    let r = put(
        &s.owner,
        &format!("{PRICES}/gemini/tuned/gem-1"),
        json!({ "input": 10_000_000_000_i64, "output": 0 }),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (r.body["data"]["provider"].as_str(), r.body["data"]["model"].as_str()),
        (Some("google"), Some("tuned/gem-1"))
    );
    let r = put(&s.owner, &path, json!({ "input": 3_000_000, "output": 15_000_000 })).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = put(&s.owner, &path, json!({ "input": 1_000_000, "output": 5_000_000 })).await;
    assert_eq!((r.status, r.body["data"]["input"].as_i64()), (200, Some(1_000_000)), "replaced: {r:?}");

    // Viewers list but neither set nor delete.
    let org = s.owner.get("/api/auth/session").await.body["data"]["org"]["name"].as_str().unwrap().to_owned();
    let viewer = s.app.user_in_org("v@example.com", &org, "viewer").await;
    assert_eq!(viewer.get(PRICES).await.body["data"].as_array().unwrap().len(), 2);
    let r = put(&viewer, &path, json!({ "input": 1, "output": 1 })).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    let r = viewer.delete(&path).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");

    // Another organization sees none of them and cannot delete them.
    let other = s.app.user_in_org("other@example.com", "Other Co", "owner").await;
    assert!(other.get(PRICES).await.body["data"].as_array().unwrap().is_empty());
    assert_eq!(other.delete(&path).await.status, 404);
    let theirs = other.get("/api/pricing").await;
    let models = theirs.body["data"]["models"].as_array().unwrap();
    assert!(!models.iter().any(|m| m["source"] == "runtime"), "{theirs:?}");
    assert_eq!(s.owner.get(PRICES).await.body["data"].as_array().unwrap().len(), 2);

    assert_eq!(s.owner.delete(&path).await.status, 200);
    let log = s.owner.get("/api/audit-log?limit=100").await;
    assert_eq!(
        audit_actions(&log, "model_price"),
        ["model_price.deleted", "model_price.set", "model_price.set", "model_price.set"],
        "{log:?}"
    );
    let last =
        log.body["data"].as_array().unwrap().iter().find(|e| e["action"] == "model_price.deleted").unwrap();
    assert_eq!(last["resourceId"], "anthropic/claude-mystery", "{last}");
    assert!(audit_actions(&other.get("/api/audit-log?limit=100").await, "model_price").is_empty());
}

/// The cost of one `gpt-4o-mini` call through `proxy`, once it is recorded.
async fn cost_through(s: &Setup, proxy: &Client) -> i64 {
    let r = send(proxy, &s.raw, "/v1/chat/completions", &chat("gpt-4o-mini")).await;
    event_of(&s.owner, &r).await["costMicrodollars"].as_i64().unwrap()
}

/// Calls through `proxy` until one costs `expected` (the change reached the instance).
async fn reaches(s: &Setup, proxy: &Client, expected: i64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let cost = cost_through(s, proxy).await;
        if cost == expected {
            return;
        }
        assert!(Instant::now() < deadline, "{what} never reached the instance: still {cost}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_runtime_price_reaches_every_instance_and_its_delete_too() {
    let s = setup().await;
    let second = Server::start(&s.app.db.url, &env_for(&s.mock));
    let other = Client::new(&second.proxy);
    // Both instances have the organization's prices cached (none).
    assert_eq!(cost_through(&s, &s.app.proxy()).await, 450);
    assert_eq!(cost_through(&s, &other).await, 450);
    let r = put(
        &s.owner,
        &format!("{PRICES}/openai/gpt-4o-mini"),
        json!({ "input": 1_000_000, "output": 1_000_000 }),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    // At once where it was made; within the change-feed delay on the other.
    assert_eq!(cost_through(&s, &s.app.proxy()).await, 1_500);
    reaches(&s, &other, 1_500, "the runtime price").await;
    assert_eq!(s.owner.delete(&format!("{PRICES}/openai/gpt-4o-mini")).await.status, 200);
    assert_eq!(cost_through(&s, &s.app.proxy()).await, 450);
    reaches(&s, &other, 450, "the delete").await;
    // The setting travels the same way.
    assert_eq!(set_policy(&s.owner, "block").await.status, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = send(&other, &s.raw, "/v1/chat/completions", &chat("gpt-mystery")).await;
        if r.status == 400 {
            assert_eq!(r.code(), "model_not_priced", "{r:?}");
            break;
        }
        assert_eq!(r.status, 200, "{r:?}");
        assert!(Instant::now() < deadline, "block never reached the second instance");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(second);
}

#[tokio::test]
async fn an_operator_defined_upstream_is_blocked_and_priced_under_its_name() {
    let mock = MockUpstream::start();
    let mut env = env_for(&mock);
    env.push(("SPENDGATE_UPSTREAMS", format!("name=openrouter,format=openai,base_url={}/or", mock.base)));
    let app = TestApp::start_with(&env).await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "agent").await;
    let s = Setup { app, mock, owner, raw };
    assert_eq!(set_policy(&s.owner, "block").await.status, 200);
    let proxy = s.app.proxy();
    let path = "/upstreams/openrouter/v1/chat/completions";
    let r = send(&proxy, &s.raw, path, &chat("acme/acme-9")).await;
    assert_eq!((r.status, r.code()), (400, "model_not_priced"), "{r:?}");
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("PUT /api/model-prices/openrouter/acme/acme-9"));
    assert_eq!(s.mock.count(), 0, "nothing was forwarded");
    // A price under the built-in provider's name does not price the upstream's model.
    let body = json!({ "input": 1_000_000, "output": 2_000_000 });
    assert_eq!(put(&s.owner, &format!("{PRICES}/openai/acme/acme-9"), body.clone()).await.status, 200);
    let r = send(&proxy, &s.raw, path, &chat("acme/acme-9")).await;
    assert_eq!((r.status, r.code()), (400, "model_not_priced"), "{r:?}");
    let r = put(&s.owner, &format!("{PRICES}/openrouter/acme/acme-9"), body).await;
    assert_eq!((r.status, r.body["data"]["provider"].as_str()), (200, Some("openrouter")), "{r:?}");
    let e = event_of(&s.owner, &send(&proxy, &s.raw, path, &chat("acme/acme-9")).await).await;
    assert_eq!(
        (e["provider"].as_str(), e["costMicrodollars"].as_i64()),
        (Some("openrouter"), Some(1_000 + 1_000)),
        "{e}"
    );
    assert!(!unknown(&e), "{e}");
    assert_eq!(s.mock.count(), 1);
}
