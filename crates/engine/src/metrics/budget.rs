//! The budget registry's figures in Prometheus form: reservations refused (by entity
//! type and reason), the mailbox wait histogram per entity type, and the entities with
//! the most reservations waiting.

use std::sync::{Arc, Mutex, PoisonError};

use actors::registry::{RefusalReason, RegistryStats, WaitHistogram, ENTITY_TYPES, WAIT_BUCKETS};
use actors::store::EntityKey;
use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

/// Entities listed in `budget_waiting_reservations` at most.
pub const BUSIEST_ENTITIES: usize = 10;
/// An entity is listed there from this many waiting reservations on.
pub const BUSY_FROM: usize = 1;

/// Name of the mailbox wait histogram (after the registry's `spendgate_` prefix).
const WAIT_HISTOGRAM: &str = "spendgate_budget_mailbox_wait_seconds";

#[derive(Clone)]
pub struct BudgetMetrics {
    /// `refused_reservations{entity_type, reason}`: reservations answered 503 before a
    /// budget decided (`deadline_passed`, `overloaded`).
    pub refused: IntCounterVec,
    /// `budget_waiting_reservations{org_id, entity_type, entity_id}`: the busiest
    /// entities now (see [`BUSIEST_ENTITIES`]); entities that calmed down disappear.
    pub waiting: IntGaugeVec,
    /// The last histogram snapshot, rendered with the registry's families.
    waits: Arc<Mutex<[WaitHistogram; 4]>>,
    /// Serializes scrapes: counters advance by the difference since the last one.
    scrape: Arc<Mutex<()>>,
}

impl BudgetMetrics {
    #[expect(clippy::expect_used, reason = "metric names and labels are constants; an invalid one is a bug")]
    pub fn register(registry: &Registry) -> Self {
        let refused = IntCounterVec::new(
            Opts::new(
                "refused_reservations",
                "Reservations answered 503 before any budget decided, by entity type and reason (deadline_passed, overloaded)",
            ),
            &["entity_type", "reason"],
        )
        .expect("valid counter");
        registry.register(Box::new(refused.clone())).expect("unique counter");
        let waiting = IntGaugeVec::new(
            Opts::new(
                "budget_waiting_reservations",
                "Reservations waiting for a budget actor, for the busiest entities (top 10, at least one waiting)",
            ),
            &["org_id", "entity_type", "entity_id"],
        )
        .expect("valid gauge");
        registry.register(Box::new(waiting.clone())).expect("unique gauge");
        BudgetMetrics { refused, waiting, waits: Arc::default(), scrape: Arc::default() }
    }

    /// Copies the registry's figures (called before a scrape).
    pub fn observe(&self, stats: &RegistryStats, busiest: &[(EntityKey, usize)]) {
        let _scrape = self.scrape.lock().unwrap_or_else(PoisonError::into_inner);
        for (entity_type, by_reason) in ENTITY_TYPES.iter().zip(stats.refused) {
            for (reason, total) in RefusalReason::ALL.iter().zip(by_reason) {
                let counter = self.refused.with_label_values(&[entity_type.as_str(), reason.as_str()]);
                counter.inc_by(total.saturating_sub(counter.get()));
            }
        }
        self.waiting.reset();
        for (key, waiting) in busiest {
            self.waiting
                .with_label_values(&[key.org_id.as_str(), key.entity_type.as_str(), key.entity_id.as_str()])
                .set(i64::try_from(*waiting).unwrap_or(i64::MAX));
        }
        *self.waits.lock().unwrap_or_else(PoisonError::into_inner) = stats.waits;
    }

    /// `spendgate_budget_mailbox_wait_seconds{entity_type}`: time from send to handling
    /// of the registry's messages (every reservation, one in eight of the others), as of
    /// the last [`observe`](Self::observe).
    pub fn wait_family(&self) -> MetricFamily {
        let waits = *self.waits.lock().unwrap_or_else(PoisonError::into_inner);
        let mut family = MetricFamily::default();
        family.set_name(WAIT_HISTOGRAM.to_owned());
        family.set_help("Time budget actor messages waited in their mailbox (send to handling), by entity type: every reservation, one in eight of the other messages".to_owned());
        family.set_field_type(MetricType::HISTOGRAM);
        let metrics = ENTITY_TYPES
            .iter()
            .zip(waits)
            .map(|(entity_type, waits)| {
                let mut label = LabelPair::default();
                label.set_name("entity_type".to_owned());
                label.set_value(entity_type.as_str().to_owned());
                let mut metric = Metric::from_label(vec![label]);
                metric.set_histogram(histogram(&waits));
                metric
            })
            .collect();
        family.set_metric(metrics);
        family
    }
}

fn histogram(waits: &WaitHistogram) -> Histogram {
    let mut cumulative = 0u64;
    let buckets = WAIT_BUCKETS
        .iter()
        .zip(waits.buckets)
        .map(|(bound, count)| {
            cumulative = cumulative.saturating_add(count);
            let mut bucket = Bucket::default();
            bucket.set_upper_bound(*bound);
            bucket.set_cumulative_count(cumulative);
            bucket
        })
        .collect();
    let mut histogram = Histogram::default();
    histogram.set_sample_count(waits.count);
    histogram.set_sample_sum(waits.sum.as_secs_f64());
    histogram.set_bucket(buckets);
    histogram
}
