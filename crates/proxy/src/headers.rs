//! The proxy's `X-Service-*` request headers, read with the spec's rules: tags never
//! reject a request, an invalid customer only warns, invalid request or trace ids are
//! replaced, and only an over-long session id is refused.

use std::collections::BTreeMap;

use actix_web::http::header::HeaderMap;

use spendgate_engine::error::ApiError;
use spendgate_engine::util::validate::{
    is_customer_id, is_tag_key, MAX_TAGS, MAX_TAG_VALUE, RESERVED_TAG_PREFIX,
};

pub const MAX_SESSION_HEADER: usize = 256;
pub const MAX_REQUEST_ID: usize = 64;

/// What the request's headers ask for, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyHeaders {
    /// Inbound tags that passed the rules (at most 10, no `_svc_` keys).
    pub tags: BTreeMap<String, String>,
    pub session: Option<String>,
    pub finalize: bool,
    /// A valid `X-Service-Customer`.
    pub customer: Option<String>,
    /// `X-Service-Customer` was present but invalid (`X-Service-Warning: invalid_customer`).
    pub customer_invalid: bool,
    /// A valid `X-Service-Action-Id` (`svc_act_<uuid>`), as sent.
    pub action_id: Option<String>,
    /// The inbound request id when valid, else a generated UUID.
    pub request_id: String,
    pub upstream: Option<String>,
    /// A valid `Service-Version` date.
    pub version: Option<String>,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Reads the headers. The only refusal: a session id over 256 characters.
pub fn parse(headers: &HeaderMap) -> Result<ProxyHeaders, ApiError> {
    let session = match header(headers, "x-service-session") {
        Some(s) if s.chars().count() > MAX_SESSION_HEADER => {
            return Err(ApiError::invalid_field(
                &["headers", "X-Service-Session"],
                "session id must be at most 256 characters",
            ))
        }
        Some(s) if !s.is_empty() => Some(s.to_owned()),
        _ => None,
    };
    let customer_raw = header(headers, "x-service-customer");
    let customer = customer_raw.filter(|c| is_customer_id(c)).map(str::to_owned);
    Ok(ProxyHeaders {
        tags: header(headers, "x-service-tags").map(parse_tags).unwrap_or_default(),
        session,
        finalize: header(headers, "x-service-finalize").is_some_and(|v| v.trim() == "1"),
        customer_invalid: customer_raw.is_some() && customer.is_none(),
        customer,
        action_id: header(headers, "x-service-action-id").filter(|v| is_action_id(v)).map(str::to_owned),
        request_id: header(headers, "x-service-request-id")
            .filter(|v| is_request_id(v))
            .map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_owned),
        upstream: header(headers, "x-service-upstream").map(|u| u.trim().to_owned()),
        version: header(headers, "service-version").filter(|v| is_version_date(v)).map(str::to_owned),
    })
}

/// `X-Service-Tags`: a JSON object; anything else reads as no tags. Entries with an
/// invalid key, a non-string or over-long value, a null byte, or a reserved `_svc_` key
/// are dropped one by one; at most the first 10 valid ones (in key order) are kept.
pub fn parse_tags(raw: &str) -> BTreeMap<String, String> {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(raw) else {
        return BTreeMap::new();
    };
    let valid = map.into_iter().filter_map(|(k, v)| {
        let serde_json::Value::String(v) = v else { return None };
        let ok = is_tag_key(&k)
            && !k.starts_with(RESERVED_TAG_PREFIX)
            && v.chars().count() <= MAX_TAG_VALUE
            && !v.contains('\0');
        ok.then_some((k, v))
    });
    let mut tags: BTreeMap<String, String> = valid.collect();
    while tags.len() > MAX_TAGS {
        tags.pop_last();
    }
    tags
}

/// A UUID (any version, hyphenated or not) or a ULID, at most 64 characters.
pub fn is_request_id(s: &str) -> bool {
    s.len() <= MAX_REQUEST_ID && (uuid::Uuid::try_parse(s).is_ok() || is_ulid(s))
}

/// 26 characters of Crockford base32, the first at most `7` (128 bits).
fn is_ulid(s: &str) -> bool {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    s.len() == 26
        && s.bytes().all(|b| ALPHABET.contains(&b.to_ascii_uppercase()))
        && s.as_bytes().first().is_some_and(|b| *b <= b'7')
}

fn is_action_id(s: &str) -> bool {
    s.strip_prefix("svc_act_").is_some_and(|u| uuid::Uuid::try_parse(u).is_ok())
}

/// `YYYY-MM-DD`, a real calendar date.
fn is_version_date(s: &str) -> bool {
    s.len() == 10 && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(HeaderName::from_static(k), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn tags_never_reject() {
        assert!(parse_tags("not json").is_empty());
        assert!(parse_tags("[1,2]").is_empty());
        let t = parse_tags(r#"{"team":"core","bad key":"x","_svc_x":"y","n":1,"nul":"a\u0000b","ok-2":"v"}"#);
        assert_eq!(t.keys().map(String::as_str).collect::<Vec<_>>(), vec!["ok-2", "team"]);
        let many: String = (0..15).map(|i| format!("\"k{i:02}\":\"v\"")).collect::<Vec<_>>().join(",");
        assert_eq!(parse_tags(&format!("{{{many}}}")).len(), 10);
        assert!(parse_tags(&format!(r#"{{"k":"{}"}}"#, "v".repeat(257))).is_empty());
    }

    #[test]
    fn request_ids() {
        assert!(is_request_id("0191f2c4-6a5e-7cc2-9d0e-3b3b0f5e8a11"));
        assert!(is_request_id("01ARZ3NDEKTSV4RRFFQ69G5FAV"));
        assert!(!is_request_id("not-an-id"));
        assert!(!is_request_id("81ARZ3NDEKTSV4RRFFQ69G5FAV"));
        let generated = parse(&headers(&[("x-service-request-id", "bad")])).unwrap().request_id;
        assert!(is_request_id(&generated));
        let kept = parse(&headers(&[("x-service-request-id", "01ARZ3NDEKTSV4RRFFQ69G5FAV")])).unwrap();
        assert_eq!(kept.request_id, "01ARZ3NDEKTSV4RRFFQ69G5FAV");
    }

    #[test]
    fn session_customer_and_finalize() {
        let long = "s".repeat(257);
        assert!(parse(&headers(&[("x-service-session", &long)])).is_err());
        let ok = "s".repeat(256);
        assert_eq!(parse(&headers(&[("x-service-session", &ok)])).unwrap().session.as_deref(), Some(&*ok));
        let h =
            parse(&headers(&[("x-service-customer", "bad customer"), ("x-service-finalize", "1")])).unwrap();
        assert!(h.customer_invalid && h.customer.is_none() && h.finalize);
        let h = parse(&headers(&[("x-service-customer", "acme:eu"), ("x-service-finalize", "yes")])).unwrap();
        assert_eq!(h.customer.as_deref(), Some("acme:eu"));
        assert!(!h.customer_invalid && !h.finalize);
    }

    #[test]
    fn action_ids_and_versions() {
        assert!(is_action_id("svc_act_0191f2c4-6a5e-7cc2-9d0e-3b3b0f5e8a11"));
        assert!(!is_action_id("svc_key_0191f2c4-6a5e-7cc2-9d0e-3b3b0f5e8a11"));
        assert!(is_version_date("2026-04-01"));
        assert!(!is_version_date("2026-13-01"));
        assert!(!is_version_date("yesterday"));
    }
}
