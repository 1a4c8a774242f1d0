//! Session limits: spend and reservations per session, bounded by forgetting the least
//! recently used.

use std::collections::HashMap;
use std::sync::Arc;

/// Sessions tracked per entity before the least recently used ones are forgotten.
pub(super) const MAX_TRACKED_SESSIONS: usize = 10_000;

/// Spend and reservations per session, bounded by forgetting the least recently used.
#[derive(Debug, Clone, Default)]
pub(super) struct SessionTracker {
    pub(super) by_id: HashMap<Arc<str>, SessionUsage>,
    /// Logical clock for least-recently-used eviction.
    pub(super) clock: u64,
}

#[derive(Debug, Clone)]
pub(super) struct SessionUsage {
    /// The map key again, so an update can hand it out without a second lookup.
    pub(super) id: Arc<str>,
    pub(super) spend: i64,
    pub(super) reserved: i64,
    pub(super) last_used: u64,
}

impl SessionTracker {
    pub(super) fn committed(&self, session_id: &str) -> i64 {
        self.by_id.get(session_id).map_or(0, |usage| usage.spend.saturating_add(usage.reserved))
    }

    /// Adds a reservation and returns the shared session key to store with it.
    pub(super) fn reserve(&mut self, session_id: &str, amount: i64) -> Arc<str> {
        self.update(session_id, |usage| usage.reserved = usage.reserved.saturating_add(amount))
    }

    pub(super) fn settle(&mut self, session_id: &str, reserved: i64, actual: i64) {
        self.update(session_id, |usage| {
            usage.reserved = usage.reserved.saturating_sub(reserved).max(0);
            usage.spend = usage.spend.saturating_add(actual);
        });
    }

    pub(super) fn record(&mut self, session_id: &str, amount: i64) {
        self.update(session_id, |usage| usage.spend = usage.spend.saturating_add(amount));
    }

    /// Returns a reservation. A session forgotten meanwhile is not brought back for it.
    pub(super) fn release(&mut self, session_id: &str, amount: i64) {
        if let Some(usage) = self.by_id.get_mut(session_id) {
            usage.reserved = usage.reserved.saturating_sub(amount).max(0);
        }
    }

    /// Session spend belongs to the period; sessions with reservations in flight stay.
    pub(super) fn start_period(&mut self) {
        self.by_id.retain(|_, usage| {
            usage.spend = 0;
            usage.reserved > 0
        });
    }

    pub(super) fn clear(&mut self) {
        self.by_id.clear();
    }

    pub(super) fn update(&mut self, session_id: &str, apply: impl FnOnce(&mut SessionUsage)) -> Arc<str> {
        self.clock += 1;
        if let Some(usage) = self.by_id.get_mut(session_id) {
            usage.last_used = self.clock;
            apply(usage);
            return Arc::clone(&usage.id);
        }
        if self.by_id.len() >= MAX_TRACKED_SESSIONS {
            self.evict_least_recent();
        }
        let id: Arc<str> = Arc::from(session_id);
        let mut usage = SessionUsage { id: Arc::clone(&id), spend: 0, reserved: 0, last_used: self.clock };
        apply(&mut usage);
        self.by_id.insert(Arc::clone(&id), usage);
        id
    }

    /// Forgets the least recently used tenth at once, so a stream of new sessions costs
    /// one scan per thousand sessions rather than one per session.
    pub(super) fn evict_least_recent(&mut self) {
        let keep = MAX_TRACKED_SESSIONS - MAX_TRACKED_SESSIONS / 10;
        let Some(evict) = self.by_id.len().checked_sub(keep).filter(|&n| n > 0) else {
            return;
        };
        let mut last_used: Vec<u64> = self.by_id.values().map(|usage| usage.last_used).collect();
        let (_, &mut cutoff, _) = last_used.select_nth_unstable(evict - 1);
        // INVARIANT: `last_used` values are unique (one clock tick per update), so exactly
        // `evict` sessions are at or below the cutoff.
        self.by_id.retain(|_, usage| usage.last_used > cutoff);
    }
}
