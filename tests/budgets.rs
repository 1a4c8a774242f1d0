//! Budgets: upsert (create and update), every validation rule and error code, tier
//! limits, roles, list, delete, reset, sources, the key-authenticated status, the
//! velocity status relayed from the proxy, and the proxy's internal routes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{create_key, key_client, read, Client, Resp, TestApp, TestDb, PASSWORD};

const OWNER_ORG: &str = "owner@example.com's organization";
const SECRET: &str = "internal-test-secret";

async fn upsert(c: &Client, body: Value) -> Resp {
    c.post("/api/budgets", body).await
}

async fn upsert_ok(c: &Client, body: Value) -> Value {
    let r = upsert(c, body).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.body
}

fn customer(id: &str, max: i64) -> Value {
    json!({ "entityType": "customer", "entityId": id, "maxBudgetMicrodollars": max })
}

/// The signed-in user's id (`svc_usr_…`) and organization id (`svc_org_…`).
async fn whoami(c: &Client) -> (String, String) {
    let r = c.get("/api/auth/session").await;
    assert_eq!(r.status, 200, "{r:?}");
    let s = |v: &Value| v.as_str().unwrap().to_owned();
    (s(&r.body["data"]["user"]["id"]), s(&r.body["data"]["org"]["id"]))
}

async fn status(c: &Client, raw_key: &str) -> Resp {
    c.get_with_key("/api/budgets/status", raw_key).await
}

fn bare(prefixed: &str) -> &str {
    prefixed.rsplit('_').next().unwrap()
}

fn ms(iso: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(iso.as_str().unwrap()).unwrap().timestamp_millis()
}

async fn set_spend(app: &TestApp, budget_id: &str, spend: i64) {
    app.exec_sql(&format!(
        "UPDATE budgets SET spend_microdollars = {spend} WHERE id = '{}'",
        bare(budget_id)
    ))
    .await;
}

/// One cost event row; ids are bare UUIDs.
struct Event<'a> {
    org: &'a str,
    key: Option<&'a str>,
    user: Option<&'a str>,
    provider: &'a str,
    model: &'a str,
    cost: i64,
    customer: Option<&'a str>,
    tag: Option<(&'a str, &'a str)>,
    created_at: i64,
}

/// An event of `org` without user, customer or tag.
fn event<'a>(
    org: &'a str,
    key: Option<&'a str>,
    provider: &'a str,
    model: &'a str,
    cost: i64,
    created_at: i64,
) -> Event<'a> {
    Event { org, key, user: None, provider, model, cost, customer: None, tag: None, created_at }
}

async fn insert_event(app: &TestApp, e: Event<'_>) {
    let id = uuid::Uuid::new_v4().to_string();
    let text = |v: Option<&str>| v.map_or("NULL".to_owned(), |v| format!("'{v}'"));
    app.exec_sql(&format!(
        "INSERT INTO cost_events (id, org_id, request_id, api_key_id, user_id, provider, model, \
             input_tokens, output_tokens, cost_microdollars, event_type, tags, customer_id, source, \
             budget_status, created_at, dedup_key) VALUES ('{id}', '{}', '{id}', {}, {}, '{}', '{}', 1, 1, {}, \
             'llm', '{{}}', {}, 'sdk', 'skipped', {}, '{id}')",
        e.org,
        text(e.key),
        text(e.user),
        e.provider,
        e.model,
        e.cost,
        text(e.customer),
        e.created_at
    ))
    .await;
    if let Some((k, v)) = e.tag {
        app.exec_sql(&format!(
            "INSERT INTO cost_event_tags (event_id, org_id, tag_key, tag_value, created_at) \
                 VALUES ('{id}', '{}', '{k}', '{v}', {})",
            e.org, e.created_at
        ))
        .await;
    }
}

fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// A control-plane-only process (`serve --only control`) whose proxy address and
/// internal secret are chosen by the test.
struct ControlOnly {
    child: Child,
    control: String,
}

impl ControlOnly {
    fn start(db_url: &str, proxy_addr: &str, secret: &str) -> ControlOnly {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spendgate"))
            .args(["serve", "--only", "control"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("SPENDGATE_DATABASE_URL", db_url)
            .env("SPENDGATE_CONTROL_ADDR", "127.0.0.1:0")
            .env("SPENDGATE_PROXY_ADDR", proxy_addr)
            .env("SPENDGATE_DEV", "1")
            .env("SPENDGATE_WORKERS", "2")
            .env("SPENDGATE_ARBITERS", "2")
            .env("SPENDGATE_DB_MAX_CONNECTIONS", "4")
            .env("SPENDGATE_INTERNAL_SECRET", secret)
            .env("SPENDGATE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("spendgate ready") {
                    let _ = tx.send(line);
                }
            }
        });
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let control = line.split_whitespace().find_map(|p| p.strip_prefix("control=")).unwrap().to_owned();
        ControlOnly { child, control }
    }

    async fn login(&self, email: &str) -> Client {
        let c = Client::new(&self.control);
        let r = c.post("/api/auth/login", json!({ "email": email, "password": PASSWORD })).await;
        assert_eq!(r.status, 200, "{r:?}");
        c
    }
}

impl Drop for ControlOnly {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const MOCK_OK: u8 = 0;
const MOCK_ERROR: u8 = 1;
const MOCK_SLOW: u8 = 2;
const MOCK_HANG_UP: u8 = 3;

/// A stand-in for the proxy's internal route: answers by `mode`, remembers request
/// heads.
struct MockProxy {
    addr: String,
    mode: Arc<AtomicU8>,
    requests: Arc<Mutex<Vec<String>>>,
}

fn mock_velocity_state() -> Value {
    json!([{ "entityType": "api_key", "entityId": "svc_key_x", "open": true }])
}

async fn mock_proxy() -> MockProxy {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mode = Arc::new(AtomicU8::new(MOCK_OK));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (m, seen) = (mode.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (m, seen) = (m.clone(), seen.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut chunk = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                    }
                }
                seen.lock().unwrap().push(String::from_utf8_lossy(&head).into_owned());
                let (status, body) = match m.load(Ordering::SeqCst) {
                    MOCK_ERROR => ("500 Internal Server Error", "{}".to_owned()),
                    MOCK_HANG_UP => return,
                    MOCK_SLOW => {
                        tokio::time::sleep(Duration::from_secs(10)).await;
                        ("200 OK", json!({ "velocityState": mock_velocity_state() }).to_string())
                    }
                    _ => ("200 OK", json!({ "velocityState": mock_velocity_state() }).to_string()),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(response.as_bytes()).await;
            });
        }
    });
    MockProxy { addr, mode, requests }
}

