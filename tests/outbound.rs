//! Outbound networking as the operator sets it: an upstream behind a certificate of
//! a test CA that only `SSL_CERT_FILE` names, and calls through an HTTP `CONNECT`
//! proxy named in `HTTPS_PROXY`, bypassed for `NO_PROXY` hosts.

use serde_json::json;

use crate::proxy::{setup_with, Setup};
use crate::support::connect_proxy::ConnectProxy;
use crate::support::mock::MockUpstream;
use crate::support::tls::{TestCa, TlsFront};

fn chat() -> serde_json::Value {
    json!({ "model": "gpt-4o", "max_tokens": 10, "messages": [{ "role": "user", "content": "hi" }] })
}

/// A server whose `secure` upstream (openai format) is `https://localhost:PORT`, a
/// TLS front of `mock` with a certificate of `ca`; plus `extra` settings.
async fn start(ca: &TestCa, mock: &MockUpstream, extra: &[(&'static str, String)]) -> (Setup, u16) {
    let front = TlsFront::start(ca, mock.base.trim_start_matches("http://"));
    let mut env = vec![(
        "SPENDGATE_UPSTREAMS",
        format!("name=secure,format=openai,base_url=https://localhost:{}", front.port),
    )];
    env.extend(extra.iter().cloned());
    (setup_with(&env).await, front.port)
}

#[tokio::test]
async fn an_upstream_signed_by_a_ca_in_ssl_cert_file_is_trusted_and_not_without_it() {
    let ca = TestCa::new();
    let tls_mock = MockUpstream::start();
    let (s, _) = start(&ca, &tls_mock, &[("SSL_CERT_FILE", ca.ca_file.display().to_string())]).await;
    let r = s.send("/upstreams/secure/v1/chat/completions", &chat(), &[]).await;
    assert_eq!(r.status, 200, "{r:?}\n{}", s.app.server.logs());
    assert_eq!(tls_mock.count(), 1);
    assert!(s.app.server.logs().contains("SSL_CERT_FILE="), "the trust in force is logged");

    // The same upstream without the CA: the certificate is refused, nothing reaches it.
    let other_mock = MockUpstream::start();
    let (s, _) = start(&ca, &other_mock, &[]).await;
    let r = s.send("/upstreams/secure/v1/chat/completions", &chat(), &[]).await;
    assert_eq!((r.status, r.code()), (502, "upstream_error"), "{r:?}");
    assert_eq!(other_mock.count(), 0);
}

#[tokio::test]
async fn calls_go_through_the_https_proxy_unless_no_proxy_names_the_host() {
    let ca = TestCa::new();
    let tls_mock = MockUpstream::start();
    let proxy = ConnectProxy::start();
    let cert = ("SSL_CERT_FILE", ca.ca_file.display().to_string());
    let (s, port) = start(&ca, &tls_mock, &[cert.clone(), ("HTTPS_PROXY", proxy.url.clone())]).await;
    let r = s.send("/upstreams/secure/v1/chat/completions", &chat(), &[]).await;
    assert_eq!(r.status, 200, "{r:?}\n{}", s.app.server.logs());
    assert_eq!(proxy.targets(), vec![format!("localhost:{port}")], "the proxy saw the CONNECT");
    assert_eq!(tls_mock.count(), 1);
    assert!(s.app.server.logs().contains(&proxy.url.replace("http://", "")), "the proxy in force is logged");
    // The built-in upstream is plain http: HTTPS_PROXY does not apply to it.
    let r = s.send("/v1/chat/completions", &chat(), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(proxy.targets().len(), 1);

    // NO_PROXY names the host: connected to directly.
    let direct_mock = MockUpstream::start();
    let (s, _) = start(
        &ca,
        &direct_mock,
        &[cert, ("HTTPS_PROXY", proxy.url.clone()), ("NO_PROXY", "example.com,localhost".to_owned())],
    )
    .await;
    let r = s.send("/upstreams/secure/v1/chat/completions", &chat(), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(direct_mock.count(), 1);
    assert_eq!(proxy.targets().len(), 1, "no new CONNECT: {:?}", proxy.targets());
}

#[tokio::test]
async fn http_proxy_carries_plain_http_upstreams_too() {
    let proxy = ConnectProxy::start();
    let s = setup_with(&[("HTTP_PROXY", proxy.url.clone())]).await;
    let r = s.send("/v1/chat/completions", &chat(), &[]).await;
    assert_eq!(r.status, 200, "{r:?}\n{}", s.app.server.logs());
    assert_eq!(proxy.targets(), vec![s.mock.base.trim_start_matches("http://").to_owned()]);
    assert_eq!(s.mock.count(), 1);
}

#[tokio::test]
async fn webhooks_go_through_the_proxy_too() {
    let proxy = ConnectProxy::start();
    let rx = crate::support::receiver::Receiver::start();
    let app = crate::support::TestApp::start_with(&[("HTTP_PROXY", proxy.url.clone())]).await;
    let owner = app.owner().await;
    let r = owner.post("/api/webhooks", json!({ "url": rx.url })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["data"]["id"].as_str().unwrap().to_owned();
    let r = owner.post_empty(&format!("/api/webhooks/{id}/test")).await;
    assert_eq!(r.body["success"], true, "{r:?}\n{}", app.server.logs());
    let target = rx.url.trim_start_matches("http://").trim_end_matches("/hook").to_owned();
    assert_eq!(proxy.targets(), vec![target]);
    assert_eq!(rx.received().len(), 1);
}
