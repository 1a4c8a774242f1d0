//! Margins: the processor connection, revenue sync against a fake Stripe, customer
//! mappings, the margin arithmetic at the tier boundaries, the once-per-worsening
//! `margin.threshold_crossed` rule, the scheduler's bearer auth and the Free-tier gate.

use serde_json::{json, Value};

use crate::support::processor::FakeProcessor;
use crate::support::{create_key, key_client, Client, TestApp};

pub(crate) const SECRET: &str = "margins-test-secret-key-0123456789abcdef";
pub(crate) const KEY: &str = "rk_test_51FakeKeyForMargins0001";
pub(crate) const CRON: &str = "cron-test-secret";

pub(crate) fn now_secs() -> i64 {
    spendgate::util::time::now_ms() / 1000
}

/// `YYYY-MM` of a Unix time, and the start of the month before it (seconds).
pub(crate) fn month_of(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0).unwrap().format("%Y-%m").to_string()
}

pub(crate) fn previous_month_start(secs: i64) -> i64 {
    use chrono::Datelike;
    let d = chrono::DateTime::from_timestamp(secs, 0).unwrap().date_naive();
    let first = d.with_day(1).unwrap();
    let prev = first.pred_opt().unwrap().with_day(1).unwrap();
    prev.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp()
}

pub(crate) struct Setup {
    pub app: TestApp,
    pub fake: FakeProcessor,
    pub owner: Client,
    pub sdk: Client,
}

pub(crate) async fn setup_with_plan(plan: &str) -> Setup {
    setup_with(plan, 0).await
}

/// A server whose own revenue sync runs every `interval_secs` (0 = off).
pub(crate) async fn setup_with(plan: &str, interval_secs: u64) -> Setup {
    let fake = FakeProcessor::start();
    fake.add_key(KEY);
    let app = TestApp::start_with(&[
        ("SPENDGATE_PROCESSOR_URL", fake.base.clone()),
        ("SPENDGATE_SECRET_KEY", SECRET.to_owned()),
        ("SPENDGATE_DEFAULT_PLAN", plan.to_owned()),
        ("SPENDGATE_REVENUE_SYNC_INTERVAL_SECS", interval_secs.to_string()),
    ])
    .await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "margins").await;
    let sdk = key_client(&app.server.control, &raw);
    Setup { app, fake, owner, sdk }
}

pub(crate) async fn setup() -> Setup {
    setup_with_plan("pro").await
}

impl Setup {
    pub async fn connect(&self) {
        let r = self.owner.post("/api/payprocessor/connect", json!({ "processorKey": KEY })).await;
        assert_eq!(r.status, 201, "{r:?}");
    }

    pub async fn sync(&self) -> Value {
        let r = self.owner.get("/api/payprocessor/revenue-sync").await;
        assert_eq!(r.status, 200, "{r:?}");
        r.body["data"].clone()
    }

    pub async fn spend(&self, customer: &str, model: &str, cost: i64) {
        let body = json!({ "provider": "openai", "model": model, "inputTokens": 1, "outputTokens": 1,
            "costMicrodollars": cost, "tags": { "customer": customer } });
        let r = self.sdk.post("/api/cost-events", body).await;
        assert_eq!(r.status, 201, "{r:?}");
    }

    pub async fn map(&self, processor_customer: &str, tag_value: &str) -> Value {
        let r = self
            .owner
            .post(
                "/api/customer-mappings",
                json!({ "processorCustomerId": processor_customer, "tagValue": tag_value }),
            )
            .await;
        assert_eq!(r.status, 201, "{r:?}");
        r.body["data"].clone()
    }

    pub async fn margins(&self, query: &str) -> Value {
        let r = self.owner.get(&format!("/api/margins{query}")).await;
        assert_eq!(r.status, 200, "{r:?}");
        r.body["data"].clone()
    }
}

pub(crate) fn customer<'a>(margins: &'a Value, id: &str) -> &'a Value {
    margins["customers"].as_array().unwrap().iter().find(|c| c["processorCustomerId"] == id).unwrap()
}