#[tokio::test]
async fn upsert_creates_then_updates_the_same_row() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let (me, _) = whoami(&c).await;

    let created =
        upsert_ok(&c, json!({ "entityType": "user", "entityId": me, "maxBudgetMicrodollars": 5_000_000 }))
            .await;
    // The bare Budget object, no `data` wrapper, with every field and its default.
    assert!(created.get("data").is_none(), "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("svc_bgt_") && id.len() == 8 + 36, "{id}");
    assert_eq!(created["entityType"], "user");
    assert_eq!(created["entityId"], me.as_str());
    assert_eq!(created["maxBudgetMicrodollars"], 5_000_000);
    assert_eq!(created["spendMicrodollars"], 0);
    assert_eq!(created["policy"], "strict_block");
    assert_eq!(created["resetInterval"], Value::Null);
    assert_eq!(created["currentPeriodStart"], Value::Null);
    assert_eq!(created["thresholdPercentages"], json!([50, 80, 90, 95]));
    for field in [
        "velocityLimitMicrodollars",
        "velocityWindowSeconds",
        "velocityCooldownSeconds",
        "sessionLimitMicrodollars",
        "finalizationReserveMicrodollars",
        "loopMaxCalls",
        "loopWindowSeconds",
        "loopAggregateMaxKeys",
    ] {
        assert_eq!(created[field], Value::Null, "{field}: {created}");
    }
    assert!(created["createdAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(created["createdAt"], created["updatedAt"]);

    // Spend moved by the proxy survives a reconfiguration.
    set_spend(&app, &id, 1_234).await;
    let before = chrono::Utc::now().timestamp_millis();
    let updated = upsert_ok(
        &c,
        json!({
            "entityType": "user", "entityId": me, "maxBudgetMicrodollars": 9_000_000,
            "policy": "warn", "resetInterval": "monthly", "thresholdPercentages": [25, 100],
            "velocityLimitMicrodollars": 100_000, "sessionLimitMicrodollars": 50_000,
            "finalizationReserveMicrodollars": 10_000, "loopMaxCalls": 0, "loopWindowSeconds": 120,
            "loopAggregateMaxKeys": 3,
        }),
    )
    .await;
    assert_eq!(updated["id"], id.as_str());
    assert_eq!(updated["createdAt"], created["createdAt"]);
    assert_eq!(updated["spendMicrodollars"], 1_234);
    assert_eq!(updated["maxBudgetMicrodollars"], 9_000_000);
    assert_eq!(updated["policy"], "warn");
    assert_eq!(updated["resetInterval"], "monthly");
    assert_eq!(updated["thresholdPercentages"], json!([25, 100]));
    assert_eq!(updated["velocityLimitMicrodollars"], 100_000);
    // A velocity limit without window and cooldown gets 60 s each.
    assert_eq!(updated["velocityWindowSeconds"], 60);
    assert_eq!(updated["velocityCooldownSeconds"], 60);
    assert_eq!(updated["sessionLimitMicrodollars"], 50_000);
    assert_eq!(updated["finalizationReserveMicrodollars"], 10_000);
    assert_eq!(updated["loopMaxCalls"], 0);
    assert_eq!(updated["loopWindowSeconds"], 120);
    assert_eq!(updated["loopAggregateMaxKeys"], 3);
    // Setting an interval where there was none starts a period now.
    let period = ms(&updated["currentPeriodStart"]);
    assert!(period >= before - 1_000 && period <= chrono::Utc::now().timestamp_millis(), "{updated}");

    // Changing the interval keeps the period; removing it clears the period.
    let daily = upsert_ok(
        &c,
        json!({ "entityType": "user", "entityId": me, "maxBudgetMicrodollars": 9_000_000,
            "resetInterval": "daily" }),
    )
    .await;
    assert_eq!(daily["currentPeriodStart"], updated["currentPeriodStart"]);
    // The body is the whole configuration: what is left out returns to its default.
    assert_eq!(daily["policy"], "strict_block");
    assert_eq!(daily["velocityLimitMicrodollars"], Value::Null);
    assert_eq!(daily["thresholdPercentages"], json!([50, 80, 90, 95]));
    let cleared = upsert_ok(
        &c,
        json!({ "entityType": "user", "entityId": me, "maxBudgetMicrodollars": 9_000_000,
            "resetInterval": null, "velocityLimitMicrodollars": 7, "velocityWindowSeconds": 3600,
            "velocityCooldownSeconds": 10, "thresholdPercentages": [] }),
    )
    .await;
    assert_eq!(cleared["currentPeriodStart"], Value::Null);
    assert_eq!(cleared["velocityWindowSeconds"], 3600);
    assert_eq!(cleared["velocityCooldownSeconds"], 10);
    assert_eq!(cleared["thresholdPercentages"], json!([]));
    assert_eq!(cleared["spendMicrodollars"], 1_234);

    // The list shows the one row; an unset reserve shows as 0 there.
    let r = c.get("/api/budgets").await;
    assert_eq!(r.status, 200, "{r:?}");
    let listed = r.body["data"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["finalizationReserveMicrodollars"], 0);
    assert_eq!(listed[0]["velocityLimitMicrodollars"], 7);
}

#[tokio::test]
async fn list_shows_every_entity_type_newest_first() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    assert_eq!(c.get("/api/budgets").await.body, json!({ "data": [] }));
    let (me, _) = whoami(&c).await;
    let (key, _) = create_key(&c, "agent").await;
    let bodies = [
        json!({ "entityType": "user", "entityId": me, "maxBudgetMicrodollars": 1 }),
        json!({ "entityType": "api_key", "entityId": key, "maxBudgetMicrodollars": 2 }),
        json!({ "entityType": "tag", "entityId": "team=core", "maxBudgetMicrodollars": 3,
            "finalizationReserveMicrodollars": 1 }),
        customer("acme", 4),
    ];
    let mut ids = Vec::new();
    for b in bodies {
        ids.push(upsert_ok(&c, b).await["id"].clone());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let listed = c.get("/api/budgets").await.body["data"].as_array().unwrap().clone();
    let types: Vec<&str> = listed.iter().map(|b| b["entityType"].as_str().unwrap()).collect();
    assert_eq!(types, ["customer", "tag", "api_key", "user"]);
    let listed_ids: Vec<Value> = listed.iter().map(|b| b["id"].clone()).collect();
    ids.reverse();
    assert_eq!(listed_ids, ids);
    assert_eq!(listed[1]["finalizationReserveMicrodollars"], 1);

    // Budgets of another organization are not listed.
    let other = app.user_in_org("other@example.com", "Other Co", "owner").await;
    assert_eq!(other.get("/api/budgets").await.body["data"], json!([]));
}

#[tokio::test]
async fn concurrent_upserts_of_one_entity_converge_on_one_row() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let attempts = (1..=12).map(|i| {
        let c = c.clone();
        async move {
            upsert(
                &c,
                json!({ "entityType": "tag", "entityId": "team=core", "maxBudgetMicrodollars": i * 1000 }),
            )
            .await
        }
    });
    let results = futures_util::future::join_all(attempts).await;
    let mut ids: Vec<Value> = results
        .iter()
        .map(|r| {
            assert_eq!(r.status, 201, "{r:?}");
            r.body["id"].clone()
        })
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let listed = c.get("/api/budgets").await.body["data"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], ids[0]);
}

