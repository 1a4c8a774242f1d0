//! Live pages: a new call appears on the overview and on the cost-event list, and a
//! new pending action raises the navigation's count on whatever page is open, all
//! without a reload.

use serde_json::json;

use super::{ingest, no_console_errors, signed_in};
use crate::support::browser::lit;
use crate::support::{create_key, key_client};

#[tokio::test]
async fn new_calls_and_pending_actions_appear_without_a_reload() {
    let (app, owner, b) = signed_in().await;
    let (_, raw) = create_key(&owner, "live-agent").await;
    ingest(&app, &raw, "gpt-4o", 1_000_000, json!({})).await;
    b.click_link("Overview").await;
    b.wait_xpath("//section[h2[normalize-space()='Recent calls']]//tr[td[normalize-space()='gpt-4o']]").await;
    b.mark_document().await;

    // A call made now shows up at the top of the recent calls, named by its key.
    ingest(&app, &raw, "gpt-live-1", 250_000, json!({})).await;
    let top = "//section[h2[normalize-space()='Recent calls']]//tbody/tr[1]";
    b.wait_xpath(&format!("{top}[td[normalize-space()='gpt-live-1'] and td/a[normalize-space()='live-agent'] and td[normalize-space()='$0.25']]")).await;

    // A pending action raises the count in the navigation, on this page and the next.
    let agent = key_client(&app.server.control, &raw);
    let act = |n: u32| {
        let agent = agent.clone();
        async move {
            let body = json!({ "agentId": format!("deployer-{n}"), "actionType": "shell_command", "payload": { "cmd": "deploy" } });
            assert_eq!(agent.post("/api/actions", body).await.status, 201);
        }
    };
    act(1).await;
    let badge = |n: &str| {
        format!(
            "//nav//span[@id='pending-count' and normalize-space()={} and @aria-label={}]",
            lit(n),
            lit(&format!("{n} waiting for approval"))
        )
    };
    b.wait_xpath(&badge("1")).await;
    b.click_link("Cost events").await;
    b.wait_xpath("//tr[td[normalize-space()='gpt-live-1']]").await;
    act(2).await;
    b.wait_xpath(&badge("2")).await;
    // And the cost-event list takes new calls too.
    ingest(&app, &raw, "gpt-live-2", 500_000, json!({})).await;
    b.wait_xpath("//tbody/tr[1][td[normalize-space()='gpt-live-2']]").await;
    // Approving one on the Actions page brings the count down.
    b.click_link("Actions").await;
    let card = "//article[.//code[normalize-space()='deployer-1']]";
    b.button(card, "Approve").await.click().await.unwrap();
    b.wait_xpath(&badge("1")).await;
    assert!(b.document_is_marked().await, "the page was reloaded");
    no_console_errors(&b).await;
}
