//! The dashboard in a real headless Chromium: sign-in, the overview's total against
//! the summary API, a budget made through the form, actions approved and arriving
//! without a reload, a key shown once, and every other page showing data created
//! through the API. Elements are found as a person finds them: by label, link and
//! button text. The modules below drive what issue #30 asked of the dashboard; with
//! `SPENDGATE_SCREENSHOTS=<dir>` the tests save PNGs of every page there, at laptop
//! and phone width (see `tour`).

mod first_run;
mod glance;
mod live;
mod spend;
mod tour;

use serde_json::json;

use crate::margins;
use crate::support::browser::{lit, usd, Browser};
use crate::support::receiver;
use crate::support::{create_key, key_client, read, Client, TestApp, PASSWORD};

const OWNER: &str = "owner@example.com";

/// A server with an owner, and a browser signed in as that owner.
async fn signed_in() -> (TestApp, Client, Browser) {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let browser = Browser::start(&app.server.control).await;
    browser.goto("/").await;
    browser.sign_in(OWNER, PASSWORD).await;
    (app, owner, browser)
}

async fn no_console_errors(b: &Browser) {
    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

async fn ingest(app: &TestApp, raw_key: &str, model: &str, cost: i64, tags: serde_json::Value) -> String {
    let sdk = key_client(&app.server.control, raw_key);
    let body = json!({ "provider": "openai", "model": model, "inputTokens": 100, "outputTokens": 20,
        "costMicrodollars": cost, "tags": tags, "sessionId": "sess-1" });
    let r = sdk.post("/api/cost-events", body).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.body["data"]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_unauthenticated_visit_signs_in_and_the_overview_total_is_the_summary_total() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "agent").await;
    for (model, cost) in [("gpt-4o", 1_234_567), ("gpt-4o-mini", 5_005), ("claude-sonnet", 2_000_000)] {
        ingest(&app, &raw, model, cost, json!({ "team": "search" })).await;
    }
    let b = Browser::start(&app.server.control).await;
    b.goto("/budgets").await;
    b.field("Email").await;
    b.field("Password").await;
    b.button("", "Sign in").await;
    assert_eq!(b.title().await, "Sign in · spendgate");

    b.fill("Email", OWNER).await;
    b.fill("Password", "not-the-password").await;
    b.click_button("Sign in").await;
    b.wait_text("Wrong email or password.").await;
    b.sign_in(OWNER, PASSWORD).await;
    // Back where the visit started, with the whole navigation.
    b.wait_xpath("//h1[normalize-space()='Budgets']").await;
    for link in [
        "Overview",
        "Cost events",
        "Budgets",
        "Actions",
        "Webhooks",
        "API keys",
        "Provider keys",
        "Customers",
        "Margins",
        "Audit log",
    ] {
        b.wait_xpath(&format!("//nav//a[normalize-space()={}]", lit(link))).await;
    }

    b.click_link("Overview").await;
    let total = b.wait_xpath("//h2[normalize-space()='Total spend']/following-sibling::p[1]").await;
    let summary = owner.get("/api/cost-events/summary").await;
    let micros = summary.body["data"]["totals"]["totalCostMicrodollars"].as_i64().unwrap();
    assert_eq!(micros, 3_239_572);
    assert_eq!(total.text().await.unwrap(), usd(micros));
    assert_eq!(usd(micros), "$3.24");
    assert_eq!(b.title().await, "Overview · spendgate");
    // Daily chart, top models, keys and tags are drawn from the same data.
    b.wait_xpath("//*[local-name()='svg' and @role='img']").await;
    b.wait_xpath("//td[normalize-space()='claude-sonnet']").await;
    b.wait_xpath("//td[normalize-space()='agent']").await;
    b.wait_xpath("//td[normalize-space()='search']").await;
    no_console_errors(&b).await;

    b.click_button("Sign out").await;
    b.field("Email").await;
    assert_eq!(owner.get("/api/auth/session").await.status, 200, "the API client's own session is untouched");
}