#[tokio::test]
async fn upsert_validates_every_field() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let (me, _) = whoami(&c).await;

    // Missing or ill-typed fields.
    let shape_cases = [
        (json!({ "entityId": "acme", "maxBudgetMicrodollars": 1 }), json!(["entityType"])),
        (json!({ "entityType": 5, "entityId": "acme", "maxBudgetMicrodollars": 1 }), json!(["entityType"])),
        (json!({ "entityType": "customer", "maxBudgetMicrodollars": 1 }), json!(["entityId"])),
        (json!({ "entityType": "customer", "entityId": "acme" }), json!(["maxBudgetMicrodollars"])),
        (
            json!({ "entityType": "customer", "entityId": "acme", "maxBudgetMicrodollars": 1.5 }),
            json!(["maxBudgetMicrodollars"]),
        ),
        (
            json!({ "entityType": "customer", "entityId": "acme", "maxBudgetMicrodollars": "1" }),
            json!(["maxBudgetMicrodollars"]),
        ),
        (
            json!({ "entityType": "customer", "entityId": "acme", "maxBudgetMicrodollars": 1,
            "thresholdPercentages": [50.5] }),
            json!(["thresholdPercentages", "0"]),
        ),
        (
            json!({ "entityType": "customer", "entityId": "acme", "maxBudgetMicrodollars": 1, "policy": 1 }),
            json!(["policy"]),
        ),
    ];
    for (body, path) in shape_cases {
        let r = upsert(&c, body.clone()).await;
        let paths = r.issue_paths();
        assert_eq!(paths, vec![path], "{body}: {r:?}");
    }

    // Field rules, one at a time.
    let base = |extra: Value| {
        let mut b = customer("acme", 1_000);
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let rule_cases = [
        (json!({ "maxBudgetMicrodollars": 0 }), "maxBudgetMicrodollars"),
        (json!({ "maxBudgetMicrodollars": -5 }), "maxBudgetMicrodollars"),
        (json!({ "policy": "block" }), "policy"),
        (json!({ "resetInterval": "hourly" }), "resetInterval"),
        (json!({ "thresholdPercentages": [90, 80] }), "thresholdPercentages"),
        (json!({ "thresholdPercentages": [80, 80] }), "thresholdPercentages"),
        (json!({ "thresholdPercentages": (1..=11).collect::<Vec<i64>>() }), "thresholdPercentages"),
        (json!({ "velocityLimitMicrodollars": 0 }), "velocityLimitMicrodollars"),
        (json!({ "velocityLimitMicrodollars": 5, "velocityWindowSeconds": 9 }), "velocityWindowSeconds"),
        (json!({ "velocityLimitMicrodollars": 5, "velocityWindowSeconds": 3601 }), "velocityWindowSeconds"),
        (json!({ "velocityLimitMicrodollars": 5, "velocityCooldownSeconds": 9 }), "velocityCooldownSeconds"),
        (
            json!({ "velocityLimitMicrodollars": 5, "velocityCooldownSeconds": 3601 }),
            "velocityCooldownSeconds",
        ),
        (json!({ "sessionLimitMicrodollars": 0 }), "sessionLimitMicrodollars"),
        (json!({ "finalizationReserveMicrodollars": -1 }), "finalizationReserveMicrodollars"),
        (json!({ "loopMaxCalls": -1 }), "loopMaxCalls"),
        (json!({ "loopWindowSeconds": 9 }), "loopWindowSeconds"),
        (json!({ "loopWindowSeconds": 3601 }), "loopWindowSeconds"),
        (json!({ "loopAggregateMaxKeys": 0 }), "loopAggregateMaxKeys"),
        // Money is bounded at 10^15 µ$ so no sum of it can leave i64.
        (json!({ "maxBudgetMicrodollars": 1_000_000_000_000_001i64 }), "maxBudgetMicrodollars"),
        (json!({ "velocityLimitMicrodollars": i64::MAX }), "velocityLimitMicrodollars"),
        (json!({ "sessionLimitMicrodollars": 1_000_000_000_000_001i64 }), "sessionLimitMicrodollars"),
        (json!({ "finalizationReserveMicrodollars": i64::MAX }), "finalizationReserveMicrodollars"),
    ];
    for (extra, field) in rule_cases {
        let r = upsert(&c, base(extra.clone())).await;
        assert_eq!(r.issue_paths(), vec![json!([field])], "{extra}: {r:?}");
    }
    for (extra, path) in [
        (json!({ "thresholdPercentages": [0, 50] }), json!(["thresholdPercentages", "0"])),
        (json!({ "thresholdPercentages": [50, 101] }), json!(["thresholdPercentages", "1"])),
    ] {
        let r = upsert(&c, base(extra.clone())).await;
        assert_eq!(r.issue_paths(), vec![path], "{extra}: {r:?}");
    }

    // Every problem is reported at once.
    let r = upsert(&c, base(json!({ "policy": "x", "resetInterval": "x", "loopMaxCalls": -1 }))).await;
    assert_eq!(r.issue_paths(), vec![json!(["policy"]), json!(["resetInterval"]), json!(["loopMaxCalls"])]);

    // Entity ids must match their type.
    let long_value = format!("k={}", "v".repeat(257));
    let long_key = format!("{}=v", "k".repeat(65));
    let long_customer = "c".repeat(257);
    for (kind, id) in [
        ("user", "abc"),
        ("user", "svc_key_6f1c1c1e-8f5e-4d55-9d7a-2f0a3c1b2d3e"),
        ("api_key", "svc_key_nope"),
        ("api_key", me.as_str()),
        ("tag", "team"),
        ("tag", "team="),
        ("tag", "=core"),
        ("tag", "bad key=x"),
        ("tag", "_svc_internal=x"),
        ("tag", long_value.as_str()),
        ("tag", long_key.as_str()),
        ("customer", "a b"),
        ("customer", ""),
        ("customer", long_customer.as_str()),
    ] {
        let r = upsert(&c, json!({ "entityType": kind, "entityId": id, "maxBudgetMicrodollars": 1 })).await;
        assert_eq!(r.issue_paths(), vec![json!(["entityId"])], "{kind} {id}: {r:?}");
    }

    // Boundaries that are allowed.
    let max_tag = format!("{}={}", "k".repeat(64), "v".repeat(256));
    assert_eq!(max_tag.len(), 321);
    upsert_ok(&c, json!({ "entityType": "tag", "entityId": max_tag, "maxBudgetMicrodollars": 1 })).await;
    upsert_ok(&c, json!({ "entityType": "tag", "entityId": "env=a=b", "maxBudgetMicrodollars": 1 })).await;
    upsert_ok(&c, customer(&"c".repeat(256), 1)).await;
    let ok = upsert_ok(
        &c,
        base(json!({
            "thresholdPercentages": (91..=100).collect::<Vec<i64>>(), "velocityLimitMicrodollars": 1,
            "velocityWindowSeconds": 10, "velocityCooldownSeconds": 3600, "loopMaxCalls": 0,
            "loopWindowSeconds": 10, "loopAggregateMaxKeys": 1, "finalizationReserveMicrodollars": 0,
            "policy": "soft_block", "resetInterval": "weekly", "sessionLimitMicrodollars": 1,
        })),
    )
    .await;
    assert_eq!(ok["finalizationReserveMicrodollars"], 0);
    assert_eq!(ok["policy"], "soft_block");
    assert_eq!(ok["resetInterval"], "weekly");

    // A reserve that is not below the limit is invalid_input.
    for reserve in [1_000, 1_001] {
        let r = upsert(&c, base(json!({ "finalizationReserveMicrodollars": reserve }))).await;
        assert_eq!(r.status, 400, "{r:?}");
        assert_eq!(r.code(), "invalid_input", "{r:?}");
    }

    // Malformed JSON and non-JSON bodies.
    let r = c.post_raw("/api/budgets", "application/json", "{").await;
    assert_eq!(r.code(), "invalid_json", "{r:?}");
    let r = c.post_raw("/api/budgets", "text/plain", "x").await;
    assert_eq!(r.status, 415, "{r:?}");

    // Nothing invalid was stored: the four successful upserts only.
    assert_eq!(c.get("/api/budgets").await.body["data"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn entities_must_be_supported_and_owned() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let member = app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    let (member_id, _) = whoami(&member).await;
    let other = app.user_in_org("other@example.com", "Other Co", "owner").await;
    let (other_id, _) = whoami(&other).await;
    let (other_key, _) = create_key(&other, "theirs").await;
    let (revoked_key, _) = create_key(&c, "revoked").await;
    assert_eq!(c.delete(&format!("/api/keys/{revoked_key}")).await.status, 200);
    let (active_key, _) = create_key(&c, "active").await;

    for (kind, id) in [
        ("team", "core"),
        ("organization", "x"),
        ("User", "x"),
        ("user", &other_id),
        ("user", "svc_usr_6f1c1c1e-8f5e-4d55-9d7a-2f0a3c1b2d3e"),
        ("api_key", &other_key),
        ("api_key", &revoked_key),
        ("api_key", "svc_key_6f1c1c1e-8f5e-4d55-9d7a-2f0a3c1b2d3e"),
    ] {
        let r = upsert(&c, json!({ "entityType": kind, "entityId": id, "maxBudgetMicrodollars": 1 })).await;
        assert_eq!(r.status, 403, "{kind} {id}: {r:?}");
        assert_eq!(r.code(), "forbidden", "{r:?}");
    }
    // An unsupported type is refused even when other fields are also wrong.
    let r = upsert(&c, json!({ "entityType": "team", "entityId": "", "maxBudgetMicrodollars": 0 })).await;
    assert_eq!(r.code(), "forbidden", "{r:?}");

    let b = upsert_ok(&c, json!({ "entityType": "user", "entityId": member_id, "maxBudgetMicrodollars": 1 }))
        .await;
    assert_eq!(b["entityId"], member_id.as_str());
    // Ids are stored canonically (lower-case UUID).
    let upper = format!("svc_key_{}", bare(&active_key).to_uppercase());
    let b = upsert_ok(&c, json!({ "entityType": "api_key", "entityId": upper, "maxBudgetMicrodollars": 1 }))
        .await;
    assert_eq!(b["entityId"], active_key.as_str());
    assert_eq!(c.get("/api/budgets").await.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(other.get("/api/budgets").await.body["data"], json!([]));
}

#[tokio::test]
async fn free_tier_caps_budget_size_and_count() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let r = upsert(&c, customer("big", 1_000_000_001)).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.code(), "spend_cap_exceeded");
    // Past the bound of every budget amount (10^15 µ$) it is a field error first.
    let r = upsert(&c, customer("huge", i64::MAX)).await;
    assert_eq!(r.issue_paths(), vec![json!(["maxBudgetMicrodollars"])]);
    let r = upsert(&c, customer("huge", 1_000_000_000_000_000)).await;
    assert_eq!(r.code(), "spend_cap_exceeded", "{r:?}");

    let first = upsert_ok(&c, customer("c0", 1_000_000_000)).await;
    for i in 1..20 {
        upsert_ok(&c, customer(&format!("c{i}"), 1)).await;
    }
    let r = upsert(&c, customer("c20", 1)).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.code(), "forbidden");
    // Updating an existing budget is not counted; raising it past the cap is refused.
    upsert_ok(&c, customer("c5", 2)).await;
    assert_eq!(upsert(&c, customer("c5", 1_000_000_001)).await.code(), "spend_cap_exceeded");
    // Deleting one makes room again.
    assert_eq!(c.delete(&format!("/api/budgets/{}", first["id"].as_str().unwrap())).await.status, 200);
    upsert_ok(&c, customer("c20", 1)).await;
    assert_eq!(upsert(&c, customer("c21", 1)).await.status, 403);
    assert_eq!(c.get("/api/budgets").await.body["data"].as_array().unwrap().len(), 20);
}

