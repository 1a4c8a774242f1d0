//! The registry's figures: mailbox waits per entity type (a histogram), reservations
//! refused by entity type and reason, and the counters of supervision.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::budget::EntityType;

/// Upper bounds of the mailbox wait histogram's buckets, in seconds (a last bucket,
/// unbounded, takes the rest): from 100 µs, a same-thread hop under load, to 10 s, well
/// past the default admission deadline.
pub const WAIT_BUCKETS: [f64; 15] =
    [0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 10.0];

/// The entity types, in the order of the per-type arrays below.
pub const ENTITY_TYPES: [EntityType; 4] =
    [EntityType::User, EntityType::ApiKey, EntityType::Tag, EntityType::Customer];

/// Index of `entity_type` in [`ENTITY_TYPES`].
pub(crate) fn type_index(entity_type: EntityType) -> usize {
    match entity_type {
        EntityType::User => 0,
        EntityType::ApiKey => 1,
        EntityType::Tag => 2,
        EntityType::Customer => 3,
    }
}

/// Why a reservation was refused before any budget decided on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// It could not be answered within the admission deadline.
    DeadlinePassed,
    /// Too many reservations were already waiting for the entity.
    Overloaded,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 2] = [RefusalReason::DeadlinePassed, RefusalReason::Overloaded];

    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::DeadlinePassed => "deadline_passed",
            RefusalReason::Overloaded => "overloaded",
        }
    }

    fn index(self) -> usize {
        match self {
            RefusalReason::DeadlinePassed => 0,
            RefusalReason::Overloaded => 1,
        }
    }
}

/// How long registry messages waited in the mailboxes of one entity type (send to
/// handling), since the registry started: every reservation, and one in eight of the
/// other registry messages.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WaitHistogram {
    /// Messages per bucket of [`WAIT_BUCKETS`] (not cumulative), the last one unbounded.
    pub buckets: [u64; WAIT_BUCKETS.len() + 1],
    pub count: u64,
    pub sum: Duration,
    pub max: Duration,
}

impl WaitHistogram {
    /// The smallest bucket bound under which at least `quantile` of the waits fall
    /// (`None` with no sample, or when they fall past the last bound).
    pub fn quantile_bound(&self, quantile: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        #[expect(clippy::cast_precision_loss, reason = "a rank within 2^52 messages")]
        let rank = (self.count as f64 * quantile).ceil();
        let mut seen = 0u64;
        for (index, bound) in WAIT_BUCKETS.iter().enumerate() {
            seen = seen.saturating_add(self.buckets.get(index).copied().unwrap_or(0));
            #[expect(clippy::cast_precision_loss, reason = "see above")]
            if seen as f64 >= rank {
                return Some(*bound);
            }
        }
        None
    }

    fn add(&mut self, other: &WaitHistogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine = mine.saturating_add(theirs);
        }
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }
}

/// Mailbox waits over all entity types, for a quick look (the benchmarks print it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MailboxWait {
    /// Messages timed.
    pub messages: u64,
    pub total: Duration,
    pub max: Duration,
}