#[tokio::test]
async fn a_budget_made_through_the_form_is_in_the_table_and_the_api() {
    let (_app, owner, b) = signed_in().await;
    let (key_id, _) = create_key(&owner, "worker").await;
    b.click_link("Budgets").await;
    b.click_button("New budget").await;
    b.choose("Entity type", "api_key").await;

    b.fill("Entity", "worker").await;
    b.fill("Limit (USD)", "12.5").await;
    b.choose("Policy", "warn").await;
    b.click_button("Save").await;
    // The row names the key; its id is behind the copy button.
    let row = "//tr[td//a[normalize-space()='worker']]".to_owned();
    b.wait_xpath(&format!("{row}//button[@title={}]", lit(&key_id))).await;
    b.wait_xpath(&format!("{row}/td[normalize-space()='$12.50']")).await;
    b.wait_xpath(&format!("{row}/td[normalize-space()='warn']")).await;
    let budgets = owner.get("/api/budgets").await.body["data"].as_array().unwrap().clone();
    assert_eq!(budgets.len(), 1, "{budgets:?}");
    assert_eq!(budgets[0]["entityId"], key_id);
    assert_eq!(budgets[0]["maxBudgetMicrodollars"], 12_500_000);
    assert_eq!(budgets[0]["policy"], "warn");

    // Edit keeps the entity and changes the limit.
    b.button(&row, "Edit").await.click().await.unwrap();
    b.fill("Limit (USD)", "20").await;
    b.click_button("Save").await;
    b.wait_xpath(&format!("{row}/td[normalize-space()='$20.00']")).await;
    assert_eq!(owner.get("/api/budgets").await.body["data"][0]["maxBudgetMicrodollars"], 20_000_000);

    // A bad amount is refused on the page and nothing is sent.
    b.click_button("New budget").await;
    b.fill("Entity", &key_id).await;
    b.fill("Limit (USD)", "12.345.6").await;
    b.click_button("Save").await;
    b.wait_xpath("//p[@role='alert' and contains(., 'Limit (USD) must be')]").await;
    assert_eq!(owner.get("/api/budgets").await.body["data"][0]["maxBudgetMicrodollars"], 20_000_000);

    // Delete asks once more, then the row goes.
    b.button(&row, "Delete").await.click().await.unwrap();
    b.button(&row, "Confirm delete").await.click().await.unwrap();
    b.wait_text("No budgets yet. Create one with “New budget”.").await;
    assert_eq!(owner.get("/api/budgets").await.body["data"], json!([]));
    no_console_errors(&b).await;
}

#[tokio::test]
async fn actions_are_approved_on_the_page_and_new_ones_arrive_without_a_reload() {
    let (app, owner, b) = signed_in().await;
    let (_, raw) = create_key(&owner, "agent").await;
    let agent = key_client(&app.server.control, &raw);
    let create = |agent_id: &'static str| {
        let agent = agent.clone();
        async move {
            let body = json!({ "agentId": agent_id, "actionType": "send_email",
                "payload": { "to": "cfo@example.com", "subject": "Q3 numbers" } });
            let r = agent.post("/api/actions", body).await;
            assert_eq!(r.status, 201, "{r:?}");
            r.body["data"]["id"].as_str().unwrap().to_owned()
        }
    };
    let first = create("mailer-7").await;
    b.click_link("Actions").await;
    let card = "//article[.//code[normalize-space()='mailer-7']]";
    b.wait_xpath(&format!("{card}//dd[normalize-space()='cfo@example.com']")).await;
    b.mark_document().await;
    b.button(card, "Approve").await.click().await.unwrap();
    b.wait_xpath(&format!("{card}//span[normalize-space()='approved']")).await;
    let r = owner.get(&format!("/api/actions/{first}")).await;
    assert_eq!(r.body["data"]["status"], "approved", "{r:?}");

    // A new request shows up by itself.
    let second = create("deployer-2").await;
    let card2 = "//article[.//code[normalize-space()='deployer-2']]";
    b.button(card2, "Reject").await;
    b.button(card2, "Reject").await.click().await.unwrap();
    b.wait_xpath(&format!("{card2}//span[normalize-space()='rejected']")).await;
    assert_eq!(owner.get(&format!("/api/actions/{second}")).await.body["data"]["status"], "rejected");
    // History filtered by status.
    b.choose("Status", "approved").await;
    b.wait_xpath(
        "//table//tr[td/code[normalize-space()='mailer-7'] and td/span[normalize-space()='approved']]",
    )
    .await;
    assert!(b.document_is_marked().await, "the page was reloaded");
    no_console_errors(&b).await;
}

