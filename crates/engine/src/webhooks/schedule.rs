//! The retry rules of a delivery: which answers are retried, and when.
//!
//! After failed attempt `n` (1-based) the next one waits `base · 2^(n-1)`, capped at
//! `max`, with full jitter on the upper half: a delay in `[d/2, d]`. With the
//! defaults (base 30 s, max 6 h, 20 attempts) that is about 30 s, 1 min, 2 min, 4 min,
//! … 4.3 h, then every 3-6 h: a delivery is retried for about three days, then marked
//! `failed` (and its endpoint stays reported as failing until a success).

use std::time::Duration;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// A 2xx answer.
    Delivered(u16),
    /// Worth retrying: network error, timeout, 408, 429, 5xx. `None` = no answer.
    Retry(Option<u16>, String),
    /// Not worth retrying: other 4xx (and 1xx/3xx: redirects are not followed), or a
    /// target the rules refuse.
    Permanent(Option<u16>, String),
}

/// Classifies an HTTP answer.
pub fn classify(status: u16) -> Attempt {
    match status {
        200..=299 => Attempt::Delivered(status),
        408 | 429 | 500..=599 => Attempt::Retry(Some(status), format!("HTTP {status}")),
        _ => Attempt::Permanent(Some(status), format!("HTTP {status}")),
    }
}

/// The delay before the attempt after failed attempt `attempts` (1-based), given a
/// random `jitter` in `[0, 1]`.
pub fn backoff(attempts: u32, base: Duration, max: Duration, jitter: f64) -> Duration {
    let exp = attempts.saturating_sub(1).min(40);
    let full = base.saturating_mul(1u32 << exp.min(31)).min(max);
    let half = full / 2;
    half + half.mul_f64(jitter.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_until_the_cap_with_jitter_in_the_upper_half() {
        let base = Duration::from_secs(30);
        let max = Duration::from_secs(6 * 3600);
        assert_eq!(backoff(1, base, max, 1.0), Duration::from_secs(30));
        assert_eq!(backoff(1, base, max, 0.0), Duration::from_secs(15));
        assert_eq!(backoff(2, base, max, 1.0), Duration::from_secs(60));
        assert_eq!(backoff(4, base, max, 1.0), Duration::from_secs(240));
        assert_eq!(backoff(20, base, max, 1.0), max);
        assert_eq!(backoff(u32::MAX, base, max, 0.0), max / 2);
        let total: Duration = (1..20).map(|n| backoff(n, base, max, 1.0)).sum();
        assert!(
            total > Duration::from_secs(2 * 86_400) && total < Duration::from_secs(4 * 86_400),
            "{total:?}"
        );
    }

    #[test]
    fn which_answers_are_retried() {
        assert_eq!(classify(204), Attempt::Delivered(204));
        for s in [408, 429, 500, 502, 503, 599] {
            assert!(matches!(classify(s), Attempt::Retry(Some(_), _)), "{s}");
        }
        for s in [301, 400, 401, 404, 410, 422] {
            assert!(matches!(classify(s), Attempt::Permanent(Some(_), _)), "{s}");
        }
    }
}
