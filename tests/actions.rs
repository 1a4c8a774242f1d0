//! Human-in-the-loop actions: validation, the transition table and its 409s, expiry
//! (with and without a restart), waiting for a decision, idempotency, the budget
//! increase, costs of an action, and two instances racing on one decision.

use std::time::Duration;

use serde_json::{json, Value};

use crate::proxy::{openai, setup, Setup};
use crate::support::{backend_is_postgres, create_key, key_client, read, Client, Resp, Server, TestApp};

fn action(extra: Value) -> Value {
    let mut body = json!({ "agentId": "agent-1", "actionType": "send_email", "payload": { "to": "a@b.c" } });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        body[k] = v;
    }
    body
}

struct Actors {
    app: TestApp,
    owner: Client,
    agent: Client,
}

async fn start() -> Actors {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    // The outbox keeps only kinds some endpoint subscribes to.
    crate::support::subscribe_all(&owner).await;
    let (_, raw) = create_key(&owner, "agent").await;
    let agent = key_client(&app.server.control, &raw);
    Actors { app, owner, agent }
}

async fn create(agent: &Client, body: Value) -> String {
    let r = agent.post("/api/actions", body).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.body["data"]["id"].as_str().unwrap().to_owned()
}

async fn report(agent: &Client, id: &str, body: Value) -> Resp {
    agent.post(&format!("/api/actions/{id}/result"), body).await
}

#[tokio::test]
async fn every_validation_rule_is_enforced_and_changes_nothing() {
    let t = start().await;
    let deep = (0..21).fold(json!(1), |inner, _| json!({ "a": inner }));
    let cases: Vec<(Value, &str)> = vec![
        (action(json!({ "agentId": "" })), "agentId"),
        (action(json!({ "agentId": "x".repeat(256) })), "agentId"),
        (action(json!({ "actionType": "launch_missiles" })), "actionType"),
        (action(json!({ "payload": [1] })), "payload"),
        (action(json!({ "payload": { "big": "x".repeat(65_536) } })), "payload"),
        (action(json!({ "payload": deep.clone() })), "payload"),
        (action(json!({ "metadata": { "big": "x".repeat(16_384) } })), "metadata"),
        (action(json!({ "metadata": deep })), "metadata"),
        (action(json!({ "expiresInSeconds": -1 })), "expiresInSeconds"),
        (action(json!({ "expiresInSeconds": 2_592_001 })), "expiresInSeconds"),
        (action(json!({ "expiresInSeconds": "soon" })), "expiresInSeconds"),
    ];
    for (body, field) in cases {
        let r = t.agent.post("/api/actions", body).await;
        assert_eq!(r.issue_paths()[0][0], json!(field), "{field}: {r:?}");
    }
    let missing = t.agent.post("/api/actions", json!({ "agentId": "a", "actionType": "send_email" })).await;
    assert_eq!(missing.issue_paths(), vec![json!(["payload"])]);
    let r = t.agent.post_raw("/api/actions", "text/plain", "{}").await;
    assert_eq!((r.status, r.code()), (415, "unsupported_media_type"));
    let r = t.agent.post_raw("/api/actions", "application/json", "{\"agentId\":").await;
    assert_eq!((r.status, r.code()), (400, "invalid_json"));
    let r = t.agent.post_raw("/api/actions", "application/json", vec![b' '; 1_048_577]).await;
    assert_eq!((r.status, r.code()), (413, "payload_too_large"));
    let r = t.app.control().post("/api/actions", action(json!({}))).await;
    assert_eq!((r.status, r.code()), (401, "authentication_required"));
    assert_eq!(t.owner.get("/api/actions").await.body["data"], json!([]));
    assert_eq!(t.app.outbox_count("action.created").await, 0);
    // The largest accepted values pass; expiry is clamped to a week, null never expires.
    let r = t.agent.post("/api/actions", action(json!({ "expiresInSeconds": 2_592_000 }))).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert!(r.header("x-ratelimit-limit").is_some() && r.header("x-ratelimit-remaining").is_some());
    let created = r.body["data"]["expiresAt"].as_str().unwrap().to_owned();
    let id = r.body["data"]["id"].as_str().unwrap();
    let a = t.agent.get(&format!("/api/actions/{id}")).await.body["data"].clone();
    let week = chrono::DateTime::parse_from_rfc3339(&created).unwrap()
        - chrono::DateTime::parse_from_rfc3339(a["createdAt"].as_str().unwrap()).unwrap();
    assert_eq!(week.num_seconds(), 604_800);
    let r = t.agent.post("/api/actions", action(json!({ "expiresInSeconds": null }))).await;
    assert_eq!(r.body["data"]["expiresAt"], Value::Null, "{r:?}");
    let r = t.agent.post("/api/actions", action(json!({}))).await;
    assert_eq!(r.body["data"]["status"], "pending");
}