#[tokio::test]
async fn a_new_key_is_shown_once_and_works() {
    let (app, owner, b) = signed_in().await;
    b.click_link("API keys").await;
    b.fill("Name", "billing-agent").await;
    b.click_button("Create key").await;
    let raw = b
        .wait_xpath("//code[starts-with(normalize-space(), 'svc_live_sk_') and string-length(normalize-space()) > 40]")
        .await.text().await.unwrap();
    assert_eq!(raw.len(), "svc_live_sk_".len() + 32, "{raw}");
    assert!(raw["svc_live_sk_".len()..].chars().all(|c| c.is_ascii_hexdigit()), "{raw}");
    b.button("", "Copy").await;
    b.wait_xpath("//td[normalize-space()='billing-agent']").await;
    let sdk = key_client(&app.server.control, &raw);
    assert_eq!(sdk.get("/api/auth/introspect").await.status, 200, "the shown key is the real one");

    b.click_link("Budgets").await;
    b.wait_xpath("//h1[normalize-space()='Budgets']").await;
    b.client.back().await.unwrap();
    b.wait_xpath("//td[normalize-space()='billing-agent']").await;
    assert!(!b.body_text().await.contains(&raw), "the raw key is shown only once");
    assert!(!b.client.source().await.unwrap().contains(&raw));

    // Revoke asks once more.
    let row = "//tr[td[normalize-space()='billing-agent']]";
    b.button(row, "Revoke").await.click().await.unwrap();
    b.button(row, "Confirm revoke").await.click().await.unwrap();
    b.wait_text("No keys yet.").await;
    assert_eq!(owner.get("/api/keys").await.body["data"], json!([]));
    no_console_errors(&b).await;
}

#[tokio::test]
async fn provider_keys_are_saved_rotated_and_deleted_on_their_page_and_never_shown() {
    // PostgreSQL needs an explicit secret_key; SQLite generates one.
    let env = [("SPENDGATE_SECRET_KEY", "dashboard-test-secret-key-of-32-characters".to_owned())];
    let app = TestApp::start_with(if crate::support::backend_is_postgres() { &env } else { &[] }).await;
    let owner = app.owner().await;
    let b = Browser::start(&app.server.control).await;
    b.goto("/").await;
    b.sign_in(OWNER, PASSWORD).await;
    b.click_link("Provider keys").await;
    b.wait_text("No provider keys stored yet.").await;
    let first = "sk-ant-dashboard-first-0123456789abcdef";
    b.choose("Provider", "anthropic").await;
    b.fill("API key", first).await;
    b.fill("Name (optional)", "prod").await;
    b.click_button("Save key").await;
    let row = "//tr[td[normalize-space()='anthropic']]";
    b.wait_xpath(&format!("{row}/td[normalize-space()='prod']")).await;
    b.wait_xpath(&format!("{row}//code[normalize-space()='sk-ant-d…']")).await;
    assert!(!b.client.source().await.unwrap().contains(first), "the secret is not on the page after saving");

    b.button(row, "Rotate").await.click().await.unwrap();
    let second = "sk-ant-dashboard-second-0123456789abcdef";
    b.fill("API key", second).await;
    b.click_button("Save key").await;
    b.wait_text("Saved the anthropic key (sk-ant-d…).").await;
    let listed = owner.get("/api/provider-credentials").await;
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 1, "{listed:?}");
    assert_eq!(listed.body["data"][0]["name"], "prod");
    assert_ne!(listed.body["data"][0]["createdAt"], listed.body["data"][0]["updatedAt"], "{listed:?}");

    b.button(row, "Delete").await.click().await.unwrap();
    b.button(row, "Confirm delete").await.click().await.unwrap();
    b.wait_text("No provider keys stored yet.").await;
    assert_eq!(owner.get("/api/provider-credentials").await.body["data"], json!([]));

    // A key restricted to the stored provider keys, made on the API keys page.
    b.click_link("API keys").await;
    b.fill("Name", "strict-agent").await;
    b.field("Stored provider keys only").await.click().await.unwrap();
    b.click_button("Create key").await;
    b.wait_xpath("//td[normalize-space()='strict-agent (stored provider keys only)']").await;
    let keys = owner.get("/api/keys").await;
    assert_eq!(keys.body["data"][0]["requireStoredCredentials"], true, "{keys:?}");
    no_console_errors(&b).await;
}

