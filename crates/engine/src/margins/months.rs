//! Calendar months (UTC) as `YYYY-MM` periods and their millisecond bounds.

use chrono::{Datelike, NaiveDate, TimeZone, Utc};

/// A UTC calendar month.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Month {
    pub year: i32,
    pub month: u32,
}

impl Month {
    pub fn of_ms(ms: i64) -> Month {
        let dt = Utc.timestamp_millis_opt(ms).single().unwrap_or_default();
        Month { year: dt.year(), month: dt.month() }
    }

    /// `YYYY-MM`, a real month between 2000 and 2999.
    pub fn parse(s: &str) -> Option<Month> {
        let (y, m) = s.split_once('-')?;
        if y.len() != 4 || m.len() != 2 || !y.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (year, month) = (y.parse().ok()?, m.parse().ok()?);
        ((2000..3000).contains(&year) && (1..=12).contains(&month)).then_some(Month { year, month })
    }

    pub fn label(self) -> String {
        format!("{:04}-{:02}", self.year, self.month)
    }

    pub fn next(self) -> Month {
        if self.month == 12 {
            Month { year: self.year + 1, month: 1 }
        } else {
            Month { year: self.year, month: self.month + 1 }
        }
    }

    pub fn prev(self) -> Month {
        if self.month == 1 {
            Month { year: self.year - 1, month: 12 }
        } else {
            Month { year: self.year, month: self.month - 1 }
        }
    }

    /// The first millisecond of the month.
    pub fn start_ms(self) -> i64 {
        NaiveDate::from_ymd_opt(self.year, self.month, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|d| d.and_utc().timestamp_millis())
            .unwrap_or(0)
    }

    /// `[start, end)` in milliseconds.
    pub fn bounds_ms(self) -> (i64, i64) {
        (self.start_ms(), self.next().start_ms())
    }

    /// The `n` months ending with this one, oldest first.
    pub fn trailing(self, n: usize) -> Vec<Month> {
        let mut out = vec![self];
        while out.len() < n {
            let first = out[0].prev();
            out.insert(0, first);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_parse_step_and_bound() {
        let m = Month::parse("2026-01").unwrap_or(Month { year: 0, month: 0 });
        assert_eq!(m.prev().label(), "2025-12");
        assert_eq!(m.prev().next(), m);
        for bad in ["2026-13", "2026-00", "26-01", "2026-1", "2026/01", "abcd-ef", "1999-12"] {
            assert_eq!(Month::parse(bad), None, "{bad}");
        }
        let (start, end) = m.bounds_ms();
        assert_eq!(start, 1_767_225_600_000);
        assert_eq!(Month::of_ms(end - 1), m);
        assert_eq!(Month::of_ms(end), m.next());
        let labels: Vec<String> = m.trailing(3).into_iter().map(Month::label).collect();
        assert_eq!(labels, ["2025-11", "2025-12", "2026-01"]);
    }
}
