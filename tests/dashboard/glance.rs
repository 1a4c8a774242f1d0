//! Budgets you can read at a glance, in the browser against the API: each usage bar's
//! spend, in-flight holds and limit are the API's, thresholds are marked, the period's
//! end is the API's, the projection is drawn; budgets nearest their limit come first
//! on the overview, and an open velocity breaker and the call it refused show as
//! tripped right now. Entities are shown by name, with their ids one click away.

use serde_json::{json, Value};

use super::{no_console_errors, OWNER};
use crate::proxy::{openai, setup_with};
use crate::support::browser::{lit, usd, Browser};
use crate::support::{create_key, read, PASSWORD};

/// A call of gpt-4o-mini that costs $0.90 (2M input, 1M output tokens), asking for
/// `max_tokens` and answered after `delay_ms`.
fn costly(max_tokens: i64, delay_ms: i64) -> Value {
    openai(json!({ "max_tokens": max_tokens,
        "mock": { "usage": { "input": 2_000_000, "output": 1_000_000 }, "delay_ms": delay_ms } }))
}

fn budget_of<'a>(budgets: &'a [Value], entity_id: &str) -> &'a Value {
    budgets.iter().find(|b| b["entityId"] == entity_id).unwrap_or_else(|| panic!("no budget of {entity_id}"))
}

#[tokio::test]
async fn budget_bars_periods_projections_and_what_is_tripped_are_the_apis() {
    let s = setup_with(&[]).await;
    let user = s.user_id().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 2_000_000,
        "resetInterval": "daily", "thresholdPercentages": [50, 80],
        "velocityLimitMicrodollars": 900_500, "velocityWindowSeconds": 60, "velocityCooldownSeconds": 600 }))
        .await;
    s.budget(json!({ "entityType": "user", "entityId": user, "maxBudgetMicrodollars": 100_000_000,
        "resetInterval": "monthly" }))
        .await;
    // $0.90 settles on both budgets; the next call of the key would pass the velocity
    // limit ($0.9005 a minute) and is refused, which opens the breaker.
    assert_eq!(s.chat(costly(10, 0)).await.status, 200);
    s.events(1).await;
    let r = s.chat(costly(1_000, 0)).await;
    assert_eq!((r.status, r.code()), (429, "velocity_exceeded"), "{r:?}");
    // A slow call of another key of the same user holds room on the user's budget
    // while the page is read.
    let (_, slow_key) = create_key(&s.owner, "slow-agent").await;
    let proxy = s.app.server.proxy.clone();
    let slow = tokio::spawn(async move {
        let c = reqwest::Client::new();
        let req = c
            .post(format!("{proxy}/v1/chat/completions"))
            .header("x-service-key", slow_key)
            .json(&costly(100_000, 60_000));
        let _ = read(req.send().await.unwrap()).await;
    });
    let mut budgets = Vec::new();
    for _ in 0..400 {
        budgets = s.owner.get("/api/budgets").await.body["data"].as_array().unwrap().clone();
        if budget_of(&budgets, &user)["reservedMicrodollars"].as_i64().unwrap_or(0) > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let key_budget = budget_of(&budgets, &s.key_id).clone();
    let user_budget = budget_of(&budgets, &user).clone();
    assert_eq!(key_budget["entityName"], "agent");
    assert_eq!(user_budget["entityName"], OWNER);
    assert_eq!(key_budget["spendMicrodollars"], 900_000, "{key_budget}");
    let held = user_budget["reservedMicrodollars"].as_i64().unwrap();
    assert!(held > 0, "{user_budget}");
    assert!(key_budget["currentPeriodEnd"].is_string() && user_budget["currentPeriodEnd"].is_string());

    let b = Browser::start(&s.app.server.control).await;
    b.goto("/budgets").await;
    b.sign_in(OWNER, PASSWORD).await;
    let key_row = "//tr[td//a[normalize-space()='agent']]";
    let user_row = format!("//tr[td//span[normalize-space()={}]]", lit(OWNER));
    for (row, budget) in [(key_row.to_owned(), &key_budget), (user_row.clone(), &user_budget)] {
        let spent = b.wait_xpath(&format!("{row}//span[@class='spent-text']")).await.text().await.unwrap();
        let limit = b.wait_xpath(&format!("{row}//span[@class='limit-text']")).await.text().await.unwrap();
        assert_eq!(spent, usd(budget["spendMicrodollars"].as_i64().unwrap()));
        assert_eq!(limit, usd(budget["maxBudgetMicrodollars"].as_i64().unwrap()));
        let end =
            b.wait_xpath(&format!("{row}//p[@class='period']/time")).await.attr("datetime").await.unwrap();
        assert_eq!(end.as_deref(), budget["currentPeriodEnd"].as_str(), "the period's end is the API's");
        b.wait_xpath(&format!("{row}//p[@class='projection' and (starts-with(normalize-space(), 'Runs out') or starts-with(normalize-space(), 'Lasts the period'))]")).await;
    }
    let held_text =
        b.wait_xpath(&format!("{user_row}//span[@class='held-text']")).await.text().await.unwrap();
    assert_eq!(held_text, usd(held), "the holds of calls in flight are the API's");
    // A screen reader hears the holds too, from the bar's meter.
    let (spend, limit) = (
        user_budget["spendMicrodollars"].as_i64().unwrap(),
        user_budget["maxBudgetMicrodollars"].as_i64().unwrap(),
    );
    let meter = b.wait_xpath(&format!("{user_row}//div[@role='meter']")).await;
    assert_eq!(
        meter.attr("aria-valuetext").await.unwrap(),
        Some(format!(
            "{} spent and {} held of {} ({}%)",
            usd(spend),
            usd(held),
            usd(limit),
            (spend + held) * 100 / limit
        ))
    );
    // 45% of the key's limit, thresholds 50 and 80 marked on its bar.
    b.wait_xpath(&format!("{key_row}//p[@class='usage-text' and contains(., '· 45%')]")).await;
    let marks = b.eval(&format!(
        "return document.evaluate({}, document, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null).snapshotLength;",
        lit(&format!("{key_row}//span[@class='threshold']"))
    )).await;
    assert_eq!(marks, 2);
    // The breaker is open now, and says so in the row and in "Tripped right now".
    b.wait_xpath(&format!("{key_row}//strong[starts-with(normalize-space(), 'Breaker open until')]")).await;
    b.wait_xpath("//li[@class='tripped-breaker' and contains(., 'API key agent')]").await;
    b.wait_xpath("//li[@class='tripped-refused' and .//a[normalize-space()='agent']]").await;
    // Names, not ids: the key's id is behind its copy button only.
    let page = b.body_text().await;
    assert!(!page.contains(&s.key_id) && !page.contains(&user), "an id is shown as text:\n{page}");
    let copy = b.wait_xpath(&format!("{key_row}//button[normalize-space()='Copy id']")).await;
    assert_eq!(copy.attr("title").await.unwrap().as_deref(), Some(s.key_id.as_str()));

    // The overview puts the budget nearest its limit first: the key's (45%) before
    // the user's (under 2%).
    b.click_link("Overview").await;
    let first = b.wait_xpath("(//li[@class='budget-card'])[1]").await;
    assert_eq!(first.attr("data-budget").await.unwrap().as_deref(), key_budget["id"].as_str());
    b.wait_xpath("(//li[@class='budget-card'])[2]//span[@class='held-text']").await;
    b.wait_xpath("//li[@class='tripped-breaker' and contains(., 'API key agent')]").await;
    no_console_errors(&b).await;
    slow.abort();
}
