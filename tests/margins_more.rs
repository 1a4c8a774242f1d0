//! Margins, continued: customer mappings and auto-matching, the unmatched lists,
//! the scheduler (bearer auth and the service's own interval), disconnecting, and
//! the Free-tier gate. Shared setup: `super::margins`.

use serde_json::{json, Value};

use crate::margins::{now_secs, setup, setup_with, setup_with_plan, CRON, KEY};

#[tokio::test]
async fn mappings_validate_upsert_and_delete() {
    let s = setup().await;
    for (body, paths) in [
        (json!({}), vec![json!(["processorCustomerId"]), json!(["tagValue"])]),
        (json!({ "processorCustomerId": "cus_1", "tagValue": "a\u{7}b" }), vec![json!(["tagValue"])]),
        (
            json!({ "processorCustomerId": "x".repeat(255), "tagValue": "a" }),
            vec![json!(["processorCustomerId"])],
        ),
        (
            json!({ "processorCustomerId": "cus_1", "tagValue": "a", "matchType": "magic" }),
            vec![json!(["matchType"])],
        ),
        (
            json!({ "processorCustomerId": "cus_1", "tagValue": "a", "tagKey": "bad key" }),
            vec![json!(["tagKey"])],
        ),
    ] {
        let r = s.owner.post("/api/customer-mappings", body.clone()).await;
        assert_eq!(r.issue_paths(), paths, "{body}");
    }
    let first = s.map("cus_1", "acme").await;
    assert_eq!(first["matchType"], "manual");
    assert_eq!(first["confidence"], 1.0);
    assert_eq!(first["tagKey"], "customer");
    assert!(first["orgId"].as_str().unwrap().starts_with("svc_org_"));
    let again = s.map("cus_1", "acme-2").await;
    assert_eq!(again["id"], first["id"], "upsert on (org, processor customer, tag key)");
    assert_eq!(again["tagValue"], "acme-2");
    let r = s.owner.get("/api/customer-mappings").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1, "{r:?}");

    let r = s.owner.delete("/api/customer-mappings").await;
    assert_eq!(r.issue_paths(), vec![json!(["id"])]);
    let r = s.owner.delete("/api/customer-mappings?id=not-a-uuid").await;
    assert_eq!(r.code(), "validation_error");
    let r = s.owner.delete(&format!("/api/customer-mappings?id={}", uuid::Uuid::new_v4())).await;
    assert_eq!((r.status, r.code()), (404, "not_found"));

    // Another organization can neither see nor delete it.
    let other = s.app.user_in_org("other@example.com", "other-org", "owner").await;
    let (ok, out) = s.app.cli(&["org", "set-plan", "--org", "other-org", "--plan", "pro"]);
    assert!(ok, "{out}");
    assert_eq!(other.get("/api/customer-mappings").await.body["data"], json!([]));
    let r = other.delete(&format!("/api/customer-mappings?id={}", first["id"].as_str().unwrap())).await;
    assert_eq!(r.status, 404);

    let r = s.owner.delete(&format!("/api/customer-mappings?id={}", first["id"].as_str().unwrap())).await;
    assert_eq!(r.body, json!({ "data": { "deleted": true } }));
    assert_eq!(s.owner.get("/api/customer-mappings").await.body["data"], json!([]));
}