#[tokio::test]
async fn pro_tier_has_a_larger_cap() {
    let app = TestApp::start_with(&[("SPENDGATE_DEFAULT_PLAN", "pro".into())]).await;
    let c = app.owner().await;
    upsert_ok(&c, customer("big", 100_000_000_000)).await;
    let r = upsert(&c, customer("bigger", 100_000_000_001)).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.code(), "spend_cap_exceeded");
    for i in 0..25 {
        upsert_ok(&c, customer(&format!("c{i}"), 1)).await;
    }
}

#[tokio::test]
async fn reset_zeroes_spend_and_delete_removes_the_budget() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let plain = upsert_ok(
        &c,
        json!({ "entityType": "tag", "entityId": "team=core", "maxBudgetMicrodollars": 1_000,
            "velocityLimitMicrodollars": 10, "policy": "soft_block" }),
    )
    .await;
    let periodic = upsert_ok(
        &c,
        json!({ "entityType": "customer", "entityId": "acme", "maxBudgetMicrodollars": 1_000,
            "resetInterval": "daily", "finalizationReserveMicrodollars": 10 }),
    )
    .await;
    let plain_path = format!("/api/budgets/{}", plain["id"].as_str().unwrap());
    let periodic_path = format!("/api/budgets/{}", periodic["id"].as_str().unwrap());
    set_spend(&app, plain["id"].as_str().unwrap(), 700).await;
    set_spend(&app, periodic["id"].as_str().unwrap(), 900).await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    let r = c.post_empty(&plain_path).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.get("data").is_none());
    assert_eq!(r.body["id"], plain["id"]);
    assert_eq!(r.body["spendMicrodollars"], 0);
    assert_eq!(r.body["currentPeriodStart"], Value::Null);
    assert_eq!(r.body["policy"], "soft_block");
    assert_eq!(r.body["velocityLimitMicrodollars"], 10);
    assert_eq!(r.body["finalizationReserveMicrodollars"], 0);
    assert_eq!(r.body["createdAt"], plain["createdAt"]);

    let r = c.post_empty(&periodic_path).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["spendMicrodollars"], 0);
    assert_eq!(r.body["finalizationReserveMicrodollars"], 10);
    assert!(ms(&r.body["currentPeriodStart"]) > ms(&periodic["currentPeriodStart"]), "{r:?}");

    let r = c.delete(&plain_path).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "deleted": true }));
    for r in [
        c.delete(&plain_path).await,
        c.post_empty(&plain_path).await,
        c.get(&format!("{plain_path}/sources")).await,
    ] {
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(r.code(), "not_found");
    }
    for bad in ["nope", "svc_bgt_nope", "svc_key_6f1c1c1e-8f5e-4d55-9d7a-2f0a3c1b2d3e"] {
        let path = format!("/api/budgets/{bad}");
        assert_eq!(c.delete(&path).await.status, 404);
        assert_eq!(c.post_empty(&path).await.status, 404);
    }
    let listed = c.get("/api/budgets").await.body["data"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], periodic["id"]);

    // Another organization's budget is a 404 everywhere and stays untouched.
    let other = app.user_in_org("other@example.com", "Other Co", "owner").await;
    for r in [
        other.post_empty(&periodic_path).await,
        other.delete(&periodic_path).await,
        other.get(&format!("{periodic_path}/sources")).await,
    ] {
        assert_eq!(r.status, 404, "{r:?}");
    }
    assert_eq!(c.get("/api/budgets").await.body["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn readers_may_read_and_only_admins_may_write() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let viewer = app.user_in_org("viewer@example.com", OWNER_ORG, "viewer").await;
    let member = app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    let admin = app.user_in_org("admin@example.com", OWNER_ORG, "admin").await;
    let b = upsert_ok(&owner, customer("acme", 10)).await;
    let path = format!("/api/budgets/{}", b["id"].as_str().unwrap());

    for c in [&viewer, &member] {
        for r in [upsert(c, customer("x", 1)).await, c.post_empty(&path).await, c.delete(&path).await] {
            assert_eq!(r.status, 403, "{r:?}");
            assert_eq!(r.code(), "forbidden");
        }
        assert_eq!(c.get("/api/budgets").await.body["data"][0]["id"], b["id"]);
        assert_eq!(c.get(&format!("{path}/sources")).await.status, 200);
        assert_eq!(c.get("/api/budgets/velocity-status").await.status, 200);
    }
    upsert_ok(&admin, customer("by-admin", 1)).await;
    assert_eq!(admin.post_empty(&path).await.status, 200);
    assert_eq!(admin.delete(&path).await.status, 200);

    let anon = app.control();
    for r in [
        anon.get("/api/budgets").await,
        upsert(&anon, customer("x", 1)).await,
        anon.post_empty(&path).await,
        anon.delete(&path).await,
        anon.get("/api/budgets/velocity-status").await,
        anon.get(&format!("{path}/sources")).await,
    ] {
        assert_eq!(r.status, 401, "{r:?}");
        assert_eq!(r.code(), "authentication_required");
    }
}

#[tokio::test]
async fn status_shows_the_keys_user_and_key_entities() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let (me, _) = whoami(&c).await;
    let (key, raw) = create_key(&c, "agent").await;
    let (_, other_raw) = create_key(&c, "no-budget-key").await;

    // No budgets yet.
    let r = status(&c, &raw).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "entities": [] }));
    assert_eq!(r.header("x-ratelimit-limit"), Some("3000"));
    assert!(r.header("x-ratelimit-remaining").is_some());
    assert_eq!(r.header("service-version"), Some("2026-04-01"));

    let user_budget = upsert_ok(
        &c,
        json!({ "entityType": "user", "entityId": me, "maxBudgetMicrodollars": 1_000, "resetInterval": "weekly",
            "velocityLimitMicrodollars": 100, "velocityWindowSeconds": 30, "sessionLimitMicrodollars": 50,
            "finalizationReserveMicrodollars": 20, "thresholdPercentages": [50] }),
    )
    .await;
    let key_budget = upsert_ok(
        &c,
        json!({ "entityType": "api_key", "entityId": key, "maxBudgetMicrodollars": 500, "policy": "warn" }),
    )
    .await;
    // Budgets of other entities are not part of a key's status.
    upsert_ok(&c, json!({ "entityType": "tag", "entityId": "team=core", "maxBudgetMicrodollars": 9 })).await;
    set_spend(&app, user_budget["id"].as_str().unwrap(), 300).await;
    set_spend(&app, key_budget["id"].as_str().unwrap(), 800).await;

    let r = status(&c, &raw).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body,
        json!({ "entities": [
            {
                "entityType": "user", "entityId": me, "limitMicrodollars": 1_000, "spendMicrodollars": 300,
                "remainingMicrodollars": 700, "policy": "strict_block", "resetInterval": "weekly",
                "currentPeriodStart": user_budget["currentPeriodStart"], "thresholdPercentages": [50],
                "velocityLimitMicrodollars": 100, "velocityWindowSeconds": 30, "velocityCooldownSeconds": 60,
                "sessionLimitMicrodollars": 50, "finalizationReserveMicrodollars": 20, "exactCeiling": false,
            },
            {
                // Spend past the limit (a warn budget) shows a remaining of 0, never negative.
                "entityType": "api_key", "entityId": key, "limitMicrodollars": 500, "spendMicrodollars": 800,
                "remainingMicrodollars": 0, "policy": "warn", "resetInterval": null,
                "currentPeriodStart": null, "thresholdPercentages": [50, 80, 90, 95],
                "velocityLimitMicrodollars": null, "velocityWindowSeconds": null,
                "velocityCooldownSeconds": null, "sessionLimitMicrodollars": null,
                "finalizationReserveMicrodollars": 0, "exactCeiling": false,
            },
        ]}),
    );

    // Another key of the same user sees the user budget only.
    let r = status(&c, &other_raw).await;
    let entities = r.body["entities"].as_array().unwrap();
    assert_eq!(entities.len(), 1, "{r:?}");
    assert_eq!(entities[0]["entityType"], "user");

    // A session is not a key.
    let r = c.get("/api/budgets/status").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.code(), "authentication_required");
    let r = status(&app.control(), &format!("svc_live_sk_{}", "0".repeat(32))).await;
    assert_eq!(r.status, 401, "{r:?}");
}

