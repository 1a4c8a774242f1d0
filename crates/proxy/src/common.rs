//! What every answer of a provider route carries, errors included: the request id,
//! session, API version and the proxy's rate-limit figures, and the steps timed for
//! `Server-Timing`. Filled in by admission, applied by the route.

use std::time::{Duration, Instant};

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::HttpResponse;

/// Steps timed for `Server-Timing`.
#[derive(Default)]
pub struct Timing {
    pub preflight: Option<Duration>,
    pub body: Option<Duration>,
    pub budget: Option<Duration>,
    pub upstream: Duration,
}

/// What every answer of a provider route carries, errors included.
pub struct Common {
    pub started: Instant,
    pub timing: Timing,
    pub request_id: Option<String>,
    pub session: Option<String>,
    pub version: String,
    pub rate_limit: Option<spendgate_engine::ratelimit::RateLimitSnapshot>,
    /// What the call's OpenTelemetry span needs, collected as it goes (export on only).
    pub trace: Option<Box<spendgate_engine::telemetry::CallTrace>>,
}

impl Common {
    pub fn apply(&self, res: &mut HttpResponse) {
        let h = res.headers_mut();
        if let Some(id) = self.request_id.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(HeaderName::from_static("x-service-request-id"), id);
        }
        if let Some(s) = self.session.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(HeaderName::from_static("x-service-session"), s);
        }
        if let Ok(v) = HeaderValue::from_str(&self.version) {
            h.insert(HeaderName::from_static("service-version"), v);
        }
        if let Some(rate_limit) = &self.rate_limit {
            // The proxy's own per-key figures; a provider's `x-ratelimit-*` headers are
            // lower case and longer (`x-ratelimit-limit-requests`), so they never collide.
            for (name, value) in rate_limit.headers() {
                h.insert(name, value);
            }
        }
    }
}