#[tokio::test]
async fn cost_events_list_filter_and_detail() {
    let (app, owner, b) = signed_in().await;
    let (_, raw) = create_key(&owner, "crawler").await;
    ingest(&app, &raw, "gpt-4o", 2_500_000, json!({ "team": "search" })).await;
    let id = ingest(&app, &raw, "claude-haiku", 1_005_000, json!({ "team": "ops" })).await;
    b.click_link("Cost events").await;
    b.wait_xpath("//tr[td[normalize-space()='gpt-4o'] and td[normalize-space()='$2.50']]").await;
    // Newest first, in the API's order.
    let newest = owner.get("/api/cost-events").await.body["data"][0]["model"].as_str().unwrap().to_owned();
    let first = b.wait_xpath("//tbody/tr[1]/td[3]").await.text().await.unwrap();
    assert_eq!(first, newest);

    b.fill("Tag", "team=search").await;
    b.click_button("Filter").await;
    b.wait_xpath("//tbody[count(tr)=1]/tr/td[normalize-space()='gpt-4o']").await;
    b.fill("Tag", "").await;
    b.fill("Model", "claude-haiku").await;
    b.click_button("Filter").await;
    b.wait_xpath("//tbody[count(tr)=1]/tr/td[normalize-space()='claude-haiku']").await;
    b.click_link("Details").await;
    b.wait_xpath(&format!("//dd/code[normalize-space()={}]", lit(&id))).await;
    b.wait_xpath("//dd[normalize-space()='$1.01']").await;
    assert_eq!(b.title().await, "Cost event claude-haiku · spendgate");

    // CSV export is a Pro feature; the suite's organizations are on Free.
    b.click_link("← All cost events").await;
    b.click_button("Export CSV").await;
    b.wait_text("CSV export needs the Pro plan or above.").await;
    no_console_errors(&b).await;

    // A path no page serves says so, signed in, with the navigation still there.
    b.goto("/no-such-page").await;
    b.wait_xpath("//h1[normalize-space()='Page not found']").await;
    assert_eq!(b.title().await, "Page not found · spendgate");
    b.click_link("Go to the overview").await;
    b.wait_xpath("//h2[normalize-space()='Total spend']").await;
}

