//! First run, from an empty organization to its first proxied call: the overview
//! walks the operator through creating a key and storing the OpenAI key, shows the
//! official SDK's code with the proxy's address and the new key in it, the code is
//! run as shown (the `openai` Python package, against the local fake upstream), and
//! the page turns into the normal overview when the call lands, without a reload.

use super::{no_console_errors, OWNER};
use crate::support::browser::{lit, Browser};
use crate::support::mock::MockUpstream;
use crate::support::{python, TestApp, PASSWORD};

#[tokio::test]
async fn an_empty_organization_is_walked_to_its_first_call_with_the_snippet_it_shows() {
    let mock = MockUpstream::start();
    let mut env = vec![
        ("SPENDGATE_UPSTREAM_OPENAI", mock.base.clone()),
        ("SPENDGATE_UPSTREAM_ANTHROPIC", mock.base.clone()),
    ];
    // PostgreSQL needs an explicit secret key for stored provider keys; SQLite makes one.
    env.push(("SPENDGATE_SECRET_KEY", "dashboard-test-secret-key-of-32-characters".to_owned()));
    let app = TestApp::start_with(&env).await;
    let owner = app.owner().await;
    let session = owner.get("/api/auth/session").await;
    let proxy_url = session.body["data"]["proxyUrl"].as_str().unwrap().to_owned();
    assert_eq!(proxy_url, app.server.proxy, "the session names the proxy's address");

    let b = Browser::start(&app.server.control).await;
    b.goto("/").await;
    b.sign_in(OWNER, PASSWORD).await;
    b.wait_xpath("//h1[normalize-space()='Welcome to spendgate']").await;
    b.wait_text("Waiting for the first call…").await;
    b.screenshot("first-run").await;
    b.mark_document().await;

    b.fill("Key name", "first-agent").await;
    b.click_button("Create key").await;
    let raw = b.wait_xpath("//code[@id='raw-key']").await.text().await.unwrap();
    assert!(raw.starts_with("svc_live_sk_") && raw.len() == 44, "{raw}");
    let keys = owner.get("/api/keys").await.body["data"].clone();
    assert_eq!(keys[0]["name"], "first-agent", "{keys}");

    b.choose("Provider", "openai").await;
    b.fill("Provider API key", "sk-provider-stored-0123456789").await;
    b.click_button("Store provider key").await;
    b.wait_xpath("//p[@role='status' and starts-with(normalize-space(), 'Stored the openai key')]").await;

    // The code on screen: the official OpenAI SDK, the proxy's address, the new key
    // as its API key (the gateway adds the stored OpenAI key).
    b.wait_xpath("//button[@aria-pressed='true' and normalize-space()='OpenAI · Python']").await;
    let code = b.wait_xpath("//pre[@id='snippet']").await.text().await.unwrap();
    assert!(code.contains("from openai import OpenAI"), "{code}");
    assert!(code.contains(&format!("base_url=\"{proxy_url}/v1\"")), "{code}");
    assert!(code.contains(&format!("api_key=\"{raw}\"")), "{code}");
    b.eval("document.getElementById('snippet').scrollIntoView({ block: 'center' }); return true;").await;
    b.screenshot("first-run-snippet").await;

    // The Anthropic SDK's code points at the proxy's root (the SDK adds /v1/messages);
    // with no Anthropic key stored, the agent sends its own and the spendgate key apart.
    b.click_button("Anthropic · Python").await;
    let other = b
        .wait_xpath("//pre[@id='snippet'][contains(., 'from anthropic import Anthropic')]")
        .await
        .text()
        .await
        .unwrap();
    assert!(other.contains(&format!("base_url=\"{proxy_url}\"")), "{other}");
    assert!(other.contains("api_key=os.environ[\"ANTHROPIC_API_KEY\"]"), "{other}");
    assert!(other.contains(&format!("default_headers={{\"X-Service-Key\": \"{raw}\"}}")), "{other}");
    b.click_button("OpenAI · Python").await;
    b.wait_xpath("//pre[@id='snippet'][contains(., 'from openai import OpenAI')]").await;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snippet.py");
    std::fs::write(&file, &code).unwrap();
    let out = python::run("run_snippet.py", file.to_str().unwrap(), &app.server.proxy, &raw).await;
    assert_eq!(out["printed"], "Hello from mock\n", "{out}");
    let call = mock.last();
    assert_eq!(call.path, "/v1/chat/completions");
    assert_eq!(
        call.header("authorization"),
        Some("Bearer sk-provider-stored-0123456789"),
        "the stored key went upstream"
    );

    // The page notices the call and becomes the overview, with the call in it.
    b.wait_xpath("//p[@role='status' and normalize-space()='Your first call is in. This is your overview from now on.']").await;
    b.wait_xpath("//h2[normalize-space()='Total spend']").await;
    b.wait_xpath(&format!("//section[h2[normalize-space()='Recent calls']]//tr[td[normalize-space()='gpt-4o-mini'] and td/a[normalize-space()={}]]", lit("first-agent"))).await;
    assert!(b.document_is_marked().await, "the page was reloaded");

    no_console_errors(&b).await;
}
