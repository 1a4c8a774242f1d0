//! Every page of the dashboard with real data, at a laptop's width (1366 px) and a
//! phone's (390 px): nothing scrolls sideways, every control has a label and every
//! button a name, text meets the WCAG AA contrast ratio, the keyboard reaches the
//! page with its focus drawn, and the console stays clean. With
//! `SPENDGATE_SCREENSHOTS=<dir>` this is the run that pictures every page at both
//! widths (docs/screenshots/ in the repository).

use serde_json::json;

use super::{no_console_errors, OWNER};
use crate::proxy::{openai, setup_with};
use crate::support::browser::{lit, Browser, Width};
use crate::support::receiver;
use crate::support::{create_key, key_client, PASSWORD};

#[tokio::test]
async fn every_page_reads_well_at_laptop_and_phone_width() {
    let s = setup_with(&[("SPENDGATE_SECRET_KEY", "dashboard-test-secret-key-of-32-characters".to_owned())])
        .await;
    let user = s.user_id().await;
    let owner = &s.owner;
    let (support_id, support) = create_key(owner, "support-bot").await;
    // Budgets of each kind, one with a velocity limit the second call trips.
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 2_000_000, "resetInterval": "daily",
        "thresholdPercentages": [50, 80], "velocityLimitMicrodollars": 900_500, "velocityWindowSeconds": 60, "velocityCooldownSeconds": 600 })).await;
    s.budget(json!({ "entityType": "user", "entityId": user, "maxBudgetMicrodollars": 40_000_000, "resetInterval": "monthly" })).await;
    s.budget(json!({ "entityType": "tag", "entityId": "team=search", "maxBudgetMicrodollars": 5_000_000, "resetInterval": "weekly", "thresholdPercentages": [75] })).await;
    let costly = |max_tokens: i64| {
        openai(
            json!({ "max_tokens": max_tokens, "mock": { "usage": { "input": 2_000_000, "output": 1_000_000 } } }),
        )
    };
    assert_eq!(s.chat(costly(10)).await.status, 200);
    s.events(1).await;
    assert_eq!(s.chat(costly(1_000_000)).await.status, 429);
    let sdk = key_client(&s.app.server.control, &support);
    for (model, cost, team, customer) in [
        ("claude-sonnet-4-5", 2_400_000, "support", "acme"),
        ("gpt-4o", 1_350_000, "search", "globex"),
        ("gpt-4o-mini", 420_000, "search", "acme"),
        ("claude-haiku-4-5", 180_000, "support", "initech"),
    ] {
        let body = json!({ "provider": if model.starts_with("claude") { "anthropic" } else { "openai" }, "model": model, "inputTokens": 1200,
            "outputTokens": 300, "costMicrodollars": cost, "tags": { "team": team }, "customer": customer, "sessionId": "sess-42" });
        assert_eq!(sdk.post("/api/cost-events", body).await.status, 201);
    }
    let event =
        owner.get("/api/cost-events?limit=1").await.body["data"][0]["id"].as_str().unwrap().to_owned();
    let proxy = key_client(&s.app.server.proxy, &support);
    let r = proxy.post("/v1/bind", json!({ "customerId": "acme", "planRef": "growth", "budgetCap": 25_000_000, "marginTargetPercent": 40 })).await;
    assert_eq!(r.status, 200, "{r:?}");
    for (agent, kind, payload) in [
        ("mailer-7", "send_email", json!({ "to": "cfo@example.com", "subject": "Q3 numbers" })),
        ("deployer-2", "shell_command", json!({ "cmd": "kubectl rollout restart deploy/api" })),
    ] {
        let r = sdk
            .post("/api/actions", json!({ "agentId": agent, "actionType": kind, "payload": payload }))
            .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    let decided = sdk.post("/api/actions", json!({ "agentId": "cleaner-1", "actionType": "file_delete", "payload": { "path": "/tmp/cache" } })).await;
    let decided = decided.body["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(owner.post_empty(&format!("/api/actions/{decided}/approve")).await.status, 200);
    let r = owner.post("/api/webhooks", json!({ "url": receiver::dead_url(), "eventTypes": ["budget.exceeded", "action.created"], "description": "On-call pager" })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = owner
        .post(
            "/api/provider-credentials",
            json!({ "upstream": "openai", "secret": "sk-tour-0123456789abcdef", "name": "prod" }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let org = owner.get("/api/auth/session").await.body["data"]["org"]["id"].as_str().unwrap().to_owned();
    let r = owner
        .post(
            &format!("/api/orgs/{org}/invitations"),
            json!({ "email": "new@example.com", "role": "viewer" }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");

    let b = Browser::start(&s.app.server.control).await;
    b.goto("/").await;
    b.field("Email").await;
    // The checks catch what they look for: an unlabelled field, a nameless button,
    // pale text and a page wider than the phone, put there on purpose.
    b.eval("const m = document.querySelector('main'); \
        const i = document.createElement('input'); i.id = 'probe-field'; \
        const x = document.createElement('button'); x.id = 'probe-button'; \
        const p = document.createElement('p'); p.id = 'probe-text'; p.textContent = 'pale'; p.style.color = '#c0c0c0'; \
        const w = document.createElement('div'); w.id = 'probe-wide'; w.style.width = '900px'; w.textContent = 'wide'; \
        m.append(i, x, p, w); return true;").await;
    b.set_width(Width::Phone).await;
    let caught = b.accessibility_problems().await.join("\n");
    for probe in ["probe-field", "probe-button", "probe-text", "probe-wide"] {
        assert!(caught.contains(probe), "{probe} not caught:\n{caught}");
    }
    b.goto("/").await;
    b.field("Email").await;
    let mut problems = check(&b, "signin").await;
    b.screenshot("signin").await;
    b.sign_in(OWNER, PASSWORD).await;

    // The keyboard, on a page just opened: the first Tab reaches "Skip to content",
    // the next the navigation, each with its focus drawn.
    b.goto("/").await;
    b.wait_xpath("//h2[normalize-space()='Spend over time']").await;
    let (tag, text, drawn) = b.tab(1).await;
    assert_eq!((tag.as_str(), text.as_str(), drawn), ("a", "Skip to content", true));
    let (tag, text, drawn) = b.tab(1).await;
    assert_eq!((tag.as_str(), text.as_str(), drawn), ("a", "Overview", true));

    let pages: [(&str, String, String); 14] = [
        ("overview", "/".into(), "//figure[@class='chart-block']//strong[@class='chart-total']".into()),
        ("cost-events", "/cost-events".into(), "//tbody/tr/td[normalize-space()='claude-haiku-4-5']".into()),
        ("cost-event", format!("/cost-events/{event}"), "//dl[@class='detail']".into()),
        ("budgets", "/budgets".into(), "//li[@class='tripped-breaker']".into()),
        (
            "actions",
            "/actions".into(),
            "//tr[td/span[normalize-space()='approved']]//span[normalize-space()='owner@example.com']".into(),
        ),
        ("webhooks", "/webhooks".into(), "//td[normalize-space()='budget.exceeded, action.created']".into()),
        ("keys", "/keys".into(), "//td/a[normalize-space()='support-bot']".into()),
        (
            "key",
            format!("/keys/{support_id}"),
            "//section[h2[normalize-space()='Recent calls of this key']]//tbody/tr".into(),
        ),
        ("provider-keys", "/provider-keys".into(), "//td[normalize-space()='prod']".into()),
        ("pricing", "/pricing".into(), "//td/code[normalize-space()='gpt-4o']".into()),
        ("customers", "/customers".into(), "//td/a[normalize-space()='acme']".into()),
        (
            "customer",
            "/customers/acme".into(),
            "//section[h2[normalize-space()='Recent calls of this customer']]//tbody/tr".into(),
        ),
        ("audit-log", "/audit-log".into(), "//td[normalize-space()='invitation.created']".into()),
        ("organization", "/organization".into(), "//td[normalize-space()='new@example.com']".into()),
    ];
    for (name, path, ready) in &pages {
        b.goto(path).await;
        b.wait_xpath(ready).await;
        problems.extend(check(&b, name).await);
        b.screenshot(name).await;
    }
    // A budget's usage bar is a meter to assistive technology, named after its budget,
    // with its values, on the budgets page and the overview alike: the tag's budget has
    // the two tagged events of team=search, and nothing held.
    let budgets = owner.get("/api/budgets").await;
    let tag =
        budgets.body["data"].as_array().unwrap().iter().find(|b| b["entityId"] == "team=search").unwrap();
    assert_eq!(
        (tag["spendMicrodollars"].as_i64(), tag["reservedMicrodollars"].as_i64()),
        (Some(1_770_000), Some(0))
    );
    let id = lit(tag["id"].as_str().unwrap());
    for (path, bar) in [
        ("/budgets", format!("//tr[@data-budget={id}]//div[contains(@class,'bar')]")),
        ("/", format!("//li[@data-budget={id}]//div[contains(@class,'bar')]")),
    ] {
        b.goto(path).await;
        let bar = b.wait_xpath(&bar).await;
        let (role, name) = b.accessible(&bar).await;
        assert_eq!((role.as_str(), name.as_str()), ("meter", "Tag team=search budget"), "{path}");
        let mut values = Vec::new();
        for attr in ["aria-valuemin", "aria-valuemax", "aria-valuenow", "aria-valuetext"] {
            values.push(bar.attr(attr).await.unwrap().unwrap_or_default());
        }
        assert_eq!(values, ["0", "5", "1.77", "$1.77 of $5.00 spent (35%)"], "{path}");
    }
    // Margins need a paid plan (its own test pictures it); the page still has to read well.
    b.goto("/margins").await;
    b.wait_text("Margins need the Pro plan or above.").await;
    problems.extend(check(&b, "margins").await);
    // The actions history names who decided, with the id behind its copy button.
    b.goto("/actions").await;
    let who = format!("//tr[td/span[normalize-space()='approved']]//span[normalize-space()={}]", lit(OWNER));
    b.wait_xpath(&who).await;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    no_console_errors(&b).await;
}

/// The page's problems at both widths, each prefixed with the page and width.
async fn check(b: &Browser, page: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (width, label) in [(Width::Laptop, "laptop"), (Width::Phone, "phone")] {
        b.set_width(width).await;
        out.extend(
            b.accessibility_problems().await.into_iter().map(|p| format!("{page} at {label} width: {p}")),
        );
    }
    b.set_width(Width::Default).await;
    out
}
