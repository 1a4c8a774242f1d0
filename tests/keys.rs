//! API keys: create, list, update, revoke, introspect, the tier limit, roles, rate
//! limiting and organization isolation.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{read, Client, Resp, TestApp};

const OWNER_ORG: &str = "owner@example.com's organization";

async fn create(c: &Client, body: Value) -> Resp {
    c.post("/api/keys", body).await
}

async fn create_ok(c: &Client, name: &str) -> Value {
    let r = create(c, json!({ "name": name })).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.body["data"].clone()
}

async fn introspect(c: &Client, raw: &str) -> Resp {
    c.get_with_key("/api/auth/introspect", raw).await
}

fn raw_key(key: &Value) -> &str {
    key["rawKey"].as_str().unwrap()
}

fn id(key: &Value) -> &str {
    key["id"].as_str().unwrap()
}

#[tokio::test]
async fn create_returns_the_raw_key_once_and_list_shows_the_rest() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let r = create(
        &c,
        json!({
            "name": "  ci  ",
            "defaultTags": { "team": "core" },
            "allowedModels": ["gpt-4o-mini"],
            "allowedProviders": ["openai", "google"],
            "allowedCustomers": [],
        }),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    let key = &r.body["data"];
    let raw = raw_key(key);
    // `svc_live_sk_` (12) + 32 hex; the spec's "43 total" miscounts its own prefix.
    assert_eq!(raw.len(), 44);
    assert!(raw.starts_with("svc_live_sk_"));
    assert!(raw[12..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{raw}");
    assert_eq!(key["keyPrefix"], raw[..16]);
    assert!(id(key).starts_with("svc_key_"));
    assert_eq!(key["name"], "ci");
    assert_eq!(key["defaultTags"], json!({ "team": "core" }));
    assert_eq!(key["allowedModels"], json!(["gpt-4o-mini"]));
    assert_eq!(key["allowedProviders"], json!(["openai", "google"]));
    assert_eq!(key["allowedCustomers"], json!([]));
    assert_eq!(key["requireCustomerId"], false);
    assert!(key["createdAt"].as_str().unwrap().ends_with('Z'));
    assert!(key.get("lastUsedAt").is_none(), "{r:?}");

    let r = c.get("/api/keys").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["cursor"], Value::Null);
    let listed = r.body["data"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], key["id"]);
    assert_eq!(listed[0]["keyPrefix"], key["keyPrefix"]);
    assert_eq!(listed[0]["allowedCustomers"], json!([]));
    assert_eq!(listed[0]["lastUsedAt"], Value::Null);
    assert!(listed[0].get("rawKey").is_none());
    assert!(!r.text.contains(raw));

    // Defaults: unrestricted lists, no tags, requireCustomerId false.
    let plain = create_ok(&c, "plain").await;
    assert_eq!(plain["defaultTags"], json!({}));
    assert_eq!(plain["allowedModels"], Value::Null);
    assert_eq!(plain["allowedProviders"], Value::Null);
    assert_eq!(plain["allowedCustomers"], Value::Null);
    let r = create(&c, json!({ "name": "mandated", "requireCustomerId": true })).await;
    assert_eq!(r.body["data"]["requireCustomerId"], true);
}

