//! Tool costs: discovery (key), list (key or session), manual override and reset
//! (session admin), and MCP tool events charged the configured cost.

use serde_json::{json, Value};

use crate::support::{create_key, key_client, Client, Resp, TestApp};

const OWNER_ORG: &str = "owner@example.com's organization";

fn assert_error(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.code(), code, "{r:?}");
}

fn discovery(tools: Value) -> Value {
    json!({ "serverName": "search-server", "tools": tools })
}

fn tool_named<'a>(list: &'a Resp, name: &str) -> &'a Value {
    list.body["data"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["toolName"] == name))
        .unwrap_or_else(|| panic!("{name} not listed: {list:?}"))
}

/// The owner's session, a key client on the control plane, and the raw key.
async fn setup(app: &TestApp) -> (Client, Client, String) {
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "tools").await;
    let key = key_client(&app.control().base, &raw);
    (owner, key, raw)
}

#[tokio::test]
async fn discovery_registers_tools_and_keeps_manual_costs() {
    let app = TestApp::start().await;
    let (owner, key, _) = setup(&app).await;
    let tools = json!([
        { "name": "web_search", "tierCost": 2_000, "suggestedCost": 2_500, "description": "Search",
          "annotations": { "readOnlyHint": true } },
        { "name": "fetch", "tierCost": 500 },
    ]);
    let r = key.post("/api/tool-costs/discover", discovery(tools.clone())).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "registered": 2 }));

    let list = owner.get("/api/tool-costs").await;
    assert_eq!(list.status, 200, "{list:?}");
    let search = tool_named(&list, "web_search");
    assert!(search["id"].as_str().unwrap().starts_with("svc_tc_"), "{search}");
    assert!(search["userId"].as_str().unwrap().starts_with("svc_usr_"), "{search}");
    assert_eq!(search["serverName"], "search-server");
    assert_eq!(search["costMicrodollars"], 2_000);
    assert_eq!(search["suggestedCost"], 2_500);
    assert_eq!(search["source"], "discovered");
    assert_eq!(search["annotations"], json!({ "readOnlyHint": true }));
    assert!(search["lastSeenAt"].is_string());

    // An admin override survives rediscovery; description and lastSeenAt follow it.
    let body = json!({ "serverName": "search-server", "toolName": "web_search", "costMicrodollars": 9_000 });
    let r = owner.post("/api/tool-costs", body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["source"], "manual");
    assert_eq!(r.body["data"]["costMicrodollars"], 9_000);
    let changed = json!([{ "name": "web_search", "tierCost": 3_000, "description": "Search v2" },
                         { "name": "fetch", "tierCost": 700 }]);
    assert_eq!(key.post("/api/tool-costs/discover", discovery(changed)).await.status, 200);
    let list = key.get("/api/tool-costs").await;
    assert_eq!(list.status, 200, "a key lists too: {list:?}");
    let search = tool_named(&list, "web_search");
    assert_eq!(
        (search["costMicrodollars"].as_i64(), search["source"].as_str()),
        (Some(9_000), Some("manual"))
    );
    assert_eq!(search["description"], "Search v2");
    assert_eq!(tool_named(&list, "fetch")["costMicrodollars"], 700);
    assert_eq!(list.body["data"].as_array().unwrap().len(), 2, "rediscovery adds no rows");

    // Reset: cost 0, back to discovery's hands.
    let id = search["id"].as_str().unwrap().to_owned();
    let r = owner.delete(&format!("/api/tool-costs/{id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "deleted": true }));
    let search = tool_named(&owner.get("/api/tool-costs").await, "web_search").clone();
    assert_eq!(
        (search["costMicrodollars"].as_i64(), search["source"].as_str()),
        (Some(0), Some("discovered"))
    );
}

#[tokio::test]
async fn discovery_refuses_bad_input_and_changes_nothing() {
    let app = TestApp::start().await;
    let (owner, key, _) = setup(&app).await;
    let mut deep = json!(true);
    for _ in 0..11 {
        deep = json!({ "x": deep });
    }
    let many: Vec<Value> = (0..501).map(|i| json!({ "name": format!("t{i}"), "tierCost": 1 })).collect();
    let cases = [
        (json!({ "serverName": "s", "tools": [] }), "tools"),
        (json!({ "serverName": "s", "tools": many }), "tools"),
        (json!({ "serverName": "a/b", "tools": [{ "name": "t", "tierCost": 1 }] }), "serverName"),
        (json!({ "serverName": "", "tools": [{ "name": "t", "tierCost": 1 }] }), "serverName"),
        (discovery(json!([{ "name": "t", "tierCost": 1 }, { "name": "t", "tierCost": 2 }])), "tools"),
        (discovery(json!([{ "name": "t", "tierCost": -1 }])), "tools"),
        (discovery(json!([{ "name": "t", "tierCost": 1_000_000_000_001_i64 }])), "tools"),
        (discovery(json!([{ "name": "", "tierCost": 1 }])), "tools"),
        (discovery(json!([{ "name": "t", "tierCost": 1, "annotations": deep }])), "tools"),
        (discovery(json!([{ "name": "t", "tierCost": 1, "annotations": [1] }])), "tools"),
        (discovery(json!([{ "name": "t", "tierCost": 1.5 }])), "tools"),
        (discovery(json!([{ "name": "t" }])), "tools"),
    ];
    for (body, field) in cases {
        let r = key.post("/api/tool-costs/discover", body.clone()).await;
        assert_error(&r, 400, "validation_error");
        assert_eq!(r.issue_paths()[0][0], field, "{body}: {r:?}");
    }
    let r = key.post_raw("/api/tool-costs/discover", "application/json", "{").await;
    assert_error(&r, 400, "invalid_json");
    let r = key.post_raw("/api/tool-costs/discover", "text/plain", "{}").await;
    assert_error(&r, 415, "unsupported_media_type");
    let list = owner.get("/api/tool-costs").await;
    assert_eq!(list.body["data"], json!([]), "{list:?}");
    // A session is not a key.
    let r = owner.post("/api/tool-costs/discover", discovery(json!([{ "name": "t", "tierCost": 1 }]))).await;
    assert_error(&r, 401, "authentication_required");
}

#[tokio::test]
async fn overrides_need_an_admin_session_and_a_known_tool() {
    let app = TestApp::start().await;
    let (owner, key, _) = setup(&app).await;
    assert_eq!(
        key.post("/api/tool-costs/discover", discovery(json!([{ "name": "t", "tierCost": 1 }]))).await.status,
        200
    );
    let set =
        |cost: Value| json!({ "serverName": "search-server", "toolName": "t", "costMicrodollars": cost });

    let r = key.post("/api/tool-costs", set(json!(5))).await;
    assert_error(&r, 401, "authentication_required");
    let member = app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    assert_error(&member.post("/api/tool-costs", set(json!(5))).await, 403, "forbidden");
    let id = tool_named(&member.get("/api/tool-costs").await, "t")["id"].as_str().unwrap().to_owned();
    assert_error(&member.delete(&format!("/api/tool-costs/{id}")).await, 403, "forbidden");

    assert_error(&owner.post("/api/tool-costs", set(json!(-1))).await, 400, "validation_error");
    assert_error(
        &owner.post("/api/tool-costs", json!({ "serverName": "search-server" })).await,
        400,
        "validation_error",
    );
    let unknown = json!({ "serverName": "search-server", "toolName": "nope", "costMicrodollars": 1 });
    assert_error(&owner.post("/api/tool-costs", unknown).await, 404, "not_found");

    let raw_uuid = id.trim_start_matches("svc_tc_");
    assert_error(&owner.delete(&format!("/api/tool-costs/{raw_uuid}")).await, 400, "validation_error");
    let missing = format!("svc_tc_{}", uuid::Uuid::new_v4());
    assert_error(&owner.delete(&format!("/api/tool-costs/{missing}")).await, 404, "not_found");
    // Another organization's admin sees nothing of it.
    let other = app.user_in_org("other@example.com", "Other Co", "owner").await;
    assert_error(&other.delete(&format!("/api/tool-costs/{id}")).await, 404, "not_found");
    assert_eq!(other.get("/api/tool-costs").await.body["data"], json!([]));
    assert_eq!(
        tool_named(&owner.get("/api/tool-costs").await, "t")["costMicrodollars"],
        1,
        "nothing changed"
    );
}

#[tokio::test]
async fn discovery_replays_an_idempotency_key() {
    let app = TestApp::start().await;
    let (_, key, _) = setup(&app).await;
    let send = |cost: i64| {
        key.request(reqwest::Method::POST, "/api/tool-costs/discover")
            .header("idempotency-key", "disc-1")
            .json(&discovery(json!([{ "name": "t", "tierCost": cost }])))
            .send()
    };
    let first = crate::support::read(send(1).await.unwrap()).await;
    assert_eq!(first.status, 200, "{first:?}");
    let again = crate::support::read(send(1).await.unwrap()).await;
    assert_eq!(again.header("x-idempotent-replayed"), Some("true"), "{again:?}");
    let other = crate::support::read(send(2).await.unwrap()).await;
    assert_error(&other, 409, "idempotency_conflict");
}

/// An MCP tool event without a cost is charged the tool's configured cost, a
/// manual override at once; a tool never discovered is charged 0 and tagged.
#[tokio::test]
async fn mcp_events_without_a_cost_are_charged_the_configured_cost() {
    let app = TestApp::start().await;
    let (owner, key, raw) = setup(&app).await;
    assert_eq!(
        key.post("/api/tool-costs/discover", discovery(json!([{ "name": "web_search", "tierCost": 2_000 }])))
            .await
            .status,
        200
    );
    let proxy = key_client(&app.proxy().base, &raw);
    let tool = |name: &str| json!({ "toolName": name, "toolServer": "search-server" });
    let r = proxy.post("/v1/mcp/events", tool("web_search")).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["data"]["id"].as_str().unwrap().to_owned();
    let event = owner.get(&format!("/api/cost-events/{id}")).await;
    assert_eq!(event.body["data"]["costMicrodollars"], 2_000, "{event:?}");

    let body = json!({ "serverName": "search-server", "toolName": "web_search", "costMicrodollars": 7_000 });
    assert_eq!(owner.post("/api/tool-costs", body).await.status, 200);
    let r = proxy.post("/v1/mcp/events", tool("web_search")).await;
    let event = owner.get(&format!("/api/cost-events/{}", r.body["data"]["id"].as_str().unwrap())).await;
    assert_eq!(event.body["data"]["costMicrodollars"], 7_000, "the override applies at once: {event:?}");

    let mut explicit = tool("web_search");
    explicit["costMicrodollars"] = json!(5);
    let r = proxy.post("/v1/mcp/events", explicit).await;
    let event = owner.get(&format!("/api/cost-events/{}", r.body["data"]["id"].as_str().unwrap())).await;
    assert_eq!(event.body["data"]["costMicrodollars"], 5, "an explicit cost wins: {event:?}");

    let r = proxy.post("/v1/mcp/events", tool("never_seen")).await;
    assert_eq!(r.status, 201, "{r:?}");
    let event = owner.get(&format!("/api/cost-events/{}", r.body["data"]["id"].as_str().unwrap())).await;
    assert_eq!(event.body["data"]["costMicrodollars"], 0, "{event:?}");
    assert_eq!(event.body["data"]["tags"]["_svc_unpriced_tool"], "true", "{event:?}");
}

/// The budget check estimates with the configured cost when it is given none.
#[tokio::test]
async fn the_budget_check_estimates_with_the_configured_cost() {
    let app = TestApp::start().await;
    let (owner, key, raw) = setup(&app).await;
    let key_id = owner.get("/api/keys").await.body["data"][0]["id"].as_str().unwrap().to_owned();
    let r = owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": 1_000,
                    "policy": "strict_block" }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let tools = json!([{ "name": "cheap", "tierCost": 10 }, { "name": "dear", "tierCost": 5_000 }]);
    assert_eq!(key.post("/api/tool-costs/discover", discovery(tools)).await.status, 200);
    let proxy = key_client(&app.proxy().base, &raw);
    let check = |name: &str| json!({ "toolName": name, "toolServer": "search-server" });
    let r = proxy.post("/v1/mcp/budget/check", check("cheap")).await;
    assert_eq!((r.status, &r.body["allowed"]), (200, &json!(true)), "{r:?}");
    let r = proxy.post("/v1/mcp/budget/check", check("dear")).await;
    assert_eq!((r.status, &r.body["allowed"]), (200, &json!(false)), "{r:?}");
    let r = proxy.post("/v1/mcp/budget/check", json!({ "toolName": "dear" })).await;
    assert_error(&r, 400, "validation_error");
}

