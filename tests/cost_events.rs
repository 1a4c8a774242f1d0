//! Cost events, read side: list filters and pagination, single events, sessions,
//! the summary, attribution, tag keys and the CSV export, on events ingested
//! through the API. A few states the public API cannot produce (events without a
//! key, cancelled-stream estimates, denied events, old events) are set directly in
//! the test's database.

#![expect(clippy::unwrap_used, reason = "a test fails loudly on the first surprise")]

use serde_json::{json, Value};

use crate::support::{read, Client, Resp, TestApp};

const DAY_MS: i64 = 86_400_000;
const TRACE_1: &str = "0af7651916cd43dd8448eb211c80319c";
const TRACE_2: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn date_of(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().format("%Y-%m-%d").to_string()
}

async fn create_key(c: &Client, name: &str) -> (String, String) {
    let r = c.post("/api/keys", json!({ "name": name })).await;
    assert_eq!(r.status, 201, "{r:?}");
    (r.body["data"]["id"].as_str().unwrap().to_owned(), r.body["data"]["rawKey"].as_str().unwrap().to_owned())
}

async fn ingest(c: &Client, raw_key: &str, event: Value) -> String {
    let r = read(
        c.request(reqwest::Method::POST, "/api/cost-events")
            .header("X-Service-Key", raw_key)
            .json(&event)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    r.body["data"]["id"].as_str().unwrap().to_owned()
}

fn bare(prefixed_id: &str) -> &str {
    prefixed_id.split_once("_evt_").or_else(|| prefixed_id.split_once("_key_")).unwrap().1
}

/// The seeded organization.
struct Seed {
    owner: Client,
    key_a: String,
    key_b: String,
    /// Event ids, `svc_evt_…`, oldest first.
    events: Vec<String>,
    /// Their `created_at`, epoch milliseconds.
    times: Vec<i64>,
}

/// Ingests five events, then pins their times and sets what ingest cannot:
///
/// | # | key | provider/model | cost | tags | session | trace | source | notes |
/// |---|---|---|---|---|---|---|---|---|
/// | 0 | B | openai/gpt-4o | 700,000 | – | – | T2 | sdk | 10 days old, breakdown |
/// | 1 | A | openai/gpt-4o | 1,000,000 | team=core env=prod | sess-1 | T1 | sdk | breakdown |
/// | 2 | A | anthropic/claude-3-5-sonnet | 2,500,000 | team=core | sess-1 | T1 | api | |
/// | 3 | B | openai/gpt-4o-mini | 300 | team=growth | sess-2 | – | mcp | tool `search` |
/// | 4 | none | google/gemini-2.0-flash | 40,000 | env=dev | – | – | proxy | estimated, denied |
async fn seed(app: &TestApp) -> Seed {
    let owner = app.owner().await;
    let (key_a, raw_a) = create_key(&owner, "alpha").await;
    let (key_b, raw_b) = create_key(&owner, "beta").await;
    let inputs = [
        (
            &raw_b,
            json!({ "provider": "openai", "model": "gpt-4o", "inputTokens": 1000, "outputTokens": 200,
            "costMicrodollars": 700_000, "traceId": TRACE_2,
            "costBreakdown": { "input": 500_000, "output": 150_000, "cached": 50_000, "reasoning": 0 } }),
        ),
        (
            &raw_a,
            json!({ "provider": "openai", "model": "gpt-4o", "inputTokens": 100, "outputTokens": 50,
            "cachedInputTokens": 10, "reasoningTokens": 5, "costMicrodollars": 1_000_000, "durationMs": 100,
            "sessionId": "sess-1", "traceId": TRACE_1, "tags": { "team": "core", "env": "prod" },
            "customer": "acme", "idempotencyKey": "req-one",
            "costBreakdown": { "input": 600_000, "output": 400_000, "cached": 0 } }),
        ),
        (
            &raw_a,
            json!({ "provider": "anthropic", "model": "claude-3-5-sonnet", "inputTokens": 300,
            "outputTokens": 70, "costMicrodollars": 2_500_000, "durationMs": 300, "sessionId": "sess-1",
            "traceId": TRACE_1, "tags": { "team": "core" }, "source": "api" }),
        ),
        (
            &raw_b,
            json!({ "provider": "openai", "model": "gpt-4o-mini", "inputTokens": 0, "outputTokens": 0,
            "costMicrodollars": 300, "durationMs": 50, "sessionId": "sess-2", "tags": { "team": "growth" },
            "source": "mcp", "eventType": "tool", "toolName": "search", "toolServer": "web" }),
        ),
        (
            &raw_a,
            json!({ "provider": "google", "model": "gemini-2.0-flash", "inputTokens": 40,
            "outputTokens": 4, "costMicrodollars": 40_000, "tags": { "env": "dev" }, "source": "proxy" }),
        ),
    ];
    let mut events = Vec::new();
    for (raw, body) in inputs {
        events.push(ingest(&owner, raw, body).await);
    }
    let now = now_ms();
    let times = vec![now - 10 * DAY_MS, now - 4_000, now - 3_000, now - 2_000, now - 1_000];
    for (id, at) in events.iter().zip(&times) {
        let id = bare(id);
        app.exec_sql(&format!("UPDATE cost_events SET created_at = {at} WHERE id = '{id}'")).await;
        app.exec_sql(&format!("UPDATE cost_event_tags SET created_at = {at} WHERE event_id = '{id}'")).await;
    }
    let last = bare(&events[4]);
    app.exec_sql(&format!(
        "UPDATE cost_events SET api_key_id = NULL, estimated = TRUE, budget_status = 'denied' \
             WHERE id = '{last}'"
    ))
    .await;
    app.exec_sql(&format!(
        "INSERT INTO cost_event_tags (event_id, org_id, tag_key, tag_value, created_at) \
             SELECT id, org_id, '_svc_estimated', 'true', created_at FROM cost_events WHERE id = '{last}'"
    ))
    .await;
    app.rebuild_rollups().await;
    Seed { owner, key_a, key_b, events, times }
}

fn ids_of(r: &Resp) -> Vec<String> {
    assert_eq!(r.status, 200, "{r:?}");
    r.body["data"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_owned()).collect()
}

fn pct(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20")
}

#[tokio::test]
async fn list_shows_events_newest_first_with_every_field() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let r = s.owner.get("/api/cost-events").await;
    let listed = ids_of(&r);
    let newest_first: Vec<String> = s.events.iter().rev().cloned().collect();
    assert_eq!(listed, newest_first);
    assert!(r.body["cursor"].is_null(), "{r:?}");

    let e = &r.body["data"][3];
    assert_eq!(e["id"], s.events[1].as_str());
    assert!(e["id"].as_str().unwrap().starts_with("svc_evt_"));
    assert_eq!(e["requestId"], "req-one");
    assert_eq!(e["apiKeyId"], s.key_a.as_str());
    assert_eq!(e["keyName"], "alpha");
    assert_eq!(e["provider"], "openai");
    assert_eq!(e["model"], "gpt-4o");
    assert_eq!(e["inputTokens"], 100);
    assert_eq!(e["outputTokens"], 50);
    assert_eq!(e["cachedInputTokens"], 10);
    assert_eq!(e["reasoningTokens"], 5);
    assert_eq!(e["costMicrodollars"], 1_000_000);
    assert_eq!(e["durationMs"], 100);
    assert_eq!(e["sessionId"], "sess-1");
    assert_eq!(e["traceId"], TRACE_1);
    assert!(e["toolName"].is_null() && e["toolServer"].is_null());
    assert_eq!(e["tags"], json!({ "team": "core", "env": "prod" }));
    assert_eq!(e["customerId"], "acme");
    assert_eq!(e["costBreakdown"], json!({ "input": 600_000, "output": 400_000, "cached": 0 }));
    assert_eq!(e["source"], "sdk");
    assert_eq!(e["budgetStatus"], "skipped");
    assert!(e["createdAt"].as_str().unwrap().ends_with('Z'));
    assert!(e.get("eventType").is_none(), "{e}");

    let tool = &r.body["data"][1];
    assert_eq!(tool["toolName"], "search");
    assert_eq!(tool["toolServer"], "web");
    assert!(tool["costBreakdown"].is_null());

    let keyless = &r.body["data"][0];
    assert!(keyless["apiKeyId"].is_null() && keyless["keyName"].is_null(), "{keyless}");
    assert_eq!(keyless["budgetStatus"], "denied");
}