#[tokio::test]
async fn introspect_names_the_user_and_reports_rate_limit_and_version() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let me = c.get("/api/auth/session").await.body["data"]["user"]["id"].clone();
    let key = create_ok(&c, "agent").await;
    let r = introspect(&app.control(), raw_key(&key)).await;
    assert_eq!(r.status, 200, "{r:?}");
    // Test servers run in development mode.
    assert_eq!(r.body, json!({ "userId": me, "keyId": "dev", "dev": true }));
    assert_eq!(r.header("service-version"), Some("2026-04-01"));
    assert_eq!(r.header("x-ratelimit-limit"), Some("3000"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2999"));
    assert!(r.header("x-ratelimit-reset").unwrap().parse::<u64>().is_ok(), "{:?}", r.headers);

    // The use is recorded in the background.
    let mut last_used = Value::Null;
    for _ in 0..50 {
        last_used = c.get("/api/keys").await.body["data"][0]["lastUsedAt"].clone();
        if !last_used.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last_used.as_str().is_some_and(|s| s.ends_with('Z')), "{last_used}");
}

#[tokio::test]
async fn introspect_outside_development_mode_shows_the_key_id() {
    let app = TestApp::start_with(&[("SPENDGATE_DEV", "0".into())]).await;
    // Outside development mode the session cookie is Secure, which the cookie jar
    // will not send over plain HTTP: carry it by hand.
    let c = app.control();
    let r = c
        .post(
            "/api/auth/signup",
            json!({ "email": "owner@example.com", "password": crate::support::PASSWORD }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let user_id = r.body["data"]["user"]["id"].clone();
    let cookie = r.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
    let r = read(
        c.request(reqwest::Method::POST, "/api/keys")
            .header("Cookie", &cookie)
            .json(&json!({ "name": "prod" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    let key = &r.body["data"];
    let r = introspect(&c, raw_key(key)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "userId": user_id, "keyId": key["id"] }));
}

#[tokio::test]
async fn introspect_refuses_missing_malformed_and_unknown_keys() {
    let app = TestApp::start().await;
    let c = app.control();
    let r = c.get("/api/auth/introspect").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.code(), "authentication_required");
    assert!(r.header("service-version").is_some());
    let unknown = format!("svc_live_sk_{}", "0".repeat(32));
    for raw in ["", "nope", "svc_live_sk_ABCDEF", &unknown, &unknown, &unknown.to_uppercase()] {
        let r = introspect(&c, raw).await;
        assert_eq!(r.status, 401, "{raw}: {r:?}");
        assert_eq!(r.code(), "authentication_required");
    }
}

#[tokio::test]
async fn list_pages_newest_first_with_a_cursor() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    for i in 0..5 {
        create_ok(&c, &format!("key-{i}")).await;
    }
    let mut seen: Vec<Value> = Vec::new();
    let mut path = "/api/keys?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let r = c.get(&path).await;
        assert_eq!(r.status, 200, "{r:?}");
        pages += 1;
        let data = r.body["data"].as_array().unwrap();
        assert!(data.len() <= 2);
        seen.extend(data.iter().cloned());
        if r.body["cursor"].is_null() {
            break;
        }
        assert!(r.body["cursor"]["createdAt"].is_string() && r.body["cursor"]["id"].is_string(), "{r:?}");
        // The cursor names the last item by its public id, as the item shows it.
        assert_eq!(r.body["cursor"]["id"], data.last().unwrap()["id"], "{r:?}");
        let cursor = serde_json::to_string(&r.body["cursor"]).unwrap();
        path = format!("/api/keys?limit=2&cursor={}", url_encode(&cursor));
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 5);
    let mut names: Vec<&str> = seen.iter().map(|k| k["name"].as_str().unwrap()).collect();
    let created: Vec<&str> = seen.iter().map(|k| k["createdAt"].as_str().unwrap()).collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "{created:?}");
    names.sort_unstable();
    assert_eq!(names, ["key-0", "key-1", "key-2", "key-3", "key-4"]);

    // The default page holds all five.
    assert_eq!(c.get("/api/keys").await.body["data"].as_array().unwrap().len(), 5);
    for bad in ["limit=0", "limit=101", "limit=abc", "cursor=%7B", "cursor=%7B%22createdAt%22%3A1%7D"] {
        let r = c.get(&format!("/api/keys?{bad}")).await;
        assert_eq!(r.code(), "validation_error", "{bad}: {r:?}");
    }
    assert_eq!(c.get("/api/keys?limit=100").await.status, 200);
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn create_validates_every_field() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let cases: Vec<(Value, Value)> = vec![
        (json!({ "name": "" }), json!(["name"])),
        (json!({ "name": "    " }), json!(["name"])),
        (json!({ "name": "x".repeat(51) }), json!(["name"])),
        (json!({ "name": "k", "defaultTags": { "bad key": "v" } }), json!(["defaultTags", "bad key"])),
        (json!({ "name": "k", "defaultTags": { "_svc_x": "v" } }), json!(["defaultTags", "_svc_x"])),
        (json!({ "name": "k", "defaultTags": { "k": "v".repeat(257) } }), json!(["defaultTags", "k"])),
        (json!({ "name": "k", "defaultTags": { "k": 5 } }), json!(["defaultTags", "k"])),
        (
            json!({ "name": "k", "defaultTags": (0..11).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>() }),
            json!(["defaultTags"]),
        ),
        (json!({ "name": "k", "allowedModels": vec!["m"; 51] }), json!(["allowedModels"])),
        (json!({ "name": "k", "allowedModels": ["ok", ""] }), json!(["allowedModels", "1"])),
        (json!({ "name": "k", "allowedModels": ["x".repeat(201)] }), json!(["allowedModels", "0"])),
        (json!({ "name": "k", "allowedProviders": ["openai", "watsonx"] }), json!(["allowedProviders", "1"])),
        (json!({ "name": "k", "allowedProviders": ["OpenAI"] }), json!(["allowedProviders", "0"])),
        (json!({ "name": "k", "allowedCustomers": vec!["c"; 101] }), json!(["allowedCustomers"])),
        (json!({ "name": "k", "allowedCustomers": ["acme", "a b"] }), json!(["allowedCustomers", "1"])),
        (json!({ "name": "k", "allowedCustomers": ["c".repeat(257)] }), json!(["allowedCustomers", "0"])),
        (json!({ "name": "k", "requireCustomerId": "yes" }), json!(["requireCustomerId"])),
        (json!({ "name": "k", "apiVersion": "April" }), json!(["apiVersion"])),
        (json!({ "name": 5 }), json!(["name"])),
    ];
    for (body, path) in cases {
        let r = create(&c, body.clone()).await;
        assert_eq!(r.issue_paths(), vec![path], "{body}: {r:?}");
    }
    // Missing name; several problems are reported together.
    let r = create(&c, json!({})).await;
    assert_eq!(r.code(), "validation_error");
    let r = create(&c, json!({ "name": "", "allowedProviders": ["x"], "allowedModels": [""] })).await;
    assert_eq!(r.issue_paths().len(), 3, "{r:?}");
    let r = c.post_raw("/api/keys", "application/json", "{").await;
    assert_eq!(r.code(), "invalid_json", "{r:?}");

    // The limits themselves are accepted; the name is stored trimmed.
    let r = create(
        &c,
        json!({
            "name": format!("  {}  ", "x".repeat(50)),
            "defaultTags": (0..10).map(|i| (format!("k{i}"), json!("v".repeat(256)))).collect::<serde_json::Map<_, _>>(),
            "allowedModels": vec!["m".repeat(200); 50],
            "allowedProviders": ["openai", "anthropic", "google"],
            "allowedCustomers": vec!["c".repeat(256); 100],
            "apiVersion": "2026-04-01",
        }),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["data"]["name"], "x".repeat(50));
    // Nothing invalid was stored.
    assert_eq!(c.get("/api/keys").await.body["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn patch_changes_settings_and_validates() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let key = create(&c, json!({ "name": "k", "allowedModels": ["a"], "allowedCustomers": ["acme"] })).await;
    let key = &key.body["data"];
    let path = format!("/api/keys/{}", id(key));

    let r = c
        .patch(
            &path,
            json!({
                "name": " renamed ",
                "defaultTags": { "env": "prod" },
                "allowedProviders": ["anthropic"],
                "allowedModels": null,
                "requireCustomerId": true,
            }),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = &r.body["data"];
    assert_eq!(d["id"], key["id"]);
    assert_eq!(d["name"], "renamed");
    assert_eq!(d["defaultTags"], json!({ "env": "prod" }));
    assert_eq!(d["allowedProviders"], json!(["anthropic"]));
    assert_eq!(d["allowedModels"], Value::Null);
    assert_eq!(d["allowedCustomers"], json!(["acme"]));
    assert_eq!(d["requireCustomerId"], true);
    assert_eq!(d["keyPrefix"], key["keyPrefix"]);
    assert_eq!(d["createdAt"], key["createdAt"]);
    assert!(d.get("lastUsedAt").is_some() && d.get("rawKey").is_none(), "{r:?}");

    // Visible at once in the list; null clears, [] allows nothing.
    let r = c.patch(&path, json!({ "allowedCustomers": null, "allowedProviders": [] })).await;
    assert_eq!(r.status, 200, "{r:?}");
    let listed = &c.get("/api/keys").await.body["data"][0];
    assert_eq!(listed["defaultTags"], json!({ "env": "prod" }));
    assert_eq!(listed["allowedCustomers"], Value::Null);
    assert_eq!(listed["allowedProviders"], json!([]));
    assert_eq!(listed["name"], "renamed");

    for (body, expected) in [
        (json!({}), json!([])),
        (json!({ "unknown": 1 }), json!([])),
        (json!({ "name": null }), json!(["name"])),
        (json!({ "name": "" }), json!(["name"])),
        (json!({ "name": "x".repeat(51) }), json!(["name"])),
        (json!({ "defaultTags": null }), json!(["defaultTags"])),
        (json!({ "defaultTags": { "_svc_internal": "x" } }), json!(["defaultTags", "_svc_internal"])),
        (json!({ "allowedModels": vec!["m"; 51] }), json!(["allowedModels"])),
        (json!({ "allowedProviders": ["watsonx"] }), json!(["allowedProviders", "0"])),
        (json!({ "allowedCustomers": ["no spaces"] }), json!(["allowedCustomers", "0"])),
        (json!({ "requireCustomerId": null }), json!(["requireCustomerId"])),
    ] {
        let r = c.patch(&path, body.clone()).await;
        assert_eq!(r.issue_paths(), vec![expected], "{body}: {r:?}");
    }
    // The failed updates changed nothing.
    assert_eq!(c.get("/api/keys").await.body["data"][0]["name"], "renamed");

    let missing = format!("/api/keys/svc_key_{}", uuid::Uuid::new_v4());
    let bare = format!("/api/keys/{}", id(key).trim_start_matches("svc_key_"));
    for p in [missing.as_str(), "/api/keys/svc_key_nope", "/api/keys/nope", bare.as_str()] {
        let r = c.patch(p, json!({ "name": "x" })).await;
        assert_eq!(r.status, 404, "{p}: {r:?}");
        assert_eq!(r.code(), "not_found");
        let r = c.delete(p).await;
        assert_eq!(r.status, 404, "{p}: {r:?}");
        assert_eq!(r.code(), "not_found");
    }
}

#[tokio::test]
async fn revoke_stops_the_key_immediately() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let key = create_ok(&c, "doomed").await;
    let keep = create_ok(&c, "kept").await;
    // Fill the validator's cache first, so the revocation has to flush it.
    assert_eq!(introspect(&c, raw_key(&key)).await.status, 200);
    assert_eq!(introspect(&c, raw_key(&key)).await.status, 200);

    let path = format!("/api/keys/{}", id(&key));
    let r = c.delete(&path).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["id"], key["id"]);
    assert!(r.body["data"]["revokedAt"].as_str().unwrap().ends_with('Z'), "{r:?}");

    let r = introspect(&c, raw_key(&key)).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.code(), "authentication_required");
    assert_eq!(introspect(&c, raw_key(&keep)).await.status, 200);

    let listed = c.get("/api/keys").await;
    let ids: Vec<&Value> = listed.body["data"].as_array().unwrap().iter().map(|k| &k["id"]).collect();
    assert_eq!(ids, vec![&keep["id"]]);
    assert_eq!(c.delete(&path).await.status, 404);
    assert_eq!(c.patch(&path, json!({ "name": "back" })).await.status, 404);
}

#[tokio::test]
async fn key_version_setting_applies_and_patches_take_effect_at_once() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let key = create(&c, json!({ "name": "pinned", "apiVersion": "2025-01-01" })).await;
    assert_eq!(key.status, 201, "{key:?}");
    let key = &key.body["data"];
    assert_eq!(key["apiVersion"], "2025-01-01");
    let r = introspect(&c, raw_key(key)).await;
    assert_eq!(r.header("service-version"), Some("2025-01-01"));
    // A request header beats the key setting.
    let r = read(
        c.request(reqwest::Method::GET, "/api/auth/introspect")
            .header("X-Service-Key", raw_key(key))
            .header("Service-Version", "2026-04-01")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.header("service-version"), Some("2026-04-01"));
    // The identity is cached now; a PATCH must flush it.
    let path = format!("/api/keys/{}", id(key));
    assert_eq!(c.patch(&path, json!({ "apiVersion": "2025-06-01" })).await.status, 200);
    assert_eq!(introspect(&c, raw_key(key)).await.header("service-version"), Some("2025-06-01"));
    assert_eq!(c.patch(&path, json!({ "apiVersion": null })).await.status, 200);
    assert_eq!(introspect(&c, raw_key(key)).await.header("service-version"), Some("2026-04-01"));
}

