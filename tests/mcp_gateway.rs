//! The MCP gateway: the organization's MCP servers (`/api/mcp-servers`: shapes, roles,
//! URL rules, header secrets never readable back, conflicts, audit), and
//! `{proxy}/mcp/{name}` driven by the official `mcp` Python client against a local
//! server built with the official `mcp` Python SDK (tests/python/mcp_server.py):
//! tool events priced to the microdollar, strict budgets refusing with an `isError`
//! result that never reaches the server, authentication and session binding, and 40
//! concurrent calls against a strict budget.

use std::io::BufRead;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::{backend_is_postgres, create_key, key_client, python, read, Client, Resp, TestApp};

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

/// The local MCP server (official SDK), killed on drop; `executions` counts the tool
/// runs it logged.
struct McpServer {
    child: std::process::Child,
    log: PathBuf,
    url: String,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl McpServer {
    async fn start(required_authorization: &str) -> McpServer {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-gateway");
        std::fs::create_dir_all(&dir).expect("log dir");
        let log = dir.join(format!("{}.log", uuid::Uuid::new_v4()));
        let (log_arg, auth) = (log.to_string_lossy().into_owned(), required_authorization.to_owned());
        let (child, port) = tokio::task::spawn_blocking(move || {
            let mut child = python::spawn("mcp_server.py", &[&log_arg, &auth]);
            let stdout = child.stdout.take().expect("stdout");
            let mut line = String::new();
            std::io::BufReader::new(stdout).read_line(&mut line).expect("read the port");
            let port: u16 =
                line.trim().strip_prefix("PORT ").and_then(|p| p.parse().ok()).expect("PORT line");
            (child, port)
        })
        .await
        .expect("join");
        McpServer { child, log, url: format!("http://127.0.0.1:{port}/mcp") }
    }

    fn executions(&self, tool: &str) -> usize {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().filter(|l| *l == tool).count()
    }
}

struct Gateway {
    app: TestApp,
    owner: Client,
    key_id: String,
    raw: String,
    server: McpServer,
}

const SEARCH_COST: i64 = 12_345;

async fn gateway() -> Gateway {
    let server = McpServer::start(&format!("Bearer {HEADER_SECRET}")).await;
    let app = TestApp::start_with(&env()).await;
    let owner = app.owner().await;
    let (key_id, raw) = create_key(&owner, "agent").await;
    let headers = json!({ "Authorization": format!("Bearer {HEADER_SECRET}") });
    register(&owner, "search", &server.url, headers).await;
    let key = key_client(&app.control().base, &raw);
    let discovery =
        json!({ "serverName": "search", "tools": [{ "name": "search", "tierCost": SEARCH_COST }] });
    let r = key.post("/api/tool-costs/discover", discovery).await;
    assert_eq!(r.status, 200, "{r:?}");
    Gateway { app, owner, key_id, raw, server }
}

impl Gateway {
    fn url(&self, name: &str) -> String {
        format!("{}/mcp/{name}", self.app.server.proxy)
    }

    async fn client(&self, case: &str) -> Value {
        python::run("mcp_client.py", case, &self.url("search"), &self.raw).await
    }

    /// The tool events recorded (denial records left out).
    async fn tool_events(&self) -> Vec<Value> {
        let r = self.owner.get("/api/cost-events?limit=100").await;
        let mut data = r.body["data"].as_array().cloned().unwrap_or_default();
        data.retain(|e| e["source"] == "mcp" && e["budgetStatus"] != "denied");
        data
    }

    /// A raw JSON-RPC POST to the gateway.
    async fn post(&self, name: &str, headers: &[(&str, &str)], body: Value) -> Resp {
        let mut r = reqwest::Client::new()
            .post(self.url(name))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        read(r.body(body.to_string()).send().await.expect("request")).await
    }
}

fn initialize() -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": { "name": "raw", "version": "1" } } })
}

#[tokio::test]
async fn the_official_client_reaches_its_tools_and_each_call_is_charged() {
    let g = gateway().await;
    let out = g.client("basic").await;
    assert_eq!(out["server"], "gateway-test", "{out}");
    assert_eq!(out["tools"], json!(["delete_row", "echo", "search"]), "{out}");
    assert_eq!(out["search"]["isError"], false, "{out}");
    assert_eq!(out["search"]["text"], "results for spend", "{out}");
    assert_eq!(out["echo"]["text"], "hi", "{out}");
    assert_eq!((g.server.executions("search"), g.server.executions("echo")), (1, 1));

    let events = g.tool_events().await;
    let search = events.iter().find(|e| e["model"] == "search").unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(search["costMicrodollars"], SEARCH_COST, "{search}");
    assert_eq!(search["toolName"], "search", "{search}");
    assert_eq!(search["toolServer"], "search", "{search}");
    assert!(search["durationMs"].as_i64().is_some(), "{search}");
    let echo = events.iter().find(|e| e["model"] == "echo").unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(echo["costMicrodollars"], 0, "{echo}");
    assert_eq!(echo["tags"], json!({}), "listed, so priced (at 0): {echo}");
    assert_eq!(events.len(), 2, "list_tools and initialize are not charged: {events:?}");

    // Listing registered the server's tools in tool costs: the priced one keeps its
    // price, new ones start at 0 with their description and annotations.
    let costs = g.owner.get("/api/tool-costs").await;
    let tool = |name: &str| {
        costs.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["toolName"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name}: {costs:?}"))
    };
    assert_eq!(tool("search")["costMicrodollars"], SEARCH_COST);
    let delete_row = tool("delete_row");
    assert_eq!(delete_row["serverName"], "search", "{delete_row}");
    assert_eq!(delete_row["costMicrodollars"], 0, "{delete_row}");
    assert_eq!(delete_row["source"], "discovered", "{delete_row}");
    assert_eq!(delete_row["description"], "Deletes a row.", "{delete_row}");
    assert_eq!(delete_row["annotations"]["destructiveHint"], true, "{delete_row}");
    assert!(delete_row["lastSeenAt"].is_string(), "{delete_row}");
    assert_eq!(tool("echo")["costMicrodollars"], 0);

    // The stored header secret went to the server and is never readable back.
    let list = g.owner.get(PATH).await;
    assert!(!list.text.contains(HEADER_SECRET), "{}", list.text);
}

