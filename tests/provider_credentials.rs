//! Provider keys held by the gateway: the credentials API (shapes, roles, masking,
//! rotation, audit), the proxy forwarding the stored key so the agent holds none
//! (with `X-Service-Key`, or with the spendgate key where the client puts its
//! provider key), refusals (no stored credential, a key that requires stored ones),
//! organizations kept apart, and the generated `secret_key` surviving a restart.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::mock::{MockUpstream, Recorded};
use crate::support::{backend_is_postgres, create_key, read, Client, Resp, TestApp};

const PATH: &str = "/api/provider-credentials";
const OPENAI_SECRET: &str = "sk-proj-stored-0123456789abcdefghijkl";
const ANTHROPIC_SECRET: &str = "sk-ant-stored-0123456789abcdef";
const GEMINI_SECRET: &str = "AIzaStored0123456789abcdef";

struct Setup {
    app: TestApp,
    mock: MockUpstream,
    owner: Client,
    raw: String,
}

/// The three upstreams on one mock; PostgreSQL gets an explicit `secret_key` (it is
/// generated only for the embedded SQLite database).
fn env_for(mock: &MockUpstream, with_secret: bool) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("SPENDGATE_UPSTREAM_OPENAI", mock.base.clone()),
        ("SPENDGATE_UPSTREAM_ANTHROPIC", mock.base.clone()),
        ("SPENDGATE_UPSTREAM_GEMINI", mock.base.clone()),
    ];
    if with_secret {
        env.push(("SPENDGATE_SECRET_KEY", "test-secret-key-of-at-least-32-characters".to_owned()));
    }
    env
}

async fn setup() -> Setup {
    let mock = MockUpstream::start();
    let app = TestApp::start_with(&env_for(&mock, backend_is_postgres())).await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "agent").await;
    Setup { app, mock, owner, raw }
}

async fn store(owner: &Client, upstream: &str, secret: &str) -> Value {
    let r = owner.post(PATH, json!({ "upstream": upstream, "secret": secret, "name": "main" })).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.body["data"].clone()
}

fn chat() -> Value {
    json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 50 })
}

fn message() -> Value {
    json!({ "model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{ "role": "user", "content": "hi" }] })
}

fn gemini() -> Value {
    json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }] })
}

const GEMINI_PATH: &str = "/v1beta/models/gemini-2.5-flash:generateContent";

impl Setup {
    /// A proxied call with exactly these headers (and a JSON content type).
    async fn call(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
        let mut r = self
            .app
            .proxy()
            .request(reqwest::Method::POST, path)
            .header("content-type", "application/json")
            .body(body.to_string());
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        read(r.send().await.expect("request")).await
    }
}

/// No header the upstream received carries a spendgate key.
fn no_spendgate_key(req: &Recorded) {
    for (name, value) in &req.headers {
        assert!(!value.contains("svc_live_sk_"), "{name} carried a spendgate key: {value}");
    }
    assert!(!req.query.contains("svc_live_sk_"), "{}", req.query);
}