#[tokio::test]
async fn roles_gate_each_operation() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let viewer = app.user_in_org("viewer@example.com", OWNER_ORG, "viewer").await;
    let member = app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    let admin = app.user_in_org("admin@example.com", OWNER_ORG, "admin").await;

    let r = create(&viewer, json!({ "name": "v" })).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.code(), "forbidden");
    assert_eq!(viewer.get("/api/keys").await.status, 200);

    let key = create_ok(&member, "by-member").await;
    let path = format!("/api/keys/{}", id(&key));
    for r in [member.patch(&path, json!({ "name": "x" })).await, member.delete(&path).await] {
        assert_eq!(r.status, 403, "{r:?}");
        assert_eq!(r.code(), "forbidden");
    }
    assert_eq!(viewer.delete(&path).await.status, 403);

    // Everyone in the organization sees the member's key.
    let listed = owner.get("/api/keys").await;
    assert_eq!(listed.body["data"][0]["id"], key["id"]);
    assert_eq!(viewer.get("/api/keys").await.body["data"][0]["id"], key["id"]);

    let r = admin.patch(&path, json!({ "name": "by-admin" })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(admin.delete(&path).await.status, 200);

    let r = app.control().get("/api/keys").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.code(), "authentication_required");
    let r = app.control().post("/api/keys", json!({ "name": "anon" })).await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn keys_of_another_organization_are_invisible() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let other = app.user_in_org("other@example.com", "Other Co", "owner").await;
    let mine = create_ok(&owner, "mine").await;
    let theirs = create_ok(&other, "theirs").await;

    let listed = owner.get("/api/keys").await;
    let ids: Vec<&Value> = listed.body["data"].as_array().unwrap().iter().map(|k| &k["id"]).collect();
    assert_eq!(ids, vec![&mine["id"]]);
    let path = format!("/api/keys/{}", id(&theirs));
    for r in [owner.patch(&path, json!({ "name": "stolen" })).await, owner.delete(&path).await] {
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(r.code(), "not_found");
    }
    // Their key still works and is unchanged.
    assert_eq!(introspect(&owner, raw_key(&theirs)).await.status, 200);
    assert_eq!(other.get("/api/keys").await.body["data"][0]["name"], "theirs");
}

