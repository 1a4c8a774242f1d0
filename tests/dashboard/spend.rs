//! Spend over time in the browser against the API: the stacked chart by model, key,
//! tag value and customer adds up to the summary's total for the period whichever
//! way it is split, its series are named (keys by name), its read-out gives a day's
//! total; a key's and a customer's own pages show their trend, top models and latest
//! calls as the API has them.

use serde_json::{json, Value};

use super::{no_console_errors, signed_in};
use crate::support::browser::{lit, usd, Browser};
use crate::support::{create_key, key_client, Client};

async fn ingest(sdk: &Client, model: &str, cost: i64, tags: Value, customer: Option<&str>) {
    let mut body = json!({ "provider": "openai", "model": model, "inputTokens": 10, "outputTokens": 5,
        "costMicrodollars": cost, "tags": tags });
    if let Some(c) = customer {
        body["customer"] = json!(c);
    }
    let r = sdk.post("/api/cost-events", body).await;
    assert_eq!(r.status, 201, "{r:?}");
}

/// The chart's total as drawn: its caption, and the sum of its bars.
async fn chart_total(b: &Browser) -> (String, i64) {
    let caption = b.wait_xpath("//figcaption/strong[@class='chart-total']").await.text().await.unwrap();
    let drawn = b
        .eval("return [...document.querySelectorAll('svg.chart rect[data-cost]')].reduce((a, r) => a + Number(r.dataset.cost), 0);")
        .await;
    (caption, drawn.as_i64().unwrap())
}

/// Waits until the legend lists every one of `names`.
async fn legend(b: &Browser, names: &[&str]) {
    for n in names {
        b.wait_xpath(&format!(
            "//ul[@class='legend']//span[@class='series-name' and normalize-space()={}]",
            lit(n)
        ))
        .await;
    }
}

