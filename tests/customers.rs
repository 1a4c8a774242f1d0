//! Per-customer budgets on the proxy: bind, gate and unit economics, with the
//! control plane's binding status endpoints.

use std::sync::Arc;

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::support::{create_key, key_client, read, subscribe_all, Client, Resp, Server, TestApp};

const OWNER_ORG: &str = "owner@example.com's organization";

fn assert_error(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.code(), code, "{r:?}");
}

fn bind_body(customer: &str, cap: i64) -> Value {
    json!({ "customerId": customer, "planRef": "pro", "budgetCap": cap })
}

fn gate_body(customer: &str, estimate: i64, send: bool) -> Value {
    json!({ "customerId": customer, "estimatedCostMicrodollars": estimate, "sendEvent": send })
}

struct Setup {
    app: TestApp,
    owner: Client,
    proxy: Client,
    raw_key: String,
}

async fn setup_with(env: &[(&'static str, String)]) -> Setup {
    let app = TestApp::start_with(env).await;
    let owner = app.owner().await;
    // The outbox keeps only kinds some endpoint subscribes to.
    subscribe_all(&owner).await;
    let (_, raw) = create_key(&owner, "billing").await;
    let proxy = key_client(&app.proxy().base, &raw);
    Setup { app, owner, proxy, raw_key: raw }
}

async fn send_keyed(client: &Client, path: &str, key: &str, body: &Value) -> Resp {
    read(
        client
            .request(reqwest::Method::POST, path)
            .header("idempotency-key", key)
            .json(body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn bind_validates_every_field_with_its_code() {
    let s = setup_with(&[]).await;
    let cases = [
        (json!({ "planRef": "p", "budgetCap": 1 }), "invalid_customer_id"),
        (json!({ "customerId": "a b", "planRef": "p", "budgetCap": 1 }), "invalid_customer_id"),
        (json!({ "customerId": "a", "budgetCap": 1 }), "invalid_plan_ref"),
        (json!({ "customerId": "a", "planRef": "p".repeat(257), "budgetCap": 1 }), "invalid_plan_ref"),
        (json!({ "customerId": "a", "planRef": "p", "budgetCap": -1 }), "invalid_budget_cap"),
        (json!({ "customerId": "a", "planRef": "p", "budgetCap": 1.5 }), "invalid_budget_cap"),
        (
            json!({ "customerId": "a", "planRef": "p", "budgetCap": 1, "marginTargetPercent": 101 }),
            "invalid_margin_target",
        ),
        (
            json!({ "customerId": "a", "planRef": "p", "budgetCap": 1, "customerData": {} }),
            "customer_data_unsupported",
        ),
        (
            json!({ "customerId": "a", "planRef": "p", "budgetCap": 1, "customer_data": {} }),
            "customer_data_unsupported",
        ),
    ];
    for (body, code) in cases {
        assert_error(&s.proxy.post("/v1/bind", body).await, 400, code);
    }
    assert_error(&s.proxy.post_raw("/v1/bind", "application/json", "{").await, 400, "invalid_json");
    let long_key = "k".repeat(257);
    assert_error(
        &send_keyed(&s.proxy, "/v1/bind", &long_key, &bind_body("a", 1)).await,
        400,
        "invalid_idempotency_key",
    );
    let anonymous = Client::new(&s.app.proxy().base);
    assert_error(&anonymous.post("/v1/bind", bind_body("a", 1)).await, 401, "unauthorized");
    assert_eq!(s.owner.get("/api/customer-bindings").await.body["data"], json!([]), "nothing was bound");
}

#[tokio::test]
async fn bind_is_idempotent_converges_and_respects_status() {
    let s = setup_with(&[]).await;
    let r = s
        .proxy
        .post(
            "/v1/bind",
            json!({ "customerId": "acme", "planRef": "pro", "budgetCap": 5_000, "marginTargetPercent": 40 }),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["status"], "active");
    assert_eq!(r.body["budgetCapMicrodollars"], 5_000);
    assert_eq!(r.body["marginTargetPercent"], 40);
    let binding_id = r.body["bindingId"].as_str().unwrap().to_owned();

    // Concurrent binds of one customer converge on one row; the last cap wins.
    let binds = (0..20).map(|i| s.proxy.post("/v1/bind", bind_body("acme", 6_000 + i)));
    for r in join_all(binds).await {
        assert_eq!((r.status, r.body["bindingId"].as_str()), (200, Some(binding_id.as_str())), "{r:?}");
    }
    let list = s.owner.get("/api/customer-bindings").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1, "{list:?}");

    // Idempotency: replay with the header the spec names, conflict on another body.
    let first = send_keyed(&s.proxy, "/v1/bind", "bind-1", &bind_body("beta", 100)).await;
    assert_eq!(first.status, 200, "{first:?}");
    let replay = send_keyed(&s.proxy, "/v1/bind", "bind-1", &bind_body("beta", 100)).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"), "{replay:?}");
    assert_eq!(replay.body, first.body);
    assert_error(
        &send_keyed(&s.proxy, "/v1/bind", "bind-1", &bind_body("beta", 200)).await,
        409,
        "idempotency_conflict",
    );

    // A suspended binding refuses bind and changes nothing; reactivated, it binds again.
    let member = s.app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    assert_error(&member.post_empty("/api/customer-bindings/acme/suspend").await, 403, "forbidden");
    // The gate reads the status from a cache that these transitions invalidate.
    assert_eq!(s.proxy.post("/v1/gate", gate_body("acme", 1, false)).await.body["allowed"], true);
    let r = s.owner.post_empty("/api/customer-bindings/acme/suspend").await;
    assert_eq!((r.status, &r.body["data"]["status"]), (200, &json!("suspended")), "{r:?}");
    assert_error(&s.proxy.post("/v1/bind", bind_body("acme", 1)).await, 409, "binding_inactive");
    assert_eq!(s.proxy.post("/v1/gate", gate_body("acme", 1, false)).await.body["reason"], "bind_not_found");
    let r = s.owner.post_empty("/api/customer-bindings/acme/reactivate").await;
    assert_eq!(s.proxy.post("/v1/gate", gate_body("acme", 1, false)).await.body["allowed"], true);
    assert!(r.body["data"]["budgetCapMicrodollars"].as_i64().unwrap() >= 6_000, "{r:?}");
    assert_eq!(s.proxy.post("/v1/bind", bind_body("acme", 7)).await.body["budgetCapMicrodollars"], 7);
    assert_error(&s.owner.post_empty("/api/customer-bindings/nobody/archive").await, 404, "not_found");
    assert_error(&s.owner.post_empty("/api/customer-bindings/acme/explode").await, 404, "not_found");
}

#[tokio::test]
async fn gate_answers_every_case_in_a_200() {
    let s = setup_with(&[]).await;
    // No binding: bind_not_found, with the feature-flag preview.
    let mut body = gate_body("ghost", 10, true);
    body["withPreview"] = json!(true);
    let r = s.proxy.post("/v1/gate", body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (r.body["allowed"].as_bool(), r.body["reason"].as_str()),
        (Some(false), Some("bind_not_found"))
    );
    assert!(r.body["decisionId"].as_str().unwrap().starts_with("dec_"), "{r:?}");
    assert_eq!(r.body["preview"]["scenario"], "feature_flag");
    assert_eq!(r.body["recovery"]["retryable"], true);

    assert_eq!(s.proxy.post("/v1/bind", bind_body("acme", 100)).await.status, 200);
    // Advisory checks write and reserve nothing.
    for _ in 0..3 {
        let r = s.proxy.post("/v1/gate", gate_body("acme", 100, false)).await;
        assert_eq!(
            (r.body["allowed"].as_bool(), r.body["remaining"].as_i64()),
            (Some(true), Some(0)),
            "{r:?}"
        );
    }
    let r = s.proxy.post("/v1/gate", gate_body("acme", 101, false)).await;
    assert_eq!(
        (r.body["allowed"].as_bool(), r.body["reason"].as_str()),
        (Some(false), Some("budget_exceeded"))
    );
    assert_eq!(s.app.query_n("SELECT COUNT(*) AS n FROM cost_events").await, 0);

    // A charge, then a denial with its record and one webhook event.
    let r = s.proxy.post("/v1/gate", json!({ "customerId": "acme", "estimatedCostMicrodollars": 60, "sendEvent": true, "feature": "chat" })).await;
    assert_eq!((r.body["allowed"].as_bool(), r.body["remaining"].as_i64()), (Some(true), Some(40)), "{r:?}");
    let mut body = gate_body("acme", 41, true);
    body["withPreview"] = json!(true);
    let r = s.proxy.post("/v1/gate", body).await;
    assert_eq!(
        (r.body["allowed"].as_bool(), r.body["reason"].as_str()),
        (Some(false), Some("budget_exceeded")),
        "{r:?}"
    );
    assert_eq!(r.body["remaining"], 40);
    assert_eq!(r.body["preview"]["requiredBalance"], 41);
    assert_eq!(r.body["recovery"]["owner_action_required"], true);
    assert_eq!(s.app.outbox_count("customer_budget.exceeded").await, 1);
    let gate_events = "SELECT COUNT(*) AS n FROM cost_events WHERE provider = 'gate'";
    assert_eq!(s.app.query_n(gate_events).await, 2, "one charge, one denial record");
    let charged = "SELECT CAST(COALESCE(SUM(cost_microdollars), 0) AS BIGINT) AS n FROM cost_events WHERE provider = 'gate' AND model = 'chat'";
    assert_eq!(s.app.query_n(charged).await, 60);

    for (body, code) in [
        (gate_body("acme", 0, true), "invalid_estimate"),
        (json!({ "customerId": "acme", "estimatedCostMicrodollars": 1, "feature": "" }), "invalid_feature"),
        (gate_body("bad id", 1, true), "invalid_customer_id"),
    ] {
        assert_error(&s.proxy.post("/v1/gate", body).await, 400, code);
    }
}

/// A replayed denial answers the stored decision and fires no second webhook; a
/// replayed charge is not charged again.
#[tokio::test]
async fn gate_replays_never_charge_or_fire_twice() {
    let s = setup_with(&[]).await;
    assert_eq!(s.proxy.post("/v1/bind", bind_body("acme", 50)).await.status, 200);
    let charge = gate_body("acme", 50, true);
    let first = send_keyed(&s.proxy, "/v1/gate", "g-1", &charge).await;
    assert_eq!(first.body["allowed"], true, "{first:?}");
    let again = send_keyed(&s.proxy, "/v1/gate", "g-1", &charge).await;
    assert_eq!((again.header("idempotent-replayed"), &again.body), (Some("true"), &first.body));
    let denial = send_keyed(&s.proxy, "/v1/gate", "g-2", &charge).await;
    assert_eq!(denial.body["allowed"], false, "{denial:?}");
    let replayed = send_keyed(&s.proxy, "/v1/gate", "g-2", &charge).await;
    assert_eq!(replayed.body["decisionId"], denial.body["decisionId"]);
    assert_eq!(s.app.outbox_count("customer_budget.exceeded").await, 1, "one denial, one event");
    let spent = "SELECT CAST(COALESCE(SUM(cost_microdollars), 0) AS BIGINT) AS n FROM cost_events WHERE provider = 'gate'";
    assert_eq!(s.app.query_n(spent).await, 50, "charged once");
    let ue = s.proxy.get("/v1/customers/acme/unit-economics").await;
    assert_eq!(ue.body["cost"]["lifetimeCostMicrodollars"], 50, "{ue:?}");
    assert_eq!(ue.body["latestBudgetCheck"]["decision"], "denied");
}

/// 500 concurrent charging gates against a cap that fits exactly k of them: exactly
/// k are allowed, each denial leaves one record and one webhook event.
#[tokio::test]
async fn concurrent_gates_never_pass_the_cap() {
    let s = setup_with(&[]).await;
    gates_fit_exactly(&s, std::slice::from_ref(&s.proxy), "solo").await;
}

/// The same across two server processes sharing the database, with shared budgets
/// (the database arbitrates; on SQLite through its write lock).
#[tokio::test]
async fn concurrent_gates_on_two_instances_never_pass_the_cap() {
    let env = [("SPENDGATE_SHARED_BUDGETS", "1".to_owned())];
    let s = setup_with(&env).await;
    let second = Server::start(&s.app.db.url, &env);
    let other = key_client(&second.proxy, &s.raw_key);
    gates_fit_exactly(&s, &[s.proxy.clone(), other], "pair").await;
    drop(second);
}

async fn gates_fit_exactly(s: &Setup, proxies: &[Client], customer: &str) {
    const CALLS: usize = 500;
    const ESTIMATE: i64 = 1_000;
    const FITS: usize = 137;
    let cap = ESTIMATE * i64::try_from(FITS).unwrap();
    assert_eq!(s.proxy.post("/v1/bind", bind_body(customer, cap)).await.status, 200);
    let proxies = Arc::new(proxies.to_vec());
    let calls = (0..CALLS).map(|i| {
        let proxies = proxies.clone();
        let customer = customer.to_owned();
        async move { proxies[i % proxies.len()].post("/v1/gate", gate_body(&customer, ESTIMATE, true)).await }
    });
    let answers = join_all(calls).await;
    let allowed = answers.iter().filter(|r| r.status == 200 && r.body["allowed"] == true).count();
    let denied = answers.iter().filter(|r| r.status == 200 && r.body["reason"] == "budget_exceeded").count();
    assert_eq!((allowed, denied), (FITS, CALLS - FITS), "{:?}", answers.iter().find(|r| r.status != 200));
    let spent = format!(
        "SELECT CAST(COALESCE(SUM(cost_microdollars), 0) AS BIGINT) AS n FROM cost_events WHERE customer_id = '{customer}'"
    );
    assert_eq!(s.app.query_n(&spent).await, cap);
    let ue = s.proxy.get(&format!("/v1/customers/{customer}/unit-economics")).await;
    assert_eq!(ue.body["budget"]["spendMicrodollars"], cap, "{ue:?}");
    assert_eq!(ue.body["budget"]["remainingMicrodollars"], 0);
    let fired = i64::try_from(CALLS - FITS).unwrap();
    assert_eq!(s.app.outbox_count("customer_budget.exceeded").await, fired, "one event per denial");
}

#[tokio::test]
async fn unit_economics_shows_the_binding_and_hides_other_customers() {
    let s = setup_with(&[]).await;
    assert_eq!(s.proxy.post("/v1/bind", bind_body("acme", 1_000)).await.status, 200);
    let ue = s.proxy.get("/v1/customers/acme/unit-economics").await;
    assert_eq!(ue.status, 200, "{ue:?}");
    assert_eq!(ue.body["customerId"], "acme");
    assert_eq!(ue.body["binding"]["planRef"], "pro");
    assert_eq!(ue.body["budget"]["maxMicrodollars"], 1_000);
    assert_eq!(ue.body["budget"]["propagated"], true);
    assert_eq!(ue.body["cost"], json!({ "lifetimeCostMicrodollars": 0, "eventCount": 0 }));
    assert_eq!(ue.body["latestBudgetCheck"], json!({ "decision": null, "at": null }));
    assert_error(&s.proxy.get("/v1/customers/nobody/unit-economics").await, 404, "not_found");

    // A key limited to other customers sees neither the binding nor may it bind.
    let r = s.owner.post("/api/keys", json!({ "name": "narrow", "allowedCustomers": ["other"] })).await;
    let narrow = key_client(&s.app.proxy().base, r.body["data"]["rawKey"].as_str().unwrap());
    assert_error(&narrow.get("/v1/customers/acme/unit-economics").await, 404, "not_found");
    assert_error(&narrow.post("/v1/bind", bind_body("acme", 1)).await, 403, "customer_not_allowed");
    assert_error(&narrow.post("/v1/gate", gate_body("acme", 1, true)).await, 403, "customer_not_allowed");
    // Another organization's key sees nothing either.
    let other_owner = s.app.user_in_org("other@example.com", "Other Co", "owner").await;
    let (_, raw) = create_key(&other_owner, "theirs").await;
    let theirs = key_client(&s.app.proxy().base, &raw);
    assert_error(&theirs.get("/v1/customers/acme/unit-economics").await, 404, "not_found");
}

fn refund_body(cost: i64) -> Value {
    json!({ "provider": "gate", "model": "refund", "inputTokens": 0, "outputTokens": 0, "costMicrodollars": cost })
}

async fn customer_spend(s: &Setup, customer: &str) -> i64 {
    let ue = s.proxy.get(&format!("/v1/customers/{customer}/unit-economics")).await;
    ue.body["budget"]["spendMicrodollars"].as_i64().unwrap()
}

/// A refund gives back an earlier gate charge of the same request and key, at most
/// what was charged, once; everything else leaves spend and events as they were.
#[tokio::test]
async fn refunds_give_back_only_a_gate_charge_of_the_same_request() {
    let s = setup_with(&[]).await;
    let ingest = key_client(&s.app.control().base, &s.raw_key);
    assert_eq!(s.proxy.post("/v1/bind", bind_body("acme", 100)).await.status, 200);
    let charge = send_keyed(&s.proxy, "/v1/gate", "g-1", &gate_body("acme", 60, true)).await;
    assert_eq!(charge.body["remaining"], 40, "{charge:?}");

    let (_, other_raw) = create_key(&s.owner, "other").await;
    let other = key_client(&s.app.control().base, &other_raw);
    let mut batch_refund = refund_body(-10);
    batch_refund["idempotencyKey"] = json!("g-1");
    let mut too_much = refund_body(-61);
    too_much["idempotencyKey"] = json!("g-1");
    let mut not_gate = refund_body(-10);
    not_gate["provider"] = json!("openai");
    not_gate["idempotencyKey"] = json!("g-1");
    let refused = [
        ingest.post("/api/cost-events", refund_body(-10)).await,
        send_keyed(&ingest, "/api/cost-events", "g-unknown", &refund_body(-10)).await,
        ingest.post("/api/cost-events", too_much).await,
        send_keyed(&other, "/api/cost-events", "g-1", &refund_body(-10)).await,
        ingest.post("/api/cost-events", not_gate).await,
        ingest.post("/api/cost-events/batch", json!({ "events": [batch_refund] })).await,
        send_keyed(&ingest, "/api/cost-events", "g-1", &refund_body(-1_000_000_000_001)).await,
    ];
    for r in &refused {
        assert_error(r, 400, "validation_error");
        assert_eq!(
            r.issue_paths().last().unwrap().as_array().unwrap().last().unwrap(),
            "costMicrodollars",
            "{r:?}"
        );
    }
    assert_eq!(s.app.query_n("SELECT COUNT(*) AS n FROM cost_events").await, 1, "nothing recorded");
    assert_eq!(customer_spend(&s, "acme").await, 60);

    // The refund: named by the gate's Idempotency-Key, counted where the charge was.
    let refund = send_keyed(&ingest, "/api/cost-events", "g-1", &refund_body(-45)).await;
    assert_eq!(refund.status, 201, "{refund:?}");
    assert_eq!(customer_spend(&s, "acme").await, 15);
    let stored =
        "SELECT COUNT(*) AS n FROM cost_events WHERE cost_microdollars = -45 AND customer_id = 'acme'";
    assert_eq!(s.app.query_n(stored).await, 1);
    // A second refund of the same request is the first one's duplicate.
    let mut again = refund_body(-15);
    again["idempotencyKey"] = json!("g-1");
    let dup = ingest.post("/api/cost-events", again).await;
    assert_eq!((dup.status, &dup.body["data"]["id"]), (200, &refund.body["data"]["id"]), "{dup:?}");
    assert_eq!(customer_spend(&s, "acme").await, 15);
    // The enforcer saw it too: 85 fit again.
    let r = send_keyed(&s.proxy, "/v1/gate", "g-3", &gate_body("acme", 85, true)).await;
    assert_eq!((r.body["allowed"].as_bool(), r.body["remaining"].as_i64()), (Some(true), Some(0)), "{r:?}");
    // A refund is not a gate decision: the latest stays the approval.
    assert_eq!(send_keyed(&ingest, "/api/cost-events", "g-3", &refund_body(-5)).await.status, 201);
    let ue = s.proxy.get("/v1/customers/acme/unit-economics").await;
    assert_eq!(ue.body["cost"]["lifetimeCostMicrodollars"], 60 - 45 + 85 - 5, "{ue:?}");
    // The session view of the same figures.
    let session = s.owner.get("/api/customer-bindings/acme").await;
    assert_eq!(session.body["data"], ue.body, "{session:?}");
    assert_eq!(ue.body["latestBudgetCheck"]["decision"], "approved");
    assert_error(&s.owner.get("/api/customer-bindings/nobody").await, 404, "not_found");
}

/// A gate without an Idempotency-Key is refunded by its decisionId; spend that a
/// manual reset already cleared never goes below zero.
#[tokio::test]
async fn a_refund_never_takes_spend_below_zero() {
    let s = setup_with(&[]).await;
    let ingest = key_client(&s.app.control().base, &s.raw_key);
    assert_eq!(s.proxy.post("/v1/bind", bind_body("acme", 100)).await.status, 200);
    let charge = s.proxy.post("/v1/gate", gate_body("acme", 70, true)).await;
    let decision = charge.body["decisionId"].as_str().unwrap().to_owned();
    assert_eq!(customer_spend(&s, "acme").await, 70);
    let budgets = s.owner.get("/api/budgets").await;
    let list = budgets.body["data"].as_array().unwrap();
    let budget = list.iter().find(|b| b["entityType"] == "customer").expect("the customer's budget");
    let reset = s.owner.post_empty(&format!("/api/budgets/{}", budget["id"].as_str().unwrap())).await;
    assert_eq!(reset.status, 200, "{reset:?}");
    assert_eq!(customer_spend(&s, "acme").await, 0);

    let refund = send_keyed(&ingest, "/api/cost-events", &decision, &refund_body(-70)).await;
    assert_eq!(refund.status, 201, "{refund:?}");
    assert_eq!(customer_spend(&s, "acme").await, 0, "never below zero in storage");
    // Nor in the enforcer: the cap still fits exactly 100, not 170.
    let r = s.proxy.post("/v1/gate", gate_body("acme", 101, true)).await;
    assert_eq!(r.body["reason"], "budget_exceeded", "{r:?}");
    let r = s.proxy.post("/v1/gate", gate_body("acme", 100, true)).await;
    assert_eq!(r.body["allowed"], true, "{r:?}");
}