#[tokio::test]
async fn the_transition_table_and_every_409() {
    let t = start().await;
    let id = create(&t.agent, action(json!({ "metadata": { "run": 7 } }))).await;
    let a = t.owner.get(&format!("/api/actions/{id}")).await;
    assert_eq!(a.body["data"]["status"], "pending", "{a:?}");
    assert_eq!(a.body["data"]["metadata"], json!({ "run": 7 }));
    // Reports before approval are refused.
    let r = report(&t.agent, &id, json!({ "status": "executing" })).await;
    assert_eq!((r.status, r.code()), (409, "invalid_action_transition"));
    let r = t.owner.post_empty(&format!("/api/actions/{id}/approve")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["status"], "approved");
    assert!(r.body["data"]["approvedAt"].is_string());
    for verb in ["approve", "reject"] {
        let r = t.owner.post_empty(&format!("/api/actions/{id}/{verb}")).await;
        assert_eq!((r.status, r.code()), (409, "invalid_action_transition"), "{verb}");
    }
    // executed/failed straight from approved are not in the table.
    let r = report(&t.agent, &id, json!({ "status": "executed" })).await;
    assert_eq!((r.status, r.code()), (409, "invalid_action_transition"));
    // Body rules come before the transition.
    let r = report(&t.agent, &id, json!({ "status": "executing", "result": {} })).await;
    assert_eq!(r.issue_paths(), vec![json!(["result"])]);
    let r = report(&t.agent, &id, json!({ "status": "failed" })).await;
    assert_eq!(r.issue_paths(), vec![json!(["errorMessage"])]);
    let r = report(&t.agent, &id, json!({ "status": "executing" })).await;
    assert_eq!((r.status, r.body["data"]["status"].clone()), (200, json!("executing")), "{r:?}");
    assert_eq!(r.body["data"]["executedAt"], Value::Null);
    let r = report(&t.agent, &id, json!({ "status": "executing" })).await;
    assert_eq!((r.status, r.code()), (409, "invalid_action_transition"));
    let r = report(&t.agent, &id, json!({ "status": "executed", "result": { "sent": true } })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body["data"]["executedAt"].is_string());
    // Terminal: nothing moves it any more.
    for body in [json!({ "status": "executing" }), json!({ "status": "failed", "errorMessage": "x" })] {
        let r = report(&t.agent, &id, body).await;
        assert_eq!((r.status, r.code()), (409, "invalid_action_transition"));
    }
    let a = t.agent.get(&format!("/api/actions/{id}")).await.body["data"].clone();
    assert_eq!((a["status"].clone(), a["result"].clone()), (json!("executed"), json!({ "sent": true })));
    assert!(a["approvedBy"].as_str().unwrap().starts_with("svc_usr_"));

    // The failure path, and a rejection.
    let failing = create(&t.agent, action(json!({}))).await;
    t.owner.post_empty(&format!("/api/actions/{failing}/approve")).await;
    report(&t.agent, &failing, json!({ "status": "executing" })).await;
    let r = report(&t.agent, &failing, json!({ "status": "failed", "errorMessage": "smtp down" })).await;
    assert_eq!(r.body["data"]["status"], "failed", "{r:?}");
    let rejected = create(&t.agent, action(json!({}))).await;
    let r = t.owner.post_empty(&format!("/api/actions/{rejected}/reject")).await;
    assert_eq!(r.body["data"]["status"], "rejected", "{r:?}");
    assert!(r.body["data"]["rejectedAt"].is_string());
    for verb in ["approve", "reject"] {
        let r = t.owner.post_empty(&format!("/api/actions/{rejected}/{verb}")).await;
        assert_eq!((r.status, r.code()), (409, "invalid_action_transition"));
    }
    let r = report(&t.agent, &rejected, json!({ "status": "executing" })).await;
    assert_eq!((r.status, r.code()), (409, "invalid_action_transition"));

    // Lists, filters, pages.
    let all = t.owner.get("/api/actions?limit=2").await;
    assert_eq!(all.body["data"].as_array().unwrap().len(), 2);
    let cursor = all.body["cursor"].to_string();
    let next = t.owner.get(&format!("/api/actions?limit=2&cursor={}", urlencode(&cursor))).await;
    assert_eq!(next.body["data"].as_array().unwrap().len(), 1, "{next:?}");
    assert_eq!(next.body["cursor"], Value::Null);
    let r = t.owner.get("/api/actions?statuses=failed,rejected").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2);
    let r = t.owner.get("/api/actions?status=executed").await;
    assert_eq!(r.body["data"][0]["id"], json!(id));
    assert_eq!(t.owner.get("/api/actions?status=done").await.issue_paths(), vec![json!(["status"])]);
    assert_eq!(t.owner.get("/api/actions?limit=101").await.issue_paths(), vec![json!(["limit"])]);
    // Events: created ×3, approved ×2, rejected ×1; none for reports.
    assert_eq!(t.app.outbox_count("action.created").await, 3);
    assert_eq!(t.app.outbox_count("action.approved").await, 2);
    assert_eq!(t.app.outbox_count("action.rejected").await, 1);
    // Unknown, malformed and other organizations' actions are 404.
    let ghost = "svc_act_00000000-0000-7000-8000-000000000000";
    for path in [format!("/api/actions/{ghost}"), "/api/actions/nope".to_owned()] {
        assert_eq!(t.agent.get(&path).await.status, 404);
    }
    assert_eq!(t.owner.post_empty(&format!("/api/actions/{ghost}/approve")).await.status, 404);
    let stranger = t.app.user_in_org("s@example.com", "elsewhere", "owner").await;
    assert_eq!(stranger.get(&format!("/api/actions/{id}")).await.status, 404);
    let pending = create(&t.agent, action(json!({}))).await;
    assert_eq!(stranger.post_empty(&format!("/api/actions/{pending}/approve")).await.status, 404);
    // Viewers read but do not decide.
    let org = t.owner.get("/api/auth/session").await.body["data"]["org"]["name"].as_str().unwrap().to_owned();
    let viewer = t.app.user_in_org("v@example.com", &org, "viewer").await;
    assert_eq!(viewer.get(&format!("/api/actions/{pending}")).await.status, 200);
    let r = viewer.post_empty(&format!("/api/actions/{pending}/approve")).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn wait(c: &Client, id: &str, seconds: u64) -> Value {
    let r = c.get(&format!("/api/actions/{id}?waitSeconds={seconds}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body["data"].clone()
}

#[tokio::test]
async fn an_expired_action_cannot_be_decided() {
    let t = start().await;
    let id = create(&t.agent, action(json!({ "expiresInSeconds": 1 }))).await;
    let a = wait(&t.agent, &id, 30).await;
    assert_eq!(a["status"], "expired", "{a}");
    assert!(a["expiredAt"].is_string());
    for verb in ["approve", "reject"] {
        let r = t.owner.post_empty(&format!("/api/actions/{id}/{verb}")).await;
        assert_eq!((r.status, r.code()), (409, "action_expired"), "{verb}");
    }
    let r = report(&t.agent, &id, json!({ "status": "executing" })).await;
    assert_eq!((r.status, r.code()), (409, "invalid_action_transition"));
    assert_eq!(t.app.outbox_count("action.expired").await, 1);
    // expiresInSeconds 0 expires at once.
    let now = create(&t.agent, action(json!({ "expiresInSeconds": 0 }))).await;
    let r = t.owner.post_empty(&format!("/api/actions/{now}/approve")).await;
    assert_eq!((r.status, r.code()), (409, "action_expired"));
    assert_eq!(wait(&t.agent, &now, 30).await["status"], "expired");
    assert_eq!(t.app.outbox_count("action.expired").await, 2);
}

#[tokio::test]
async fn timers_survive_a_restart_and_overdue_actions_expire_at_start() {
    let mut t = start().await;
    let later = create(&t.agent, action(json!({ "expiresInSeconds": 3 }))).await;
    let overdue = create(&t.agent, action(json!({ "expiresInSeconds": 1 }))).await;
    let never = create(&t.agent, action(json!({ "expiresInSeconds": null }))).await;
    t.app.server.kill();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    t.app.server = Server::start(&t.app.db.url, &[]);
    let owner = t.app.login("owner@example.com").await;
    let raw_agent = Client { base: t.app.server.control.clone(), ..t.agent.clone() };
    assert_eq!(wait(&raw_agent, &overdue, 30).await["status"], "expired");
    assert_eq!(wait(&raw_agent, &later, 30).await["status"], "expired");
    assert_eq!(wait(&raw_agent, &never, 1).await["status"], "pending");
    assert_eq!(t.app.outbox_count("action.expired").await, 2);
    let r = owner.post_empty(&format!("/api/actions/{never}/approve")).await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn waiting_returns_on_a_decision_or_at_the_deadline() {
    let t = start().await;
    let id = create(&t.agent, action(json!({}))).await;
    let a = wait(&t.agent, &id, 1).await;
    assert_eq!(a["status"], "pending");
    let waiter = {
        let agent = t.agent.clone();
        let id = id.clone();
        tokio::spawn(async move { wait(&agent, &id, 60).await })
    };
    // The waiter is subscribed once its request is in; approving early or late, it
    // answers with the decision, long before its 60 s.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = t.owner.post_empty(&format!("/api/actions/{id}/approve")).await;
    assert_eq!(r.status, 200);
    let a = tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("waiter answered").unwrap();
    assert_eq!(a["status"], "approved");
    assert_eq!(
        t.agent.get(&format!("/api/actions/{id}?waitSeconds=61")).await.issue_paths(),
        vec![json!(["waitSeconds"])]
    );
}

#[tokio::test]
async fn idempotent_create_and_report_replay() {
    let t = start().await;
    let post = |body: Value, key: &str| {
        t.agent
            .request(reqwest::Method::POST, "/api/actions")
            .header("Idempotency-Key", key.to_owned())
            .json(&body)
    };
    let first = read(post(action(json!({})), "k1").send().await.unwrap()).await;
    let again = read(post(action(json!({})), "k1").send().await.unwrap()).await;
    assert_eq!(first.status, 201);
    assert_eq!((again.status, again.header("x-idempotent-replayed")), (201, Some("true")));
    assert_eq!(first.body["data"]["id"], again.body["data"]["id"]);
    let other = read(post(action(json!({ "agentId": "b" })), "k1").send().await.unwrap()).await;
    assert_eq!((other.status, other.code()), (409, "idempotency_conflict"));
    assert_eq!(t.owner.get("/api/actions").await.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(t.app.outbox_count("action.created").await, 1);
    let id = first.body["data"]["id"].as_str().unwrap();
    t.owner.post_empty(&format!("/api/actions/{id}/approve")).await;
    let send = || {
        t.agent
            .request(reqwest::Method::POST, &format!("/api/actions/{id}/result"))
            .header("Idempotency-Key", "r1")
            .json(&json!({ "status": "executing" }))
    };
    let a = read(send().send().await.unwrap()).await;
    let b = read(send().send().await.unwrap()).await;
    assert_eq!((a.status, b.status, b.header("x-idempotent-replayed")), (200, 200, Some("true")));
}

async fn budget_of(s: &Setup) -> Value {
    let r = s.owner.get("/api/budgets").await;
    r.body["data"].as_array().unwrap().iter().find(|b| b["entityId"] == json!(s.key_id)).cloned().unwrap()
}

#[tokio::test]
async fn budget_increase_needs_pro_and_raises_the_limit_on_approval() {
    let s = setup().await;
    let agent = key_client(&s.app.server.control, &s.raw);
    let increase = json!({ "actionType": "budget_increase", "payload": {
        "entityType": "api_key", "entityId": s.key_id, "requestedAmountMicrodollars": 1_000_000,
        "currentLimitMicrodollars": 1, "currentSpendMicrodollars": 0, "reason": "more room" } });
    let r = agent.post("/api/actions", action(increase.clone())).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");

    let s = setup().await;
    let org = s.owner.get("/api/auth/session").await.body["data"]["org"]["name"].as_str().unwrap().to_owned();
    let (ok, out) = s.app.cli(&["org", "set-plan", "--org", &org, "--plan", "pro"]);
    assert!(ok, "{out}");
    let agent = key_client(&s.app.server.control, &s.raw);
    let mut increase = increase;
    increase["payload"]["entityId"] = json!(s.key_id);
    // The budget must exist, and the payload have its shape.
    let r = agent.post("/api/actions", action(increase.clone())).await;
    assert_eq!(r.issue_paths(), vec![json!(["payload", "entityId"])]);
    let mut bad = increase.clone();
    bad["payload"]["requestedAmountMicrodollars"] = json!(0);
    bad["payload"]["entityType"] = json!("planet");
    let r = agent.post("/api/actions", action(bad)).await;
    assert_eq!(r.issue_paths().len(), 2, "{r:?}");

    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1 })).await;
    let refused = s.chat(openai(json!({}))).await;
    assert_eq!((refused.status, refused.code()), (429, "budget_exceeded"), "{refused:?}");
    let id = create(&agent, action(increase)).await;
    let r = s.owner.post_empty(&format!("/api/actions/{id}/approve")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(budget_of(&s).await["maxBudgetMicrodollars"], 1_000_001);
    assert_eq!(s.chat(openai(json!({}))).await.status, 200);
    assert_eq!(s.app.outbox_count("budget.increased").await, 1);
    let n = s
        .app
        .query_n(&format!(
            "SELECT COUNT(*) AS n FROM event_outbox WHERE event_type = 'budget.increased' \
             AND payload LIKE '%\"increased_by_microdollars\":1000000,%' \
             AND payload LIKE '%\"new_limit_microdollars\":1000001,%' AND payload LIKE '%{id}%'"
        ))
        .await;
    assert_eq!(n, 1);
    // A second increase whose budget is deleted before approval changes nothing.
    let again = create(
        &agent,
        action(json!({ "actionType": "budget_increase", "payload": {
        "entityType": "api_key", "entityId": s.key_id, "requestedAmountMicrodollars": 5 } })),
    )
    .await;
    let bid = budget_of(&s).await["id"].as_str().unwrap().to_owned();
    assert_eq!(s.owner.delete(&format!("/api/budgets/{bid}")).await.status, 200);
    let r = s.owner.post_empty(&format!("/api/actions/{again}/approve")).await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{r:?}");
    assert_eq!(s.owner.get(&format!("/api/actions/{again}")).await.body["data"]["status"], "pending");
}

#[tokio::test]
async fn costs_of_an_action_come_from_its_proxied_calls() {
    let s = setup().await;
    let agent = key_client(&s.app.server.control, &s.raw);
    let id = create(&agent, action(json!({}))).await;
    let r = s.send("/v1/chat/completions", &openai(json!({})), &[("x-service-action-id", &id)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    s.chat(openai(json!({}))).await;
    s.events(2).await;
    let costs = agent.get(&format!("/api/actions/{id}/costs")).await;
    let list = costs.body["data"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{costs:?}");
    assert_eq!(list[0]["provider"], "openai");
    assert!(list[0]["id"].as_str().unwrap().starts_with("svc_evt_"));
    assert!(list[0]["costMicrodollars"].as_i64().unwrap() > 0);
    assert_eq!(s.owner.get(&format!("/api/actions/{id}/costs")).await.body, costs.body);
    let other = create(&agent, action(json!({}))).await;
    assert_eq!(agent.get(&format!("/api/actions/{other}/costs")).await.body["data"], json!([]));
}

#[tokio::test]
async fn two_instances_racing_on_one_decision_have_one_winner() {
    if !backend_is_postgres() {
        return; // One process owns a SQLite file: there is no second instance to race.
    }
    let t = start().await;
    let second = Server::start(&t.app.db.url, &[]);
    let other_owner = Client::new(&second.control);
    let r = other_owner
        .post(
            "/api/auth/login",
            json!({ "email": "owner@example.com", "password": crate::support::PASSWORD }),
        )
        .await;
    assert_eq!(r.status, 200);
    for round in 0..10 {
        let id = create(&t.agent, action(json!({}))).await;
        let (approve, reject) = (format!("/api/actions/{id}/approve"), format!("/api/actions/{id}/reject"));
        let (a, b) = tokio::join!(t.owner.post_empty(&approve), other_owner.post_empty(&reject));
        let wins = [a.status, b.status].iter().filter(|s| **s == 200).count();
        assert_eq!(wins, 1, "round {round}: {a:?} {b:?}");
        let loser = if a.status == 200 { &b } else { &a };
        assert_eq!(loser.status, 409, "{loser:?}");
        assert!(["stale_action", "invalid_action_transition"].contains(&loser.code()), "{loser:?}");
    }
    assert_eq!(t.app.outbox_count("action.approved").await + t.app.outbox_count("action.rejected").await, 10);
    // A waiter on one instance sees a decision made on the other.
    let id = create(&t.agent, action(json!({}))).await;
    let waiter = {
        let agent = t.agent.clone();
        let id = id.clone();
        tokio::spawn(async move { wait(&agent, &id, 60).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(other_owner.post_empty(&format!("/api/actions/{id}/approve")).await.status, 200);
    let a = tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("waiter answered").unwrap();
    assert_eq!(a["status"], "approved");
}

#[tokio::test]
async fn an_approved_increase_reaches_the_budget_actor_of_every_instance() {
    if !backend_is_postgres() {
        return; // One process owns a SQLite file: there is no other instance.
    }
    let s = setup().await;
    let org = s.owner.get("/api/auth/session").await.body["data"]["org"]["name"].as_str().unwrap().to_owned();
    let (ok, out) = s.app.cli(&["org", "set-plan", "--org", &org, "--plan", "pro"]);
    assert!(ok, "{out}");
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1 })).await;
    let second = Server::start(&s.app.db.url, &s.app.extra_env);
    let chat_on_second = || async {
        let r = crate::support::Client::new(&second.proxy)
            .request(reqwest::Method::POST, "/v1/chat/completions")
            .header("x-service-key", &s.raw)
            .json(&openai(json!({})))
            .send()
            .await
            .unwrap();
        read(r).await
    };
    let refused = chat_on_second().await;
    assert_eq!((refused.status, refused.code()), (429, "budget_exceeded"), "{refused:?}");
    let agent = key_client(&s.app.server.control, &s.raw);
    let id = create(
        &agent,
        action(json!({ "actionType": "budget_increase", "payload": {
        "entityType": "api_key", "entityId": s.key_id, "requestedAmountMicrodollars": 1_000_000 } })),
    )
    .await;
    assert_eq!(s.owner.post_empty(&format!("/api/actions/{id}/approve")).await.status, 200);
    // The second instance learns of the new limit from the budget change feed.
    let mut last = chat_on_second().await;
    for _ in 0..100 {
        if last.status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = chat_on_second().await;
    }
    assert_eq!(last.status, 200, "{last:?}");
}

/// Every pending action is a live actor with a timer: an organization holds at most
/// `max_pending_actions` of them; past that, create is 409 and writes nothing, and
/// deciding one makes room again.
#[tokio::test]
async fn pending_actions_are_bounded_per_organization() {
    let app = TestApp::start_with(&[("SPENDGATE_MAX_PENDING_ACTIONS", "2".to_owned())]).await;
    let owner = app.owner().await;
    crate::support::subscribe_all(&owner).await;
    let (_, raw) = create_key(&owner, "agent").await;
    let agent = key_client(&app.server.control, &raw);
    let first = create(&agent, action(json!({}))).await;
    create(&agent, action(json!({}))).await;
    let r = agent.post("/api/actions", action(json!({}))).await;
    assert_eq!((r.status, r.code()), (409, "limit_exceeded"), "{r:?}");
    assert_eq!(app.query_n("SELECT COUNT(*) AS n FROM actions").await, 2, "nothing written");
    assert_eq!(app.outbox_count("action.created").await, 2);
    let r = owner.post_empty(&format!("/api/actions/{first}/reject")).await;
    assert_eq!(r.status, 200, "{r:?}");
    create(&agent, action(json!({}))).await;
}