#[tokio::test]
async fn stacked_charts_add_up_to_the_summary_and_key_and_customer_pages_show_their_own() {
    let (app, owner, b) = signed_in().await;
    let (search_id, search) = create_key(&owner, "search-bot").await;
    let (_, support) = create_key(&owner, "support-bot").await;
    let (search, support) =
        (key_client(&app.server.control, &search), key_client(&app.server.control, &support));
    ingest(&search, "gpt-4o", 1_200_000, json!({ "team": "search" }), Some("acme")).await;
    ingest(&search, "gpt-4o-mini", 300_000, json!({ "team": "search" }), Some("globex")).await;
    ingest(&search, "gpt-4o", 50_000, json!({}), None).await;
    ingest(&support, "claude-sonnet", 2_000_000, json!({ "team": "support" }), Some("acme")).await;
    for customer in ["acme", "globex"] {
        let r = owner.post("/api/budgets", json!({ "entityType": "customer", "entityId": customer, "maxBudgetMicrodollars": 50_000_000 })).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    let total = 3_550_000;
    let summary = owner.get("/api/cost-events/summary?period=30d").await.body["data"].clone();
    assert_eq!(summary["totals"]["totalCostMicrodollars"], total);

    b.click_link("Overview").await;
    b.wait_xpath("//h2[normalize-space()='Spend over time']").await;
    legend(&b, &["gpt-4o", "gpt-4o-mini", "claude-sonnet"]).await;
    assert_eq!(chart_total(&b).await, (usd(total), total));
    // The read-out of the focused chart: today, the summary's total of the day.
    b.eval("document.querySelector('svg.chart').focus(); return true;").await;
    let today = summary["daily"].as_array().unwrap().last().unwrap().clone();
    let readout = b.wait_xpath("//p[@class='readout' and strong]").await.text().await.unwrap();
    let expected = format!(
        "{}: {}",
        today["date"].as_str().unwrap(),
        usd(today["totalCostMicrodollars"].as_i64().unwrap())
    );
    assert!(readout.starts_with(&expected), "{readout} / {expected}");

    for (by, names) in [
        ("api_key", vec!["search-bot", "support-bot"]),
        ("tag", vec!["search", "support", "Other"]),
        ("customer", vec!["acme", "globex", "Other"]),
    ] {
        b.choose("Stack by", by).await;
        legend(&b, &names).await;
        assert_eq!(chart_total(&b).await, (usd(total), total), "stacked by {by}");
    }
    assert!(!b.body_text().await.contains(&search_id), "keys are named in the chart");
    // Another period reads the same rollups: the chart is the 90-day summary's.
    b.choose("Period", "90d").await;
    let ninety = owner.get("/api/cost-events/summary?period=90d").await.body["data"]["totals"]
        ["totalCostMicrodollars"]
        .as_i64()
        .unwrap();
    b.wait_xpath(&format!(
        "//figcaption[contains(., 'last 90 days')]/strong[normalize-space()={}]",
        lit(&usd(ninety))
    ))
    .await;
    no_console_errors(&b).await;

    // A key's page: its trend, models and calls, as the attribution detail and the
    // event list have them.
    // (From the live list of calls, which stays put while the period's figures redraw.)
    b.wait_xpath("(//section[h2[normalize-space()='Recent calls']]//a[normalize-space()='search-bot'])[1]")
        .await
        .click()
        .await
        .unwrap();
    b.wait_xpath("//h1[starts-with(normalize-space(), 'API key: search-bot')]").await;
    let detail = owner.get(&format!("/api/cost-events/attribution/{search_id}?groupBy=api_key")).await.body
        ["data"]
        .clone();
    let spend = detail["totalCostMicrodollars"].as_i64().unwrap();
    assert_eq!(spend, 1_550_000);
    b.wait_xpath(&format!(
        "//h2[normalize-space()='Spend']/following-sibling::p[normalize-space()={}]",
        lit(&usd(spend))
    ))
    .await;
    assert_eq!(chart_total(&b).await, (usd(spend), spend));
    for m in detail["models"].as_array().unwrap() {
        let cell = format!(
            "//tr[td[normalize-space()={}] and td[normalize-space()={}]]",
            lit(m["model"].as_str().unwrap()),
            lit(&usd(m["cost"].as_i64().unwrap()))
        );
        b.wait_xpath(&cell).await;
    }
    let calls = owner.get(&format!("/api/cost-events?apiKeyId={search_id}")).await.body["data"]
        .as_array()
        .unwrap()
        .len();
    b.wait_xpath(&format!(
        "//section[h2[normalize-space()='Recent calls of this key']]//tbody[count(tr)={calls}]"
    ))
    .await;

    // A customer's page: acme spent through both keys.
    b.goto("/customers/acme").await;
    b.wait_xpath("//p[normalize-space()='This customer is not bound to a plan; its spend is below.']").await;
    assert_eq!(chart_total(&b).await, (usd(3_200_000), 3_200_000));
    b.wait_xpath("//tr[td[normalize-space()='claude-sonnet'] and td[normalize-space()='$2.00']]").await;
    b.wait_xpath("//tr[td[normalize-space()='gpt-4o'] and td[normalize-space()='$1.20']]").await;
    b.wait_xpath("//section[h2[normalize-space()='Recent calls of this customer']]//tbody[count(tr)=2]")
        .await;
    no_console_errors(&b).await;
}

#[tokio::test]
async fn the_daily_series_api_splits_exactly_and_refuses_bad_input_and_other_organizations() {
    let app = crate::support::TestApp::start().await;
    let owner = app.owner().await;
    let (key_id, raw) = create_key(&owner, "bot").await;
    let sdk = key_client(&app.server.control, &raw);
    ingest(&sdk, "gpt-4o", 700_000, json!({ "team": "a" }), Some("acme")).await;
    ingest(&sdk, "gpt-4o-mini", 200_000, json!({ "team": "b" }), Some("globex")).await;
    ingest(&sdk, "claude-haiku", 100_000, json!({}), None).await;

    // One series apart, the rest in "other": together the day's total.
    let d = owner.get("/api/cost-events/daily?by=model&limit=1").await;
    assert_eq!(d.status, 200, "{d:?}");
    let d = &d.body["data"];
    assert_eq!(
        (d["series"][0]["key"].as_str(), d["series"][0]["totalCostMicrodollars"].as_i64()),
        (Some("gpt-4o"), Some(700_000))
    );
    assert_eq!(
        (d["totalSeries"].as_i64(), d["other"]["totalCostMicrodollars"].as_i64()),
        (Some(3), Some(300_000))
    );
    assert_eq!(d["totals"], json!({ "totalCostMicrodollars": 1_000_000, "totalRequests": 3 }));
    let summary = owner.get("/api/cost-events/summary").await.body["data"]["daily"].clone();
    let days: Vec<Value> = d["daily"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| json!({ "date": p["date"], "totalCostMicrodollars": p["cost"] }))
        .collect();
    assert_eq!(Value::Array(days), summary, "the daily totals are the summary's");
    // Keys by name; a tag's untagged events and unknown customers are "other".
    let k = owner.get("/api/cost-events/daily?by=api_key").await.body["data"].clone();
    assert_eq!(
        (k["series"][0]["key"].as_str(), k["series"][0]["name"].as_str()),
        (Some(key_id.as_str()), Some("bot"))
    );
    let t = owner.get("/api/cost-events/daily?by=tag&tagKey=team").await.body["data"].clone();
    assert_eq!(
        (t["series"].as_array().unwrap().len(), t["other"]["totalCostMicrodollars"].as_i64()),
        (2, Some(100_000))
    );
    let c = owner.get("/api/cost-events/daily?by=customer").await.body["data"].clone();
    assert_eq!(
        (c["series"].as_array().unwrap().len(), c["other"]["totalCostMicrodollars"].as_i64()),
        (0, Some(1_000_000)),
        "no customer is bound or budgeted yet"
    );
    let r = owner
        .post(
            "/api/budgets",
            json!({ "entityType": "customer", "entityId": "acme", "maxBudgetMicrodollars": 5_000_000 }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let c = owner.get("/api/cost-events/daily?by=customer").await.body["data"].clone();
    assert_eq!(
        (c["series"][0]["key"].as_str(), c["series"][0]["totalCostMicrodollars"].as_i64()),
        (Some("acme"), Some(700_000))
    );
    // One customer's or one key's own spend, by model.
    let one = owner.get("/api/cost-events/daily?by=model&customerId=globex").await.body["data"].clone();
    assert_eq!(
        (one["series"][0]["key"].as_str(), one["totals"]["totalCostMicrodollars"].as_i64()),
        (Some("gpt-4o-mini"), Some(200_000))
    );
    let mine = owner.get(&format!("/api/cost-events/daily?by=model&apiKeyId={key_id}")).await.body["data"]
        ["totals"]
        .clone();
    assert_eq!(mine["totalCostMicrodollars"], 1_000_000);
    // The event list filtered by customer.
    let listed = owner.get("/api/cost-events?customerId=acme").await.body["data"].clone();
    assert_eq!((listed.as_array().unwrap().len(), listed[0]["model"].as_str()), (1, Some("gpt-4o")));

    for bad in [
        "by=trace",
        "by=tag",
        "by=tag&tagKey=a%20b",
        "by=model&limit=0",
        "by=model&limit=21",
        "by=model&period=1y",
        "by=api_key&apiKeyId=svc_key_nope",
        "by=customer&customerId=acme",
        "by=model&customerId=a%20b",
        "by=tag&tagKey=team&apiKeyId=svc_key_00000000-0000-0000-0000-000000000000",
    ] {
        let r = owner.get(&format!("/api/cost-events/daily?{bad}")).await;
        assert_eq!((r.status, r.code()), (400, "validation_error"), "{bad}: {r:?}");
    }
    assert_eq!(owner.get("/api/cost-events?customerId=a%20b").await.code(), "validation_error");
    assert_eq!(app.control().get("/api/cost-events/daily?by=model").await.status, 401);
    // Another organization's key scope finds nothing of this one's.
    let other = app.user_in_org("other@example.com", "Other Org", "owner").await;
    let theirs = other.get(&format!("/api/cost-events/daily?by=model&apiKeyId={key_id}")).await;
    assert_eq!(theirs.status, 200, "{theirs:?}");
    assert_eq!(theirs.body["data"]["totals"], json!({ "totalCostMicrodollars": 0, "totalRequests": 0 }));
    assert_eq!(other.get("/api/cost-events?customerId=acme").await.body["data"], json!([]));
}
