//! Signup, login, sessions, the operator CLI and the same-origin rule.

use serde_json::json;

use crate::support::{TestApp, PASSWORD};

#[tokio::test]
async fn signup_then_session_then_logout() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let r = c.get("/api/auth/session").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["role"], "owner");
    assert!(r.body["data"]["user"]["id"].as_str().unwrap().starts_with("svc_usr_"));
    assert!(r.body["data"]["org"]["id"].as_str().unwrap().starts_with("svc_org_"));
    assert_eq!(c.post_empty("/api/auth/logout").await.status, 200);
    let r = c.get("/api/auth/session").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.code(), "authentication_required");
}

#[tokio::test]
async fn signup_closes_after_the_first_user() {
    let app = TestApp::start().await;
    app.owner().await;
    let r = app
        .control()
        .post("/api/auth/signup", json!({ "email": "second@example.com", "password": PASSWORD }))
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.code(), "forbidden");
}

#[tokio::test]
async fn signup_validates_its_fields() {
    let app = TestApp::start().await;
    let r = app.control().post("/api/auth/signup", json!({ "email": "nope", "password": "short" })).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "validation_error");
    let issues = r.body["error"]["details"]["issues"].as_array().unwrap();
    assert_eq!(issues.len(), 2, "{r:?}");
    let r = app.control().post("/api/auth/signup", json!({ "email": "a@b.co" })).await;
    assert_eq!(r.code(), "validation_error");
    assert_eq!(r.issue_paths(), vec![json!(["password"])]);
}

#[tokio::test]
async fn login_rejects_wrong_password_and_unknown_email() {
    let app = TestApp::start().await;
    app.owner().await;
    for (email, pw) in [("owner@example.com", "wrong-password"), ("ghost@example.com", PASSWORD)] {
        let r = app.control().post("/api/auth/login", json!({ "email": email, "password": pw })).await;
        assert_eq!(r.status, 401, "{r:?}");
        assert_eq!(r.code(), "authentication_required");
    }
    let c = app.login("OWNER@example.com").await;
    assert_eq!(c.get("/api/auth/session").await.status, 200);
}

#[tokio::test]
async fn login_cookie_is_http_only_and_lax() {
    let app = TestApp::start().await;
    app.owner().await;
    let r = app
        .control()
        .post("/api/auth/login", json!({ "email": "owner@example.com", "password": PASSWORD }))
        .await;
    let cookie = r.header("set-cookie").unwrap();
    assert!(cookie.starts_with("svc_session="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/"),
        "{cookie}"
    );
    // Dev mode (the test default) drops Secure.
    assert!(!cookie.contains("Secure"), "{cookie}");
}

#[tokio::test]
async fn cross_origin_session_writes_are_refused() {
    let app = TestApp::start().await;
    let c = app.owner().await;
    let r = crate::support::read(
        c.request(reqwest::Method::POST, "/api/auth/logout")
            .header("Origin", "https://evil.example")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.code(), "forbidden");
    // Still signed in: the refused write changed nothing.
    assert_eq!(c.get("/api/auth/session").await.status, 200);
    let same = c.base.clone();
    let r = crate::support::read(
        c.request(reqwest::Method::POST, "/api/auth/logout").header("Origin", same).send().await.unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn operator_cli_adds_users_to_named_orgs_and_switch_org_works() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let member = app.user_in_org("m@example.com", "Acme", "member").await;
    let r = member.get("/api/auth/session").await;
    assert_eq!(r.body["data"]["role"], "member");
    assert_eq!(r.body["data"]["org"]["name"], "Acme");
    let acme = r.body["data"]["org"]["id"].as_str().unwrap().to_owned();
    // The owner is not in Acme: switching there is a 404.
    let r = owner.post("/api/auth/switch-org", json!({ "orgId": acme })).await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = owner.post("/api/auth/switch-org", json!({ "orgId": "nope" })).await;
    assert_eq!(r.code(), "validation_error");
}

#[tokio::test]
async fn non_json_bodies_are_415_and_oversize_is_413() {
    let app = TestApp::start().await;
    let c = app.control();
    let r = c.post_raw("/api/auth/login", "text/plain", "x").await;
    assert_eq!(r.status, 415, "{r:?}");
    assert_eq!(r.code(), "unsupported_media_type");
    let big = format!("{{\"email\":\"{}\",\"password\":\"x\"}}", "a".repeat(1_048_600));
    let r = c.post_raw("/api/auth/login", "application/json", big).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.code(), "payload_too_large");
}