#[tokio::test]
async fn list_filters_narrow_and_combine() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let e = |i: usize| s.events[i].clone();
    let cases: Vec<(String, Vec<String>)> = vec![
        ("provider=openai".into(), vec![e(3), e(1), e(0)]),
        ("model=gpt-4o".into(), vec![e(1), e(0)]),
        (format!("apiKeyId={}", s.key_b), vec![e(3), e(0)]),
        ("source=mcp".into(), vec![e(3)]),
        ("source=proxy".into(), vec![e(4)]),
        (format!("traceId={TRACE_1}"), vec![e(2), e(1)]),
        ("sessionId=sess-1".into(), vec![e(2), e(1)]),
        ("tag.team=core".into(), vec![e(2), e(1)]),
        ("tag.team=core&tag.env=prod".into(), vec![e(1)]),
        ("tag.team=core&tag.env=dev".into(), vec![]),
        ("tag.env=dev".into(), vec![e(4)]),
        ("tag.team=nobody".into(), vec![]),
        ("budgetStatus=denied".into(), vec![e(4)]),
        ("budgetStatus=approved".into(), vec![]),
        ("requestId=req-one".into(), vec![e(1)]),
        ("provider=openai&sessionId=sess-2&source=mcp".into(), vec![e(3)]),
    ];
    for (query, expected) in cases {
        let r = s.owner.get(&format!("/api/cost-events?{query}")).await;
        assert_eq!(ids_of(&r), expected, "{query}");
    }
}

#[tokio::test]
async fn list_pages_through_cursors() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let mut seen = Vec::new();
    let mut path = "/api/cost-events?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let r = s.owner.get(&path).await;
        let ids = ids_of(&r);
        assert!(ids.len() <= 2);
        seen.extend(ids);
        pages += 1;
        if r.body["cursor"].is_null() {
            break;
        }
        // The cursor names the last item by its public id, as the item shows it.
        assert_eq!(r.body["cursor"]["id"], r.body["data"][1]["id"], "{r:?}");
        let cursor = serde_json::to_string(&r.body["cursor"]).unwrap();
        path = format!("/api/cost-events?limit=2&cursor={}", pct(&cursor));
    }
    assert_eq!(pages, 3);
    let newest_first: Vec<String> = s.events.iter().rev().cloned().collect();
    assert_eq!(seen, newest_first);

    // A filter and a cursor together.
    let r = s.owner.get("/api/cost-events?provider=openai&limit=1").await;
    assert_eq!(ids_of(&r), vec![s.events[3].clone()]);
    let cursor = serde_json::to_string(&r.body["cursor"]).unwrap();
    let r = s.owner.get(&format!("/api/cost-events?provider=openai&limit=1&cursor={}", pct(&cursor))).await;
    assert_eq!(ids_of(&r), vec![s.events[1].clone()]);

    // A cursor handed out before ids were prefixed (the bare UUID) still works.
    let r = s.owner.get("/api/cost-events?provider=openai&limit=1").await;
    let mut old = r.body["cursor"].clone();
    old["id"] = json!(old["id"].as_str().unwrap().trim_start_matches("svc_evt_"));
    let old = serde_json::to_string(&old).unwrap();
    let r = s.owner.get(&format!("/api/cost-events?provider=openai&limit=1&cursor={}", pct(&old))).await;
    assert_eq!(ids_of(&r), vec![s.events[1].clone()]);
}