#[tokio::test]
async fn connect_validates_the_key_stores_it_encrypted_and_only_once() {
    let s = setup().await;
    s.fake.add_restricted_key("rk_test_no_customers_0001", &["invoices"]);
    for (body, path) in [
        (json!({}), "processorKey"),
        (json!({ "processorKey": "sk_live_abcdefgh1234" }), "processorKey"),
        (json!({ "processorKey": "rk_test with space" }), "processorKey"),
    ] {
        let r = s.owner.post("/api/payprocessor/connect", body).await;
        assert_eq!(r.issue_paths(), vec![json!([path])], "{r:?}");
    }
    let r = s.owner.post("/api/payprocessor/connect", json!({ "processorKey": 42 })).await;
    assert_eq!(r.code(), "validation_error", "{r:?}");
    let r = s
        .owner
        .post("/api/payprocessor/connect", json!({ "processorKey": "rk_test_unknown_key_9999" }))
        .await;
    assert_eq!((r.status, r.code()), (400, "processor_validation_failed"), "{r:?}");
    assert!(r.body["error"]["message"].as_str().unwrap().contains("Invalid API Key"), "{r:?}");
    let r = s
        .owner
        .post("/api/payprocessor/connect", json!({ "processorKey": "rk_test_no_customers_0001" }))
        .await;
    assert_eq!((r.status, r.code()), (400, "processor_validation_failed"), "{r:?}");
    assert_eq!(s.app.query_n("SELECT COUNT(*) AS n FROM processor_connections").await, 0);

    let r = s.owner.post("/api/payprocessor/connect", json!({ "processorKey": KEY })).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["data"]["keyPrefix"], "rk_test_****0001");
    assert_eq!(r.body["data"]["status"], "active");
    assert!(!r.text.contains(KEY), "the key is never returned");
    let probe = s.fake.requests().into_iter().find(|(p, _)| p == "/v1/customers").unwrap();
    assert_eq!(probe.1, "limit=1", "validated with a minimal listing call");
    let plain =
        format!("SELECT COUNT(*) AS n FROM processor_connections WHERE key_ciphertext LIKE '%{KEY}%'");
    assert_eq!(s.app.query_n(&plain).await, 0, "stored encrypted");
    assert_eq!(s.app.query_n("SELECT COUNT(*) AS n FROM processor_connections").await, 1);

    let r = s.owner.post("/api/payprocessor/connect", json!({ "processorKey": KEY })).await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{r:?}");

    let viewer = s.app.user_in_org("viewer@example.com", "viewers", "viewer").await;
    let (ok, out) = s.app.cli(&["org", "set-plan", "--org", "viewers", "--plan", "pro"]);
    assert!(ok, "{out}");
    let r = viewer.post("/api/payprocessor/connect", json!({ "processorKey": KEY })).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "a viewer: {r:?}");
    assert!(r.body["error"]["message"].as_str().unwrap().contains("admin"), "{r:?}");
}

#[tokio::test]
async fn sync_pages_through_everything_excludes_tax_and_skips_other_currencies() {
    let s = setup().await;
    s.fake.set_page_cap(2);
    let now = now_secs();
    for i in 0..5 {
        s.fake.add_customer(
            &format!("cus_{i}"),
            &format!("Customer {i}"),
            &format!("c{i}@x.com"),
            json!({}),
            now - 100 - i,
        );
    }
    for i in 0..5 {
        // $12.00 with $2.00 tax: $10.00 of revenue each.
        s.fake.add_invoice(&format!("in_{i}"), "cus_0", "usd", 1_200, 200, now - 10 - i);
    }
    s.fake.add_invoice("in_eur1", "cus_1", "eur", 5_000, 0, now - 20);
    s.fake.add_invoice("in_eur2", "cus_1", "eur", 5_000, 0, now - 21);
    s.fake.add_invoice("in_gbp", "cus_1", "gbp", 5_000, 0, now - 22);
    s.fake.add_open_invoice("in_open", "cus_0", 99_900, now - 5);
    s.connect().await;
    let report = s.sync().await;
    assert_eq!(report["customersProcessed"], 5, "{report}");
    assert_eq!(report["invoicesFetched"], 8, "{report}");
    assert_eq!(report["invoicesSkipped"], 3, "{report}");
    assert_eq!(report["skippedCurrencies"], json!({ "eur": 2, "gbp": 1 }), "{report}");
    assert!(report["orgId"].as_str().unwrap().starts_with("svc_org_"));
    assert!(
        s.fake.requests_to("/v1/customers") >= 4,
        "five customers at two a page: {:?}",
        s.fake.requests()
    );
    assert!(s.fake.requests().iter().any(|(p, q)| p == "/v1/invoices" && q.contains("starting_after=")));
    assert!(s.fake.requests().iter().all(|(p, q)| p != "/v1/invoices" || q.contains("status=paid")));

    s.map("cus_0", "acme").await;
    let m = s.margins("").await;
    assert_eq!(customer(&m, "cus_0")["revenueMicrodollars"], 50_000_000, "5 × $10.00 without tax: {m}");
    assert_eq!(m["summary"]["skippedCurrencies"], json!({ "eur": 2, "gbp": 1 }));
    assert_eq!(m["summary"]["syncStatus"], "ok");
    assert!(m["summary"]["lastSyncAt"].is_string());

    // A re-sync rewrites the same items: nothing is counted twice.
    s.sync().await;
    s.sync().await;
    let m = s.margins("").await;
    assert_eq!(customer(&m, "cus_0")["revenueMicrodollars"], 50_000_000, "{m}");
    assert_eq!(s.app.query_n("SELECT COUNT(*) AS n FROM revenue_items").await, 5);
}