/// An organization holds at most `max_tool_costs` tools: a discovery that would pass
/// the bound writes nothing (not even its updates); rediscovering held tools is fine.
#[tokio::test]
async fn tools_per_organization_are_bounded() {
    let app = TestApp::start_with(&[("SPENDGATE_MAX_TOOL_COSTS", "3".to_owned())]).await;
    let (owner, key, _) = setup(&app).await;
    let tools = json!([{ "name": "a", "tierCost": 1 }, { "name": "b", "tierCost": 1 }]);
    assert_eq!(key.post("/api/tool-costs/discover", discovery(tools)).await.status, 200);
    let over = json!([{ "name": "a", "tierCost": 7 }, { "name": "c", "tierCost": 1 }, { "name": "d", "tierCost": 1 }]);
    assert_error(&key.post("/api/tool-costs/discover", discovery(over)).await, 409, "limit_exceeded");
    let list = owner.get("/api/tool-costs").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 2, "{list:?}");
    assert_eq!(tool_named(&list, "a")["costMicrodollars"], 1, "the update rolled back too");
    let fits = json!([{ "name": "a", "tierCost": 7 }, { "name": "c", "tierCost": 1 }]);
    assert_eq!(key.post("/api/tool-costs/discover", discovery(fits)).await.status, 200);
    let list = owner.get("/api/tool-costs").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 3, "{list:?}");
    assert_eq!(tool_named(&list, "a")["costMicrodollars"], 7);
}
