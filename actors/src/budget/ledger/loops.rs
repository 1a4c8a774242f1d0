//! Loop detection: recent admitted calls per fingerprint, per provider and model (the
//! exact and the aggregate rules).

use std::collections::HashMap;

use super::window::SlidingWindow;
use super::{Fingerprint, LoopConfig, LoopDetectionType};

/// Loop fingerprints tracked per entity before the stalest is dropped.
pub(super) const MAX_LOOP_FINGERPRINTS: usize = 1_024;
/// Fingerprints dropped at once when the table is full (see `LoopTracker::make_room`).
pub(super) const LOOP_EVICT_BATCH: usize = MAX_LOOP_FINGERPRINTS / 8;

/// Recent admitted calls per fingerprint, grouped by provider and model.
#[derive(Debug, Clone, Default)]
pub(super) struct LoopTracker {
    pub(super) providers: HashMap<String, HashMap<String, ModelCalls>>,
    /// Number of fingerprint windows across all models.
    pub(super) fingerprints: usize,
}

#[derive(Debug, Clone, Default)]
pub(super) struct ModelCalls {
    /// Every admitted call of the model, whatever its fingerprint.
    pub(super) all: SlidingWindow,
    pub(super) by_hash: HashMap<u64, SlidingWindow>,
    /// One unit per fingerprint dropped for space, at the time of its last call: they
    /// still count as distinct keys until that call leaves the window.
    pub(super) evicted: SlidingWindow,
}

impl LoopTracker {
    /// Whether admitting `fingerprint` now would be a loop, with the rule and the call
    /// count including this call.
    pub(super) fn check(
        &mut self,
        fingerprint: Fingerprint<'_>,
        config: LoopConfig,
        now_ms: i64,
    ) -> Option<(LoopDetectionType, u32)> {
        let window_ms = config.window_ms;
        let max_calls = i64::from(config.max_calls);
        let calls = self.providers.get_mut(fingerprint.provider)?.get_mut(fingerprint.model)?;

        let exact = match calls.by_hash.get_mut(&fingerprint.hash) {
            Some(window) => {
                window.prune(now_ms, window_ms);
                window.total
            }
            None => 0,
        };
        if exact >= max_calls {
            return Some((LoopDetectionType::Exact, call_count(exact)));
        }

        calls.all.prune(now_ms, window_ms);
        if calls.all.total < max_calls {
            return None;
        }
        calls.evicted.prune(now_ms, window_ms);
        let max_keys = i64::from(config.aggregate_max_keys);
        // This fingerprint counts even before its first call.
        let mut distinct = i64::from(exact == 0).saturating_add(calls.evicted.total);
        for window in calls.by_hash.values_mut() {
            if distinct > max_keys {
                return None;
            }
            window.prune(now_ms, window_ms);
            distinct += i64::from(window.total > 0);
        }
        (distinct <= max_keys).then(|| (LoopDetectionType::Semantic, call_count(calls.all.total)))
    }

    /// Remembers an admitted call.
    pub(super) fn record(&mut self, fingerprint: Fingerprint<'_>, config: LoopConfig, now_ms: i64) {
        let known = self
            .providers
            .get(fingerprint.provider)
            .and_then(|models| models.get(fingerprint.model))
            .is_some_and(|calls| calls.by_hash.contains_key(&fingerprint.hash));
        if !known && self.fingerprints >= MAX_LOOP_FINGERPRINTS {
            self.make_room(now_ms, config.window_ms);
        }

        if !self.providers.contains_key(fingerprint.provider) {
            self.providers.insert(fingerprint.provider.to_owned(), HashMap::new());
        }
        let Some(models) = self.providers.get_mut(fingerprint.provider) else {
            return;
        };
        if !models.contains_key(fingerprint.model) {
            models.insert(fingerprint.model.to_owned(), ModelCalls::default());
        }
        let Some(calls) = models.get_mut(fingerprint.model) else {
            return;
        };
        calls.all.add(now_ms, 1, config.window_ms);
        let window = calls.by_hash.entry(fingerprint.hash).or_insert_with(|| {
            self.fingerprints += 1;
            SlidingWindow::default()
        });
        window.add(now_ms, 1, config.window_ms);
    }

    /// Forgets expired calls, empty fingerprints and idle models.
    pub(super) fn prune(&mut self, now_ms: i64, window_ms: i64) {
        let mut fingerprints = 0;
        self.providers.retain(|_, models| {
            models.retain(|_, calls| {
                calls.all.prune(now_ms, window_ms);
                calls.evicted.prune(now_ms, window_ms);
                calls.by_hash.retain(|_, window| {
                    window.prune(now_ms, window_ms);
                    window.total > 0
                });
                fingerprints += calls.by_hash.len();
                calls.all.total > 0 || !calls.by_hash.is_empty()
            });
            !models.is_empty()
        });
        self.fingerprints = fingerprints;
    }

    /// Makes space for more fingerprints: first by pruning, then by dropping the
    /// [`LOOP_EVICT_BATCH`] whose last calls are oldest, in one pass. Evicting a batch
    /// at a time keeps a budget that sees many distinct calls from paying a walk of the
    /// whole table on every new one (the cost is O(n) once per batch, not per call).
    pub(super) fn make_room(&mut self, now_ms: i64, window_ms: i64) {
        self.prune(now_ms, window_ms);
        if self.fingerprints < MAX_LOOP_FINGERPRINTS {
            return;
        }
        let mut all: Vec<(i64, &String, &String, u64)> = Vec::with_capacity(self.fingerprints);
        for (provider, models) in &self.providers {
            for (model, calls) in models {
                for (&hash, window) in &calls.by_hash {
                    all.push((window.newest().unwrap_or(i64::MIN), provider, model, hash));
                }
            }
        }
        let batch = LOOP_EVICT_BATCH.min(all.len());
        if batch == 0 {
            return;
        }
        all.select_nth_unstable_by_key(batch - 1, |e| e.0);
        let stalest: Vec<(i64, String, String, u64)> =
            all[..batch].iter().map(|(at, p, m, h)| (*at, (*p).clone(), (*m).clone(), *h)).collect();
        for (last_call, provider, model, hash) in stalest {
            if let Some(calls) = self.providers.get_mut(&provider).and_then(|models| models.get_mut(&model)) {
                if calls.by_hash.remove(&hash).is_some() {
                    calls.evicted.add(last_call, 1, window_ms);
                    self.fingerprints -= 1;
                }
            }
        }
    }

    pub(super) fn clear(&mut self) {
        self.providers.clear();
        self.fingerprints = 0;
    }
}

/// Calls in the window plus the one being blocked, as reported in events.
pub(super) fn call_count(calls_in_window: i64) -> u32 {
    u32::try_from(calls_in_window.saturating_add(1)).unwrap_or(u32::MAX)
}
