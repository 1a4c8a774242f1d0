//! Calendar alignment of budget periods: where a daily, weekly or monthly period starts
//! and where the next one begins, in UTC epoch milliseconds.
//!
//! Periods are aligned to the UTC calendar: a daily period starts at 00:00 UTC, a weekly
//! one on Monday 00:00 UTC, a monthly one on the 1st at 00:00 UTC. A period may *start*
//! off a boundary (a budget created, or reset by hand, at 15:00 starts its period then),
//! but it always *ends* on the next aligned boundary, so every later period is aligned.
//!
//! chrono does the calendar work (month lengths, leap years, weekdays). Timestamps
//! outside chrono's range (about ±262,000 years) cannot occur in practice; for them
//! [`period_start`] returns the timestamp unchanged and [`next_period_start`] returns
//! `i64::MAX`, so such a period simply never rolls instead of panicking.

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, NaiveTime};

use super::vocabulary::ResetInterval;

/// The start of the period of `interval` that contains `now_ms`, in epoch milliseconds:
/// 00:00 UTC of the day, of the Monday of the week, or of the 1st of the month.
///
/// A timestamp exactly on a boundary belongs to the period that starts there.
pub fn period_start(interval: ResetInterval, now_ms: i64) -> i64 {
    aligned_date(interval, now_ms).map_or(now_ms, midnight_ms)
}

/// The start of the period that follows the one containing `start_ms`.
///
/// `start_ms` need not be aligned: the result is always the next aligned boundary
/// strictly after it (for example the next 00:00 UTC for a daily budget reset by hand at
/// 15:00).
pub fn next_period_start(interval: ResetInterval, start_ms: i64) -> i64 {
    let next = aligned_date(interval, start_ms).and_then(|start| match interval {
        ResetInterval::Daily => start.checked_add_days(Days::new(1)),
        ResetInterval::Weekly => start.checked_add_days(Days::new(7)),
        ResetInterval::Monthly => start.checked_add_months(Months::new(1)),
    });
    next.map_or(i64::MAX, midnight_ms)
}

/// The UTC calendar date on which the period containing `ms` starts.
fn aligned_date(interval: ResetInterval, ms: i64) -> Option<NaiveDate> {
    let date = DateTime::from_timestamp_millis(ms)?.date_naive();
    match interval {
        ResetInterval::Daily => Some(date),
        ResetInterval::Weekly => {
            date.checked_sub_days(Days::new(u64::from(date.weekday().num_days_from_monday())))
        }
        ResetInterval::Monthly => date.with_day(1),
    }
}