/// A tag filter walks the tag rows (newest first) instead of the events: the pages
/// must still come in the list's order, ties on `created_at` broken by id, with
/// further filters (a second tag, a provider) and across cursors.
#[tokio::test]
async fn tag_filtered_list_pages_in_list_order() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "alpha").await;
    let events: Vec<Value> = (0..24)
        .map(|i| {
            let provider = if i % 3 == 0 { "anthropic" } else { "openai" };
            json!({ "provider": provider, "model": "m", "inputTokens": 1, "outputTokens": 1,
                "costMicrodollars": 100 + i, "tags": { "team": format!("t{}", i % 2), "env": format!("e{}", i % 4) } })
        })
        .collect();
    let r = read(
        owner
            .request(reqwest::Method::POST, "/api/cost-events/batch")
            .header("X-Service-Key", &raw)
            .json(&json!({ "events": events }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    // Times with ties: four events a millisecond, events of one tag interleaved.
    let now = now_ms();
    app.exec_sql(&format!(
        "UPDATE cost_events SET created_at = {now} - 1000 + (cost_microdollars - 100) / 4"
    ))
    .await;
    app.exec_sql(
        "UPDATE cost_event_tags SET created_at = \
         (SELECT e.created_at FROM cost_events e WHERE e.id = cost_event_tags.event_id)",
    )
    .await;
    let all = owner.get("/api/cost-events?limit=100").await;
    let all = all.body["data"].as_array().unwrap().clone();
    assert_eq!(all.len(), 24);
    let expected = |f: &dyn Fn(&Value) -> bool| -> Vec<String> {
        all.iter().filter(|e| f(e)).map(|e| e["id"].as_str().unwrap().to_owned()).collect()
    };
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("tag.team=t1", expected(&|e| e["tags"]["team"] == "t1")),
        ("tag.env=e2&tag.team=t0", expected(&|e| e["tags"]["env"] == "e2")),
        (
            "tag.team=t0&provider=anthropic",
            expected(&|e| e["tags"]["team"] == "t0" && e["provider"] == "anthropic"),
        ),
        ("tag.team=t1&tag.env=e2", vec![]),
    ];
    for (filter, want) in cases {
        let mut seen = Vec::new();
        let mut path = format!("/api/cost-events?{filter}&limit=5");
        loop {
            let r = owner.get(&path).await;
            assert_eq!(r.status, 200, "{r:?}");
            seen.extend(ids_of(&r));
            if r.body["cursor"].is_null() {
                break;
            }
            let cursor = serde_json::to_string(&r.body["cursor"]).unwrap();
            path = format!("/api/cost-events?{filter}&limit=5&cursor={}", pct(&cursor));
        }
        assert_eq!(seen, want, "{filter}");
    }
}

#[tokio::test]
async fn list_rejects_bad_parameters_with_their_path() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let cases: Vec<(String, Value)> = vec![
        ("limit=0".into(), json!(["limit"])),
        ("limit=101".into(), json!(["limit"])),
        ("limit=ten".into(), json!(["limit"])),
        ("cursor=nope".into(), json!(["cursor"])),
        ("requestId=".into(), json!(["requestId"])),
        (format!("requestId={}", "r".repeat(201)), json!(["requestId"])),
        ("apiKeyId=key_1".into(), json!(["apiKeyId"])),
        ("apiKeyId=svc_key_123".into(), json!(["apiKeyId"])),
        ("source=browser".into(), json!(["source"])),
        ("traceId=0AF7651916CD43DD8448EB211C80319C".into(), json!(["traceId"])),
        ("traceId=abc".into(), json!(["traceId"])),
        // The W3C invalid all-zero id, refused at ingest and by the proxy alike.
        (format!("traceId={}", "0".repeat(32)), json!(["traceId"])),
        ("sessionId=".into(), json!(["sessionId"])),
        (format!("sessionId={}", "s".repeat(201)), json!(["sessionId"])),
        ("budgetStatus=maybe".into(), json!(["budgetStatus"])),
        ("tag.bad%20key=x".into(), json!(["tag.bad key"])),
        (format!("tag.team={}", "v".repeat(257)), json!(["tag.team"])),
    ];
    for (query, path) in cases {
        let r = c.get(&format!("/api/cost-events?{query}")).await;
        assert_eq!(r.issue_paths(), vec![path], "{query}");
    }
    // Every problem is reported at once.
    let r = c.get("/api/cost-events?source=x&traceId=y&budgetStatus=z").await;
    assert_eq!(r.issue_paths().len(), 3);

    let anonymous = app.control();
    for path in [
        "/api/cost-events",
        "/api/cost-events/summary",
        "/api/cost-events/sessions",
        "/api/cost-events/sessions/s",
        "/api/cost-events/attribution?groupBy=api_key",
        "/api/cost-events/attribution/x?groupBy=api_key",
        "/api/cost-events/tag-keys",
        "/api/cost-events/export",
        "/api/cost-events/2b0c6f5e-8d5f-4a47-9d2a-4f7e1c3b9a10",
    ] {
        let r = anonymous.get(path).await;
        assert_eq!(r.status, 401, "{path}: {r:?}");
        assert_eq!(r.code(), "authentication_required");
    }
}