#[tokio::test]
async fn sources_break_spend_down_by_key_and_model() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let (me, org) = whoami(&c).await;
    let (me, org) = (bare(&me).to_owned(), bare(&org).to_owned());
    let (key_a, _) = create_key(&c, "agent-a").await;
    let (key_b, _) = create_key(&c, "agent-b").await;
    let (a, b) = (bare(&key_a).to_owned(), bare(&key_b).to_owned());
    let other = app.user_in_org("other@example.com", "Other Co", "owner").await;
    let (_, other_org) = whoami(&other).await;

    let key_budget = upsert_ok(
        &c,
        json!({ "entityType": "api_key", "entityId": key_a, "maxBudgetMicrodollars": 10_000, "resetInterval": "daily" }),
    )
    .await;
    let period = ms(&key_budget["currentPeriodStart"]);
    let user_budget = upsert_ok(
        &c,
        json!({ "entityType": "user", "entityId": format!("svc_usr_{me}"), "maxBudgetMicrodollars": 10 }),
    )
    .await;
    let tag_budget =
        upsert_ok(&c, json!({ "entityType": "tag", "entityId": "team=core", "maxBudgetMicrodollars": 10 }))
            .await;
    let customer_budget = upsert_ok(&c, customer("acme", 10)).await;

    let sources = |b: &Value| format!("/api/budgets/{}/sources", b["id"].as_str().unwrap());
    // Before any event: the budget and no sources.
    let r = c.get(&sources(&key_budget)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["sources"], json!([]));
    assert_eq!(r.body["data"]["budget"]["id"], key_budget["id"]);
    assert_eq!(r.body["data"]["budget"]["finalizationReserveMicrodollars"], 0);

    let t = period + 1;
    let events = [
        Event {
            user: Some(&me),
            tag: Some(("team", "core")),
            ..event(&org, Some(&a), "openai", "gpt-4o", 100, t)
        },
        Event { user: Some(&me), ..event(&org, Some(&a), "openai", "gpt-4o", 150, t) },
        Event {
            user: Some(&me),
            customer: Some("acme"),
            ..event(&org, Some(&a), "anthropic", "claude", 40, t)
        },
        // Before the period started: not counted by the daily key budget.
        event(&org, Some(&a), "openai", "gpt-4o", 7_000, period - 1),
        Event {
            user: Some(&me),
            tag: Some(("team", "core")),
            ..event(&org, Some(&b), "openai", "gpt-4o", 900, t)
        },
        Event {
            tag: Some(("team", "other")),
            customer: Some("acme"),
            ..event(&org, None, "google", "gemini", 5, t)
        },
        // Another organization's event never counts.
        Event {
            user: Some(&me),
            tag: Some(("team", "core")),
            customer: Some("acme"),
            ..event(bare(&other_org), Some(&a), "openai", "gpt-4o", 100_000, t)
        },
    ];
    for e in events {
        insert_event(&app, e).await;
    }
    // Inserted behind the commit's back: the rollups the sources are read from are
    // rebuilt from them.
    app.rebuild_rollups().await;

    let r = c.get(&sources(&key_budget)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body["data"]["sources"],
        json!([
            { "apiKeyId": key_a, "keyName": "agent-a", "model": "gpt-4o", "provider": "openai",
              "totalCostMicrodollars": 250, "requestCount": 2 },
            { "apiKeyId": key_a, "keyName": "agent-a", "model": "claude", "provider": "anthropic",
              "totalCostMicrodollars": 40, "requestCount": 1 },
        ])
    );

    // A user budget without a reset interval counts all time, across the user's keys.
    let r = c.get(&sources(&user_budget)).await;
    let got: Vec<(Value, i64)> = r.body["data"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["keyName"].clone(), s["totalCostMicrodollars"].as_i64().unwrap()))
        .collect();
    assert_eq!(got, vec![(json!("agent-b"), 900), (json!("agent-a"), 250), (json!("agent-a"), 40)], "{r:?}");

    let r = c.get(&sources(&tag_budget)).await;
    let got: Vec<(Value, i64)> = r.body["data"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["apiKeyId"].clone(), s["totalCostMicrodollars"].as_i64().unwrap()))
        .collect();
    assert_eq!(got, vec![(json!(key_b), 900), (json!(key_a), 100)], "{r:?}");

    let r = c.get(&sources(&customer_budget)).await;
    assert_eq!(
        r.body["data"]["sources"],
        json!([
            { "apiKeyId": key_a, "keyName": "agent-a", "model": "claude", "provider": "anthropic",
              "totalCostMicrodollars": 40, "requestCount": 1 },
            { "apiKeyId": null, "keyName": null, "model": "gemini", "provider": "google",
              "totalCostMicrodollars": 5, "requestCount": 1 },
        ])
    );
}

