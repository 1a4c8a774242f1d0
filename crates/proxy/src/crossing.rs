//! Which headers cross the proxy in each direction: those forwarded upstream for a
//! route (the provider key of the call's credential, never a spendgate key), and those
//! of the provider's answer passed back to the client.

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};

use super::credential::{is_spendgate_key, Credential};
use super::upstream::Route;
use spendgate_llm::pricing::Provider;

/// The headers forwarded upstream for `route`, exactly as the spec lists them, with
/// the provider key of `credential` (the client's own key headers, never a spendgate
/// key; or the stored one). `traceparent` is forwarded (with `tracestate`) only when
/// it was valid. An upstream whose key goes in another header (`key_header`) gets the
/// key there alone (see [`move_key`]).
pub fn forwarded_headers(
    route: Route,
    inbound: &HeaderMap,
    traceparent: Option<&str>,
    credential: &Credential,
    key_header: Option<&str>,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = standard_headers(route, inbound, traceparent, credential);
    if let Some(h) = key_header {
        // A client that already sends its key in the upstream's own header.
        let own =
            inbound.get(h).filter(|v| matches!(credential, Credential::Client) && !is_spendgate_key(h, v));
        if let (Some(v), Ok(name)) = (own, HeaderName::from_bytes(h.as_bytes())) {
            out.push((name, v.clone()));
        }
        move_key(&mut out, h);
    }
    out
}

/// The provider key among the forwarded headers (the client's own or the stored one)
/// moved into `key_header`: the key is sent in `key_header` alone (as a bearer token
/// when that is `authorization`).
fn move_key(out: &mut Vec<(HeaderName, HeaderValue)>, key_header: &str) {
    let Ok(name) = HeaderName::from_bytes(key_header.as_bytes()) else { return };
    let is_key =
        |n: &HeaderName| matches!(n.as_str(), "authorization" | "x-api-key" | "x-goog-api-key") || *n == name;
    let key = out.iter().find(|(n, _)| *n == name).or_else(|| out.iter().find(|(n, _)| is_key(n))).and_then(
        |(n, v)| {
            let v = v.to_str().ok()?;
            Some(if n == "authorization" { strip_bearer(v)?.to_owned() } else { v.to_owned() })
        },
    );
    out.retain(|(n, _)| !is_key(n));
    let value = match key {
        Some(k) if name == "authorization" => HeaderValue::from_str(&format!("Bearer {k}")),
        Some(k) => HeaderValue::from_str(&k),
        None => return,
    };
    if let Ok(value) = value {
        out.push((name, value));
    }
}

/// The token of a `Bearer <token>` header value.
fn strip_bearer(value: &str) -> Option<&str> {
    value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")).map(str::trim)
}

fn standard_headers(
    route: Route,
    inbound: &HeaderMap,
    traceparent: Option<&str>,
    credential: &Credential,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::with_capacity(6);
    let client_keys = matches!(credential, Credential::Client);
    // `key`: a provider key header, passed only as the client's own key, and never
    // when it holds a spendgate key.
    let mut copy = |name: &'static str, key: bool| {
        let value = inbound.get(name).filter(|v| !key || (client_keys && !is_spendgate_key(name, v)));
        if let Some(v) = value {
            out.push((HeaderName::from_static(name), v.clone()));
        }
    };
    match route.wire() {
        Provider::OpenAi | Provider::Azure => {
            copy("authorization", true);
            copy("openai-organization", false);
            copy("openai-project", false);
        }
        Provider::Anthropic => {
            copy("x-api-key", true);
            copy("authorization", true);
            copy("anthropic-beta", false);
            let version = inbound
                .get("anthropic-version")
                .cloned()
                .unwrap_or_else(|| HeaderValue::from_static("2023-06-01"));
            out.push((HeaderName::from_static("anthropic-version"), version));
        }
        Provider::Google | Provider::Bedrock | Provider::Vertex => {
            // The Google-style key: the native header, else `Authorization: Bearer <key>`.
            let native =
                inbound.get("x-goog-api-key").filter(|v| !is_spendgate_key("x-goog-api-key", v)).cloned();
            let bearer = inbound
                .get("authorization")
                .filter(|v| !is_spendgate_key("authorization", v))
                .and_then(|v| v.to_str().ok())
                .and_then(strip_bearer)
                .and_then(|k| HeaderValue::from_str(k).ok());
            if let Some(key) = native.or(bearer).filter(|_| client_keys) {
                out.push((HeaderName::from_static("x-goog-api-key"), key));
            }
        }
    }
    match credential {
        Credential::Stored(name, value) => out.push((name.clone(), value.clone())),
        Credential::Cloud(cloud) => out.extend(super::cloud::headers(cloud)),
        Credential::Client | Credential::Absent => {}
    }
    if let Some(tp) = traceparent.and_then(|t| HeaderValue::from_str(t).ok()) {
        out.push((HeaderName::from_static("traceparent"), tp));
        if let Some(ts) = inbound.get("tracestate") {
            out.push((HeaderName::from_static("tracestate"), ts.clone()));
        }
    }
    out
}