#[tokio::test]
async fn single_event_by_prefixed_or_raw_id_within_the_org() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let id = &s.events[2];
    for path in [format!("/api/cost-events/{id}"), format!("/api/cost-events/{}", bare(id))] {
        let r = s.owner.get(&path).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body["data"]["id"], id.as_str());
        assert_eq!(r.body["data"]["model"], "claude-3-5-sonnet");
        assert_eq!(r.body["data"]["keyName"], "alpha");
    }
    for bad in ["nope", "svc_evt_nope", "svc_key_2b0c6f5e-8d5f-4a47-9d2a-4f7e1c3b9a10"] {
        let r = s.owner.get(&format!("/api/cost-events/{bad}")).await;
        assert_eq!(r.issue_paths(), vec![json!(["id"])], "{bad}");
    }
    let r = s.owner.get("/api/cost-events/svc_evt_2b0c6f5e-8d5f-4a47-9d2a-4f7e1c3b9a10").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.code(), "not_found");

    let other = app.user_in_org("other@example.com", "Other Org", "owner").await;
    let r = other.get(&format!("/api/cost-events/{id}")).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.code(), "not_found");
}

#[tokio::test]
async fn another_organization_sees_none_of_it() {
    let app = TestApp::start_with(&[("SPENDGATE_DEFAULT_PLAN", "pro".into())]).await;
    let s = seed(&app).await;
    let other = app.user_in_org("other@example.com", "Other Org", "viewer").await;
    assert!(ids_of(&other.get("/api/cost-events").await).is_empty());
    assert!(ids_of(&other.get("/api/cost-events?tag.team=core").await).is_empty());
    assert!(ids_of(&other.get("/api/cost-events/sessions").await).is_empty());
    let r = other.get("/api/cost-events/sessions/sess-1").await;
    assert_eq!(r.body["summary"]["eventCount"], 0, "{r:?}");
    let r = other.get("/api/cost-events/summary?period=90d").await;
    assert_eq!(r.body["data"]["totals"]["totalRequests"], 0, "{r:?}");
    assert_eq!(r.body["data"]["models"], json!([]));
    let r = other.get("/api/cost-events/attribution?groupBy=team").await;
    assert_eq!(r.body["data"]["groups"], json!([]), "{r:?}");
    assert_eq!(r.body["data"]["totalGroups"], 0);
    let r = other.get(&format!("/api/cost-events/attribution/{}?groupBy=api_key", s.key_a)).await;
    assert_eq!(r.body["data"]["requestCount"], 0, "{r:?}");
    let r = other.get("/api/cost-events/tag-keys").await;
    assert_eq!(r.body["data"], json!([]), "{r:?}");
    // The tier is the organization's: the CLI-made one is on Free.
    let r = other.get("/api/cost-events/export").await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = s.owner.get("/api/cost-events/export").await;
    assert_eq!(r.text.lines().count(), 6, "{}", r.text);
}

#[tokio::test]
async fn sessions_list_and_detail() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let r = s.owner.get("/api/cost-events/sessions").await;
    assert_eq!(r.status, 200, "{r:?}");
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2, "{r:?}");
    assert_eq!(data[0]["sessionId"], "sess-2");
    assert_eq!(data[0]["eventCount"], 1);
    assert_eq!(data[1]["sessionId"], "sess-1");
    assert_eq!(data[1]["eventCount"], 2);
    assert_eq!(data[1]["totalCostMicrodollars"], 3_500_000);
    assert!(data[1]["startedAt"].as_str().unwrap() < data[1]["endedAt"].as_str().unwrap());

    let r = s.owner.get("/api/cost-events/sessions?limit=1").await;
    assert_eq!(r.body["data"][0]["sessionId"], "sess-2", "{r:?}");
    let cursor = serde_json::to_string(&r.body["cursor"]).unwrap();
    let r = s.owner.get(&format!("/api/cost-events/sessions?limit=1&cursor={}", pct(&cursor))).await;
    assert_eq!(r.body["data"][0]["sessionId"], "sess-1", "{r:?}");
    assert!(r.body["cursor"].is_null(), "{r:?}");
    assert_eq!(
        s.owner.get("/api/cost-events/sessions?limit=101").await.issue_paths(),
        vec![json!(["limit"])]
    );

    let r = s.owner.get("/api/cost-events/sessions/sess-1").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.get("data").is_none(), "not wrapped: {r:?}");
    assert_eq!(r.body["sessionId"], "sess-1");
    let summary = &r.body["summary"];
    assert_eq!(summary["eventCount"], 2);
    assert_eq!(summary["totalCostMicrodollars"], 3_500_000);
    assert_eq!(summary["totalInputTokens"], 400);
    assert_eq!(summary["totalOutputTokens"], 120);
    assert_eq!(summary["totalDurationMs"], 400);
    let events: Vec<&str> =
        r.body["events"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(events, vec![s.events[1].as_str(), s.events[2].as_str()], "oldest first");
    assert_eq!(summary["startedAt"], r.body["events"][0]["createdAt"]);
    assert_eq!(summary["endedAt"], r.body["events"][1]["createdAt"]);

    let r = s.owner.get("/api/cost-events/sessions/nobody").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body,
        json!({ "sessionId": "nobody", "events": [], "summary": { "eventCount": 0, "totalCostMicrodollars": 0,
            "totalInputTokens": 0, "totalOutputTokens": 0, "totalDurationMs": 0, "startedAt": null,
            "endedAt": null } })
    );
    let long = "s".repeat(201);
    assert_eq!(
        s.owner.get(&format!("/api/cost-events/sessions/{long}")).await.issue_paths(),
        vec![json!(["sessionId"])]
    );
    assert!(s.owner.get(&format!("/api/cost-events/sessions/{}", "s".repeat(200))).await.status == 200);
    assert_eq!(s.owner.get("/api/cost-events/sessions/").await.issue_paths(), vec![json!(["sessionId"])]);
}