#[tokio::test]
async fn ingested_cost_events_show_in_sources_and_status() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let (key, raw) = create_key(&c, "sdk").await;
    let budget =
        upsert_ok(&c, json!({ "entityType": "api_key", "entityId": key, "maxBudgetMicrodollars": 1_000 }))
            .await;
    for cost in [300, 900] {
        let r = read(
            c.request(reqwest::Method::POST, "/api/cost-events")
                .header("X-Service-Key", &raw)
                .json(&json!({ "provider": "openai", "model": "gpt-4o-mini", "inputTokens": 10,
                    "outputTokens": 5, "costMicrodollars": cost }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    let r = c.get(&format!("/api/budgets/{}/sources", budget["id"].as_str().unwrap())).await;
    assert_eq!(
        r.body["data"]["sources"],
        json!([{ "apiKeyId": key, "keyName": "sdk", "model": "gpt-4o-mini", "provider": "openai",
            "totalCostMicrodollars": 1_200, "requestCount": 2 }]),
        "{r:?}"
    );
    assert_eq!(r.body["data"]["budget"]["spendMicrodollars"], 1_200);
    let r = status(&c, &raw).await;
    assert_eq!(r.body["entities"][0]["spendMicrodollars"], 1_200, "{r:?}");
    assert_eq!(r.body["entities"][0]["remainingMicrodollars"], 0);
}

#[tokio::test]
async fn velocity_status_relays_the_proxy_answer_and_hides_failures() {
    let mock = mock_proxy().await;
    let db = TestDb::new().await;
    let server = ControlOnly::start(&db.url, &mock.addr, SECRET);
    let c = Client::new(&server.control);
    let r = c.post("/api/auth/signup", json!({ "email": "owner@example.com", "password": PASSWORD })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let (_, org) = whoami(&c).await;

    let r = c.get("/api/budgets/velocity-status").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "velocityState": mock_velocity_state() }));
    let head = mock.requests.lock().unwrap()[0].clone();
    assert!(
        head.starts_with(&format!("GET /internal/budget/velocity-state?orgId={org} HTTP/1.1\r\n")),
        "{head}"
    );
    assert!(head.to_ascii_lowercase().contains(&format!("x-internal-secret: {SECRET}\r\n")), "{head}");

    for mode in [MOCK_ERROR, MOCK_HANG_UP] {
        mock.mode.store(mode, Ordering::SeqCst);
        let r = c.get("/api/budgets/velocity-status").await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, json!({ "velocityState": [] }), "mode {mode}");
    }
    mock.mode.store(MOCK_SLOW, Ordering::SeqCst);
    let started = Instant::now();
    let r = c.get("/api/budgets/velocity-status").await;
    let took = started.elapsed();
    assert_eq!(r.body, json!({ "velocityState": [] }), "{r:?}");
    assert!(took >= Duration::from_millis(2_500) && took < Duration::from_secs(6), "{took:?}");
}