#[tokio::test]
async fn a_strict_budget_refuses_with_a_tool_result_and_nothing_reaches_the_server() {
    let g = gateway().await;
    // A tool never listed nor priced runs at cost 0, tagged as unpriced.
    let out = g.client("call:echo").await;
    assert_eq!(out["result"]["isError"], false, "{out}");
    let events = g.tool_events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0]["model"].clone(), events[0]["costMicrodollars"].clone()),
        (json!("echo"), json!(0))
    );
    assert_eq!(events[0]["tags"]["_svc_unpriced_tool"], "true", "{events:?}");

    let body =
        json!({ "entityType": "api_key", "entityId": g.key_id, "maxBudgetMicrodollars": SEARCH_COST - 1 });
    let r = g.owner.post("/api/budgets", body).await;
    assert_eq!(r.status, 201, "{r:?}");
    let out = g.client("call:search").await;
    let result = &out["result"];
    assert_eq!(result["isError"], true, "{out}");
    let text = result["text"].as_str().unwrap();
    assert!(text.contains(&format!("api_key:{}", g.key_id)), "names the budget: {text}");
    assert!(text.contains("$0.000000") && text.contains("$0.012344"), "spend and limit: {text}");
    assert_eq!(result["meta"]["spendgate/denial"]["code"], "budget_exceeded", "{out}");
    assert_eq!(g.server.executions("search"), 0);
    assert_eq!(g.tool_events().await.len(), 1, "only the echo before");
    let r = g.owner.get("/api/cost-events?limit=100").await;
    let denied: Vec<&Value> =
        r.body["data"].as_array().unwrap().iter().filter(|e| e["budgetStatus"] == "denied").collect();
    assert_eq!(denied.len(), 1, "a denial record: {r:?}");
    assert_eq!(denied[0]["model"], "search");
}

#[tokio::test]
async fn keys_names_and_sessions_are_checked_before_anything_reaches_the_server() {
    let g = gateway().await;
    let r = g.post("search", &[], initialize()).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"), "{r:?}");
    let r = g.post("search", &[("authorization", "Bearer svc_live_sk_nope")], initialize()).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"), "{r:?}");
    let bearer = format!("Bearer {}", g.raw);
    let r = g.post("nowhere", &[("authorization", &bearer)], initialize()).await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{r:?}");

    // A session opened by one key (in X-Service-Key) is the gateway's own id, and
    // another key presenting it finds nothing.
    let r = g.post("search", &[("x-service-key", &g.raw)], initialize()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let session = r.header("mcp-session-id").expect("a session id").to_owned();
    assert_eq!(session.len(), 32, "{session}");
    let (_, other) = create_key(&g.owner, "other").await;
    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
    let other_bearer = format!("Bearer {other}");
    let r = g
        .post("search", &[("authorization", &other_bearer), ("mcp-session-id", &session)], list.clone())
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{r:?}");
    let r = g.post("search", &[("authorization", &bearer), ("mcp-session-id", "0123")], list.clone()).await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{r:?}");

    // Ended with DELETE, the session is gone.
    let r = g
        .app
        .proxy()
        .request(reqwest::Method::DELETE, "/mcp/search")
        .header("authorization", &bearer)
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("delete");
    assert!(r.status().is_success(), "{r:?}");
    let r = g.post("search", &[("authorization", &bearer), ("mcp-session-id", &session)], list).await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{r:?}");
}

#[tokio::test]
async fn forty_concurrent_calls_admit_exactly_what_a_strict_budget_affords() {
    let g = gateway().await;
    let limit = SEARCH_COST * 10;
    let body = json!({ "entityType": "api_key", "entityId": g.key_id, "maxBudgetMicrodollars": limit });
    assert_eq!(g.owner.post("/api/budgets", body).await.status, 201);
    let out = g.client("burst:40").await;
    assert_eq!((out["ok"].as_i64(), out["refused"].as_i64()), (Some(10), Some(30)), "{out}");
    assert_eq!(g.server.executions("search"), 10, "the server ran exactly the admitted calls");
    let events = g.tool_events().await;
    assert_eq!(events.len(), 10, "{events:?}");
    let charged: i64 = events.iter().map(|e| e["costMicrodollars"].as_i64().unwrap()).sum();
    assert_eq!(charged, limit);
    let budgets = g.owner.get("/api/budgets").await;
    let budget =
        budgets.body["data"].as_array().unwrap().iter().find(|b| b["entityType"] == "api_key").cloned();
    let budget = budget.unwrap_or_else(|| panic!("{budgets:?}"));
    assert_eq!(budget["spendMicrodollars"], limit, "{budget}");
}

#[tokio::test]
async fn a_tool_outside_allowed_tools_is_neither_listed_nor_called() {
    let g = gateway().await;
    let body = json!({ "name": "narrow", "allowedTools": ["search/search", "search/echo", "other/*"] });
    let r = g.owner.post("/api/keys", body).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["data"]["allowedTools"], json!(["search/search", "search/echo", "other/*"]));
    let raw = r.body["data"]["rawKey"].as_str().unwrap().to_owned();
    let out = python::run("mcp_client.py", "restricted", &g.url("search"), &raw).await;
    assert_eq!(out["tools"], json!(["echo", "search"]), "{out}");
    let message = out["error"]["message"].as_str().unwrap_or_else(|| panic!("{out}"));
    assert!(message.contains("search/delete_row"), "names the tool: {out}");
    assert_eq!(g.server.executions("delete_row"), 0, "never reached the server");
    assert!(g.tool_events().await.is_empty());
    // The full key still sees every tool.
    assert_eq!(g.client("basic").await["tools"], json!(["delete_row", "echo", "search"]));
}

