//! Admission under load over real HTTP: a reservation that cannot be answered within
//! the admission deadline is 503 with `Retry-After` on every path that reserves, and
//! holds nothing; the refusal and the mailbox waits show in the metrics; settlement of
//! many concurrent calls (one message per entity per commit) leaves nothing reserved;
//! the MCP routes authenticate before they read the body.

use serde_json::{json, Value};

use crate::proxy::{openai, setup, setup_with, usage, Setup, MINI_COST, MINI_USAGE};
use crate::support::{read, Resp};

/// A deadline of 0 ms: every reservation waits at least a little, so every one is past
/// its deadline when its actor reaches it (deterministic, unlike a stall of some length).
async fn no_patience() -> Setup {
    setup_with(&[("SPENDGATE_ADMISSION_DEADLINE_MS", "0".to_owned())]).await
}

fn assert_busy(r: &Resp) {
    assert_eq!((r.status, r.code()), (503, "service_unavailable"), "{r:?}");
    assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("The budget for ")
            && message.ends_with("is busy: a reservation waited longer than 0 ms"),
        "{message}"
    );
}

async fn metrics_text(s: &Setup) -> String {
    let r = s.app.proxy().request(reqwest::Method::GET, "/health/metrics").header("Accept", "text/plain");
    read(r.send().await.unwrap()).await.text
}

#[tokio::test]
async fn a_reservation_past_its_deadline_is_503_and_holds_nothing() {
    let s = no_patience().await;
    let budget = json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000_000 });
    s.budget(budget).await;

    let r = s.chat(openai(json!({ "mock": { "usage": usage(MINI_USAGE) } }))).await;
    assert_busy(&r);
    assert!(r.body["error"]["message"].as_str().unwrap().contains("api_key"), "{r:?}");
    assert_eq!(s.mock.count(), 0, "no upstream call");

    let r = s.send("/v1/mcp/budget/check", &json!({ "estimateMicrodollars": 10 }), &[]).await;
    assert_busy(&r);
    let tool = json!({ "toolName": "search", "toolServer": "web", "costMicrodollars": 800 });
    assert_busy(&s.send("/v1/mcp/events", &tool, &[]).await);

    assert_eq!(s.key_spend().await, (0, 0), "no hold taken, nothing spent");
    let events = s.owner.get("/api/cost-events?limit=10").await;
    assert_eq!(events.body["data"], json!([]), "nothing recorded");
    let text = metrics_text(&s).await;
    let refused = text
        .lines()
        .find(|l| {
            l.starts_with("spendgate_refused_reservations{")
                && l.contains(r#"entity_type="api_key""#)
                && l.contains(r#"reason="deadline_passed""#)
        })
        .unwrap_or_else(|| panic!("no refusal counted:\n{text}"));
    assert!(refused.ends_with(" 3"), "three refusals: {refused}");
}

#[tokio::test]
async fn concurrent_calls_settle_to_the_cent_and_show_their_mailbox_waits() {
    let s = setup().await;
    let budget = json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000_000 });
    s.budget(budget).await;
    let calls = (0..40).map(|_| s.chat(openai(json!({ "mock": { "usage": usage(MINI_USAGE) } }))));
    for r in futures_util::future::join_all(calls).await {
        assert_eq!(r.status, 200, "{r:?}");
    }
    s.events(40).await;
    // Recorded, and settled on the actor: no reservation is left over.
    let mut spend = (0, 0);
    for _ in 0..100 {
        spend = s.key_spend().await;
        if spend == (40 * MINI_COST, 40 * MINI_COST) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(spend, (40 * MINI_COST, 40 * MINI_COST));

    let text = metrics_text(&s).await;
    for line in [
        r#"spendgate_budget_mailbox_wait_seconds_bucket{entity_type="api_key",le="0.001"}"#,
        r#"spendgate_budget_mailbox_wait_seconds_count{entity_type="api_key"}"#,
        r#"spendgate_refused_reservations{entity_type="api_key",reason="overloaded"} 0"#,
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    let json = s.app.proxy().get("/health/metrics").await;
    let histogram = &json.body["spendgate_budget_mailbox_wait_seconds"];
    let api_key = histogram.as_array().unwrap().iter().find(|m| m["labels"]["entity_type"] == "api_key");
    let count = api_key.and_then(|m| m["count"].as_u64());
    assert!(count.is_some_and(|c| c >= 40), "every reservation is timed: {histogram}");
}

/// `POST /v1/mcp/events` and `/v1/mcp/budget/check` answer 401 to a missing or bad key
/// whatever the body (not 415 for its media type, not 400 for its content).
#[tokio::test]
async fn mcp_routes_authenticate_before_reading_the_body() {
    let s = setup().await;
    for path in ["/v1/mcp/events", "/v1/mcp/budget/check"] {
        for key in [None, Some("svc_key_not-a-real-key")] {
            for (content_type, body) in [("text/plain", "not json"), ("application/json", "{\"bad\":")] {
                let mut r = s
                    .app
                    .proxy()
                    .request(reqwest::Method::POST, path)
                    .header("content-type", content_type)
                    .body(body);
                if let Some(key) = key {
                    r = r.header("x-service-key", key);
                }
                let r = read(r.send().await.unwrap()).await;
                assert_eq!(
                    (r.status, r.code()),
                    (401, "unauthorized"),
                    "{path} {key:?} {content_type}: {r:?}"
                );
            }
        }
    }
    let r = s.send("/v1/mcp/budget/check", &Value::from("not an object"), &[]).await;
    assert_eq!(r.status, 400, "with a valid key the body is read: {r:?}");
}
