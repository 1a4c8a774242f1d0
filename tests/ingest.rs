//! Cost-event ingest: validation, dedup, idempotency, batch, budget effects, and
//! durability across a crash.

use serde_json::json;

use crate::support::{create_key, event, key_client, read, TestApp};

#[tokio::test]
async fn single_event_is_created_then_deduplicated_on_request_id() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "sdk").await;
    let sdk = key_client(&app.server.control, &raw);

    let mut body = event(1_234);
    body["idempotencyKey"] = json!("req-1");
    let r = sdk.post("/api/cost-events", body.clone()).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["data"]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("svc_evt_"));
    assert!(r.body["data"]["createdAt"].as_str().unwrap().ends_with('Z'));

    let again = sdk.post("/api/cost-events", body.clone()).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body["data"]["id"], json!(id));
    assert_eq!(again.body["data"]["createdAt"], r.body["data"]["createdAt"]);

    // Same request id with another provider is a different event.
    body["provider"] = json!("anthropic");
    assert_eq!(sdk.post("/api/cost-events", body).await.status, 201);
}

#[tokio::test]
async fn idempotency_key_header_replays_the_first_response() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "sdk").await;
    let sdk = key_client(&app.server.control, &raw);
    let send = |body: serde_json::Value| {
        let sdk = sdk.clone();
        async move {
            read(
                sdk.request(reqwest::Method::POST, "/api/cost-events")
                    .header("Idempotency-Key", "abc")
                    .json(&body)
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        }
    };
    let first = send(event(10)).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(first.header("x-idempotent-replayed").is_none());
    let second = send(event(10)).await;
    assert_eq!(second.status, 201, "{second:?}");
    assert_eq!(second.header("x-idempotent-replayed"), Some("true"));
    assert_eq!(second.body, first.body);
    let conflict = send(event(11)).await;
    assert_eq!(conflict.status, 409, "{conflict:?}");
    assert_eq!(conflict.code(), "idempotency_conflict");

    let bad = read(
        sdk.request(reqwest::Method::POST, "/api/cost-events")
            .header("Idempotency-Key", "x".repeat(257))
            .json(&event(1))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.code(), "invalid_idempotency_key");
}

#[tokio::test]
async fn concurrent_duplicates_record_one_event() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "sdk").await;
    let sdk = key_client(&app.server.control, &raw);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let sdk = sdk.clone();
        tasks.push(tokio::spawn(async move {
            let mut body = event(7);
            body["idempotencyKey"] = json!("same-request");
            sdk.post("/api/cost-events", body).await
        }));
    }
    let mut created = 0;
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let r = t.await.unwrap();
        assert!(r.status == 201 || r.status == 200, "{r:?}");
        created += usize::from(r.status == 201);
        ids.insert(r.body["data"]["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(created, 1);
    assert_eq!(ids.len(), 1);
}

#[tokio::test]
async fn ingest_validates_auth_type_size_and_fields() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "sdk").await;
    let sdk = key_client(&app.server.control, &raw);

    let anon = app.control().post("/api/cost-events", event(1)).await;
    assert_eq!(anon.status, 401);
    assert_eq!(anon.code(), "authentication_required");

    let r = sdk.post_raw("/api/cost-events", "text/plain", "{}").await;
    assert_eq!(r.status, 415, "{r:?}");
    let r = sdk.post_raw("/api/cost-events", "application/json", "{").await;
    assert_eq!(r.code(), "invalid_json");
    let big = json!({ "provider": "openai", "model": "x".repeat(1_100_000), "inputTokens": 1, "outputTokens": 1, "costMicrodollars": 1 });
    let r = sdk.post("/api/cost-events", big).await;
    assert_eq!(r.status, 413, "{r:?}");

    let mut bad = event(-5);
    bad["traceId"] = json!("NOT-HEX");
    bad["tags"] = json!({ "_svc_x": "1" });
    bad["source"] = json!("carrier-pigeon");
    let r = sdk.post("/api/cost-events", bad).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "validation_error");
    let paths: Vec<String> = r.body["error"]["details"]["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"][0].as_str().unwrap().to_owned())
        .collect();
    for p in ["costMicrodollars", "traceId", "source", "tags"] {
        assert!(paths.contains(&p.to_owned()), "{p} missing in {paths:?}");
    }
    let r = sdk.post("/api/cost-events", json!({ "provider": "openai" })).await;
    assert_eq!(r.code(), "validation_error");
    // A missing required field is named, at the top level and inside a batch.
    let mut no_provider = event(1);
    no_provider.as_object_mut().unwrap().remove("provider");
    assert_eq!(
        sdk.post("/api/cost-events", no_provider.clone()).await.issue_paths(),
        vec![json!(["provider"])]
    );
    let events = json!({ "events": [event(1), event(2), event(3), no_provider] });
    assert_eq!(
        sdk.post("/api/cost-events/batch", events).await.issue_paths(),
        vec![json!(["events", "3", "provider"])]
    );
}

