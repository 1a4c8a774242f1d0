//! One signed webhook call: the HTTP client (checked resolver, no redirects, a
//! timeout) and the request with its headers.

use std::time::Duration;

use crate::webhooks::schedule::{classify, Attempt};
use crate::webhooks::{sign, target};

/// `User-Agent` of every webhook call.
pub const USER_AGENT: &str = "Service-Webhooks/1.0";
/// The most of a response body kept for `responsePreview`.
pub const PREVIEW_CHARS: usize = 500;

/// A client whose connections go only to addresses the target rules allow (through
/// the operator's proxy too: the name is vetted before the tunnel is asked for).
/// `awc::Client` is not `Send`: build one per thread (per actor arbiter or worker).
pub fn client(dev: bool, timeout: Duration) -> awc::Client {
    let resolver = actix_tls::connect::Resolver::custom(target::CheckedResolver { dev });
    crate::net::client(&crate::net::Options {
        connect_timeout: timeout,
        keep_alive: Duration::from_secs(30),
        timeout: Some(timeout),
        resolver: Some(resolver),
    })
}

/// Like [`client`], without a whole-request timeout (for streams that rightly stay
/// open, such as an MCP server's SSE answers): connects only to allowed addresses.
pub fn streaming_client(dev: bool, connect_timeout: Duration) -> awc::Client {
    let resolver = actix_tls::connect::Resolver::custom(target::CheckedResolver { dev });
    crate::net::client(&crate::net::Options {
        connect_timeout,
        keep_alive: Duration::from_secs(30),
        timeout: None,
        resolver: Some(resolver),
    })
}

/// One call to make.
pub struct Call<'a> {
    pub url: &'a str,
    pub event_id: &'a str,
    pub body: Vec<u8>,
    /// The current secret, then the previous one while it still signs.
    pub secrets: Vec<&'a str>,
    pub timestamp: i64,
}

/// Sends `call`; returns what the attempt came to and the start of the answer.
/// The URL is checked against the target rules again first.
pub async fn send(client: &awc::Client, dev: bool, call: Call<'_>) -> (Attempt, String) {
    if let Err(e) = target::check_url(call.url, dev) {
        return (Attempt::Permanent(None, format!("target refused: {e}")), String::new());
    }
    let signature = sign::header(&call.secrets, call.timestamp, &call.body);
    let request = client
        .post(call.url)
        .insert_header(("Content-Type", "application/json"))
        .insert_header(("X-Service-Signature", signature))
        .insert_header(("X-Service-Webhook-Id", call.event_id))
        .insert_header(("X-Service-Webhook-Timestamp", call.timestamp.to_string()))
        .insert_header(("User-Agent", USER_AGENT));
    match request.send_body(call.body).await {
        Ok(mut response) => {
            let status = response.status().as_u16();
            let body = response.body().limit(64 * 1024).await.unwrap_or_default();
            let preview: String = String::from_utf8_lossy(&body).chars().take(PREVIEW_CHARS).collect();
            (classify(status), preview)
        }
        Err(e) => (Attempt::Retry(None, e.to_string()), String::new()),
    }
}
