//! Request rate limits: requests per minute per client IP (the proxy checks it
//! first) and per API key (the proxy and every key-authenticated control-plane
//! endpoint), and sign-in attempts (login and signup) per client IP and per email, so
//! the deliberately slow password hash can be used neither to burn the CPU nor to
//! guess passwords. The client IP is the one [`crate::client_ip`] resolves.
//!
//! Both are keyed GCRA limiters from `governor`: a quota of `n` per minute allows a
//! burst of `n` and replenishes one request every `60 / n` seconds. The
//! [`StateInformationMiddleware`] hands back the remaining burst after each
//! decision, which is what the `X-RateLimit-*` headers report.

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix_web::http::header::{HeaderName, HeaderValue};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

pub const LIMIT_HEADER: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub const REMAINING_HEADER: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
pub const RESET_HEADER: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The `Retry-After` of a 429 rate-limit answer; the spec fixes it at 60 seconds.
pub const RETRY_AFTER_SECS: u64 = 60;

/// Every this many checks a limiter drops the state of keys that have fully
/// replenished, so a stream of distinct IPs or keys cannot grow memory without
/// bound. Amortized over the checks, the sweep costs next to nothing.
const SWEEP_EVERY: u64 = 4096;

/// The outcome of one rate-limit check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    pub allowed: bool,
    /// Requests per minute; 0 when this limit is off (then nothing is reported).
    pub limit: u32,
    /// Requests still allowed right now after this one.
    pub remaining: u32,
    /// Seconds until the full burst is available again.
    pub reset_secs: u64,
}

impl RateDecision {
    fn unlimited() -> Self {
        RateDecision { allowed: true, limit: 0, remaining: 0, reset_secs: 0 }
    }

    /// Whether a limit was applied at all (a limit of 0 means off).
    pub fn is_limited(&self) -> bool {
        self.limit > 0
    }

    /// The values of the `X-RateLimit-*` headers, or `None` when the limit is off.
    pub fn snapshot(&self) -> Option<RateLimitSnapshot> {
        self.is_limited().then_some(RateLimitSnapshot {
            limit: self.limit,
            remaining: self.remaining,
            reset_secs: self.reset_secs,
        })
    }
}

/// What a key-authenticated request reports in its `X-RateLimit-*` response
/// headers. Key authentication stores it in the request extensions; the control
/// plane's response middleware copies it onto the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitSnapshot {
    pub limit: u32,
    pub remaining: u32,
    pub reset_secs: u64,
}

impl RateLimitSnapshot {
    /// The three headers, in `Limit`, `Remaining`, `Reset` order.
    pub fn headers(&self) -> [(HeaderName, HeaderValue); 3] {
        [
            (LIMIT_HEADER, HeaderValue::from(self.limit)),
            (REMAINING_HEADER, HeaderValue::from(self.remaining)),
            (RESET_HEADER, HeaderValue::from(self.reset_secs)),
        ]
    }
}

type Keyed<K> = RateLimiter<K, DefaultKeyedStateStore<K>, DefaultClock, StateInformationMiddleware>;

/// One keyed per-minute limiter.
struct PerMinute<K: Hash + Eq + Clone> {
    limiter: Keyed<K>,
    limit: u32,
    replenish: Duration,
    checks: AtomicU64,
}

impl<K: Hash + Eq + Clone> PerMinute<K> {
    /// `None` when `per_minute` is 0 (the limit is off).
    fn new(per_minute: u32) -> Option<Self> {
        let n = NonZeroU32::new(per_minute)?;
        let quota = Quota::per_minute(n);
        Some(PerMinute {
            limiter: RateLimiter::dashmap(quota).with_middleware::<StateInformationMiddleware>(),
            limit: per_minute,
            replenish: quota.replenish_interval(),
            checks: AtomicU64::new(0),
        })
    }

    fn check(&self, key: &K) -> RateDecision {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
        }
        match self.limiter.check_key(key) {
            Ok(state) => {
                let remaining = state.remaining_burst_capacity();
                // Each used cell comes back after one replenish interval.
                let used = self.limit.saturating_sub(remaining);
                RateDecision {
                    allowed: true,
                    limit: self.limit,
                    remaining,
                    reset_secs: ceil_secs(self.replenish.saturating_mul(used)),
                }
            }
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.limiter.clock().now());
                // After the first cell returns, the rest of the burst follows one
                // interval apart.
                let rest = self.replenish.saturating_mul(self.limit.saturating_sub(1));
                RateDecision {
                    allowed: false,
                    limit: self.limit,
                    remaining: 0,
                    reset_secs: ceil_secs(wait.saturating_add(rest)).max(1),
                }
            }
        }
    }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// 429 `rate_limit_exceeded` with the spec's `Retry-After: 60`.
pub fn rate_limit_exceeded() -> crate::error::ApiError {
    crate::error::ApiError::new(crate::error::ErrorCode::RateLimitExceeded, "Rate limit exceeded")
        .with_header(actix_web::http::header::RETRY_AFTER, RETRY_AFTER_SECS.to_string())
}

/// The process's rate limiters.
pub struct RateLimiters {
    ip: Option<PerMinute<IpAddr>>,
    key: Option<PerMinute<String>>,
    auth_ip: Option<PerMinute<IpAddr>>,
    auth_email: Option<PerMinute<String>>,
}