#[tokio::test]
async fn velocity_status_through_the_real_proxy_and_its_internal_routes() {
    let app = TestApp::start_with(&[("SPENDGATE_PROXY_ADDR", free_addr())]).await;
    let c = app.owner().await;
    let (_, org) = whoami(&c).await;
    let r = c.get("/api/budgets/velocity-status").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "velocityState": [] }));

    let proxy = app.proxy();
    let get_state = |secret: Option<&'static str>, query: String| {
        let mut req = proxy.request(reqwest::Method::GET, &format!("/internal/budget/velocity-state{query}"));
        if let Some(s) = secret {
            req = req.header("X-Internal-Secret", s);
        }
        async move { read(req.send().await.unwrap()).await }
    };
    let r = get_state(Some(SECRET), format!("?orgId={org}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "velocityState": [] }));
    assert!(r.header("x-service-trace-id").is_some());
    let r = get_state(Some(SECRET), format!("?orgId={}", bare(&org))).await;
    assert_eq!(r.status, 200, "{r:?}");
    for query in ["".to_owned(), "?orgId=nope".to_owned()] {
        let r = get_state(Some(SECRET), query).await;
        assert_eq!(r.status, 400, "{r:?}");
        assert_eq!(r.code(), "validation_error");
    }
    for secret in [None, Some("wrong"), Some("")] {
        let r = get_state(secret, format!("?orgId={org}")).await;
        assert_eq!(r.status, 401, "{r:?}");
        assert_eq!(r.code(), "unauthorized");
    }

    let invalidate = |secret: Option<&'static str>, body: Value| {
        let mut req = proxy.request(reqwest::Method::POST, "/internal/budget/invalidate").json(&body);
        if let Some(s) = secret {
            req = req.header("X-Internal-Secret", s);
        }
        async move { read(req.send().await.unwrap()).await }
    };
    let body = json!({ "orgId": org, "entityType": "tag", "entityId": "team=core" });
    let r = invalidate(Some(SECRET), body.clone()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "invalidated": true }));
    for secret in [None, Some("wrong")] {
        let r = invalidate(secret, body.clone()).await;
        assert_eq!(r.status, 401, "{r:?}");
        assert_eq!(r.code(), "unauthorized");
    }
    // The secret is checked before the body is even read.
    assert_eq!(invalidate(None, json!("garbage")).await.status, 401);
    for bad in [
        json!({ "orgId": org, "entityType": "team", "entityId": "x" }),
        json!({ "orgId": "nope", "entityType": "tag", "entityId": "x" }),
        json!({ "orgId": org, "entityType": "tag", "entityId": "" }),
        json!({ "orgId": org, "entityType": "tag" }),
    ] {
        let r = invalidate(Some(SECRET), bad.clone()).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert_eq!(r.code(), "validation_error");
    }

    // A control plane holding the wrong secret is refused by the proxy and shows
    // an empty list.
    let wrong =
        ControlOnly::start(&app.db.url, app.server.proxy.trim_start_matches("http://"), "wrong-secret");
    let w = wrong.login("owner@example.com").await;
    let r = w.get("/api/budgets/velocity-status").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "velocityState": [] }));
}

