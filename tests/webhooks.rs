//! Webhook endpoints: the API and its rules, and delivery to a local receiver that
//! checks signatures on its own (retries, a dead endpoint beside a healthy one,
//! rotation overlap, SSRF refusals, resumption after a kill).

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::receiver::{dead_url, Received, Receiver};
use crate::support::{create_key, event, key_client, Client, TestApp};

/// Fast retries, polls and leases, so the suite needs no long waits.
fn fast() -> Vec<(&'static str, String)> {
    vec![
        ("SPENDGATE_WEBHOOK_RETRY_BASE_MS", "100".into()),
        ("SPENDGATE_WEBHOOK_RETRY_MAX_MS", "400".into()),
        ("SPENDGATE_WEBHOOK_POLL_MS", "100".into()),
        ("SPENDGATE_WEBHOOK_LEASE_MS", "1000".into()),
        ("SPENDGATE_WEBHOOK_TIMEOUT_MS", "3000".into()),
    ]
}

async fn create(c: &Client, body: Value) -> Value {
    let r = c.post("/api/webhooks", body).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.body["data"].clone()
}

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

fn secret(v: &Value) -> String {
    v["signingSecret"].as_str().unwrap().to_owned()
}

async fn ingest(app: &TestApp, owner: &Client, n: usize) {
    let (_, raw) = create_key(owner, &format!("k{n}")).await;
    let k = key_client(&app.server.control, &raw);
    for i in 0..n {
        let r = k.post("/api/cost-events", event(100 + i64::try_from(i).unwrap())).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
}

/// The endpoint's deliveries once none is pending any more.
async fn settled_deliveries(c: &Client, endpoint: &str, n: usize) -> Vec<Value> {
    for _ in 0..300 {
        let r = c.get(&format!("/api/webhooks/{endpoint}/deliveries")).await;
        assert_eq!(r.status, 200, "{r:?}");
        let list = r.body["data"].as_array().unwrap().clone();
        if list.len() >= n && list.iter().all(|d| d["status"] != "pending") {
            return list;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("deliveries of {endpoint} never settled");
}

#[tokio::test]
async fn create_list_update_delete_and_every_rule() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let hook = create(&c, json!({ "url": "https://hooks.example.com/a", "description": "ops" })).await;
    assert!(id(&hook).starts_with("svc_wh_"));
    let s = secret(&hook);
    assert!(s.starts_with("whsec_") && s.len() == 70 && s[6..].bytes().all(|b| b.is_ascii_hexdigit()), "{s}");
    assert_eq!(hook["eventTypes"], json!([]));
    assert_eq!(hook["enabled"], true);
    assert_eq!(hook["apiVersion"], "2026-04-01");
    assert_eq!(hook["payloadMode"], "thin", "Free tier defaults to thin");
    assert_eq!(hook["description"], "ops");
    assert!(hook["createdAt"].as_str().unwrap().ends_with('Z'));

    let r = c.get("/api/webhooks").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert!(r.body["data"][0].get("signingSecret").is_none() && !r.text.contains(&s));

    let path = format!("/api/webhooks/{}", id(&hook));
    let r = c
        .patch(&path, json!({ "description": null, "enabled": false, "eventTypes": ["budget.exceeded"], "payloadMode": "full" }))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = &r.body["data"];
    assert_eq!((d["description"].clone(), d["enabled"].clone()), (Value::Null, json!(false)));
    assert_eq!(
        (d["eventTypes"].clone(), d["payloadMode"].clone()),
        (json!(["budget.exceeded"]), json!("full"))
    );

    // Validation: every rule reports its field and changes nothing.
    for (body, field) in [
        (json!({}), "url"),
        (json!({ "url": "ftp://hooks.example.com" }), "url"),
        (json!({ "url": "https://10.1.2.3/x" }), "url"),
        (json!({ "url": "https://169.254.169.254/latest/meta-data" }), "url"),
        (json!({ "url": "https://printer.local/x" }), "url"),
        (json!({ "url": "https://[2001:db8::1]/x" }), "url"),
        (json!({ "url": "https://h.example.com", "eventTypes": ["nope"] }), "eventTypes"),
        (json!({ "url": "https://h.example.com", "description": "d".repeat(201) }), "description"),
        (json!({ "url": "https://h.example.com", "payloadMode": "fat" }), "payloadMode"),
    ] {
        let r = c.post("/api/webhooks", body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert!(r.text.contains(field), "{body}: {r:?}");
    }
    let r = c.patch(&path, json!({})).await;
    assert_eq!(r.code(), "validation_error", "{r:?}");
    let r = c.patch(&path, json!({ "url": "https://192.168.0.1/x" })).await;
    assert_eq!(r.code(), "validation_error", "{r:?}");
    assert_eq!(c.get("/api/webhooks").await.body["data"][0]["url"], "https://hooks.example.com/a");

    // Free tier: two endpoints.
    create(&c, json!({ "url": "https://hooks.example.com/b" })).await;
    let r = c.post("/api/webhooks", json!({ "url": "https://hooks.example.com/c" })).await;
    assert_eq!((r.status, r.code()), (409, "limit_exceeded"), "{r:?}");

    // Unknown, malformed and other organizations' ids are 404; viewers only read.
    for bad in ["/api/webhooks/svc_wh_nope", "/api/webhooks/svc_wh_00000000-0000-0000-0000-000000000000"] {
        assert_eq!(c.patch(bad, json!({ "enabled": true })).await.status, 404);
        assert_eq!(c.delete(bad).await.status, 404);
        assert_eq!(c.post_empty(&format!("{bad}/test")).await.status, 404);
        assert_eq!(c.post_empty(&format!("{bad}/rotate-secret")).await.status, 404);
        assert_eq!(c.get(&format!("{bad}/deliveries")).await.status, 404);
    }
    let viewer = app.user_in_org("v@example.com", "owner@example.com's organization", "viewer").await;
    assert_eq!(viewer.get("/api/webhooks").await.status, 200);
    assert_eq!(viewer.get(&format!("{path}/deliveries")).await.status, 200);
    assert_eq!(viewer.post("/api/webhooks", json!({ "url": "https://h.example.com" })).await.status, 403);
    assert_eq!(viewer.delete(&path).await.status, 403);
    let stranger = app.user_in_org("s@example.com", "elsewhere", "owner").await;
    assert_eq!(stranger.delete(&path).await.status, 404);
    assert_eq!(stranger.get("/api/webhooks").await.body["data"], json!([]));

    let r = c.delete(&path).await;
    assert_eq!((r.status, r.body.clone()), (200, json!({ "success": true })), "{r:?}");
    assert_eq!(c.delete(&path).await.status, 404);
    assert_eq!(c.get("/api/webhooks").await.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(app.control().get("/api/webhooks").await.status, 401);
}

#[tokio::test]
async fn a_cost_event_is_delivered_signed_in_full_and_thin_and_only_to_subscribers() {
    let app = TestApp::start_with(&fast()).await;
    let c = app.owner().await;
    // Nobody subscribes yet: nothing is queued for nobody.
    ingest(&app, &c, 1).await;
    assert_eq!(app.query_n("SELECT COUNT(*) AS n FROM event_outbox").await, 0);

    let full_rx = Receiver::start();
    let thin_rx = Receiver::start();
    let full = create(
        &c,
        json!({ "url": full_rx.url, "payloadMode": "full", "eventTypes": ["cost_event.created"] }),
    )
    .await;
    let thin =
        create(&c, json!({ "url": thin_rx.url, "eventTypes": ["cost_event.created", "budget.exceeded"] }))
            .await;
    let (_, raw) = create_key(&c, "agent").await;
    let k = key_client(&app.server.control, &raw);
    let r = k
        .post(
            "/api/cost-events",
            json!({ "provider": "openai", "model": "gpt-4o", "inputTokens": 7,
            "outputTokens": 3, "costMicrodollars": 1234, "sessionId": "s-1", "tags": { "team": "core" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let cost_event_id = r.body["data"]["id"].as_str().unwrap().to_owned();

    let got = full_rx.wait_for_events(1).await;
    let call = &got[0];
    assert!(call.signed_with(&secret(&full)), "{:?}", call.header("x-service-signature"));
    assert!(!call.signed_with(&secret(&thin)));
    assert_eq!(call.header("user-agent"), Some("Service-Webhooks/1.0"));
    assert_eq!(call.header("content-type"), Some("application/json"));
    assert_eq!(
        call.header("x-service-webhook-timestamp"),
        call.timestamp().map(|t| t.to_string()).as_deref()
    );
    let body = call.json();
    assert_eq!(call.header("x-service-webhook-id"), body["id"].as_str());
    assert!(body["id"].as_str().unwrap().starts_with("evt_"));
    assert_eq!(body["type"], "cost_event.created");
    assert_eq!(body["api_version"], "2026-04-01");
    assert!(body["created_at"].is_i64());
    let object = &body["data"]["object"];
    for (field, want) in [
        ("cost_microdollars", json!(1234)),
        ("input_tokens", json!(7)),
        ("output_tokens", json!(3)),
        ("provider", json!("openai")),
        ("model", json!("gpt-4o")),
        ("session_id", json!("s-1")),
        ("tags", json!({ "team": "core" })),
        ("tool_definition_tokens", json!(0)),
    ] {
        assert_eq!(object[field], want, "{field}: {object}");
    }
    for field in [
        "request_id",
        "event_type",
        "cached_input_tokens",
        "duration_ms",
        "upstream_duration_ms",
        "trace_id",
        "tool_name",
        "tool_server",
        "tool_calls_requested",
        "api_key_id",
        "source",
        "created_at",
    ] {
        assert!(object.get(field).is_some(), "{field} missing: {object}");
    }

    let got = thin_rx.wait_for_events(1).await;
    assert!(got[0].signed_with(&secret(&thin)));
    let body = got[0].json();
    assert!(body.get("data").is_none(), "{body}");
    assert_eq!(body["related_object"]["id"], cost_event_id);
    assert_eq!(body["related_object"]["type"], "cost_event");
    assert!(body["related_object"]["url"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/api/cost-events/{cost_event_id}")));

    let list = settled_deliveries(&c, &id(&full), 1).await;
    let d = &list[0];
    assert!(d["id"].as_str().unwrap().starts_with("svc_del_"));
    assert_eq!(
        (d["status"].clone(), d["attempts"].clone(), d["responseStatus"].clone()),
        (json!("delivered"), json!(1), json!(200))
    );
    assert_eq!(d["eventType"], "cost_event.created");
    assert_eq!(d["eventId"], full_rx.received()[0].json()["id"]);
    assert!(d["lastAttemptAt"].as_str().is_some());

    // An endpoint that subscribes elsewhere gets nothing; a disabled one neither.
    let r =
        c.patch(&format!("/api/webhooks/{}", id(&full)), json!({ "eventTypes": ["budget.exceeded"] })).await;
    assert_eq!(r.status, 200);
    let r = c.patch(&format!("/api/webhooks/{}", id(&thin)), json!({ "enabled": false })).await;
    assert_eq!(r.status, 200);
    let outbox_before = app.query_n("SELECT COUNT(*) AS n FROM event_outbox").await;
    ingest(&app, &c, 2).await;
    assert_eq!(app.query_n("SELECT COUNT(*) AS n FROM event_outbox").await, outbox_before);
    // A test ping goes out regardless and is signed the same way.
    let r = c.post_empty(&format!("/api/webhooks/{}/test", id(&full))).await;
    assert_eq!(r.body, json!({ "success": true, "statusCode": 200, "responsePreview": "thanks" }), "{r:?}");
    let pings: Vec<Received> =
        full_rx.received().into_iter().filter(|r| r.json()["type"] == "test.ping").collect();
    assert_eq!(pings.len(), 1);
    assert!(pings[0].signed_with(&secret(&full)));
    assert!(pings[0].json()["data"]["object"]["message"].is_string());
    assert_eq!(full_rx.received().len(), 2, "no cost event went to a budget-only endpoint");
}

#[tokio::test]
async fn failures_are_retried_with_backoff_and_4xx_is_final() {
    let app = TestApp::start_with(&fast()).await;
    let c = app.owner().await;
    let rx = Receiver::start();
    rx.fail_next(3);
    let hook = create(&c, json!({ "url": rx.url })).await;
    ingest(&app, &c, 1).await;
    let got = rx.wait_until("a success after 3 failures", |r| r.len() >= 4).await;
    assert!(got.iter().all(|r| r.signed_with(&secret(&hook))));
    assert_eq!(
        got.iter().map(Received::event_id).collect::<HashSet<_>>().len(),
        1,
        "one event, four attempts"
    );
    let list = settled_deliveries(&c, &id(&hook), 1).await;
    assert_eq!((list[0]["status"].clone(), list[0]["attempts"].clone()), (json!("delivered"), json!(4)));
    // Backoff: attempt n+1 waits at least half of 100 ms · 2^(n-1) (jitter is in the
    // upper half), so the gaps are at least 50, 100 and 200 ms (less 2 ms of clock rounding).
    let gaps: Vec<Duration> = got.windows(2).map(|w| w[1].at - w[0].at).collect();
    for (i, gap) in gaps.iter().enumerate() {
        assert!(*gap >= Duration::from_millis((50 << i) - 2), "gap {i}: {gaps:?}");
    }

    rx.set_status(404);
    ingest(&app, &c, 1).await;
    let list = settled_deliveries(&c, &id(&hook), 2).await;
    let newest = &list[0];
    assert_eq!(
        (newest["status"].clone(), newest["attempts"].clone(), newest["responseStatus"].clone()),
        (json!("failed"), json!(1), json!(404)),
        "{list:?}"
    );
    let hooks = c.get("/api/webhooks").await;
    assert!(hooks.body["data"][0]["failingSince"].is_string(), "{hooks:?}");
}

#[tokio::test]
async fn a_dead_endpoint_never_delays_a_healthy_one() {
    let app = TestApp::start_with(&fast()).await;
    let c = app.owner().await;
    let rx = Receiver::start();
    let dead = create(&c, json!({ "url": dead_url() })).await;
    let healthy = create(&c, json!({ "url": rx.url })).await;
    ingest(&app, &c, 20).await;
    let got = rx.wait_for_events(20).await;
    assert!(got.iter().all(|r| r.signed_with(&secret(&healthy))));
    // The dead endpoint is retried (its deliveries stay pending) and reported failing.
    let mut dead_view = Value::Null;
    for _ in 0..100 {
        let hooks = c.get("/api/webhooks").await.body["data"].clone();
        dead_view = hooks.as_array().unwrap().iter().find(|h| h["id"] == dead["id"]).unwrap().clone();
        if dead_view["failingSince"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(dead_view["failingSince"].is_string(), "{dead_view}");
    let r = c.get(&format!("/api/webhooks/{}/deliveries", id(&dead))).await;
    let list = r.body["data"].as_array().unwrap();
    assert_eq!(list.len(), 20, "{r:?}");
    assert!(list.iter().all(|d| d["status"] == "pending" && d["responseStatus"].is_null()), "{r:?}");
    assert!(list.iter().any(|d| d["attempts"].as_i64().unwrap() >= 1), "{r:?}");
    let hooks = c.get("/api/webhooks").await.body["data"].clone();
    let healthy_view = hooks.as_array().unwrap().iter().find(|h| h["id"] == healthy["id"]).unwrap().clone();
    assert!(healthy_view["failingSince"].is_null(), "{healthy_view}");
}

#[tokio::test]
async fn after_a_rotation_both_secrets_sign_for_the_overlap() {
    let app = TestApp::start_with(&fast()).await;
    let c = app.owner().await;
    let rx = Receiver::start();
    let hook = create(&c, json!({ "url": rx.url })).await;
    let old = secret(&hook);
    let r = c.post_empty(&format!("/api/webhooks/{}/rotate-secret", id(&hook))).await;
    assert_eq!(r.status, 200, "{r:?}");
    let new = r.body["data"]["signingSecret"].as_str().unwrap().to_owned();
    assert!(new.starts_with("whsec_") && new != old);
    assert!(r.body["data"]["secretRotatedAt"].as_str().unwrap().ends_with('Z'));
    ingest(&app, &c, 1).await;
    let got = rx.wait_for_events(1).await;
    assert_eq!(got[0].signatures().len(), 2, "{:?}", got[0].header("x-service-signature"));
    assert!(got[0].signed_with(&new) && got[0].signed_with(&old));
    assert!(!got[0].signed_with("whsec_other"));
    // The overlap ends 24 h after the rotation: past it only the new secret signs.
    app.exec_sql("UPDATE webhook_endpoints SET previous_secret_expires_at = 1").await;
    let r = c.post_empty(&format!("/api/webhooks/{}/test", id(&hook))).await;
    assert_eq!(r.body["success"], true, "{r:?}");
    let ping = rx.received().into_iter().find(|r| r.json()["type"] == "test.ping").unwrap();
    assert_eq!(ping.signatures().len(), 1);
    assert!(ping.signed_with(&new) && !ping.signed_with(&old));
}

/// A signed-in owner outside development mode: the session cookie is `Secure`, which
/// the cookie jar will not send over plain HTTP, so it travels as a default header.
async fn cookie_client(app: &TestApp) -> Client {
    let r = app
        .control()
        .post(
            "/api/auth/signup",
            json!({ "email": "owner@example.com", "password": crate::support::PASSWORD }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let cookie = r.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("cookie", cookie.parse().unwrap());
    let http = reqwest::Client::builder().default_headers(headers).build().unwrap();
    Client { http, base: app.server.control.clone() }
}

/// A name other than `localhost` that this machine resolves to a loopback address.
fn loopback_name() -> String {
    use std::net::ToSocketAddrs;
    let hostname = std::fs::read_to_string("/etc/hostname").unwrap_or_default().trim().to_owned();
    let found = [hostname.as_str(), "vm", "runsc", "ip6-localhost"]
        .into_iter()
        .filter(|n| !n.is_empty() && *n != "localhost")
        .find(|n| (*n, 443).to_socket_addrs().is_ok_and(|mut a| a.all(|a| a.ip().is_loopback())))
        .expect("no name besides localhost resolves to loopback here; add one to /etc/hosts")
        .to_owned();
    found
}

#[tokio::test]
async fn outside_dev_mode_private_targets_are_refused_at_create_and_at_send() {
    let mut env = fast();
    env.push(("SPENDGATE_DEV", "0".into()));
    let app = TestApp::start_with(&env).await;
    let c = cookie_client(&app).await;
    let name = loopback_name();
    for url in [
        "http://hooks.example.com/x".to_owned(),
        "https://127.0.0.1/x".to_owned(),
        "https://localhost/x".to_owned(),
        format!("https://{name}/x"),
    ] {
        let r = c.post("/api/webhooks", json!({ "url": url })).await;
        assert_eq!(r.code(), "validation_error", "{url}: {r:?}");
    }
    // A name that resolved somewhere public at create time and resolves to loopback
    // now: the send checks the address it would connect to and never connects.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let hook = create(&c, json!({ "url": "https://hooks.example.com/x" })).await;
    app.exec_sql(&format!("UPDATE webhook_endpoints SET url = 'https://{name}:{port}/x'")).await;
    let r = c.post_empty(&format!("/api/webhooks/{}/test", id(&hook))).await;
    assert_eq!(
        (r.status, r.body["success"].clone(), r.body["statusCode"].clone()),
        (200, json!(false), Value::Null),
        "{r:?}"
    );
    assert!(listener.accept().is_err(), "a refused target must never be connected to");
    // Deliveries are held to the same rule.
    ingest(&app, &c, 1).await;
    let attempted = "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE attempts >= 2";
    for _ in 0..300 {
        if app.query_n(attempted).await > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(app.query_n(attempted).await, 1, "the delivery was attempted (and refused) twice");
    assert!(listener.accept().is_err(), "a refused target must never be connected to");
    let r = c.get(&format!("/api/webhooks/{}/deliveries", id(&hook))).await;
    assert!(r.body["data"].as_array().unwrap().iter().all(|d| d["status"] != "delivered"), "{r:?}");
}

#[tokio::test]
async fn delivery_resumes_after_a_kill_with_nothing_lost() {
    let app_env = fast();
    let mut app = TestApp::start_with(&app_env).await;
    let c = app.owner().await;
    let rx = Receiver::start();
    rx.set_delay(Duration::from_millis(300));
    let hook = create(&c, json!({ "url": rx.url })).await;
    ingest(&app, &c, 30).await;
    rx.wait_until("the first calls", |r| r.len() >= 3).await;
    app.restart();
    let c = app.login("owner@example.com").await;
    rx.set_delay(Duration::ZERO);
    let got = rx.wait_for_events(30).await;
    assert!(got.iter().all(|r| r.signed_with(&secret(&hook))));
    let list = settled_deliveries(&c, &id(&hook), 30).await;
    assert!(list.iter().all(|d| d["status"] == "delivered"), "{list:?}");
    // Duplicates only of calls in flight at the kill (at most 8 per endpoint).
    let unique = got.iter().map(Received::event_id).collect::<HashSet<_>>().len();
    assert_eq!(unique, 30);
    assert!(got.len() - unique <= 8, "{} calls for 30 events", got.len());
}

/// Two instances on one PostgreSQL database: events committed by either are delivered
/// by exactly one of them (the lease holder), each once.
#[tokio::test]
async fn two_instances_deliver_each_event_once() {
    if !crate::support::backend_is_postgres() {
        return;
    }
    // A long lease: nothing here may hand the endpoint over, so no call is repeated.
    let env = vec![("SPENDGATE_WEBHOOK_POLL_MS", "100".to_owned())];
    let app = TestApp::start_with(&env).await;
    let second = crate::support::Server::start(&app.db.url, &env);
    let c = app.owner().await;
    let rx = Receiver::start();
    let hook = create(&c, json!({ "url": rx.url })).await;
    let (_, raw) = create_key(&c, "both").await;
    for base in [&app.server.control, &second.control] {
        let k = key_client(base, &raw);
        for i in 0..10 {
            assert_eq!(k.post("/api/cost-events", event(10 + i)).await.status, 201);
        }
    }
    let got = rx.wait_for_events(20).await;
    settled_deliveries(&c, &id(&hook), 20).await;
    assert_eq!(rx.received().len(), 20, "each event sent once: {}", got.len());
    assert_eq!(app.query_n("SELECT COUNT(*) AS n FROM webhook_leases").await, 1);
}
