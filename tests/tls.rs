//! TLS on the listeners (`proxy_tls_cert` / `proxy_tls_key`, `control_tls_*`): a
//! governed call over https with a certificate from a test CA, the control plane over
//! https, plain http and untrusted clients refused, a client that goes away over TLS
//! noticed at once, and a certificate renewed on SIGHUP while a stream is in flight:
//! the stream finishes and is charged, new connections get the new certificate.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::proxy::setup_with;
use crate::support::tls::TestCa;
use crate::support::{read, TestApp};

/// A certificate and key file pair in a directory of its own.
struct Files {
    cert: PathBuf,
    key: PathBuf,
    _dir: tempfile::TempDir,
}

fn files(ca: &TestCa) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    ca.write_leaf(&cert, &key);
    Files { cert, key, _dir: dir }
}

fn path(p: &std::path::Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// A streamed Anthropic call: 100 prompt and 50 output tokens of claude-sonnet-4-5,
/// 300 + 750 µ$, in `chunks` events `delay_ms` apart.
fn stream_body(chunks: u64, delay_ms: u64) -> serde_json::Value {
    json!({ "model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true,
        "messages": [{ "role": "user", "content": "hi" }],
        "mock": { "chunks": chunks, "chunk_delay_ms": delay_ms, "usage": { "input": 100, "output": 50 } } })
}

#[tokio::test]
async fn the_proxy_serves_https_with_the_configured_certificate() {
    let ca = TestCa::new();
    let f = files(&ca);
    let s =
        setup_with(&[("SPENDGATE_PROXY_TLS_CERT", path(&f.cert)), ("SPENDGATE_PROXY_TLS_KEY", path(&f.key))])
            .await;
    let proxy = s.app.server.proxy.clone();
    assert!(proxy.starts_with("https://"), "the ready line names the scheme: {proxy}");

    let r = ca
        .client()
        .post(format!("{proxy}/v1/messages"))
        .header("x-service-key", &s.raw)
        .json(&stream_body(3, 0))
        .send()
        .await
        .unwrap();
    let r = read(r).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text.contains("message_stop"), "{}", r.text);
    let e = &s.events(1).await[0];
    assert_eq!(
        (e["costMicrodollars"].as_i64(), e["provider"].as_str()),
        (Some(1050), Some("anthropic")),
        "{e}"
    );

    // Plain http to the https port, and a client that does not trust the test CA.
    let plain = proxy.replacen("https://", "http://", 1);
    assert!(reqwest::get(format!("{plain}/health")).await.is_err(), "plain http is not served");
    let untrusting = reqwest::Client::builder().tls_built_in_root_certs(true).build().unwrap();
    assert!(untrusting.get(format!("{proxy}/health")).send().await.is_err());
    // The OpenAPI document names the proxy by its https address.
    let doc = s.owner.get("/api/openapi.json").await;
    assert!(doc.text.contains(&format!("\"{proxy}\"")), "{}", &doc.text[..doc.text.len().min(400)]);
}

#[tokio::test]
async fn a_client_gone_over_tls_is_noticed_before_the_provider_answers() {
    let ca = TestCa::new();
    let f = files(&ca);
    let s =
        setup_with(&[("SPENDGATE_PROXY_TLS_CERT", path(&f.cert)), ("SPENDGATE_PROXY_TLS_KEY", path(&f.key))])
            .await;
    // The provider takes 10 s to answer; the client gives up after 300 ms.
    let mut slow = stream_body(1, 0);
    slow["stream"] = json!(false);
    slow["mock"]["delay_ms"] = json!(10_000);
    let gone = ca
        .client()
        .post(format!("{}/v1/messages", s.app.server.proxy))
        .header("x-service-key", &s.raw)
        .json(&slow)
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up first");
    // Within two seconds (not after the provider's 10 s): charged its estimate.
    let e = tokio::time::timeout(Duration::from_secs(2), s.events(1)).await.expect("recorded at once");
    assert_eq!(e[0]["tags"]["_svc_cancelled"], "true", "{}", e[0]);
}

#[tokio::test]
async fn the_control_plane_serves_https() {
    let ca = TestCa::new();
    let f = files(&ca);
    let app = TestApp::start_with(&[
        ("SPENDGATE_CONTROL_TLS_CERT", path(&f.cert)),
        ("SPENDGATE_CONTROL_TLS_KEY", path(&f.key)),
    ])
    .await;
    let control = app.server.control.clone();
    assert!(control.starts_with("https://"), "{control}");
    assert!(app.server.proxy.starts_with("http://"), "only the control plane was given a certificate");
    let r = read(ca.client().get(format!("{control}/api/health")).send().await.unwrap()).await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn a_bad_certificate_stops_the_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, "not a certificate").unwrap();
    std::fs::write(&key, "not a key").unwrap();
    let db = crate::support::TestDb::new().await;
    let out = Command::new(env!("CARGO_BIN_EXE_spendgate"))
        .arg("serve")
        .env_clear()
        .env("SPENDGATE_DATABASE_URL", &db.url)
        .env("SPENDGATE_CONTROL_ADDR", "127.0.0.1:0")
        .env("SPENDGATE_PROXY_ADDR", "127.0.0.1:0")
        .env("SPENDGATE_PROXY_TLS_CERT", &cert)
        .env("SPENDGATE_PROXY_TLS_KEY", &key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("cert.pem") && said.contains("CERTIFICATE"), "{said}");
}

#[tokio::test]
async fn sighup_renews_the_certificate_without_dropping_a_call() {
    let (old_ca, new_ca) = (TestCa::new(), TestCa::new());
    let f = files(&old_ca);
    let s =
        setup_with(&[("SPENDGATE_PROXY_TLS_CERT", path(&f.cert)), ("SPENDGATE_PROXY_TLS_KEY", path(&f.key))])
            .await;
    let proxy = s.app.server.proxy.clone();

    // A stream of about 2 s, in flight over a connection made with the old certificate.
    let response = old_ca
        .client()
        .post(format!("{proxy}/v1/messages"))
        .header("x-service-key", &s.raw)
        .json(&stream_body(8, 250))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let in_flight = tokio::spawn(read(response));

    new_ca.write_leaf(&f.cert, &f.key);
    let hup = Command::new("kill").args(["-HUP", &s.app.server.child.id().to_string()]).status().unwrap();
    assert!(hup.success());
    let mut renewed = false;
    for _ in 0..100 {
        if new_ca.client().get(format!("{proxy}/health")).send().await.is_ok() {
            renewed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(renewed, "new connections get the new certificate\n{}", s.app.server.logs());
    assert!(old_ca.client().get(format!("{proxy}/health")).send().await.is_err(), "the old one is gone");

    let streamed = in_flight.await.unwrap();
    assert!(streamed.text.contains("message_stop"), "the stream finished: {}", streamed.text);
    let e = &s.events(1).await[0];
    assert_eq!(e["costMicrodollars"], 1050, "{e}");
    assert!(e["tags"].get("_svc_estimated").is_none(), "{e}");
    assert!(s.app.server.logs().contains("TLS certificate reloaded"));
}