#[tokio::test]
async fn without_an_internal_secret_the_internal_routes_do_not_exist() {
    let app = TestApp::start_with(&[("SPENDGATE_INTERNAL_SECRET", String::new())]).await;
    let c = app.owner().await;
    let (_, org) = whoami(&c).await;
    assert_eq!(c.get("/api/budgets/velocity-status").await.body, json!({ "velocityState": [] }));
    let proxy = app.proxy();
    for secret in ["", SECRET] {
        let r = read(
            proxy
                .request(reqwest::Method::GET, &format!("/internal/budget/velocity-state?orgId={org}"))
                .header("X-Internal-Secret", secret)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 404, "{r:?}");
        let r = read(
            proxy
                .request(reqwest::Method::POST, "/internal/budget/invalidate")
                .header("X-Internal-Secret", secret)
                .json(&json!({ "orgId": org, "entityType": "tag", "entityId": "a=b" }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(r.code(), "not_found");
    }
}

#[tokio::test]
async fn openapi_lists_the_budget_and_internal_routes() {
    let app = TestApp::start().await;
    let r = app.control().get("/api/openapi.json").await;
    assert_eq!(r.status, 200, "{r:?}");
    let paths = &r.body["paths"];
    for (path, method) in [
        ("/api/budgets", "get"),
        ("/api/budgets", "post"),
        ("/api/budgets/{id}", "post"),
        ("/api/budgets/{id}", "delete"),
        ("/api/budgets/{id}/sources", "get"),
        ("/api/budgets/status", "get"),
        ("/api/budgets/velocity-status", "get"),
        ("/internal/budget/invalidate", "post"),
        ("/internal/budget/velocity-state", "get"),
    ] {
        assert!(paths[path][method].is_object(), "{method} {path} missing");
    }
}

/// Spend committed after a period boundary but before the sweep counts in the new
/// period: the commit rolls the period itself, and the sweep then has nothing to do.
#[tokio::test]
async fn spend_after_a_period_boundary_counts_in_the_new_period_before_the_sweep() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    crate::support::subscribe_all(&owner).await;
    let (key_id, raw) = create_key(&owner, "sdk").await;
    let sdk = key_client(&app.server.control, &raw);
    let budget = upsert_ok(
        &owner,
        json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": 1_000_000,
            "policy": "warn", "resetInterval": "daily" }),
    )
    .await;
    assert_eq!(sdk.post("/api/cost-events", crate::support::event(300)).await.status, 201);
    // The day ends: the period started a day earlier than it did.
    app.exec_sql("UPDATE budgets SET current_period_start = current_period_start - 86400000").await;
    assert_eq!(sdk.post("/api/cost-events", crate::support::event(50)).await.status, 201);
    let listed = owner.get("/api/budgets").await;
    let row =
        listed.body["data"].as_array().unwrap().iter().find(|b| b["id"] == budget["id"]).unwrap().clone();
    assert_eq!(row["spendMicrodollars"], 50, "only the new period's spend: {row}");
    assert!(ms(&row["currentPeriodStart"]) > ms(&budget["currentPeriodStart"]) - 86_400_000, "{row}");
    assert_eq!(app.outbox_count("budget.reset").await, 1);
}
