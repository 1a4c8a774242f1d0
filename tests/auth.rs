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

async fn login_attempt(app: &TestApp, email: &str, forwarded_for: Option<&str>) -> crate::support::Resp {
    let mut req = app
        .control()
        .request(reqwest::Method::POST, "/api/auth/login")
        .json(&json!({ "email": email, "password": "wrong-password" }));
    if let Some(xff) = forwarded_for {
        req = req.header("x-forwarded-for", xff);
    }
    crate::support::read(req.send().await.unwrap()).await
}

fn assert_rate_limited(r: &crate::support::Resp) {
    assert_eq!((r.status, r.code()), (429, "rate_limit_exceeded"), "{r:?}");
    assert_eq!(r.header("retry-after"), Some("60"), "{r:?}");
}

/// Sign-in attempts are limited per email, whatever address they come from (here
/// addresses a trusted load balancer reports), and per address.
#[tokio::test]
async fn sign_in_is_rate_limited_per_email_and_per_address() {
    let app = TestApp::start_with(&[
        ("SPENDGATE_RATE_LIMIT_AUTH_EMAIL_PER_MINUTE", "3".to_owned()),
        ("SPENDGATE_RATE_LIMIT_AUTH_IP_PER_MINUTE", "4".to_owned()),
        ("SPENDGATE_TRUSTED_PROXIES", "127.0.0.1".to_owned()),
    ])
    .await;
    app.owner().await; // the signup is the email's first attempt
    for ip in ["198.51.100.1", "198.51.100.2"] {
        assert_eq!(login_attempt(&app, "owner@example.com", Some(ip)).await.status, 401);
    }
    assert_rate_limited(&login_attempt(&app, " Owner@Example.com", Some("198.51.100.3")).await);
    // Another email from a fresh address is still served...
    assert_eq!(login_attempt(&app, "other@example.com", Some("198.51.100.9")).await.status, 401);
    // ...until that address has made its four attempts (signup counts too).
    let r = app
        .control()
        .request(reqwest::Method::POST, "/api/auth/signup")
        .header("x-forwarded-for", "198.51.100.9")
        .json(&json!({ "email": "third@example.com", "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "signup is closed after the first user");
    for email in ["a@example.com", "b@example.com"] {
        assert_eq!(login_attempt(&app, email, Some("198.51.100.9")).await.status, 401);
    }
    assert_rate_limited(&login_attempt(&app, "c@example.com", Some("198.51.100.9")).await);
}

/// Without trusted proxies a forged `X-Forwarded-For` does not buy fresh sign-in
/// attempts: the limit is on the connection's address.
#[tokio::test]
async fn a_forged_forwarded_for_does_not_escape_the_sign_in_limit() {
    let app = TestApp::start_with(&[
        ("SPENDGATE_RATE_LIMIT_AUTH_EMAIL_PER_MINUTE", "0".to_owned()),
        ("SPENDGATE_RATE_LIMIT_AUTH_IP_PER_MINUTE", "3".to_owned()),
    ])
    .await;
    for i in 0..3 {
        let r = login_attempt(&app, &format!("u{i}@example.com"), Some(&format!("203.0.113.{i}"))).await;
        assert_eq!(r.status, 401, "{r:?}");
    }
    assert_rate_limited(&login_attempt(&app, "u9@example.com", Some("203.0.113.99")).await);
}

/// Many concurrent first signups: exactly one becomes the owner.
#[tokio::test]
async fn concurrent_first_signups_create_one_owner() {
    let app = TestApp::start().await;
    let attempts = (0..16).map(|i| {
        let c = app.control();
        async move {
            c.post(
                "/api/auth/signup",
                json!({ "email": format!("racer{i}@example.com"), "password": PASSWORD }),
            )
            .await
            .status
        }
    });
    let statuses = futures_util::future::join_all(attempts).await;
    assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1, "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 201 || *s == 403), "{statuses:?}");
    assert_eq!(app.query_n("SELECT COUNT(*) AS n FROM users").await, 1);
}