#[tokio::test]
async fn refunds_and_credit_notes_count_in_their_own_month() {
    let s = setup().await;
    let now = now_secs();
    let last_month = previous_month_start(now) + 86_400;
    s.fake.add_customer("cus_r", "Refunded", "r@x.com", json!({}), last_month);
    // $120 with $20 tax last month; this month a $60 refund (half: $50 without tax) and a
    // $12 credit note ($10 without tax) whose refund must not count a second time.
    s.fake.add_invoice("in_r", "cus_r", "usd", 12_000, 2_000, last_month);
    s.fake.add_refund("re_1", "in_r", 6_000, now - 30);
    s.fake.add_credit_note("cn_1", "cus_r", 1_200, 200, now - 20, Some("re_2"));
    s.fake.add_refund("re_2", "in_r", 1_200, now - 20);
    s.fake.add_refund("re_pending", "in_r", 500, now - 10);
    s.fake.set_field("refunds", "re_pending", "status", json!("pending"));
    s.connect().await;
    s.sync().await;
    s.map("cus_r", "refunded").await;
    let before = s.margins(&format!("?period={}", month_of(last_month))).await;
    assert_eq!(customer(&before, "cus_r")["revenueMicrodollars"], 100_000_000, "{before}");
    let this = s.margins("").await;
    assert_eq!(customer(&this, "cus_r")["revenueMicrodollars"], -60_000_000, "{this}");
    assert_eq!(customer(&this, "cus_r")["healthTier"], "critical");

    // The pending refund succeeds: the next sync rewrites it.
    s.fake.set_field("refunds", "re_pending", "status", json!("succeeded"));
    s.sync().await;
    let this = s.margins("").await;
    assert_eq!(
        customer(&this, "cus_r")["revenueMicrodollars"],
        -64_160_000,
        "$5 less its tax share, rounded down to $4.16: {this}"
    );
}