#[tokio::test]
async fn sessions_cap_their_events_at_200_but_total_them_all() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "bulk").await;
    for chunk in 0..3 {
        let events: Vec<Value> = (0..70)
            .map(|i| {
                json!({ "provider": "openai", "model": "gpt-4o-mini", "inputTokens": 1, "outputTokens": 1,
                    "costMicrodollars": 10, "sessionId": "long", "idempotencyKey": format!("e-{chunk}-{i}") })
            })
            .collect();
        let r = read(
            owner
                .request(reqwest::Method::POST, "/api/cost-events/batch")
                .header("X-Service-Key", &raw)
                .json(&json!({ "events": events }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    let r = owner.get("/api/cost-events/sessions/long").await;
    assert_eq!(r.body["events"].as_array().unwrap().len(), 200, "{r:?}");
    assert_eq!(r.body["summary"]["eventCount"], 210);
    assert_eq!(r.body["summary"]["totalCostMicrodollars"], 2_100);
}

#[tokio::test]
async fn summary_reports_every_breakdown() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let r = s.owner.get("/api/cost-events/summary").await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = &r.body["data"];
    assert_eq!(
        d["totals"],
        json!({ "totalCostMicrodollars": 4_240_300, "totalRequests": 5, "period": "30d" })
    );

    let mut daily_total = 0;
    let mut dates = Vec::new();
    for day in d["daily"].as_array().unwrap() {
        daily_total += day["totalCostMicrodollars"].as_i64().unwrap();
        dates.push(day["date"].as_str().unwrap().to_owned());
    }
    assert_eq!(daily_total, 4_240_300);
    let mut sorted = dates.clone();
    sorted.sort();
    assert_eq!(dates, sorted, "ascending");
    assert_eq!(dates.first().unwrap(), &date_of(s.times[0]));
    assert!(dates.contains(&date_of(s.times[4])));

    assert_eq!(
        d["models"][0],
        json!({ "provider": "anthropic", "model": "claude-3-5-sonnet", "totalCostMicrodollars": 2_500_000,
            "requestCount": 1, "inputTokens": 300, "outputTokens": 70, "cachedInputTokens": 0,
            "reasoningTokens": 0 })
    );
    assert_eq!(
        d["models"][1],
        json!({ "provider": "openai", "model": "gpt-4o", "totalCostMicrodollars": 1_700_000,
            "requestCount": 2, "inputTokens": 1100, "outputTokens": 250, "cachedInputTokens": 10,
            "reasoningTokens": 5 })
    );
    assert_eq!(d["models"].as_array().unwrap().len(), 4);
    assert_eq!(
        d["providers"],
        json!([
            { "provider": "anthropic", "totalCostMicrodollars": 2_500_000, "requestCount": 1 },
            { "provider": "openai", "totalCostMicrodollars": 1_700_300, "requestCount": 3 },
            { "provider": "google", "totalCostMicrodollars": 40_000, "requestCount": 1 },
        ])
    );
    assert_eq!(
        d["keys"],
        json!([
            { "apiKeyId": s.key_a, "keyName": "alpha", "totalCostMicrodollars": 3_500_000, "requestCount": 2 },
            { "apiKeyId": s.key_b, "keyName": "beta", "totalCostMicrodollars": 700_300, "requestCount": 2 },
            { "apiKeyId": null, "keyName": null, "totalCostMicrodollars": 40_000, "requestCount": 1 },
        ])
    );
    assert_eq!(
        d["tools"],
        json!([{ "model": "search", "totalCostMicrodollars": 300, "requestCount": 1, "avgDurationMs": 50 }])
    );
    assert_eq!(
        d["sources"],
        json!([
            { "source": "api", "totalCostMicrodollars": 2_500_000, "requestCount": 1 },
            { "source": "sdk", "totalCostMicrodollars": 1_700_000, "requestCount": 2 },
            { "source": "proxy", "totalCostMicrodollars": 40_000, "requestCount": 1 },
            { "source": "mcp", "totalCostMicrodollars": 300, "requestCount": 1 },
        ])
    );
    assert_eq!(
        d["traces"],
        json!([
            { "traceId": TRACE_1, "totalCostMicrodollars": 3_500_000, "requestCount": 2 },
            { "traceId": TRACE_2, "totalCostMicrodollars": 700_000, "requestCount": 1 },
        ])
    );
    assert_eq!(
        d["costBreakdown"],
        json!({ "inputCost": 1_100_000, "outputCost": 550_000, "cachedCost": 50_000, "reasoningCost": 0 })
    );

    // 7 days leave out the old event; excludeEstimated the estimated one.
    let r = s.owner.get("/api/cost-events/summary?period=7d&excludeEstimated=true").await;
    let d = &r.body["data"];
    assert_eq!(
        d["totals"],
        json!({ "totalCostMicrodollars": 3_500_300, "totalRequests": 3, "period": "7d" })
    );
    assert_eq!(d["traces"].as_array().unwrap().len(), 1);
    assert_eq!(
        d["costBreakdown"],
        json!({ "inputCost": 600_000, "outputCost": 400_000, "cachedCost": 0, "reasoningCost": 0 })
    );
    assert!(d["keys"].as_array().unwrap().iter().all(|k| !k["apiKeyId"].is_null()));
    let r = s.owner.get("/api/cost-events/summary?period=90d&excludeEstimated=false").await;
    assert_eq!(r.body["data"]["totals"]["totalRequests"], 5);

    for (query, path) in [
        ("period=1d", json!(["period"])),
        ("period=", json!(["period"])),
        ("excludeEstimated=yes", json!(["excludeEstimated"])),
    ] {
        let r = s.owner.get(&format!("/api/cost-events/summary?{query}")).await;
        assert_eq!(r.issue_paths(), vec![path], "{query}");
    }
}

#[tokio::test]
async fn attribution_groups_by_key_and_by_tag() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let r = s.owner.get("/api/cost-events/attribution?groupBy=api_key").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body["data"],
        json!({
            "groups": [
                { "key": "alpha", "keyId": s.key_a, "totalCostMicrodollars": 3_500_000, "requestCount": 2,
                  "avgCostMicrodollars": 1_750_000 },
                { "key": "beta", "keyId": s.key_b, "totalCostMicrodollars": 700_300, "requestCount": 2,
                  "avgCostMicrodollars": 350_150 },
                { "key": "(no key)", "keyId": null, "totalCostMicrodollars": 40_000, "requestCount": 1,
                  "avgCostMicrodollars": 40_000 },
            ],
            "period": "30d",
            "groupBy": "api_key",
            "totalGroups": 3,
            "hasMore": false,
            "totals": { "totalCostMicrodollars": 4_240_300, "totalRequests": 5 },
        })
    );

    let r = s.owner.get("/api/cost-events/attribution?groupBy=api_key&limit=1&period=7d").await;
    let d = &r.body["data"];
    assert_eq!(d["groups"].as_array().unwrap().len(), 1, "{r:?}");
    assert_eq!(d["groups"][0]["key"], "alpha");
    assert_eq!(d["totalGroups"], 3);
    assert_eq!(d["hasMore"], true);
    assert_eq!(d["totals"], json!({ "totalCostMicrodollars": 3_540_300, "totalRequests": 4 }));

    let r = s.owner.get("/api/cost-events/attribution?groupBy=team&excludeEstimated=true").await;
    assert_eq!(
        r.body["data"]["groups"],
        json!([
            { "key": "core", "keyId": null, "totalCostMicrodollars": 3_500_000, "requestCount": 2,
              "avgCostMicrodollars": 1_750_000 },
            { "key": "(no key)", "keyId": null, "totalCostMicrodollars": 700_000, "requestCount": 1,
              "avgCostMicrodollars": 700_000 },
            { "key": "growth", "keyId": null, "totalCostMicrodollars": 300, "requestCount": 1,
              "avgCostMicrodollars": 300 },
        ]),
        "{r:?}"
    );
    assert_eq!(r.body["data"]["totalGroups"], 3);
    assert_eq!(r.body["data"]["groupBy"], "team");
    assert_eq!(r.body["data"]["totals"]["totalRequests"], 4);

    let cases: Vec<(String, Value)> = vec![
        (String::new(), json!(["groupBy"])),
        ("groupBy=".into(), json!(["groupBy"])),
        ("groupBy=a.b".into(), json!(["groupBy"])),
        (format!("groupBy={}", "k".repeat(101)), json!(["groupBy"])),
        ("groupBy=api_key&limit=0".into(), json!(["limit"])),
        ("groupBy=api_key&limit=501".into(), json!(["limit"])),
        ("groupBy=api_key&period=365d".into(), json!(["period"])),
        ("groupBy=api_key&excludeEstimated=1".into(), json!(["excludeEstimated"])),
        ("groupBy=api_key&format=xml".into(), json!(["format"])),
    ];
    for (query, path) in cases {
        let r = s.owner.get(&format!("/api/cost-events/attribution?{query}")).await;
        assert_eq!(r.issue_paths(), vec![path], "{query}");
    }
    let r = s.owner.get("/api/cost-events/attribution?groupBy=api_key&limit=500").await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn attribution_as_csv() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let r = s.owner.get("/api/cost-events/attribution?groupBy=api_key&format=csv").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("text/csv; charset=utf-8"));
    let today = date_of(now_ms());
    assert_eq!(
        r.header("content-disposition").unwrap(),
        format!("attachment; filename=service-attribution-api_key-{today}.csv")
    );
    let lines: Vec<&str> = r.text.lines().collect();
    assert_eq!(
        lines,
        vec![
            "key,key_id,total_cost_microdollars,total_cost_usd,request_count,avg_cost_microdollars,avg_cost_usd",
            &format!("alpha,{},3500000,3.500000,2,1750000,1.750000", s.key_a),
            &format!("beta,{},700300,0.700300,2,350150,0.350150", s.key_b),
            "(no key),,40000,0.040000,1,40000,0.040000",
        ]
    );
    let r = s.owner.get("/api/cost-events/attribution?groupBy=team&format=csv&period=7d").await;
    assert!(r
        .header("content-disposition")
        .unwrap()
        .contains(&format!("service-attribution-team-{today}.csv")));
    assert_eq!(r.text.lines().nth(1), Some("core,,3500000,3.500000,2,1750000,1.750000"), "{}", r.text);
}