fn midnight_ms(date: NaiveDate) -> i64 {
    date.and_time(NaiveTime::MIN).and_utc().timestamp_millis()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Epoch milliseconds of a UTC date and time, for readable test inputs.
    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, ms: u32) -> i64 {
        NaiveDate::from_ymd_opt(y, mo, d)
            .unwrap()
            .and_hms_milli_opt(h, mi, s, ms)
            .unwrap()
            .and_utc()
            .timestamp_millis()
    }

    fn day(y: i32, mo: u32, d: u32) -> i64 {
        utc(y, mo, d, 0, 0, 0, 0)
    }

    #[test]
    fn daily_start_is_midnight_utc_of_the_same_day() {
        let now = utc(2026, 3, 14, 15, 9, 26, 535);
        assert_eq!(period_start(ResetInterval::Daily, now), day(2026, 3, 14));
    }

    #[test]
    fn daily_start_of_an_exact_midnight_is_that_midnight() {
        assert_eq!(period_start(ResetInterval::Daily, day(2026, 3, 14)), day(2026, 3, 14));
    }

    #[test]
    fn daily_start_one_millisecond_before_midnight_is_the_previous_day() {
        let now = day(2026, 3, 15) - 1;
        assert_eq!(period_start(ResetInterval::Daily, now), day(2026, 3, 14));
    }

    #[test]
    fn next_daily_start_is_the_following_midnight() {
        assert_eq!(next_period_start(ResetInterval::Daily, day(2026, 3, 14)), day(2026, 3, 15));
    }

    #[test]
    fn next_daily_start_from_an_unaligned_start_is_the_next_midnight() {
        let start = utc(2026, 3, 14, 15, 0, 0, 0);
        assert_eq!(next_period_start(ResetInterval::Daily, start), day(2026, 3, 15));
    }

    #[test]
    fn next_daily_start_crosses_the_year_end() {
        assert_eq!(
            next_period_start(ResetInterval::Daily, utc(2025, 12, 31, 23, 59, 59, 999)),
            day(2026, 1, 1)
        );
    }

    #[test]
    fn weekly_start_is_the_monday_of_the_week() {
        // 2026-03-14 is a Saturday; its week started on Monday 2026-03-09.
        let now = utc(2026, 3, 14, 12, 0, 0, 0);
        assert_eq!(period_start(ResetInterval::Weekly, now), day(2026, 3, 9));
    }

    #[test]
    fn weekly_start_of_a_monday_midnight_is_itself() {
        assert_eq!(period_start(ResetInterval::Weekly, day(2026, 3, 9)), day(2026, 3, 9));
    }

    #[test]
    fn weekly_start_of_a_sunday_night_is_the_monday_six_days_before() {
        let now = day(2026, 3, 16) - 1; // Sunday 2026-03-15 23:59:59.999
        assert_eq!(period_start(ResetInterval::Weekly, now), day(2026, 3, 9));
    }

    #[test]
    fn weekly_start_crosses_back_over_the_year_boundary() {
        // 2026-01-01 is a Thursday; its week started on Monday 2025-12-29.
        let now = utc(2026, 1, 1, 8, 0, 0, 0);
        assert_eq!(period_start(ResetInterval::Weekly, now), day(2025, 12, 29));
    }

    #[test]
    fn next_weekly_start_is_the_following_monday_across_the_year_boundary() {
        assert_eq!(next_period_start(ResetInterval::Weekly, utc(2025, 12, 31, 10, 0, 0, 0)), day(2026, 1, 5));
    }

    #[test]
    fn weekly_start_before_the_epoch_is_aligned_too() {
        // 1969-12-31 was a Wednesday; its week started on Monday 1969-12-29.
        let now = utc(1969, 12, 31, 23, 0, 0, 0);
        assert!(now < 0);
        assert_eq!(period_start(ResetInterval::Weekly, now), day(1969, 12, 29));
    }

    #[test]
    fn monthly_start_is_the_first_of_the_month() {
        let now = utc(2026, 3, 14, 15, 9, 26, 535);
        assert_eq!(period_start(ResetInterval::Monthly, now), day(2026, 3, 1));
    }

    #[test]
    fn monthly_start_of_the_last_millisecond_of_a_month_is_that_month() {
        let now = day(2026, 5, 1) - 1;
        assert_eq!(period_start(ResetInterval::Monthly, now), day(2026, 4, 1));
    }

    #[test]
    fn next_monthly_start_from_a_31_day_month_end() {
        assert_eq!(next_period_start(ResetInterval::Monthly, utc(2026, 1, 31, 23, 0, 0, 0)), day(2026, 2, 1));
    }

    #[test]
    fn next_monthly_start_from_leap_day_is_march_first() {
        let leap_day = utc(2024, 2, 29, 12, 0, 0, 0);
        assert_eq!(period_start(ResetInterval::Monthly, leap_day), day(2024, 2, 1));
        assert_eq!(next_period_start(ResetInterval::Monthly, leap_day), day(2024, 3, 1));
    }

    #[test]
    fn daily_period_after_leap_day_is_march_first() {
        assert_eq!(next_period_start(ResetInterval::Daily, day(2024, 2, 29)), day(2024, 3, 1));
        assert_eq!(next_period_start(ResetInterval::Daily, day(2023, 2, 28)), day(2023, 3, 1));
    }

    #[test]
    fn next_monthly_start_crosses_the_year_end() {
        assert_eq!(next_period_start(ResetInterval::Monthly, day(2025, 12, 1)), day(2026, 1, 1));
    }

    #[test]
    fn next_start_of_an_aligned_start_is_exactly_one_period_later() {
        assert_eq!(next_period_start(ResetInterval::Daily, day(2026, 3, 1)) - day(2026, 3, 1), 86_400_000);
        assert_eq!(
            next_period_start(ResetInterval::Weekly, day(2026, 3, 2)) - day(2026, 3, 2),
            7 * 86_400_000
        );
    }

    #[test]
    fn out_of_range_timestamps_never_roll_and_do_not_panic() {
        assert_eq!(period_start(ResetInterval::Daily, i64::MAX), i64::MAX);
        assert_eq!(next_period_start(ResetInterval::Monthly, i64::MAX), i64::MAX);
        assert_eq!(period_start(ResetInterval::Weekly, i64::MIN), i64::MIN);
    }
}
