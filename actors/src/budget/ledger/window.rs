//! A sliding time window of amounts, coalesced into buckets: the velocity window and
//! the loop detector's call counts.

use std::collections::VecDeque;

/// Sliding windows are coalesced into buckets of `window / WINDOW_BUCKETS`.
pub(super) const WINDOW_BUCKETS: i64 = 64;

/// Amounts over a sliding time window, coalesced into at most about `WINDOW_BUCKETS`
/// entries per window. Each entry carries the time of its latest amount, so coalescing
/// can only keep an amount in the window longer, never drop it early.
#[derive(Debug, Clone, Default)]
pub(super) struct SlidingWindow {
    /// `(time of the latest amount, sum)`, oldest first.
    pub(super) entries: VecDeque<(i64, i64)>,
    /// Sum of `entries`.
    pub(super) total: i64,
}

impl SlidingWindow {
    /// Forgets entries that are `window_ms` or more old.
    pub(super) fn prune(&mut self, now_ms: i64, window_ms: i64) {
        let horizon = now_ms.saturating_sub(window_ms);
        while let Some(&(at, amount)) = self.entries.front() {
            if at > horizon {
                break;
            }
            self.entries.pop_front();
            self.total = self.total.saturating_sub(amount);
        }
        if self.entries.is_empty() {
            // A saturated sum cannot be unwound exactly; an empty window is exactly zero.
            self.total = 0;
        }
    }

    pub(super) fn add(&mut self, now_ms: i64, amount: i64, window_ms: i64) {
        self.prune(now_ms, window_ms);
        self.total = self.total.saturating_add(amount);
        let width = (window_ms / WINDOW_BUCKETS).max(1);
        if let Some(newest) = self.entries.back_mut() {
            // Same bucket, or the clock stepped back: fold into the newest entry.
            if now_ms.div_euclid(width) <= newest.0.div_euclid(width) {
                newest.0 = newest.0.max(now_ms);
                newest.1 = newest.1.saturating_add(amount);
                return;
            }
        }
        self.entries.push_back((now_ms, amount));
    }

    pub(super) fn newest(&self) -> Option<i64> {
        self.entries.back().map(|&(at, _)| at)
    }

    /// The sum of the entries younger than `window_ms`, without pruning.
    pub(super) fn total_within(&self, now_ms: i64, window_ms: i64) -> i64 {
        let horizon = now_ms.saturating_sub(window_ms);
        self.entries
            .iter()
            .filter(|&&(at, _)| at > horizon)
            .fold(0, |sum, &(_, amount)| sum.saturating_add(amount))
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.total = 0;
    }
}