#[tokio::test]
async fn attribution_detail_of_one_group() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let r = s.owner.get(&format!("/api/cost-events/attribution/{}?groupBy=api_key", s.key_b)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = &r.body["data"];
    assert_eq!(d["key"], s.key_b.as_str());
    assert_eq!(d["totalCostMicrodollars"], 700_300);
    assert_eq!(d["requestCount"], 2);
    assert_eq!(d["avgCostMicrodollars"], 350_150);
    assert_eq!(
        d["models"],
        json!([{ "model": "gpt-4o", "cost": 700_000, "count": 1 }, { "model": "gpt-4o-mini", "cost": 300, "count": 1 }])
    );
    let daily = d["daily"].as_array().unwrap();
    assert_eq!(daily.first().unwrap(), &json!({ "date": date_of(s.times[0]), "cost": 700_000, "count": 1 }));
    assert_eq!(daily.iter().map(|p| p["count"].as_i64().unwrap()).sum::<i64>(), 2);

    let r = s.owner.get(&format!("/api/cost-events/attribution/{}?groupBy=api_key&period=7d", s.key_b)).await;
    assert_eq!(r.body["data"]["totalCostMicrodollars"], 300, "{r:?}");

    let no_key = pct("(no key)");
    let r = s.owner.get(&format!("/api/cost-events/attribution/{no_key}?groupBy=api_key")).await;
    assert_eq!(r.body["data"]["key"], "(no key)", "{r:?}");
    assert_eq!(r.body["data"]["requestCount"], 1);
    assert_eq!(
        r.body["data"]["models"],
        json!([{ "model": "gemini-2.0-flash", "cost": 40_000, "count": 1 }])
    );
    let r = s
        .owner
        .get(&format!("/api/cost-events/attribution/{no_key}?groupBy=api_key&excludeEstimated=true"))
        .await;
    assert_eq!(r.body["data"]["requestCount"], 0, "{r:?}");
    assert_eq!(r.body["data"]["daily"], json!([]));

    let r = s.owner.get("/api/cost-events/attribution/core?groupBy=team").await;
    assert_eq!(r.body["data"]["totalCostMicrodollars"], 3_500_000, "{r:?}");
    assert_eq!(r.body["data"]["models"][0]["model"], "claude-3-5-sonnet");
    let r = s.owner.get(&format!("/api/cost-events/attribution/{no_key}?groupBy=team")).await;
    assert_eq!(r.body["data"]["totalCostMicrodollars"], 740_000, "{r:?}");
    assert_eq!(r.body["data"]["requestCount"], 2);

    for key in ["a..b", "a%2Fb", "svc_key_nope", "alpha"] {
        let r = s.owner.get(&format!("/api/cost-events/attribution/{key}?groupBy=api_key")).await;
        assert_eq!(r.status, 400, "{key}: {r:?}");
        assert_eq!(r.code(), "invalid_key", "{key}: {r:?}");
    }
    for key in ["a..b", "a%2Fb"] {
        let r = s.owner.get(&format!("/api/cost-events/attribution/{key}?groupBy=team")).await;
        assert_eq!(r.code(), "invalid_key", "{key}: {r:?}");
    }
    let r = s.owner.get(&format!("/api/cost-events/attribution/{}", s.key_a)).await;
    assert_eq!(r.issue_paths(), vec![json!(["groupBy"])]);
    let r = s.owner.get(&format!("/api/cost-events/attribution/{}?groupBy=api_key&period=2d", s.key_a)).await;
    assert_eq!(r.issue_paths(), vec![json!(["period"])]);
}