#[tokio::test]
async fn tiers_sit_at_their_exact_boundaries() {
    let s = setup().await;
    let now = now_secs();
    // (customer, cost of $100.00 revenue, tier, margin %)
    let cases = [
        ("b50", 50_000_000, "healthy", 50.0),
        ("b50m", 50_000_001, "moderate", 50.0),
        ("b20", 80_000_000, "moderate", 20.0),
        ("b20m", 80_000_001, "at_risk", 20.0),
        ("b0", 100_000_000, "at_risk", 0.0),
        ("b0m", 100_000_001, "critical", 0.0),
    ];
    for (i, (name, cost, _, _)) in cases.iter().enumerate() {
        let id = format!("cus_{name}");
        s.fake.add_customer(&id, name, &format!("{name}@x.com"), json!({}), now - 100);
        s.fake.add_invoice(
            &format!("in_{name}"),
            &id,
            "usd",
            10_000,
            0,
            now - 50 - i64::try_from(i).unwrap(),
        );
        s.spend(name, "gpt-4o", *cost).await;
    }
    s.connect().await;
    s.sync().await;
    for (name, ..) in &cases {
        s.map(&format!("cus_{name}"), name).await;
    }
    let m = s.margins("").await;
    for (name, cost, tier, percent) in &cases {
        let c = customer(&m, &format!("cus_{name}"));
        assert_eq!(c["healthTier"], *tier, "{name}: {c}");
        assert_eq!(c["costMicrodollars"], *cost, "{name}");
        assert_eq!(c["marginMicrodollars"], 100_000_000 - cost, "{name}");
        assert_eq!(c["marginPercent"].as_f64().unwrap(), *percent, "{name} rounds to hundredths");
        assert_eq!(c["budgetSuggestionMicrodollars"], 50_000_000);
        assert_eq!(c["sparkline"].as_array().unwrap().len(), 6, "one known point: no projection");
        assert_eq!(c["projectedTierWorsening"], false);
        assert!(c["avatarUrl"].is_null());
    }
    assert_eq!(m["summary"]["criticalCount"], 1);
    assert_eq!(m["summary"]["atRiskCount"], 2);
    assert_eq!(m["summary"]["totalRevenueMicrodollars"], 600_000_000);
    assert_eq!(m["summary"]["totalCostMicrodollars"], 460_000_003);

    let r = s.owner.get("/api/margins?format=csv").await;
    assert_eq!(r.status, 200);
    let disposition = format!("attachment; filename=margins-{}.csv", month_of(now));
    assert_eq!(r.header("content-disposition"), Some(disposition.as_str()));
    let mut lines = r.text.lines();
    assert_eq!(
        lines.next(),
        Some("Customer,Processor ID,Tag Value,Revenue ($),Cost ($),Margin (%),Margin ($),Health Tier")
    );
    assert!(r.text.contains("b0m,cus_b0m,b0m,100.000000,100.000001,0.00,-0.000001,critical"), "{}", r.text);

    for bad in ["?period=2026-13", "?period=26-01", "?format=xml"] {
        let r = s.owner.get(&format!("/api/margins{bad}")).await;
        assert_eq!((r.status, r.code()), (400, "validation_error"), "{bad}: {r:?}");
    }
}

#[tokio::test]
async fn threshold_event_fires_once_per_worsening() {
    let s = setup().await;
    // The outbox keeps only kinds some endpoint subscribes to.
    crate::support::subscribe_all(&s.owner).await;
    let now = now_secs();
    s.fake.add_customer("cus_t", "Tenant", "t@x.com", json!({}), now - 100);
    s.fake.add_invoice("in_t1", "cus_t", "usd", 10_000, 0, now - 60);
    s.spend("tenant", "gpt-4o", 10_000_000).await;
    s.connect().await;
    s.map("cus_t", "tenant").await;
    let events = "margin.threshold_crossed";
    s.sync().await;
    assert_eq!(s.app.outbox_count(events).await, 0, "the first sync sets the baseline");

    s.spend("tenant", "gpt-4o", 95_000_000).await; // $105 of cost on $100: critical
    s.sync().await;
    assert_eq!(s.app.outbox_count(events).await, 1);
    s.sync().await;
    assert_eq!(s.app.outbox_count(events).await, 1, "not twice");

    s.fake.add_invoice("in_t2", "cus_t", "usd", 100_000, 0, now - 30); // $1,100 revenue: healthy
    s.sync().await;
    assert_eq!(s.app.outbox_count(events).await, 1, "not on improvement");

    s.spend("tenant", "gpt-4o", 700_000_000).await; // $805 on $1,100: 26.8 %, moderate
    s.sync().await;
    assert_eq!(s.app.outbox_count(events).await, 2, "a new worsening fires again");
    let payload = format!("SELECT COUNT(*) AS n FROM event_outbox WHERE event_type = '{events}' AND payload LIKE '%\"previousTier\":\"healthy\"%' AND payload LIKE '%\"currentTier\":\"moderate\"%' AND payload LIKE '%\"processorId\":\"cus_t\"%' AND payload LIKE '%\"revenue_microdollars\":1100000000%'");
    assert_eq!(s.app.query_n(&payload).await, 1);
}

#[tokio::test]
async fn a_revoked_key_fails_the_sync_visibly() {
    let s = setup().await;
    s.connect().await;
    s.fake.add_restricted_key(KEY, &["customers"]);
    let r = s.owner.get("/api/payprocessor/revenue-sync").await;
    assert_eq!((r.status, r.code()), (400, "processor_validation_failed"), "{r:?}");
    assert!(r.body["error"]["message"].as_str().unwrap().contains("rak_invoice_read"), "{r:?}");
    assert_eq!(s.margins("").await["summary"]["syncStatus"], "error");
}