#[tokio::test]
async fn allowed_tools_are_set_listed_cleared_and_checked() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (id, _) = create_key(&owner, "agent").await;
    let path = format!("/api/keys/{id}");
    let r = owner.patch(&path, json!({ "allowedTools": ["search/*"] })).await;
    assert_eq!((r.status, r.body["data"]["allowedTools"].clone()), (200, json!(["search/*"])), "{r:?}");
    let list = owner.get("/api/keys").await;
    assert_eq!(list.body["data"][0]["allowedTools"], json!(["search/*"]), "{list:?}");
    let r = owner.patch(&path, json!({ "allowedTools": [] })).await;
    assert_eq!(r.body["data"]["allowedTools"], json!([]), "{r:?}");
    let r = owner.patch(&path, json!({ "allowedTools": null })).await;
    assert_eq!(r.body["data"]["allowedTools"], Value::Null, "{r:?}");

    let many: Vec<String> = (0..101).map(|i| format!("s/t{i}")).collect();
    let r = owner.patch(&path, json!({ "allowedTools": many })).await;
    assert!(r.issue_paths().contains(&json!(["allowedTools"])), "{r:?}");
    let r = owner.patch(&path, json!({ "allowedTools": ["search", "Search/x", "search/"] })).await;
    let paths = r.issue_paths();
    for i in ["0", "1", "2"] {
        assert!(paths.contains(&json!(["allowedTools", i])), "{r:?}");
    }
    let r = owner.post("/api/keys", json!({ "name": "bad", "allowedTools": ["nope"] })).await;
    assert!(r.issue_paths().contains(&json!(["allowedTools", "0"])), "{r:?}");
    assert_eq!(owner.get("/api/keys").await.body["data"][0]["allowedTools"], Value::Null, "nothing changed");
}

#[tokio::test]
async fn unpriced_tools_are_blocked_when_the_organization_says_so() {
    let g = gateway().await;
    let org = g.owner.get("/api/auth/session").await.body["data"]["org"]["id"].as_str().unwrap().to_owned();
    let path = format!("/api/orgs/{org}");
    let r = g.owner.patch(&path, json!({ "unpricedTools": "maybe" })).await;
    assert!(r.issue_paths().contains(&json!(["unpricedTools"])), "{r:?}");
    let r = g.owner.get(&path).await;
    assert_eq!(r.body["data"]["unpricedTools"], "allow", "the default: {r:?}");
    let r = g.owner.patch(&path, json!({ "unpricedTools": "block" })).await;
    assert_eq!((r.status, r.body["data"]["unpricedTools"].clone()), (200, json!("block")), "{r:?}");

    let out = g.client("call:echo").await;
    assert_eq!(out["result"]["isError"], true, "{out}");
    assert_eq!(out["result"]["meta"]["spendgate/denial"]["code"], "tool_not_priced", "{out}");
    assert!(out["result"]["text"].as_str().unwrap().contains("echo"), "{out}");
    assert_eq!(g.server.executions("echo"), 0);
    let out = g.client("call:search").await;
    assert_eq!(out["result"]["isError"], false, "a priced tool still runs: {out}");
    assert_eq!(g.tool_events().await.len(), 1);

    let log = g.owner.get("/api/audit-log?limit=100").await;
    assert!(log.text.contains("org_unpriced_tools.updated"), "{log:?}");
}