/// Whether an upstream response header is passed back to the client: the request id
/// (Bedrock's `x-amzn-requestid` too), every rate-limit header, `retry-after`, the
/// content type, and Bedrock's `x-amzn-errortype`.
pub fn passes_back(name: &HeaderName) -> bool {
    let n = name.as_str();
    n == "content-type"
        || n == "x-request-id"
        || n == "request-id"
        || n == "retry-after"
        || n.starts_with("x-ratelimit-")
        || n.starts_with("anthropic-ratelimit-")
        || n == "x-amzn-requestid"
        || n == "x-amzn-errortype"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_version_defaults_and_gemini_key_moves() {
        let inbound = HeaderMap::new();
        let h = forwarded_headers(Route::Messages, &inbound, None, &Credential::Client, None);
        assert_eq!(
            h,
            vec![(HeaderName::from_static("anthropic-version"), HeaderValue::from_static("2023-06-01"))]
        );
        let mut inbound = HeaderMap::new();
        inbound.insert(HeaderName::from_static("authorization"), HeaderValue::from_static("Bearer g-key"));
        inbound.insert(HeaderName::from_static("x-service-key"), HeaderValue::from_static("secret"));
        let h = forwarded_headers(Route::GenerateContent, &inbound, None, &Credential::Client, None);
        assert_eq!(h, vec![(HeaderName::from_static("x-goog-api-key"), HeaderValue::from_static("g-key"))]);
    }

    #[test]
    fn stored_credential_replaces_client_keys_and_spendgate_keys_never_leave() {
        let svc = HeaderValue::from_static("Bearer svc_live_sk_0123456789abcdef0123456789abcdef");
        let mut inbound = HeaderMap::new();
        inbound.insert(HeaderName::from_static("authorization"), svc.clone());
        inbound.insert(HeaderName::from_static("x-api-key"), HeaderValue::from_static("sk-ant-own"));
        let h = forwarded_headers(Route::Messages, &inbound, None, &Credential::Client, None);
        assert!(h.iter().all(|(_, v)| v != svc), "{h:?}");
        assert!(h.iter().any(|(n, v)| n == "x-api-key" && v == "sk-ant-own"));
        let stored = Credential::Stored(
            HeaderName::from_static("x-api-key"),
            HeaderValue::from_static("sk-ant-stored"),
        );
        let h = forwarded_headers(Route::Messages, &inbound, None, &stored, None);
        let keys: Vec<_> = h.iter().filter(|(n, _)| n == "x-api-key" || n == "authorization").collect();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].1, "sk-ant-stored");
        let h = forwarded_headers(Route::ChatCompletions, &inbound, None, &Credential::Absent, None);
        assert!(h.iter().all(|(n, _)| n != "authorization"));
    }

    #[test]
    fn a_key_header_gets_the_bearer_key_alone() {
        let mut inbound = HeaderMap::new();
        inbound.insert(HeaderName::from_static("authorization"), HeaderValue::from_static("Bearer az-key"));
        let h =
            forwarded_headers(Route::ChatCompletions, &inbound, None, &Credential::Client, Some("api-key"));
        assert_eq!(h, vec![(HeaderName::from_static("api-key"), HeaderValue::from_static("az-key"))]);
        let mut inbound = HeaderMap::new();
        inbound.insert(HeaderName::from_static("x-api-key"), HeaderValue::from_static("k"));
        let h =
            forwarded_headers(Route::Messages, &inbound, None, &Credential::Client, Some("authorization"));
        assert!(h.contains(&(HeaderName::from_static("authorization"), HeaderValue::from_static("Bearer k"))));
        assert!(!h.iter().any(|(n, _)| n == "x-api-key"), "{h:?}");
    }
}