#[tokio::test]
async fn batch_counts_only_new_events() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "sdk").await;
    let sdk = key_client(&app.server.control, &raw);
    let mut a = event(100);
    a["idempotencyKey"] = json!("a");
    let mut b = event(200);
    b["idempotencyKey"] = json!("b");
    let r = sdk.post("/api/cost-events/batch", json!({ "events": [a.clone(), b] })).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["inserted"], 2);
    let mut c = event(300);
    c["idempotencyKey"] = json!("c");
    let r2 = sdk.post("/api/cost-events/batch", json!({ "events": [a, c] })).await;
    assert_eq!(r2.body["inserted"], 1, "{r2:?}");
    assert_eq!(r2.body["ids"][0], r.body["ids"][0]);

    assert_eq!(sdk.post("/api/cost-events/batch", json!({ "events": [] })).await.code(), "validation_error");
    let many: Vec<_> = (0..101).map(|_| event(1)).collect();
    assert_eq!(
        sdk.post("/api/cost-events/batch", json!({ "events": many })).await.code(),
        "validation_error"
    );
    let r = sdk.post("/api/cost-events/batch", json!({ "events": [event(1), { "provider": "" }] })).await;
    assert_eq!(r.code(), "validation_error");
    assert_eq!(r.body["error"]["details"]["issues"][0]["path"][1], "1", "{r:?}");
}

#[tokio::test]
async fn ingested_spend_counts_against_key_user_tag_and_customer_budgets() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (key_id, raw) = create_key(&owner, "sdk").await;
    let session = owner.get("/api/auth/session").await;
    let user_id = session.body["data"]["user"]["id"].as_str().unwrap().to_owned();
    for (t, id) in
        [("api_key", key_id.as_str()), ("user", user_id.as_str()), ("tag", "team=core"), ("customer", "acme")]
    {
        let r = owner
            .post(
                "/api/budgets",
                json!({ "entityType": t, "entityId": id, "maxBudgetMicrodollars": 1_000_000 }),
            )
            .await;
        assert_eq!(r.status, 201, "{t}: {r:?}");
    }
    let sdk = key_client(&app.server.control, &raw);
    let mut e = event(1_500);
    e["tags"] = json!({ "team": "core", "customer": "acme" });
    assert_eq!(sdk.post("/api/cost-events", e).await.status, 201);
    let mut other = event(250);
    other["tags"] = json!({ "team": "other" });
    assert_eq!(sdk.post("/api/cost-events", other).await.status, 201);

    let budgets = owner.get("/api/budgets").await;
    for b in budgets.body["data"].as_array().unwrap() {
        let expected = match b["entityType"].as_str().unwrap() {
            "api_key" | "user" => 1_750,
            _ => 1_500,
        };
        assert_eq!(b["spendMicrodollars"], expected, "{b}");
    }
}