#[tokio::test]
async fn tag_keys_are_recent_public_and_sorted() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    // An older key only: outside the 7-day window.
    let first = bare(&s.events[0]);
    let old = now_ms() - 8 * DAY_MS;
    app.exec_sql(&format!(
        "INSERT INTO cost_event_tags (event_id, org_id, tag_key, tag_value, created_at) \
             SELECT id, org_id, 'legacy', 'x', {old} FROM cost_events WHERE id = '{first}'"
    ))
    .await;
    let r = s.owner.get("/api/cost-events/tag-keys").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "data": ["env", "team"] }));
}

#[tokio::test]
async fn tag_keys_stop_at_50() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "many").await;
    for batch in 0..6 {
        let tags: serde_json::Map<String, Value> =
            (0..10).map(|i| (format!("k{:02}", batch * 10 + i), json!("v"))).collect();
        ingest(
            &owner,
            &raw,
            json!({ "provider": "openai", "model": "m", "inputTokens": 0, "outputTokens": 0,
                "costMicrodollars": 1, "tags": tags }),
        )
        .await;
    }
    let r = owner.get("/api/cost-events/tag-keys").await;
    let keys: Vec<&str> = r.body["data"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(keys.len(), 50, "{r:?}");
    assert_eq!(keys[0], "k00");
    assert_eq!(keys[49], "k49");
}

#[tokio::test]
async fn export_is_for_paid_tiers() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    let r = s.owner.get("/api/cost-events/export").await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.code(), "forbidden");
}

