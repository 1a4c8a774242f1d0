//! The largest numbers the control plane accepts, so that no sum the service keeps
//! or reports can leave `i64`. Values past a bound are 400 `validation_error`.
//!
//! With these bounds a single event or budget can never overflow anything, and every
//! aggregate is additionally computed exactly (see `db::exact_sum`) and saturates at
//! `i64::MAX` rather than fail: it would take about nine million events at the
//! per-event maximum to get there.

use crate::error::Issues;

/// Largest absolute cost of one event: 10^12 µ$ (one million dollars).
pub const MAX_EVENT_COST_MICRODOLLARS: i64 = 1_000_000_000_000;
/// Largest token count of one event, per kind (input, output, cached, reasoning).
pub const MAX_EVENT_TOKENS: i64 = 1_000_000_000;
/// Longest duration of one event: 24 hours.
pub const MAX_EVENT_DURATION_MS: i64 = 86_400_000;
/// Largest budget amount (limit, velocity limit, session limit, reserve): 10^15 µ$
/// (one billion dollars).
pub const MAX_BUDGET_MICRODOLLARS: i64 = 1_000_000_000_000_000;
/// Largest price of a model set at run time, per kind: 10^10 µ$ per million tokens
/// ($10,000 per million tokens, far above any provider's list price).
pub const MAX_PRICE_MICRODOLLARS_PER_MILLION_TOKENS: i64 = 10_000_000_000;

/// Checks `min <= value <= max` and reports `must be an integer from min to max` at
/// `path` otherwise.
pub fn check_range(value: i64, min: i64, max: i64, path: &[&str], issues: &mut Issues) {
    if !(min..=max).contains(&value) {
        issues.push(path, format!("must be an integer from {min} to {max}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive() {
        let mut issues = Issues::new();
        check_range(0, 0, MAX_EVENT_TOKENS, &["t"], &mut issues);
        check_range(MAX_EVENT_TOKENS, 0, MAX_EVENT_TOKENS, &["t"], &mut issues);
        assert!(issues.is_empty());
        check_range(MAX_EVENT_TOKENS + 1, 0, MAX_EVENT_TOKENS, &["t"], &mut issues);
        check_range(-1, 0, MAX_EVENT_TOKENS, &["t"], &mut issues);
        assert!(issues.finish().is_err());
    }

    #[test]
    fn the_largest_values_cannot_overflow_one_sum_term() {
        // A budget's spend plus one maximal event, and the limit plus a reserve, stay
        // far inside i64.
        assert!(MAX_BUDGET_MICRODOLLARS.checked_mul(1_000).is_some());
        assert!(MAX_EVENT_COST_MICRODOLLARS.checked_mul(1_000_000).is_some());
    }
}