impl RateLimiters {
    /// Limits in requests per minute; 0 turns that limit off. Sign-in attempts are
    /// not limited until [`Self::with_auth`].
    pub fn new(ip_per_minute: u32, key_per_minute: u32) -> Self {
        Self {
            ip: PerMinute::new(ip_per_minute),
            key: PerMinute::new(key_per_minute),
            auth_ip: None,
            auth_email: None,
        }
    }

    /// Limits sign-in attempts (login and signup) per client IP and per email, per
    /// minute; 0 turns one off.
    pub fn with_auth(mut self, ip_per_minute: u32, email_per_minute: u32) -> Self {
        self.auth_ip = PerMinute::new(ip_per_minute);
        self.auth_email = PerMinute::new(email_per_minute);
        self
    }

    /// Counts one sign-in attempt from `ip` for `email` (normalized); the address is
    /// checked first, and an attempt refused by it does not count against the email.
    pub fn check_auth(&self, ip: IpAddr, email: &str) -> RateDecision {
        let by_ip = self.auth_ip.as_ref().map_or_else(RateDecision::unlimited, |l| l.check(&ip));
        if !by_ip.allowed {
            return by_ip;
        }
        self.auth_email.as_ref().map_or_else(RateDecision::unlimited, |l| l.check(&email.to_owned()))
    }

    /// Counts one request from `ip`.
    pub fn check_ip(&self, ip: IpAddr) -> RateDecision {
        self.ip.as_ref().map_or_else(RateDecision::unlimited, |l| l.check(&ip))
    }

    /// Counts one request made with the API key `key_id`.
    pub fn check_key(&self, key_id: &str) -> RateDecision {
        self.key.as_ref().map_or_else(RateDecision::unlimited, |l| l.check(&key_id.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_limit_counts_down_then_refuses() {
        let limits = RateLimiters::new(0, 3);
        let seen: Vec<_> = (0..3).map(|_| limits.check_key("k1")).collect();
        assert!(seen.iter().all(|d| d.allowed && d.limit == 3));
        assert_eq!(seen.iter().map(|d| d.remaining).collect::<Vec<_>>(), vec![2, 1, 0]);
        // One replenish interval is 20 s; three used cells take 60 s to come back.
        assert_eq!(seen[0].reset_secs, 20);
        assert_eq!(seen[2].reset_secs, 60);
        let refused = limits.check_key("k1");
        assert!(!refused.allowed);
        assert_eq!(refused.remaining, 0);
        assert!(refused.reset_secs > 40 && refused.reset_secs <= 60, "{refused:?}");
        // Keys are independent.
        assert!(limits.check_key("k2").allowed);
    }

    #[test]
    fn zero_turns_a_limit_off() {
        let limits = RateLimiters::new(0, 0);
        for _ in 0..100 {
            let d = limits.check_key("k");
            assert!(d.allowed);
            assert!(d.snapshot().is_none());
            assert!(limits.check_ip(IpAddr::from([127, 0, 0, 1])).allowed);
        }
    }

    #[test]
    fn sign_in_is_limited_per_address_and_per_email() {
        let limits = RateLimiters::new(0, 0).with_auth(3, 2);
        let a = IpAddr::from([10, 0, 0, 1]);
        let b = IpAddr::from([10, 0, 0, 2]);
        assert!(limits.check_auth(a, "x@e.co").allowed);
        assert!(limits.check_auth(b, "x@e.co").allowed);
        // The email is spent, whatever the address.
        assert!(!limits.check_auth(IpAddr::from([10, 0, 0, 3]), "x@e.co").allowed);
        assert!(limits.check_auth(a, "y@e.co").allowed);
        assert!(limits.check_auth(a, "z@e.co").allowed);
        // Address a made three attempts.
        assert!(!limits.check_auth(a, "w@e.co").allowed);
        assert!(RateLimiters::new(0, 0).check_auth(a, "x@e.co").allowed);
    }

    #[test]
    fn ip_limit_is_per_address() {
        let limits = RateLimiters::new(1, 0);
        let a = IpAddr::from([10, 0, 0, 1]);
        assert!(limits.check_ip(a).allowed);
        assert!(!limits.check_ip(a).allowed);
        assert!(limits.check_ip(IpAddr::from([10, 0, 0, 2])).allowed);
        assert!(limits.check_key("anything").allowed);
    }

    #[test]
    fn sweeping_keeps_live_state() {
        let limits = RateLimiters::new(0, 2);
        assert!(limits.check_key("hot").allowed);
        assert!(limits.check_key("hot").allowed);
        for i in 0..SWEEP_EVERY {
            limits.check_key(&format!("cold-{i}"));
        }
        // The sweep ran; "hot" is still exhausted because its state was recent.
        assert!(!limits.check_key("hot").allowed);
    }

    #[test]
    fn snapshot_headers() {
        let d = RateDecision { allowed: true, limit: 10, remaining: 9, reset_secs: 6 };
        let h = d.snapshot().map(|s| s.headers());
        let h = h.as_ref().map(|h| h.iter().map(|(n, v)| (n.as_str(), v.to_str().ok())).collect::<Vec<_>>());
        assert_eq!(
            h,
            Some(vec![
                ("x-ratelimit-limit", Some("10")),
                ("x-ratelimit-remaining", Some("9")),
                ("x-ratelimit-reset", Some("6")),
            ])
        );
    }
}