#[tokio::test]
async fn export_writes_csv_with_the_spec_columns() {
    let app = TestApp::start_with(&[("SPENDGATE_DEFAULT_PLAN", "pro".into())]).await;
    let s = seed(&app).await;
    let r = s.owner.get("/api/cost-events/export").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("text/csv; charset=utf-8"));
    assert_eq!(
        r.header("content-disposition").unwrap(),
        format!("attachment; filename=service-cost-events-{}.csv", date_of(now_ms()))
    );
    let lines: Vec<&str> = r.text.lines().collect();
    assert_eq!(
        lines[0],
        "id,request_id,provider,model,input_tokens,output_tokens,cached_input_tokens,reasoning_tokens,\
         cost_microdollars,cost_usd,duration_ms,source,session_id,trace_id,key_name,created_at"
    );
    assert_eq!(lines.len(), 6, "{}", r.text);
    let mut reader = csv::Reader::from_reader(r.text.as_bytes());
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let ids: Vec<&str> = rows.iter().map(|row| &row[0]).collect();
    let newest_first: Vec<&str> = s.events.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first);
    let one = &rows[3];
    assert_eq!(
        one.iter().skip(1).take(14).collect::<Vec<_>>(),
        vec![
            "req-one", "openai", "gpt-4o", "100", "50", "10", "5", "1000000", "1.000000", "100", "sdk",
            "sess-1", TRACE_1, "alpha"
        ]
    );
    assert!(one[15].ends_with('Z'));
    let keyless = &rows[0];
    assert_eq!((&keyless[9], &keyless[10], &keyless[14]), ("0.040000", "", ""));
    assert_eq!(&rows[1][9], "0.000300");

    let r = s.owner.get("/api/cost-events/export?provider=openai&tag.team=growth").await;
    assert_eq!(r.text.lines().count(), 2, "{}", r.text);
    assert!(r.text.lines().nth(1).unwrap().starts_with(s.events[3].as_str()));
    let r = s
        .owner
        .get(&format!("/api/cost-events/export?apiKeyId={}&sessionId=sess-1&traceId={TRACE_1}", s.key_a))
        .await;
    assert_eq!(r.text.lines().count(), 3, "{}", r.text);
    let r = s.owner.get("/api/cost-events/export?source=mcp&model=gpt-4o-mini").await;
    assert_eq!(r.text.lines().count(), 2, "{}", r.text);
    let r = s.owner.get("/api/cost-events/export?source=nowhere").await;
    assert_eq!(r.issue_paths(), vec![json!(["source"])]);
}

#[tokio::test]
async fn openapi_lists_the_read_endpoints() {
    let app = TestApp::start().await;
    let r = app.control().get("/api/openapi.json").await;
    assert_eq!(r.status, 200, "{r:?}");
    for path in [
        "/api/cost-events",
        "/api/cost-events/{id}",
        "/api/cost-events/sessions",
        "/api/cost-events/sessions/{sessionId}",
        "/api/cost-events/summary",
        "/api/cost-events/attribution",
        "/api/cost-events/attribution/{key}",
        "/api/cost-events/tag-keys",
        "/api/cost-events/export",
    ] {
        assert!(r.body["paths"][path]["get"].is_object(), "{path} missing");
    }
}

/// Sums past `i64` (rows written before the input bounds, or millions of maximal
/// events) saturate instead of failing: every read that sums answers 200 on both
/// backends, with integers.
#[tokio::test]
async fn sums_past_i64_saturate_instead_of_failing() {
    let app = TestApp::start().await;
    let s = seed(&app).await;
    app.exec_sql(
        "UPDATE cost_events SET cost_microdollars = 9223372036854775000, input_tokens = 9223372036854775000, \
         output_tokens = 9223372036854775000, duration_ms = 9223372036854775000, \
         provider = 'openai', model = 'gpt-4o'",
    )
    .await;
    app.rebuild_rollups().await;
    const MAX: i64 = i64::MAX;
    let r = s.owner.get("/api/cost-events/summary").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["totals"]["totalCostMicrodollars"], MAX, "{r:?}");
    for path in [
        "/api/cost-events/attribution?groupBy=api_key",
        "/api/cost-events/attribution?groupBy=team",
        "/api/cost-events/sessions",
        "/api/cost-events/sessions/sess-1",
    ] {
        let r = s.owner.get(path).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert!(!r.text.contains("e+") && !r.text.contains(".0,"), "{path}: a float crept in: {r:?}");
    }
    let r = s.owner.get("/api/cost-events/attribution?groupBy=api_key").await;
    assert_eq!(r.body["data"]["totals"]["totalCostMicrodollars"], MAX, "{r:?}");
    let r = s.owner.get("/api/cost-events/sessions/sess-1").await;
    assert_eq!(r.body["summary"]["totalCostMicrodollars"], MAX, "{r:?}");
    assert_eq!(r.body["summary"]["totalInputTokens"], MAX, "{r:?}");
    assert_eq!(r.body["summary"]["totalDurationMs"], MAX, "{r:?}");
    let r = s.owner.get(&format!("/api/cost-events/attribution/{}?groupBy=api_key", s.key_a)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["totalCostMicrodollars"], MAX, "{r:?}");
    let budget = s
        .owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": s.key_a, "maxBudgetMicrodollars": 1_000 }),
        )
        .await;
    assert_eq!(budget.status, 201, "{budget:?}");
    let r = s.owner.get(&format!("/api/budgets/{}/sources", budget.body["id"].as_str().unwrap())).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text.contains("9223372036854775807"), "{r:?}");
}