#[tokio::test]
async fn free_tier_allows_ten_active_keys() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    // Concurrent creates cannot overshoot the limit.
    let results = futures_util::future::join_all((0..12).map(|i| {
        let c = c.clone();
        async move { create(&c, json!({ "name": format!("k{i}") })).await }
    }))
    .await;
    let created: Vec<&Resp> = results.iter().filter(|r| r.status == 201).collect();
    let refused: Vec<&Resp> = results.iter().filter(|r| r.status == 409).collect();
    assert_eq!((created.len(), refused.len()), (10, 2), "{results:?}");
    assert!(refused.iter().all(|r| r.code() == "limit_exceeded"));
    let r = create(&c, json!({ "name": "eleventh" })).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.code(), "limit_exceeded");

    // Revoking one frees a slot.
    let victim = created[0].body["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(c.delete(&format!("/api/keys/{victim}")).await.status, 200);
    assert_eq!(create(&c, json!({ "name": "replacement" })).await.status, 201);
    assert_eq!(create(&c, json!({ "name": "one-too-many" })).await.status, 409);
}

#[tokio::test]
async fn pro_tier_has_no_key_limit() {
    let app = TestApp::start_with(&[("SPENDGATE_DEFAULT_PLAN", "pro".into())]).await;
    let c = app.owner().await;
    for i in 0..12 {
        create_ok(&c, &format!("k{i}")).await;
    }
    assert_eq!(c.get("/api/keys").await.body["data"].as_array().unwrap().len(), 12);
}

#[tokio::test]
async fn per_key_rate_limit_answers_429() {
    let app = TestApp::start_with(&[("SPENDGATE_RATE_LIMIT_KEY_PER_MINUTE", "3".into())]).await;
    let c = app.owner().await;
    let key = create_ok(&c, "busy").await;
    let other = create_ok(&c, "quiet").await;
    for remaining in ["2", "1", "0"] {
        let r = introspect(&c, raw_key(&key)).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
        assert_eq!(r.header("x-ratelimit-remaining"), Some(remaining));
    }
    let r = introspect(&c, raw_key(&key)).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.code(), "rate_limit_exceeded");
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    let reset: u64 = r.header("x-ratelimit-reset").unwrap().parse().unwrap();
    assert!((1..=60).contains(&reset), "{reset}");
    assert_eq!(r.header("service-version"), Some("2026-04-01"));
    // The limit is per key.
    assert_eq!(introspect(&c, raw_key(&other)).await.status, 200);
}