/// Kill the server with SIGKILL while clients are ingesting; after a restart every
/// acknowledged event is present exactly once and the budget's spend equals the sum
/// of the events that exist.
#[tokio::test]
async fn acknowledged_events_survive_a_crash_exactly_once() {
    let mut app = TestApp::start().await;
    let owner = app.owner().await;
    let (key_id, raw) = create_key(&owner, "sdk").await;
    let r = owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": 1_000_000_000 }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let sdk = key_client(&app.server.control, &raw);

    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, i64)>::new()));
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let sdk = sdk.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10_000 {
                let cost = 1 + (worker * 7 + i) % 97;
                let mut body = event(cost);
                body["idempotencyKey"] = json!(format!("w{worker}-{i}"));
                let Ok(resp) = sdk.http.post(sdk.url("/api/cost-events")).json(&body).send().await else {
                    break;
                };
                if resp.status().as_u16() == 201 {
                    let v: serde_json::Value = resp.json().await.unwrap_or_default();
                    if let Some(id) = v["data"]["id"].as_str() {
                        acked.lock().unwrap().push((id.to_owned(), cost));
                    }
                }
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    app.server.kill();
    for t in tasks {
        let _ = t.await;
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 10, "too few acknowledged events before the kill: {}", acked.len());

    app.restart();
    let owner = app.login("owner@example.com").await;
    let mut seen = std::collections::HashMap::new();
    let mut total = 0i64;
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/cost-events?limit=100&cursor={}", urlencode(c)),
            None => "/api/cost-events?limit=100".to_owned(),
        };
        let page = owner.get(&path).await;
        assert_eq!(page.status, 200, "{page:?}");
        for e in page.body["data"].as_array().unwrap() {
            *seen.entry(e["id"].as_str().unwrap().to_owned()).or_insert(0) += 1;
            total += e["costMicrodollars"].as_i64().unwrap();
        }
        match page.body["cursor"].as_object() {
            Some(c) => cursor = Some(serde_json::to_string(c).unwrap()),
            None => break,
        }
    }
    for (id, _) in &acked {
        assert_eq!(seen.get(id), Some(&1), "acknowledged event {id} missing or repeated");
    }
    let budgets = owner.get("/api/budgets").await;
    let spend = budgets.body["data"][0]["spendMicrodollars"].as_i64().unwrap();
    assert_eq!(spend, total, "budget spend must equal the sum of recorded events");
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A daily budget whose period has elapsed is reset by the background sweep: spend
/// back to zero and a new, UTC-aligned period start.
#[tokio::test]
async fn elapsed_periods_reset_spend() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (key_id, raw) = create_key(&owner, "sdk").await;
    let r = owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": 1_000_000, "resetInterval": "daily" }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let budget_id = r.body["id"].as_str().unwrap().trim_start_matches("svc_bgt_").to_owned();
    let sdk = key_client(&app.server.control, &raw);
    assert_eq!(sdk.post("/api/cost-events", event(4_000)).await.status, 201);
    // Move the period two days back, as if the server had run across midnight.
    let two_days_ago = chrono::Utc::now().timestamp_millis() - 2 * 86_400_000;
    app.exec_sql(&format!(
        "UPDATE budgets SET current_period_start = {two_days_ago} WHERE id = '{budget_id}'"
    ))
    .await;
    let mut reset = None;
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let list = owner.get("/api/budgets").await;
        let b = list.body["data"][0].clone();
        if b["spendMicrodollars"] == 0 {
            reset = Some(b);
            break;
        }
    }
    let b = reset.expect("the sweep resets the budget within a few seconds");
    let start = b["currentPeriodStart"].as_str().unwrap();
    assert!(start.ends_with("T00:00:00.000Z"), "a rolled period starts at UTC midnight: {start}");
    // New spend lands in the new period.
    assert_eq!(sdk.post("/api/cost-events", event(10)).await.status, 201);
    assert_eq!(owner.get("/api/budgets").await.body["data"][0]["spendMicrodollars"], 10);
}

/// Every number of an event is bounded at the edge (documented in the README): the
/// reported 9,223,372,036,854,775,000 µ$ is refused, single and in a batch, and so are
/// token counts, durations and breakdown parts past their maxima.
#[tokio::test]
async fn ingest_bounds_every_number() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "sdk").await;
    let sdk = key_client(&app.server.control, &raw);
    let r = sdk.post("/api/cost-events", event(9_223_372_036_854_775_000)).await;
    assert_eq!(r.issue_paths(), vec![json!(["costMicrodollars"])]);
    // A negative cost names no charge to refund: a key could lower its own spend.
    for cost in [-1_000_000_000_001, -500] {
        let mut refund = event(cost);
        refund["provider"] = json!("gate");
        let r = sdk.post("/api/cost-events", refund).await;
        assert_eq!(r.issue_paths(), vec![json!(["costMicrodollars"])], "{cost}");
    }
    let r =
        sdk.post("/api/cost-events/batch", json!({ "events": [event(1), event(1_000_000_000_001)] })).await;
    assert_eq!(r.issue_paths(), vec![json!(["events", "1", "costMicrodollars"])]);
    let mut big = event(1);
    big["inputTokens"] = json!(1_000_000_001);
    big["outputTokens"] = json!(i64::MAX);
    big["cachedInputTokens"] = json!(1_000_000_001);
    big["reasoningTokens"] = json!(1_000_000_001);
    big["durationMs"] = json!(86_400_001);
    big["costBreakdown"] = json!({ "input": 1_000_000_000_001i64, "output": 0, "cached": -1 });
    let paths = sdk.post("/api/cost-events", big).await.issue_paths();
    assert_eq!(
        paths,
        vec![
            json!(["inputTokens"]),
            json!(["outputTokens"]),
            json!(["cachedInputTokens"]),
            json!(["reasoningTokens"]),
            json!(["durationMs"]),
            json!(["costBreakdown", "input"]),
            json!(["costBreakdown", "cached"]),
        ]
    );
    // The maxima themselves are accepted.
    let mut max = event(1_000_000_000_000);
    max["inputTokens"] = json!(1_000_000_000);
    max["durationMs"] = json!(86_400_000);
    assert_eq!(sdk.post("/api/cost-events", max).await.status, 201);
}

