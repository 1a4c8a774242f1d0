//! Time as the service keeps it: epoch milliseconds in storage and accounting,
//! ISO 8601 UTC with milliseconds on the wire.

use chrono::{DateTime, SecondsFormat, Utc};

/// Milliseconds since the Unix epoch, the service's one clock.
#[expect(clippy::disallowed_methods, reason = "this is the one sanctioned clock read")]
pub fn now_ms() -> i64 {
    let elapsed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
}

/// `2026-04-01T12:00:00.000Z`.
pub fn iso(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub fn iso_opt(ms: Option<i64>) -> Option<String> {
    ms.map(iso)
}

/// Parses an RFC 3339 timestamp back to epoch milliseconds.
pub fn parse_iso(s: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(s).ok().map(|d| d.timestamp_millis())
}

/// `YYYY-MM-DD` of a timestamp, UTC.
pub fn date(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default().format("%Y-%m-%d").to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn iso_has_milliseconds_and_z() {
        assert_eq!(iso(1_775_001_600_123), "2026-04-01T00:00:00.123Z");
        assert_eq!(parse_iso("2026-04-01T00:00:00.123Z"), Some(1_775_001_600_123));
        assert_eq!(date(1_775_001_600_123), "2026-04-01");
    }
}