#[tokio::test]
async fn sync_auto_matches_and_unmatched_lists_the_rest() {
    let s = setup().await;
    let now = now_secs();
    s.fake.add_customer(
        "cus_a",
        "Acme Corp",
        "billing@acme.com",
        json!({ "tenant": "acme-tenant" }),
        now - 100,
    );
    s.fake.add_customer("cus_b", "Bravo", "b@bravo.com", json!({}), now - 100);
    s.fake.add_invoice("in_b", "cus_b", "usd", 4_200, 0, now - 50);
    s.spend("acme-tenant", "gpt-4o", 1_000).await;
    s.spend("acme-tenant", "gpt-4o-mini", 500).await;
    s.spend("zulu", "gpt-4o", 7_000).await;
    s.connect().await;
    let report = s.sync().await;
    assert_eq!(report["autoMatchesCreated"], 1, "{report}");
    assert_eq!(s.sync().await["autoMatchesCreated"], 0, "once");

    let r = s.owner.get("/api/margins/unmatched").await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = &r.body["data"];
    assert_eq!(
        d["unmatchedProcessorCustomers"],
        json!([{ "processorCustomerId": "cus_b", "customerName": "Bravo", "customerEmail": "b@bravo.com", "totalRevenueMicrodollars": 42_000_000 }])
    );
    assert_eq!(
        d["unmappedTagValues"],
        json!([{ "tagValue": "zulu", "totalCostMicrodollars": 7_000, "requestCount": 1 }])
    );
    let pending = &d["pendingAutoMatches"][0];
    assert_eq!(
        (pending["processorCustomerId"].as_str(), pending["tagValue"].as_str()),
        (Some("cus_a"), Some("acme-tenant"))
    );
    assert_eq!(pending["confidence"], 0.95);
    assert_eq!(pending["customerName"], "Acme Corp");
    assert_eq!(d["customerNames"], json!({ "cus_a": "Acme Corp", "cus_b": "Bravo" }));

    let r = s.owner.get("/api/margins/acme-tenant").await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = &r.body["data"];
    assert_eq!(d["costMicrodollars"], 1_500);
    assert_eq!(d["healthTier"], "critical", "cost without revenue");
    assert!(d["marginPercent"].is_null());
    assert_eq!(d["revenueOverTime"].as_array().unwrap().len(), 6);
    assert_eq!(
        d["modelBreakdown"],
        json!([{ "model": "gpt-4o", "cost": 1_000, "requestCount": 1 }, { "model": "gpt-4o-mini", "cost": 500, "requestCount": 1 }])
    );
    let r = s.owner.get("/api/margins/nobody").await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
}