fn sha256_hex(s: &str) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(s.as_bytes()))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Writes the pending claim a request with `Idempotency-Key: idem_key` and body `body`
/// holds, owned by the instance `owner_sql` selects (a SQL expression).
async fn insert_claim(app: &TestApp, raw_key: &str, idem_key: &str, body: &str, owner_sql: &str) {
    let id = sha256_hex(&format!("{}\n/api/cost-events\n{idem_key}", sha256_hex(raw_key)));
    let now = now_ms();
    app.exec_sql(&format!(
        "INSERT INTO idempotency_keys (id, request_hash, state, created_at, expires_at, owner_instance) \
         VALUES ('{id}', '{}', 'pending', {now}, {}, {owner_sql})",
        sha256_hex(body),
        now + 86_400_000
    ))
    .await;
}

async fn post_with_key(sdk: &crate::support::Client, idem_key: &str, body: &str) -> crate::support::Resp {
    let req = sdk
        .request(reqwest::Method::POST, "/api/cost-events")
        .header("content-type", "application/json")
        .header("idempotency-key", idem_key)
        .body(body.to_owned());
    read(req.send().await.unwrap()).await
}

/// A server killed (SIGKILL) while it held an idempotency claim: a new server on the
/// same database runs the retry at once (the claim's owner has no fresh heartbeat),
/// where it used to answer 503 `request_in_progress` for a minute. A claim of the
/// live server itself is still respected.
#[tokio::test]
async fn a_dead_servers_idempotency_claim_is_taken_over_at_once() {
    let mut app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "sdk").await;
    app.server.kill();
    let body = event(42).to_string();
    // The dead server's claim, made just now; its last heartbeat is 30 s old by the
    // time the retry comes (a crash noticed after several missed beats).
    insert_claim(&app, &raw, "crashed-1", &body, "(SELECT id FROM instances)").await;
    app.exec_sql(&format!("UPDATE instances SET last_seen = {}", now_ms() - 30_000)).await;
    // A claim of a process never seen at all.
    insert_claim(&app, &raw, "crashed-2", &body, "'gone-instance'").await;
    app.restart();
    let sdk = key_client(&app.server.control, &raw);
    for idem_key in ["crashed-1", "crashed-2"] {
        let r = post_with_key(&sdk, idem_key, &body).await;
        assert_eq!(r.status, 201, "{idem_key}: {r:?}");
        let replay = post_with_key(&sdk, idem_key, &body).await;
        assert_eq!(replay.status, 201, "{replay:?}");
        assert_eq!(replay.header("x-idempotent-replayed"), Some("true"));
        assert_eq!(replay.body["data"]["id"], r.body["data"]["id"]);
    }
    // This server's own pending claim is never taken over.
    insert_claim(&app, &raw, "mine", &body, "(SELECT id FROM instances ORDER BY started_at DESC LIMIT 1)")
        .await;
    let r = post_with_key(&sdk, "mine", &body).await;
    assert_eq!((r.status, r.code()), (503, "request_in_progress"), "{r:?}");
}

/// A server killed (SIGKILL) while a request of it held an idempotency claim, its
/// heartbeat still fresh: the restarted server runs the retry at once, because the
/// dead process's lock is free (it used to wait about 8 s, until the heartbeat went
/// stale). A live peer's claim is still respected, and taken over as soon as that
/// peer is killed.
#[tokio::test]
async fn a_retry_after_a_kill_runs_at_once_and_a_live_peers_claim_holds() {
    let mut app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "sdk").await;
    let body = event(42).to_string();
    insert_claim(&app, &raw, "in-flight", &body, "(SELECT id FROM instances)").await;
    app.server.kill();
    // However long the restart takes, the dead process's heartbeat looks fresh: only
    // its free lock can tell that it is gone.
    let fresh = now_ms() + 60_000;
    app.exec_sql(&format!("UPDATE instances SET last_seen = {fresh}")).await;
    app.restart();
    let sdk = key_client(&app.server.control, &raw);
    let r = post_with_key(&sdk, "in-flight", &body).await;
    assert_eq!(r.status, 201, "{r:?}");

    // A second live process on the same database, holding a claim.
    let mut peer = crate::support::Server::start(&app.db.url, &app.extra_env);
    insert_claim(&app, &raw, "peer", &body, "(SELECT id FROM instances ORDER BY started_at DESC LIMIT 1)")
        .await;
    let r = post_with_key(&sdk, "peer", &body).await;
    assert_eq!((r.status, r.code()), (503, "request_in_progress"), "{r:?}");
    peer.kill();
    app.exec_sql(&format!("UPDATE instances SET last_seen = {fresh}")).await;
    let r = post_with_key(&sdk, "peer", &body).await;
    assert_eq!(r.status, 201, "{r:?}");
}
