//! Trace-id resolution for proxy requests: W3C `traceparent` first, then
//! `X-Service-Trace-Id`, else a fresh id.

use actix_web::http::header::{HeaderMap, HeaderName};

pub const TRACE_ID_HEADER: HeaderName = HeaderName::from_static("x-service-trace-id");

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedTrace {
    pub trace_id: String,
    /// The inbound `traceparent`, when valid (it is forwarded upstream).
    pub traceparent: Option<String>,
}

pub use spendgate_engine::util::validate::is_trace_id;
use spendgate_engine::util::validate::{all_zeros, is_lower_hex};

/// Parses `{version}-{trace-id}-{span-id}-{flags}`; returns the trace id.
pub fn parse_traceparent(value: &str) -> Option<&str> {
    let mut parts = value.trim().split('-');
    let (version, trace_id, span_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || version != "00" {
        return None;
    }
    (is_trace_id(trace_id) && is_lower_hex(span_id, 16) && !all_zeros(span_id) && is_lower_hex(flags, 2))
        .then_some(trace_id)
}

/// A fresh trace id: a UUIDv7 without dashes. Time-ordered, so that the indexes and
/// rollup rows keyed by trace (one per call that brings no trace of its own) grow at
/// their end instead of dirtying a random page each; its last 62 bits stay random.
pub fn new_trace_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

pub fn resolve(headers: &HeaderMap) -> ResolvedTrace {
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
    if let Some(tp) = traceparent {
        if let Some(id) = parse_traceparent(tp) {
            return ResolvedTrace { trace_id: id.to_owned(), traceparent: Some(tp.trim().to_owned()) };
        }
    }
    let explicit = headers.get(TRACE_ID_HEADER).and_then(|v| v.to_str().ok()).filter(|v| is_trace_id(v));
    ResolvedTrace { trace_id: explicit.map(str::to_owned).unwrap_or_else(new_trace_id), traceparent: None }
}

/// The request's resolved trace (the middleware put it there; resolved again if not).
pub(crate) fn trace_of(req: &actix_web::HttpRequest) -> ResolvedTrace {
    use actix_web::HttpMessage;
    req.extensions().get::<ResolvedTrace>().cloned().unwrap_or_else(|| resolve(req.headers()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_rules() {
        let tid = "4bf92f3577b34da6a3ce929d0e0e4736";
        assert_eq!(parse_traceparent(&format!("00-{tid}-00f067aa0ba902b7-01")), Some(tid));
        assert_eq!(parse_traceparent(&format!("ff-{tid}-00f067aa0ba902b7-01")), None);
        assert_eq!(parse_traceparent(&format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32))), None);
        assert_eq!(parse_traceparent(&format!("00-{tid}-0000000000000000-01")), None);
        assert_eq!(parse_traceparent(&format!("00-{}-00f067aa0ba902b7-01", tid.to_uppercase())), None);
        assert_eq!(parse_traceparent("00-abc"), None);
    }

    #[test]
    fn trace_ids() {
        assert!(is_trace_id("4bf92f3577b34da6a3ce929d0e0e4736"));
        assert!(!is_trace_id(&"0".repeat(32)));
        assert!(!is_trace_id("4BF92F3577B34DA6A3CE929D0E0E4736"));
        assert!(is_trace_id(&new_trace_id()));
    }

    #[test]
    fn fresh_trace_ids_grow() {
        let ids: Vec<String> = (0..1000).map(|_| new_trace_id()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "trace ids must be time-ordered");
    }
}