#[tokio::test]
async fn scheduler_bearer_auth_and_disconnect_cascade() {
    let s = setup().await;
    let now = now_secs();
    s.fake.add_customer("cus_c", "Cron", "c@x.com", json!({}), now - 100);
    s.fake.add_invoice("in_c", "cus_c", "usd", 1_000, 0, now - 50);
    s.connect().await;
    let anonymous = s.app.control();
    let r = anonymous.get("/api/payprocessor/revenue-sync").await;
    assert_eq!((r.status, r.code()), (401, "authentication_required"));
    for bad in ["Bearer wrong", "Bearer ", "Bearer cron-test-secretX"] {
        let r = anonymous
            .request(reqwest::Method::GET, "/api/payprocessor/revenue-sync")
            .header("authorization", bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{bad}");
    }
    let r = anonymous
        .request(reqwest::Method::GET, "/api/payprocessor/revenue-sync")
        .header("authorization", format!("Bearer {CRON}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({ "data": { "synced": 1, "errors": 0 } }));
    assert_eq!(s.app.query_n("SELECT COUNT(*) AS n FROM revenue_items").await, 1);

    s.map("cus_c", "cron").await;
    let r = s.owner.delete("/api/payprocessor/disconnect").await;
    assert_eq!(r.body, json!({ "data": { "deleted": true } }), "{r:?}");
    for table in ["revenue_items", "customer_mappings", "processor_customers", "processor_connections"] {
        assert_eq!(s.app.query_n(&format!("SELECT COUNT(*) AS n FROM {table}")).await, 0, "{table}");
    }
    let r = s.owner.delete("/api/payprocessor/disconnect").await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    let r = s.owner.get("/api/payprocessor/revenue-sync").await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    assert_eq!(s.margins("").await["summary"]["syncStatus"], "disconnected");
}

#[tokio::test]
async fn free_tier_is_refused_everywhere() {
    let s = setup_with_plan("free").await;
    let id = uuid::Uuid::new_v4();
    for r in [
        s.owner.post("/api/payprocessor/connect", json!({ "processorKey": KEY })).await,
        s.owner.delete("/api/payprocessor/disconnect").await,
        s.owner.get("/api/payprocessor/revenue-sync").await,
        s.owner.get("/api/customer-mappings").await,
        s.owner
            .post("/api/customer-mappings", json!({ "processorCustomerId": "cus_1", "tagValue": "a" }))
            .await,
        s.owner.delete(&format!("/api/customer-mappings?id={id}")).await,
        s.owner.get("/api/margins").await,
        s.owner.get("/api/margins?format=csv").await,
        s.owner.get("/api/margins/unmatched").await,
        s.owner.get("/api/margins/acme").await,
    ] {
        assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    }
    assert!(s.fake.requests().is_empty(), "the processor was never called");
}

#[tokio::test]
async fn the_service_syncs_on_its_own_schedule_under_a_lease() {
    let s = setup_with("pro", 1).await;
    let now = now_secs();
    s.fake.add_customer("cus_s", "Scheduled", "s@x.com", json!({}), now - 100);
    s.fake.add_invoice("in_s", "cus_s", "usd", 2_500, 0, now - 50);
    s.connect().await;
    // Waits for the condition (a background round), generously bounded.
    let mut synced = 0;
    for _ in 0..300 {
        synced = s.app.query_n("SELECT COUNT(*) AS n FROM revenue_items").await;
        if synced > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(synced, 1, "no scheduled sync happened");
    assert_eq!(s.app.query_n("SELECT COUNT(*) AS n FROM sync_leases WHERE name = 'revenue-sync'").await, 1);
    assert_eq!(s.margins("").await["summary"]["syncStatus"], "ok");
}

#[tokio::test]
async fn a_sync_overtaken_by_a_disconnect_leaves_nothing_behind() {
    let s = setup().await;
    let now = now_secs();
    s.fake.add_customer("cus_d", "Racing", "d@x.com", json!({}), now - 100);
    s.fake.add_invoice("in_d", "cus_d", "usd", 2_500, 0, now - 50);
    s.connect().await;
    s.fake.close_gate("/v1/refunds");
    let owner = s.owner.clone();
    let sync = tokio::spawn(async move { owner.get("/api/payprocessor/revenue-sync").await });
    // The sync has fetched customers, invoices and credit notes and waits on refunds.
    for _ in 0..1_500 {
        if s.fake.requests_to("/v1/refunds") > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(s.fake.requests_to("/v1/refunds"), 1, "the sync never reached the refunds");
    let r = s.owner.delete("/api/payprocessor/disconnect").await;
    assert_eq!(r.status, 200, "{r:?}");
    s.fake.open_gate();
    let r = sync.await.unwrap();
    assert_eq!((r.status, r.code()), (404, "not_found"), "{r:?}");
    for table in ["revenue_items", "processor_customers", "customer_mappings", "margin_tiers"] {
        assert_eq!(s.app.query_n(&format!("SELECT COUNT(*) AS n FROM {table}")).await, 0, "{table}");
    }
}

#[tokio::test]
async fn deleting_the_organization_deletes_its_processor_key_and_revenue() {
    let s = setup().await;
    let now = now_secs();
    s.fake.add_customer("cus_o", "Org", "o@x.com", json!({}), now - 100);
    s.fake.add_invoice("in_o", "cus_o", "usd", 1_000, 0, now - 50);
    s.connect().await;
    s.sync().await;
    s.map("cus_o", "org").await;
    let org = s.owner.get("/api/auth/session").await.body["data"]["org"]["id"].as_str().unwrap().to_owned();
    let r = s.owner.delete(&format!("/api/orgs/{org}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    for table in
        ["processor_connections", "revenue_items", "processor_customers", "customer_mappings", "margin_tiers"]
    {
        assert_eq!(s.app.query_n(&format!("SELECT COUNT(*) AS n FROM {table}")).await, 0, "{table}");
    }
}
