//! Contract fixes of the proxy: the per-customer endpoints are pinned to their
//! version, and a Gemini model path that cannot form the provider's URL is a 400.

use serde_json::json;

use crate::proxy::setup_with;
use crate::support::read;

#[tokio::test]
async fn per_customer_endpoints_answer_their_pinned_version_whatever_is_asked() {
    let s = setup_with(&[("SPENDGATE_DEFAULT_PLAN", "pro".to_owned())]).await;
    let proxy = s.app.proxy();
    let send = |path: &'static str, body: Option<serde_json::Value>, version: Option<&'static str>| {
        let mut r = match &body {
            Some(b) => proxy
                .request(reqwest::Method::POST, path)
                .header("content-type", "application/json")
                .body(b.to_string()),
            None => proxy.request(reqwest::Method::GET, path),
        };
        r = r.header("x-service-key", &s.raw);
        if let Some(v) = version {
            r = r.header("service-version", v);
        }
        async move { read(r.send().await.unwrap()).await }
    };
    let bind = json!({ "customerId": "cust-1", "planRef": "pro", "budgetCap": 1_000_000 });
    let gate = json!({ "customerId": "cust-1", "estimatedCostMicrodollars": 10, "sendEvent": false });
    for version in [None, Some("2025-01-01"), Some("2027-06-30"), Some("garbage")] {
        let r = send("/v1/bind", Some(bind.clone()), version).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("service-version"), Some("2026-04-01"), "bind {version:?}");
        let r = send("/v1/gate", Some(gate.clone()), version).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("service-version"), Some("2026-04-01"), "gate {version:?}");
        let r = send("/v1/customers/cust-1/unit-economics", None, version).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("service-version"), Some("2026-04-01"), "unit-economics {version:?}");
        // Errors too.
        let r = send("/v1/customers/nobody/unit-economics", None, version).await;
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(r.header("service-version"), Some("2026-04-01"));
    }
    // The provider routes still follow the request's version.
    let r = s
        .send(
            "/v1/chat/completions",
            &json!({ "model": "gpt-4o", "messages": [] }),
            &[("service-version", "2025-01-01")],
        )
        .await;
    assert_eq!(r.header("service-version"), Some("2025-01-01"), "{r:?}");
}

#[tokio::test]
async fn a_gemini_model_that_cannot_form_the_url_is_a_validation_error() {
    let s = setup_with(&[]).await;
    let body = json!({ "contents": [{ "parts": [{ "text": "hi" }] }] });
    for model in
        ["gemini%202.5", "a%2Fb", "a%3Fb", "a%23b", "a%25b", "a%00b", "..", "a..b", "g%C3%A9mini", "a%20"]
    {
        for action in ["generateContent", "streamGenerateContent"] {
            let path = format!("/v1beta/models/{model}:{action}");
            let r = s.send(&path, &body, &[]).await;
            assert_eq!((r.status, r.code()), (400, "validation_error"), "{path}: {r:?}");
            assert_eq!(r.body["error"]["details"]["issues"][0]["path"], json!(["model"]), "{r:?}");
        }
    }
    assert_eq!(s.mock.count(), 0, "nothing was forwarded");
    let r = s.owner.get("/api/cost-events?limit=10").await;
    assert_eq!(r.body["data"], json!([]), "nothing was recorded");
    // A well-formed one still goes through.
    let r = s.send("/v1beta/models/gemini-2.5-flash:generateContent", &body, &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
}