#[tokio::test]
async fn credentials_are_stored_masked_listed_and_deleted_by_role() {
    let s = setup().await;
    let r =
        s.owner.post(PATH, json!({ "upstream": "openai", "secret": OPENAI_SECRET, "name": " Prod " })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let d = &r.body["data"];
    let id = d["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("svc_cred_"), "{d}");
    assert_eq!(d["upstream"], "openai");
    assert_eq!(d["name"], "Prod");
    assert_eq!(d["secretPrefix"], "sk-proj-");
    assert!(d["createdAt"].is_string(), "{d}");
    assert!(!r.text.contains(OPENAI_SECRET), "the secret is never returned: {}", r.text);

    let list = s.owner.get(PATH).await;
    assert_eq!(list.status, 200, "{list:?}");
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(list.body["data"][0]["id"], id.as_str());
    assert!(!list.text.contains(OPENAI_SECRET), "{}", list.text);
    assert!(!list.text.contains("v1:"), "no ciphertext either: {}", list.text);

    // Viewers list; members and viewers do not change.
    let org = s.owner.get("/api/auth/session").await.body["data"]["org"]["name"].as_str().unwrap().to_owned();
    let viewer = s.app.user_in_org("v@example.com", &org, "viewer").await;
    assert_eq!(viewer.get(PATH).await.status, 200);
    let member = s.app.user_in_org("m@example.com", &org, "member").await;
    let r = member.post(PATH, json!({ "upstream": "anthropic", "secret": ANTHROPIC_SECRET })).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    let r = viewer.delete(&format!("{PATH}/{id}")).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    assert_eq!(s.app.control().get(PATH).await.status, 401);

    let r = s.owner.delete(&format!("{PATH}/{id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({ "data": { "deleted": true } }));
    assert_eq!(s.owner.delete(&format!("{PATH}/{id}")).await.status, 404);
    assert_eq!(s.owner.delete(&format!("{PATH}/nope")).await.status, 404);
    assert_eq!(s.owner.get(PATH).await.body["data"], json!([]));
}

#[tokio::test]
async fn bad_credentials_are_refused_and_change_nothing() {
    let s = setup().await;
    let bad = [
        (json!({ "upstream": "watsonx", "secret": OPENAI_SECRET }), "upstream"),
        (json!({ "upstream": "OpenAI", "secret": OPENAI_SECRET }), "upstream"),
        (json!({ "upstream": "openai", "secret": "" }), "secret"),
        (json!({ "upstream": "openai", "secret": "sk has spaces" }), "secret"),
        (json!({ "upstream": "openai", "secret": "x".repeat(4097) }), "secret"),
        (json!({ "upstream": "openai", "secret": s.raw.clone() }), "secret"),
        (json!({ "upstream": "openai", "secret": OPENAI_SECRET, "name": "  " }), "name"),
        (json!({ "upstream": "openai", "secret": OPENAI_SECRET, "name": "n".repeat(51) }), "name"),
    ];
    for (body, field) in bad {
        let r = s.owner.post(PATH, body.clone()).await;
        assert_eq!((r.status, r.code()), (400, "validation_error"), "{body}: {r:?}");
        assert!(r.issue_paths().contains(&json!([field])), "{body}: {r:?}");
    }
    let r = s.owner.post(PATH, json!({ "upstream": "openai" })).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(s.owner.get(PATH).await.body["data"], json!([]));
}

#[tokio::test]
async fn rotation_keeps_the_id_takes_effect_at_once_and_is_audited() {
    let s = setup().await;
    let first = store(&s.owner, "openai", "sk-old-0123456789abcdefghij").await;
    let r = s.call("/v1/chat/completions", &chat(), &[("x-service-key", &s.raw)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        s.mock.last().headers.get("authorization").map(String::as_str),
        Some("Bearer sk-old-0123456789abcdefghij")
    );

    let r = s.owner.post(PATH, json!({ "upstream": "openai", "secret": OPENAI_SECRET })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let second = &r.body["data"];
    assert_eq!(second["id"], first["id"], "a rotation keeps the credential");
    assert_eq!(second["name"], "main", "the name is kept when none is given");
    assert_eq!(second["secretPrefix"], "sk-proj-");
    assert_eq!(s.owner.get(PATH).await.body["data"].as_array().unwrap().len(), 1);
    let r = s.call("/v1/chat/completions", &chat(), &[("x-service-key", &s.raw)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let expected = format!("Bearer {OPENAI_SECRET}");
    assert_eq!(s.mock.last().headers.get("authorization"), Some(&expected));

    let id = first["id"].as_str().unwrap();
    assert_eq!(s.owner.delete(&format!("{PATH}/{id}")).await.status, 200);
    let log = s.owner.get("/api/audit-log?limit=100").await;
    assert_eq!(log.status, 200, "{log:?}");
    let actions: Vec<&str> = log.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["resourceType"] == "provider_credential")
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["provider_credential.deleted", "provider_credential.rotated", "provider_credential.created"],
        "{log:?}"
    );
    assert!(!log.text.contains(OPENAI_SECRET) && !log.text.contains("sk-old-"), "{}", log.text);
    // Deleted: a call with the spendgate key in the provider slot now has nothing to use.
    let bearer = format!("Bearer {}", s.raw);
    let before = s.mock.count();
    let r = s.call("/v1/chat/completions", &chat(), &[("authorization", &bearer)]).await;
    assert_eq!((r.status, r.code()), (400, "invalid_upstream"), "{r:?}");
    assert_eq!(s.mock.count(), before);
}

#[tokio::test]
async fn the_agent_sends_only_its_service_key_and_the_upstream_sees_the_stored_one() {
    let s = setup().await;
    store(&s.owner, "openai", OPENAI_SECRET).await;
    store(&s.owner, "anthropic", ANTHROPIC_SECRET).await;
    store(&s.owner, "gemini", GEMINI_SECRET).await;
    let key = [("x-service-key", s.raw.as_str())];

    let r = s.call("/v1/chat/completions", &chat(), &key).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = s.mock.last();
    assert_eq!(seen.headers.get("authorization"), Some(&format!("Bearer {OPENAI_SECRET}")));
    no_spendgate_key(&seen);

    let r = s.call("/v1/messages", &message(), &key).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = s.mock.last();
    assert_eq!(seen.headers.get("x-api-key").map(String::as_str), Some(ANTHROPIC_SECRET));
    assert!(!seen.headers.contains_key("authorization"), "{:?}", seen.headers);
    no_spendgate_key(&seen);

    let r = s.call(GEMINI_PATH, &gemini(), &key).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = s.mock.last();
    assert_eq!(seen.headers.get("x-goog-api-key").map(String::as_str), Some(GEMINI_SECRET));
    no_spendgate_key(&seen);

    // The calls were metered like any other.
    let events = wait_events(&s.owner, 3).await;
    assert!(events.iter().all(|e| e["costMicrodollars"].as_i64().unwrap() > 0), "{events:?}");
}

#[tokio::test]
async fn the_spendgate_key_is_accepted_where_clients_put_their_provider_key() {
    let s = setup().await;
    store(&s.owner, "openai", OPENAI_SECRET).await;
    store(&s.owner, "anthropic", ANTHROPIC_SECRET).await;
    store(&s.owner, "gemini", GEMINI_SECRET).await;
    let bearer = format!("Bearer {}", s.raw);

    let r = s.call("/v1/chat/completions", &chat(), &[("authorization", &bearer)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = s.mock.last();
    assert_eq!(seen.headers.get("authorization"), Some(&format!("Bearer {OPENAI_SECRET}")));
    no_spendgate_key(&seen);

    for headers in [[("x-api-key", s.raw.as_str())], [("authorization", bearer.as_str())]] {
        let r = s.call("/v1/messages", &message(), &headers).await;
        assert_eq!(r.status, 200, "{headers:?}: {r:?}");
        let seen = s.mock.last();
        assert_eq!(seen.headers.get("x-api-key").map(String::as_str), Some(ANTHROPIC_SECRET));
        assert!(!seen.headers.contains_key("authorization"), "{:?}", seen.headers);
        no_spendgate_key(&seen);
    }

    for headers in [[("x-goog-api-key", s.raw.as_str())], [("authorization", bearer.as_str())]] {
        let r = s.call(GEMINI_PATH, &gemini(), &headers).await;
        assert_eq!(r.status, 200, "{headers:?}: {r:?}");
        let seen = s.mock.last();
        assert_eq!(seen.headers.get("x-goog-api-key").map(String::as_str), Some(GEMINI_SECRET));
        no_spendgate_key(&seen);
    }
    let events = wait_events(&s.owner, 5).await;
    assert_eq!(events.len(), 5, "{events:?}");

    // Only the provider routes take the key there: the others keep X-Service-Key.
    let proxy = s.app.proxy();
    let r = read(
        proxy
            .request(reqwest::Method::GET, "/v1/policy")
            .header("authorization", &bearer)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"), "{r:?}");
    let tool = json!({ "toolName": "search", "toolServer": "web", "costMicrodollars": 5 });
    for path in ["/v1/mcp/events", "/v1/bind", "/v1/gate"] {
        let r = s.call(path, &tool, &[("authorization", &bearer)]).await;
        assert_eq!((r.status, r.code()), (401, "unauthorized"), "{path}: {r:?}");
    }

    // An unknown spendgate key in the slot is a 401, forwarded nowhere.
    let before = s.mock.count();
    let wrong = "Bearer svc_live_sk_00000000000000000000000000000000";
    let r = s.call("/v1/chat/completions", &chat(), &[("authorization", wrong)]).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"), "{r:?}");
    assert_eq!(s.mock.count(), before);
}

#[tokio::test]
async fn without_a_stored_credential_the_spendgate_key_in_the_slot_is_refused() {
    let s = setup().await;
    let bearer = format!("Bearer {}", s.raw);
    let cases: [(&str, Value, (&str, &str), &str); 3] = [
        ("/v1/chat/completions", chat(), ("authorization", bearer.as_str()), "openai"),
        ("/v1/messages", message(), ("x-api-key", s.raw.as_str()), "anthropic"),
        (GEMINI_PATH, gemini(), ("x-goog-api-key", s.raw.as_str()), "gemini"),
    ];
    for (path, body, header, upstream) in cases {
        let r = s.call(path, &body, &[header]).await;
        assert_eq!((r.status, r.code()), (400, "invalid_upstream"), "{path}: {r:?}");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(upstream) && message.contains("/api/provider-credentials"), "{message}");
        assert_eq!(r.body["error"]["details"]["upstream"], upstream, "{r:?}");
    }
    assert_eq!(s.mock.count(), 0, "nothing was forwarded");
    // With X-Service-Key and no credential anywhere, the call goes out as before.
    let r = s.call("/v1/chat/completions", &chat(), &[("x-service-key", &s.raw)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(!s.mock.last().headers.contains_key("authorization"));
}

#[tokio::test]
async fn a_key_requiring_stored_credentials_refuses_a_call_bringing_its_own() {
    let s = setup().await;
    store(&s.owner, "openai", OPENAI_SECRET).await;
    store(&s.owner, "anthropic", ANTHROPIC_SECRET).await;
    let r = s.owner.post("/api/keys", json!({ "name": "strict", "requireStoredCredentials": true })).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["data"]["requireStoredCredentials"], true);
    let strict = r.body["data"]["rawKey"].as_str().unwrap().to_owned();
    let strict_id = r.body["data"]["id"].as_str().unwrap().to_owned();
    let listed = s.owner.get("/api/keys").await;
    let flags: Vec<&Value> =
        listed.body["data"].as_array().unwrap().iter().map(|k| &k["requireStoredCredentials"]).collect();
    assert!(flags.contains(&&json!(true)) && flags.contains(&&json!(false)), "{listed:?}");

    let cases = [
        ("/v1/chat/completions", chat(), ("authorization", "Bearer sk-own-0123456789")),
        ("/v1/messages", message(), ("x-api-key", "sk-ant-own-0123456789")),
    ];
    for (path, body, own) in &cases {
        let r = s.call(path, body, &[("x-service-key", &strict), *own]).await;
        assert_eq!((r.status, r.code()), (403, "forbidden"), "{path}: {r:?}");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("stored provider credentials"), "{message}");
    }
    let r = s.call(&format!("{GEMINI_PATH}?key=AIzaOwn"), &gemini(), &[("x-service-key", &strict)]).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{r:?}");
    assert_eq!(s.mock.count(), 0, "nothing was forwarded");

    // The same call without its own key goes out with the stored one.
    let r = s.call("/v1/chat/completions", &chat(), &[("x-service-key", &strict)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.mock.last().headers.get("authorization"), Some(&format!("Bearer {OPENAI_SECRET}")));
    // An unrestricted key may still bring its own.
    let r = s.call("/v1/chat/completions", &chat(), &[("x-service-key", &s.raw), cases[0].2]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        s.mock.last().headers.get("authorization").map(String::as_str),
        Some("Bearer sk-own-0123456789")
    );

    // PATCH lifts the requirement, at once.
    let r =
        s.owner.patch(&format!("/api/keys/{strict_id}"), json!({ "requireStoredCredentials": false })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["requireStoredCredentials"], false);
    let r = s.call("/v1/chat/completions", &chat(), &[("x-service-key", &strict), cases[0].2]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r =
        s.owner.patch(&format!("/api/keys/{strict_id}"), json!({ "requireStoredCredentials": null })).await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
}

#[tokio::test]
async fn an_organization_never_uses_another_organizations_credential() {
    let s = setup().await;
    let stored = store(&s.owner, "openai", OPENAI_SECRET).await;
    let other = s.app.user_in_org("other@example.com", "elsewhere", "owner").await;
    let (_, other_raw) = create_key(&other, "theirs").await;

    assert_eq!(other.get(PATH).await.body["data"], json!([]));
    let id = stored["id"].as_str().unwrap();
    let r = other.delete(&format!("{PATH}/{id}")).await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{r:?}");

    let bearer = format!("Bearer {other_raw}");
    let r = s.call("/v1/chat/completions", &chat(), &[("authorization", &bearer)]).await;
    assert_eq!((r.status, r.code()), (400, "invalid_upstream"), "{r:?}");
    assert_eq!(s.mock.count(), 0);
    let r = s.call("/v1/chat/completions", &chat(), &[("x-service-key", &other_raw)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = s.mock.last();
    assert!(!seen.headers.contains_key("authorization"), "{:?}", seen.headers);
    // The owner's credential is still there and still used for the owner's calls.
    assert_eq!(s.owner.get(PATH).await.body["data"].as_array().unwrap().len(), 1);
    let r = s.call("/v1/chat/completions", &chat(), &[("x-service-key", &s.raw)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.mock.last().headers.get("authorization"), Some(&format!("Bearer {OPENAI_SECRET}")));
}

/// SQLite: with no `secret_key`, one is generated beside the database (mode 0600) and
/// reused after a restart, so the stored credential still decrypts. PostgreSQL: with
/// no `secret_key` the credential endpoints refuse and say why, the rest runs.
#[tokio::test]
async fn the_secret_key_is_generated_for_sqlite_and_required_for_postgres() {
    let mock = MockUpstream::start();
    let mut app = TestApp::start_with(&env_for(&mock, false)).await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "agent").await;
    if backend_is_postgres() {
        let r = owner.post(PATH, json!({ "upstream": "openai", "secret": OPENAI_SECRET })).await;
        assert_eq!((r.status, r.code()), (503, "service_unavailable"), "{r:?}");
        assert!(r.body["error"]["message"].as_str().unwrap().contains("SPENDGATE_SECRET_KEY"), "{r:?}");
        assert_eq!(owner.get(PATH).await.status, 200, "listing needs no key");
        let r = owner.get("/api/keys").await;
        assert_eq!(r.status, 200, "the rest of the service runs");
        return;
    }
    let db = app.db.url.strip_prefix("sqlite://").unwrap().to_owned();
    let file = std::path::PathBuf::from(format!("{db}.secret_key"));
    let generated = std::fs::read_to_string(&file).expect("the key file beside the database");
    assert_eq!(generated.trim().len(), 64);
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert!(app.server.logs().contains("secret_key was not set"), "{}", app.server.logs());
    store(&owner, "openai", OPENAI_SECRET).await;

    app.restart();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), generated, "reused, not replaced");
    let owner = app.login("owner@example.com").await;
    assert_eq!(owner.get(PATH).await.body["data"].as_array().unwrap().len(), 1);
    let bearer = format!("Bearer {raw}");
    let r = read(
        app.proxy()
            .request(reqwest::Method::POST, "/v1/chat/completions")
            .header("content-type", "application/json")
            .header("authorization", &bearer)
            .body(chat().to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(mock.last().headers.get("authorization"), Some(&format!("Bearer {OPENAI_SECRET}")));
}

async fn wait_events(owner: &Client, at_least: usize) -> Vec<Value> {
    for _ in 0..100 {
        let r = owner.get("/api/cost-events?limit=100").await;
        let data = r.body["data"].as_array().cloned().unwrap_or_default();
        if data.len() >= at_least {
            return data;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {at_least} cost events were recorded");
}

/// A rotation and a delete made through one instance reach another instance's
/// credential cache through the change feed, within about a second.
#[tokio::test]
async fn a_change_made_on_one_instance_reaches_the_others() {
    let s = setup().await;
    store(&s.owner, "openai", "sk-first-0123456789abcdefghijklmn").await;
    let second = crate::support::Server::start(&s.app.db.url, &s.app.extra_env);
    let call_second = || async {
        let r = Client::new(&second.proxy)
            .request(reqwest::Method::POST, "/v1/chat/completions")
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {}", s.raw))
            .body(chat().to_string());
        read(r.send().await.expect("request")).await
    };
    // Warm the second instance's cache with the first secret.
    let r = call_second().await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        s.mock.last().headers.get("authorization").map(String::as_str),
        Some("Bearer sk-first-0123456789abcdefghijklmn")
    );

    let rotated = store(&s.owner, "openai", OPENAI_SECRET).await;
    let expected = format!("Bearer {OPENAI_SECRET}");
    let mut seen = None;
    for _ in 0..40 {
        let r = call_second().await;
        assert_eq!(r.status, 200, "{r:?}");
        seen = s.mock.last().headers.get("authorization").cloned();
        if seen.as_ref() == Some(&expected) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, Some(expected), "the rotation reached the second instance");

    let id = rotated["id"].as_str().unwrap();
    assert_eq!(s.owner.delete(&format!("{PATH}/{id}")).await.status, 200);
    let mut last = None;
    for _ in 0..40 {
        let r = call_second().await;
        if r.status == 400 {
            last = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = last.expect("the delete reached the second instance");
    assert_eq!(r.code(), "invalid_upstream", "{r:?}");
}

/// The Responses routes and operator-defined upstreams take the same credentials:
/// each named upstream its own stored key (in its key header), one without a stored
/// key gets the call keyless, and the bookkeeping endpoints use the stored key too.
#[tokio::test]
async fn responses_routes_and_named_upstreams_use_their_own_stored_credentials() {
    let mock = MockUpstream::start();
    let named = MockUpstream::start();
    let mut env = env_for(&mock, backend_is_postgres());
    let upstreams = format!(
        "name=router,format=openai,base_url={b}/or;name=azure,format=openai,base_url={b}/az,key_header=api-key;\
         name=local,format=openai,base_url={b}/lo",
        b = named.base
    );
    env.push(("SPENDGATE_UPSTREAMS", upstreams));
    let app = TestApp::start_with(&env).await;
    let owner = app.owner().await;
    let (_, raw) = create_key(&owner, "agent").await;
    let s = Setup { app, mock, owner, raw };
    store(&s.owner, "openai", OPENAI_SECRET).await;
    store(&s.owner, "router", "sk-or-stored-0123456789abcdef").await;
    store(&s.owner, "azure", "az-stored-0123456789abcdef").await;
    let r = s.owner.post(PATH, json!({ "upstream": "nowhere", "secret": "sk-x-0123456789" })).await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
    let bearer = format!("Bearer {}", s.raw);
    let slot = [("authorization", bearer.as_str())];

    let body = json!({ "model": "gpt-4o-mini", "input": "hi", "max_output_tokens": 50 });
    let r = s.call("/v1/responses", &body, &slot).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = s.mock.last();
    assert_eq!(seen.headers.get("authorization"), Some(&format!("Bearer {OPENAI_SECRET}")));
    no_spendgate_key(&seen);
    let proxy = s.app.proxy();
    let r = read(
        proxy
            .request(reqwest::Method::GET, "/v1/responses/resp_1")
            .header("authorization", &bearer)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = s.mock.last();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("GET", "/v1/responses/resp_1"));
    assert_eq!(seen.headers.get("authorization"), Some(&format!("Bearer {OPENAI_SECRET}")));
    no_spendgate_key(&seen);

    let r = s.call("/upstreams/router/v1/chat/completions", &chat(), &slot).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = named.last();
    assert_eq!(seen.path, "/or/v1/chat/completions");
    assert_eq!(
        seen.headers.get("authorization").map(String::as_str),
        Some("Bearer sk-or-stored-0123456789abcdef")
    );
    no_spendgate_key(&seen);

    let r = s.call("/upstreams/azure/v1/responses", &body, &slot).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = named.last();
    assert_eq!(seen.path, "/az/v1/responses");
    assert_eq!(seen.headers.get("api-key").map(String::as_str), Some("az-stored-0123456789abcdef"));
    assert!(!seen.headers.contains_key("authorization"), "{:?}", seen.headers);

    // No stored key for `local` (a keyless local server): forwarded without one.
    let r = s.call("/upstreams/local/v1/chat/completions", &chat(), &slot).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = named.last();
    assert_eq!(seen.path, "/lo/v1/chat/completions");
    assert!(!seen.headers.contains_key("authorization"), "{:?}", seen.headers);
    no_spendgate_key(&seen);
    let events = wait_events(&s.owner, 4).await;
    assert_eq!(events.len(), 4, "{events:?}");
}