#[tokio::test]
async fn webhooks_customers_audit_log_and_organization_show_real_data() {
    let (app, owner, b) = signed_in().await;
    let url = receiver::dead_url();
    let r = owner.post("/api/webhooks", json!({ "url": url, "eventTypes": ["action.created"] })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let (_, raw) = create_key(&owner, "billing").await;
    let proxy = key_client(&app.server.proxy, &raw);
    let r = proxy
        .post("/v1/bind", json!({ "customerId": "acme-corp", "planRef": "gold", "budgetCap": 25_000_000 }))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let gate =
        json!({ "customerId": "acme-corp", "estimatedCostMicrodollars": 1_250_000, "sendEvent": true });
    assert_eq!(proxy.post("/v1/gate", gate).await.body["allowed"], true);
    let org = org_id(&owner).await;
    let mut invitations = Vec::new();
    for email in ["new@example.com", "gone@example.com"] {
        let r = owner
            .post(&format!("/api/orgs/{org}/invitations"), json!({ "email": email, "role": "viewer" }))
            .await;
        assert_eq!(r.status, 201, "{r:?}");
        invitations.push(r.body["data"]["id"].as_str().unwrap().to_owned());
    }
    let r = owner.delete(&format!("/api/orgs/{org}/invitations/{}", invitations[1])).await;
    assert_eq!(r.status, 200, "{r:?}");

    b.click_link("Webhooks").await;
    let row = format!("//tr[td/code[normalize-space()={}]]", lit(&url));
    b.wait_xpath(&format!("{row}/td[normalize-space()='action.created']")).await;
    b.button(&row, "Send test").await.click().await.unwrap();
    b.wait_xpath("//p[@role='status' and starts-with(normalize-space(), 'Test failed')]").await;
    b.wait_xpath(&format!("//h2[normalize-space()={}]", lit(&format!("Deliveries to {url}")))).await;
    // An action makes an `action.created` delivery, which the open list picks up.
    let body = json!({ "agentId": "hook-check", "actionType": "db_write", "payload": { "table": "t" } });
    let r = key_client(&app.server.control, &raw).post("/api/actions", body).await;
    assert_eq!(r.status, 201, "{r:?}");
    b.wait_xpath("//tr[td[normalize-space()='action.created'] and td/span[normalize-space()='pending' or normalize-space()='failed']]")
        .await;
    b.button(&row, "Rotate secret").await.click().await.unwrap();
    b.wait_xpath("//code[starts-with(normalize-space(), 'whsec_')]").await;

    b.click_link("Customers").await;
    let row = "//tr[td/a[normalize-space()='acme-corp']]";
    b.wait_xpath(&format!("{row}/td[normalize-space()='$25.00']")).await;
    b.wait_xpath(&format!("{row}/td[normalize-space()='$1.25']")).await;
    b.wait_xpath(&format!("{row}/td[normalize-space()='gold']")).await;
    b.button(row, "Suspend").await.click().await.unwrap();
    b.wait_xpath(&format!("{row}//span[normalize-space()='suspended']")).await;
    assert_eq!(owner.get("/api/customer-bindings").await.body["data"][0]["status"], "suspended");
    // The customer's own page: unit economics as the API gives them.
    b.click_link("acme-corp").await;
    b.wait_xpath("//section[div[h2[normalize-space()='Lifetime cost'] and p[normalize-space()='$1.25']]]")
        .await;
    b.wait_xpath("//tr[th[normalize-space()='Latest budget check'] and td[normalize-space()='approved']]")
        .await;
    b.wait_xpath("//tr[th[normalize-space()='Status'] and td[normalize-space()='suspended']]").await;
    let ue = owner.get("/api/customer-bindings/acme-corp").await;
    assert_eq!(ue.body["data"]["cost"]["lifetimeCostMicrodollars"], 1_250_000, "{ue:?}");

    b.click_link("Audit log").await;
    b.wait_xpath("//tbody[count(tr)=3]/tr/td[normalize-space()='invitation.created']").await;
    b.fill("Action", "invitation.revoked").await;
    b.click_button("Filter").await;
    b.wait_xpath("//tbody[count(tr)=1]/tr/td[normalize-space()='invitation.revoked']").await;

    b.click_link("Organization").await;
    b.wait_xpath(&format!("//td[normalize-space()={}]", lit(OWNER))).await;
    b.wait_xpath("//tr[td[normalize-space()='new@example.com'] and td[normalize-space()='pending']]").await;
    assert!(!b.body_text().await.contains("gone@example.com"), "a revoked invitation is not listed");
    no_console_errors(&b).await;
}

async fn org_id(owner: &Client) -> String {
    owner.get("/api/auth/session").await.body["data"]["org"]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn margins_show_health_tiers_and_the_customer_view() {
    let s = margins::setup().await;
    let now = margins::now_secs();
    for (name, cost) in [("globex", 30_000_000), ("initech", 120_000_000)] {
        let id = format!("cus_{name}");
        s.fake.add_customer(&id, name, &format!("{name}@x.com"), json!({}), now - 100);
        s.fake.add_invoice(&format!("in_{name}"), &id, "usd", 10_000, 0, now - 50);
        s.spend(name, "gpt-4o", cost).await;
    }
    s.connect().await;
    s.sync().await;
    s.map("cus_globex", "globex").await;
    s.map("cus_initech", "initech").await;

    let b = Browser::start(&s.app.server.control).await;
    b.goto("/margins").await;
    b.sign_in(OWNER, PASSWORD).await;
    b.wait_xpath("//tr[td/a[normalize-space()='globex'] and td/span[normalize-space()='Healthy']]").await;
    b.wait_xpath("//tr[td/a[normalize-space()='initech'] and td/span[normalize-space()='Critical']]").await;
    b.wait_xpath("//tr[td/a[normalize-space()='initech'] and td[normalize-space()='-$20.00']]").await;
    b.screenshot("margins").await;
    b.click_link("initech").await;
    b.wait_xpath("//h2[normalize-space()='Health']/following-sibling::p[normalize-space()='Critical']").await;
    b.wait_xpath("//td[normalize-space()='gpt-4o']").await;
    no_console_errors(&b).await;
}

#[tokio::test]
async fn pages_and_assets_are_served_with_a_strict_policy_and_never_shadow_the_api() {
    let app = TestApp::start().await;
    let c = app.control();
    for path in ["/", "/budgets", "/cost-events/svc_evt_x", "/signin?next=%2Factions"] {
        let r = c.get(path).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"), "{path}");
        assert!(r.text.contains(r#"<script type="module" src="/assets/app.js">"#), "{path}");
        let csp = r.header("content-security-policy").unwrap();
        assert!(csp.starts_with("default-src 'self'; script-src 'self';"), "{csp}");
        assert!(!r.text.contains("<script>"), "no inline script");
    }
    let r = c.get("/assets/app.js").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/javascript; charset=utf-8"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let etag = r.header("etag").unwrap().to_owned();
    let again = read(
        c.request(reqwest::Method::GET, "/assets/app.js")
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((again.status, again.text.as_str()), (304, ""));
    assert_eq!(c.get("/assets/style.css").await.header("content-type"), Some("text/css; charset=utf-8"));
    assert_eq!(c.get("/assets/pages/budgets.js").await.status, 200);

    // Unknown assets, unknown API paths and writes outside /api are JSON 404s.
    for r in [c.get("/assets/nope.js").await, c.get("/api/nope").await, c.post("/budgets", json!({})).await] {
        assert_eq!((r.status, r.code()), (404, "not_found"), "{r:?}");
    }
    // The API answers as before: a session endpoint without a session is a 401, not a page.
    let r = c.get("/api/budgets").await;
    assert_eq!((r.status, r.code()), (401, "authentication_required"), "{r:?}");
}

#[tokio::test]
async fn a_model_seen_unpriced_is_priced_and_unpriced_again_on_the_pricing_page() {
    let mock = crate::support::mock::MockUpstream::start();
    let app = TestApp::start_with(&[("SPENDGATE_UPSTREAM_OPENAI", mock.base.clone())]).await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "agent").await;
    let body = json!({ "model": "gpt-mystery", "max_tokens": 10, "messages": [{ "role": "user", "content": "hi" }] });
    let call = app
        .proxy()
        .request(reqwest::Method::POST, "/v1/chat/completions")
        .header("x-service-key", &raw)
        .header("content-type", "application/json")
        .body(body.to_string());
    assert_eq!(read(call.send().await.unwrap()).await.status, 200);
    // The tagged event is recorded (and rolled up) before the page reads the list.
    for _ in 0..200 {
        let p = owner.get("/api/pricing").await;
        if p.body["data"]["unpriced"].as_array().is_some_and(|u| !u.is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let b = Browser::start(&app.server.control).await;
    b.goto("/").await;
    b.sign_in(OWNER, PASSWORD).await;
    b.click_link("Pricing").await;
    let seen = "//tr[td/code[normalize-space()='gpt-mystery']]";
    b.wait_xpath(&format!("{seen}/td[normalize-space()='openai']")).await;
    b.wait_xpath("//tr[td/code[normalize-space()='gpt-4o']]/td[normalize-space()='builtin']").await;
    b.button(seen, "Price it").await.click().await.unwrap();
    b.fill("Input $ per 1M tokens", "2").await;
    b.fill("Output $ per 1M tokens", "3.5").await;
    b.click_button("Save price").await;
    b.wait_text("Priced openai/gpt-mystery: $2 in, $3.5 out per 1M tokens.").await;
    b.wait_text("No model was called without a price in the last 7 days.").await;
    let runtime = "//tr[td/code[normalize-space()='gpt-mystery']][td[normalize-space()='runtime']]";
    b.wait_xpath(&format!("{runtime}/td[normalize-space()='$3.5']")).await;
    let listed = owner.get("/api/model-prices").await;
    assert_eq!(listed.body["data"][0]["input"], 2_000_000, "{listed:?}");
    assert_eq!(listed.body["data"][0]["output"], 3_500_000, "{listed:?}");

    b.button(runtime, "Remove").await.click().await.unwrap();
    b.button(runtime, "Confirm remove").await.click().await.unwrap();
    b.wait_text("Removed the runtime price of openai/gpt-mystery.").await;
    assert_eq!(owner.get("/api/model-prices").await.body["data"], json!([]));

    b.choose("Calls to unpriced models", "block").await;
    b.click_button("Save setting").await;
    b.wait_text("Calls to unpriced models: block.").await;
    let org = org_id(&owner).await;
    assert_eq!(owner.get(&format!("/api/orgs/{org}")).await.body["data"]["unpricedModels"], "block");
    no_console_errors(&b).await;
}
