//! Health, version, OpenAPI and the shared response conventions.

use crate::support::TestApp;

#[tokio::test]
async fn control_plane_health_and_version() {
    let app = TestApp::start().await;
    let c = app.control();
    let r = c.get("/api/health").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["status"], "ok");
    assert_eq!(r.header("service-version"), Some("2026-04-01"));
    let r = c.get("/api/version").await;
    assert_eq!(r.body["apiVersion"], "2026-04-01");
}

#[tokio::test]
async fn service_version_follows_the_request_header() {
    let app = TestApp::start().await;
    let c = app.control();
    let r = crate::support::read(
        c.request(reqwest::Method::GET, "/api/health")
            .header("Service-Version", "2026-05-01")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.header("service-version"), Some("2026-05-01"));
    let r = crate::support::read(
        c.request(reqwest::Method::GET, "/api/health")
            .header("Service-Version", "garbage")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.header("service-version"), Some("2026-04-01"));
}

#[tokio::test]
async fn proxy_health_routes() {
    let app = TestApp::start().await;
    let p = app.proxy();
    for path in ["/health", "/health/ready"] {
        let r = p.get(path).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_eq!(r.body, serde_json::json!({ "status": "ok", "service": "service-proxy" }));
        let trace = r.header("x-service-trace-id").unwrap();
        assert_eq!(trace.len(), 32);
    }
    let r = p.get("/health/feature-flags").await;
    for key in ["PLAN_COUNTER_ENABLED", "SERVICE_CLOUD", "CACHE_SCHEMA_VERSION", "build_sha"] {
        assert!(r.body.get(key).is_some(), "{key} missing: {r:?}");
    }
    let r = p.get("/health/metrics").await;
    assert!(r.body.is_object(), "{r:?}");
    for name in ["spendgate_live_budget_actors", "spendgate_budget_registry"] {
        assert!(r.body.get(name).is_some(), "{name} missing: {r:?}");
    }
    let r = crate::support::read(
        p.request(reqwest::Method::GET, "/health/metrics")
            .header("Accept", "text/plain")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    assert!(r.text.contains("spendgate_"), "{}", r.text);
}

#[tokio::test]
async fn proxy_keeps_an_inbound_trace_id_and_404s_unknown_routes() {
    let app = TestApp::start().await;
    let p = app.proxy();
    let tid = "4bf92f3577b34da6a3ce929d0e0e4736";
    let r = crate::support::read(
        p.request(reqwest::Method::GET, "/v1/nope").header("X-Service-Trace-Id", tid).send().await.unwrap(),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.code(), "not_found");
    assert_eq!(r.header("x-service-trace-id"), Some(tid));
    let r = crate::support::read(
        p.request(reqwest::Method::GET, "/health")
            .header("traceparent", format!("00-{tid}-00f067aa0ba902b7-01"))
            .header("X-Service-Trace-Id", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.header("x-service-trace-id"), Some(tid));
}

#[tokio::test]
async fn openapi_document_lists_the_endpoints() {
    let app = TestApp::start().await;
    let r = app.control().get("/api/openapi.json").await;
    assert_eq!(r.status, 200);
    assert!(r.body["openapi"].as_str().unwrap().starts_with("3.1"));
    let paths = r.body["paths"].as_object().unwrap();
    for p in ["/api/health", "/api/auth/login", "/health/ready"] {
        assert!(paths.contains_key(p), "{p} missing from {:?}", paths.keys().collect::<Vec<_>>());
    }
}

#[tokio::test]
async fn unknown_control_paths_are_404_in_the_envelope() {
    let app = TestApp::start().await;
    let r = app.control().get("/api/does-not-exist").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.code(), "not_found");
    assert_eq!(r.header("service-version"), Some("2026-04-01"));
    // Outside `/api`, a GET is the dashboard's page and anything else the JSON 404.
    let page = app.control().get("/not-api").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("service-version"), Some("2026-04-01"), "every control-plane response");
    let outside = app.control().post("/not-api", serde_json::json!({})).await;
    assert_eq!((outside.status, outside.code()), (404, "not_found"));
    assert_eq!(outside.header("service-version"), Some("2026-04-01"), "every control-plane response");
    assert!(r.body["error"]["message"].is_string());
    assert!(r.body["error"].get("details").is_some());
}