impl MailboxWait {
    pub fn mean(&self) -> Duration {
        if self.messages == 0 {
            return Duration::ZERO;
        }
        let nanos = self.total.as_nanos() / u128::from(self.messages);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// Registry figures for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RegistryStats {
    /// Actors alive now (loading ones included).
    pub live_actors: usize,
    /// Actors found dead (panic or failed load) and replaced.
    pub restarts: u64,
    pub passivations: u64,
    /// Reservations released by the reaper.
    pub reaped: u64,
    /// Reservations refused before a budget decided, per entity type (as in
    /// [`ENTITY_TYPES`]) and reason (as in [`RefusalReason::ALL`]).
    pub refused: [[u64; 2]; 4],
    pub load_failures: u64,
    /// Mailbox waits per entity type (as in [`ENTITY_TYPES`]).
    pub waits: [WaitHistogram; 4],
    pub mailbox: MailboxWait,
}

impl RegistryStats {
    /// Reservations refused for `reason`, all entity types together.
    pub fn refused_for(&self, reason: RefusalReason) -> u64 {
        self.refused.iter().map(|by_reason| by_reason[reason.index()]).sum()
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) live: AtomicUsize,
    pub(crate) restarts: AtomicU64,
    pub(crate) passivations: AtomicU64,
    pub(crate) reaped: AtomicU64,
    refused: [[AtomicU64; 2]; 4],
    pub(crate) load_failures: AtomicU64,
}

impl Counters {
    pub(crate) fn refuse(&self, entity_type: EntityType, reason: RefusalReason) {
        if let Some(counter) = self.refused.get(type_index(entity_type)).and_then(|r| r.get(reason.index())) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn refused(&self) -> [[u64; 2]; 4] {
        self.refused.each_ref().map(|by_reason| by_reason.each_ref().map(|c| c.load(Ordering::Relaxed)))
    }
}

/// Mailbox waits of the actors of one arbiter, per entity type. Aligned to its own cache
/// lines so arbiters rarely write to a line another one writes. (Actors adopted by an
/// HTTP worker count in the bucket of their key's arbiter, so writes may come from
/// several threads: every update is an atomic add.)
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct MailboxStats {
    by_type: [TypeWaits; 4],
}

#[derive(Debug, Default)]
struct TypeWaits {
    buckets: [AtomicU64; WAIT_BUCKETS.len() + 1],
    count: AtomicU64,
    wait_ns: AtomicU64,
    max_wait_ns: AtomicU64,
}

impl MailboxStats {
    pub(crate) fn record(&self, entity_type: EntityType, wait: Duration) {
        let Some(waits) = self.by_type.get(type_index(entity_type)) else {
            return;
        };
        let seconds = wait.as_secs_f64();
        let bucket = WAIT_BUCKETS.iter().position(|bound| seconds <= *bound).unwrap_or(WAIT_BUCKETS.len());
        if let Some(counter) = waits.buckets.get(bucket) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        waits.count.fetch_add(1, Ordering::Relaxed);
        waits.wait_ns.fetch_add(nanos, Ordering::Relaxed);
        waits.max_wait_ns.fetch_max(nanos, Ordering::Relaxed);
    }

    /// Adds this arbiter's figures to `into` (indexed like [`ENTITY_TYPES`]).
    pub(crate) fn add_to(&self, into: &mut [WaitHistogram; 4]) {
        for (histogram, waits) in into.iter_mut().zip(&self.by_type) {
            let mine = WaitHistogram {
                buckets: waits.buckets.each_ref().map(|c| c.load(Ordering::Relaxed)),
                count: waits.count.load(Ordering::Relaxed),
                sum: Duration::from_nanos(waits.wait_ns.load(Ordering::Relaxed)),
                max: Duration::from_nanos(waits.max_wait_ns.load(Ordering::Relaxed)),
            };
            histogram.add(&mine);
        }
    }
}

/// All waits of `histograms` together.
pub(crate) fn overall(histograms: &[WaitHistogram; 4]) -> MailboxWait {
    let mut wait = MailboxWait::default();
    for histogram in histograms {
        wait.messages = wait.messages.saturating_add(histogram.count);
        wait.total = wait.total.saturating_add(histogram.sum);
        wait.max = wait.max.max(histogram.max);
    }
    wait
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_bound_reads_the_cumulative_buckets() {
        let stats = MailboxStats::default();
        for _ in 0..98 {
            stats.record(EntityType::Tag, Duration::from_micros(50));
        }
        stats.record(EntityType::Tag, Duration::from_millis(3));
        stats.record(EntityType::Tag, Duration::from_secs(60));
        let mut histograms = [WaitHistogram::default(); 4];
        stats.add_to(&mut histograms);
        let tag = histograms[type_index(EntityType::Tag)];
        assert_eq!(tag.count, 100);
        assert_eq!(tag.quantile_bound(0.5), Some(0.000_1));
        assert_eq!(tag.quantile_bound(0.99), Some(0.005));
        assert_eq!(tag.quantile_bound(1.0), None, "past the last bound");
        assert_eq!(tag.max, Duration::from_secs(60));
        assert_eq!(histograms[type_index(EntityType::User)].quantile_bound(0.99), None);
        assert_eq!(overall(&histograms).messages, 100);
    }
}
