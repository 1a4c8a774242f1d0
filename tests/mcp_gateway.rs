//! The MCP gateway: the organization's MCP servers (`/api/mcp-servers`: shapes, roles,
//! URL rules, header secrets never readable back, conflicts, audit).

use serde_json::{json, Value};

use crate::support::{backend_is_postgres, Client, TestApp};

const PATH: &str = "/api/mcp-servers";
const HEADER_SECRET: &str = "mcp-upstream-token-0123456789";

/// PostgreSQL gets an explicit `secret_key` (generated only for embedded SQLite).
fn env() -> Vec<(&'static str, String)> {
    if backend_is_postgres() {
        vec![("SPENDGATE_SECRET_KEY", "test-secret-key-of-at-least-32-characters".to_owned())]
    } else {
        Vec::new()
    }
}

async fn register(owner: &Client, name: &str, url: &str, headers: Value) -> Value {
    let r = owner.post(PATH, json!({ "name": name, "url": url, "headers": headers })).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.body["data"].clone()
}

#[tokio::test]
async fn servers_are_registered_listed_and_deleted_without_their_header_values() {
    let app = TestApp::start_with(&env()).await;
    let owner = app.owner().await;
    let d = register(
        &owner,
        "search",
        "http://127.0.0.1:9/mcp",
        json!({ "Authorization": format!("Bearer {HEADER_SECRET}"), "X-Team": "a" }),
    )
    .await;
    let id = d["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("svc_mcp_"), "{d}");
    assert_eq!(d["name"], "search");
    assert_eq!(d["url"], "http://127.0.0.1:9/mcp");
    assert_eq!(d["headerNames"], json!(["Authorization", "X-Team"]));
    assert!(d["createdAt"].is_string(), "{d}");
    assert_eq!(d.as_object().unwrap().len(), 5, "{d}");

    let list = owner.get(PATH).await;
    assert_eq!(list.status, 200, "{list:?}");
    assert_eq!(list.body["data"], json!([d]));
    assert!(!list.text.contains(HEADER_SECRET) && !list.text.contains("v1:"), "{}", list.text);

    let r = owner.post(PATH, json!({ "name": "search", "url": "http://127.0.0.1:10/mcp" })).await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{r:?}");

    let org = owner.get("/api/auth/session").await.body["data"]["org"]["name"].as_str().unwrap().to_owned();
    let viewer = app.user_in_org("v@example.com", &org, "viewer").await;
    assert_eq!(viewer.get(PATH).await.status, 200);
    let member = app.user_in_org("m@example.com", &org, "member").await;
    let r = member.post(PATH, json!({ "name": "other", "url": "http://127.0.0.1:9/mcp" })).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    let r = viewer.delete(&format!("{PATH}/{id}")).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    assert_eq!(app.control().get(PATH).await.status, 401);

    // Another organization sees none of it and cannot delete it.
    let other = app.user_in_org("other@example.com", "elsewhere", "owner").await;
    assert_eq!(other.get(PATH).await.body["data"], json!([]));
    assert_eq!(other.delete(&format!("{PATH}/{id}")).await.status, 404);
    register(&other, "search", "http://127.0.0.1:9/mcp", json!(null)).await;

    let r = owner.delete(&format!("{PATH}/{id}")).await;
    assert_eq!((r.status, r.body.clone()), (200, json!({ "data": { "deleted": true } })), "{r:?}");
    assert_eq!(owner.delete(&format!("{PATH}/{id}")).await.status, 404);
    assert_eq!(owner.delete(&format!("{PATH}/nope")).await.status, 404);
    assert_eq!(owner.get(PATH).await.body["data"], json!([]));

    let log = owner.get("/api/audit-log?limit=100").await;
    let actions: Vec<&str> = log.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["resourceType"] == "mcp_server")
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["mcp_server.deleted", "mcp_server.created"], "{log:?}");
    assert!(!log.text.contains(HEADER_SECRET), "{}", log.text);
}

#[tokio::test]
async fn bad_servers_are_refused_and_change_nothing() {
    let app = TestApp::start_with(&env()).await;
    let owner = app.owner().await;
    let many: serde_json::Map<String, Value> = (0..21).map(|i| (format!("X-H{i}"), json!("v"))).collect();
    let cases = [
        (json!({ "name": "Search", "url": "http://127.0.0.1:9/mcp" }), json!(["name"])),
        (json!({ "name": "_x", "url": "http://127.0.0.1:9/mcp" }), json!(["name"])),
        (json!({ "name": "a".repeat(65), "url": "http://127.0.0.1:9/mcp" }), json!(["name"])),
        (json!({ "name": "s", "url": "ftp://example.com/mcp" }), json!(["url"])),
        (json!({ "name": "s", "url": "not a url" }), json!(["url"])),
        (json!({ "name": "s", "url": "http://10.0.0.8/mcp" }), json!(["url"])),
        (json!({ "name": "s", "url": "http://169.254.169.254/mcp" }), json!(["url"])),
        (json!({ "name": "s", "url": "http://127.0.0.1:9/mcp", "headers": many }), json!(["headers"])),
        (
            json!({ "name": "s", "url": "http://127.0.0.1:9/mcp", "headers": { "Mcp-Session-Id": "x" } }),
            json!(["headers", "Mcp-Session-Id"]),
        ),
        (
            json!({ "name": "s", "url": "http://127.0.0.1:9/mcp", "headers": { "X-Key": "" } }),
            json!(["headers", "X-Key"]),
        ),
        (
            json!({ "name": "s", "url": "http://127.0.0.1:9/mcp", "headers": { "X-Key": "a", "x-key": "b" } }),
            json!(["headers", "x-key"]),
        ),
    ];
    for (body, path) in cases {
        let r = owner.post(PATH, body.clone()).await;
        assert_eq!((r.status, r.code()), (400, "validation_error"), "{body}: {r:?}");
        assert!(r.issue_paths().contains(&path), "{body}: {r:?}");
    }
    let r = owner.post(PATH, json!({ "url": "http://127.0.0.1:9/mcp" })).await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
    assert_eq!(owner.get(PATH).await.body["data"], json!([]));
}
