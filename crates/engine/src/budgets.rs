//! The budget service: the bridge between HTTP handlers and the budget actors.
//! Handlers never reach actors directly; they call this. Storage for the actors
//! (`DbBudgetStore`) reads budget rows through the same pool as everything else.

use std::sync::Arc;

use actors::budget::{
    BudgetConfig, EntityType, EventSink, LedgerEvent, LoopConfig, Policy, ResetInterval, VelocityConfig,
};
use actors::registry::ReservationTicket;
use actors::registry::{BudgetRegistry, EntitySettles, RegistryConfig, RegistryError};
use actors::store::{BudgetStore, EntityKey, SpendMark, StoreError, StoredBudget};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::Value;

use crate::db::cost_events::SpendChange;
use crate::db::models::Budget;
use crate::db::Pool;
use crate::error::{ApiError, ErrorCode};

/// One budget entity as the control plane names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EntityRef {
    pub org_id: String,
    pub entity_type: String,
    pub entity_id: String,
}

impl EntityRef {
    fn key(&self) -> Option<EntityKey> {
        let entity_type: EntityType = self.entity_type.parse().ok()?;
        Some(EntityKey::new(self.org_id.clone(), entity_type, self.entity_id.clone()))
    }
}

/// Turns a budget row into the rules' configuration. Unset loop settings take the
/// system defaults (50 calls, 60 s window, 5 aggregate keys).
pub fn config_of(row: &Budget) -> BudgetConfig {
    let secs = |s: Option<i64>| s.map(|v| v.saturating_mul(1000));
    let velocity = row.velocity_limit_microdollars.map(|limit| VelocityConfig {
        limit,
        window_ms: secs(row.velocity_window_seconds).unwrap_or(60_000),
        cooldown_ms: secs(row.velocity_cooldown_seconds).unwrap_or(60_000),
    });
    let defaults = LoopConfig::default();
    let loop_detection = LoopConfig {
        max_calls: row.loop_max_calls.and_then(|v| u32::try_from(v).ok()).unwrap_or(defaults.max_calls),
        window_ms: secs(row.loop_window_seconds).unwrap_or(defaults.window_ms),
        aggregate_max_keys: row
            .loop_aggregate_max_keys
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(defaults.aggregate_max_keys),
    };
    BudgetConfig {
        limit: row.max_budget_microdollars,
        policy: row.policy.parse().unwrap_or(Policy::StrictBlock),
        reset_interval: row.reset_interval.as_deref().and_then(|r| r.parse::<ResetInterval>().ok()),
        thresholds: serde_json::from_str::<Vec<u8>>(&row.threshold_percentages).unwrap_or_default(),
        velocity,
        session_limit: row.session_limit_microdollars,
        finalization_reserve: row.finalization_reserve_microdollars.unwrap_or(0),
        loop_detection,
        exact_ceiling: row.exact_ceiling,
    }
}

/// The actors' view of storage.
pub struct DbBudgetStore {
    pool: Pool,
}

impl BudgetStore for DbBudgetStore {
    fn load(&self, key: &EntityKey) -> BoxFuture<'static, Result<Option<StoredBudget>, StoreError>> {
        let pool = self.pool.clone();
        let key = key.clone();
        async move {
            let row = crate::db::budgets::find_for_actor(
                &pool,
                &key.org_id,
                key.entity_type.as_str(),
                &key.entity_id,
            )
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            Ok(row.map(|(row, spend_seq)| StoredBudget {
                budget_id: row.id.clone(),
                config: config_of(&row),
                spend: row.spend_microdollars,
                period_start: row.current_period_start,
                spend_seq,
            }))
        }
        .boxed()
    }
}

/// Writes the events actors raise on their own (not in answer to a request) to the
/// outbox. Only `velocity.recovered` is announced from here: threshold events come
/// from the accounting writer's transaction and `budget.reset` from the period
/// sweep, both in the same transaction as the change they announce.
struct OutboxSink {
    pool: Pool,
    outbox: crate::outbox::Outbox,
}

impl EventSink for OutboxSink {
    fn publish(&self, key: &EntityKey, _budget_id: &str, events: Vec<LedgerEvent>) {
        let now = crate::util::time::now_ms();
        let rows: Vec<_> = events
            .into_iter()
            .filter_map(|e| match e {
                LedgerEvent::VelocityRecovered { limit, window_ms, cooldown_ms } => {
                    Some(crate::db::cost_events::outbox_event(
                        &key.org_id,
                        "velocity.recovered",
                        serde_json::json!({
                            "budget_entity_type": key.entity_type.as_str(),
                            "budget_entity_id": key.entity_id,
                            "velocity_limit_microdollars": limit,
                            "velocity_window_seconds": window_ms / 1000,
                            "velocity_cooldown_seconds": cooldown_ms / 1000,
                            "recovered_at": crate::util::time::iso(now),
                        }),
                        now,
                    ))
                }
                _ => None,
            })
            .collect();
        if rows.is_empty() {
            return;
        }
        let pool = self.pool.clone();
        let outbox = self.outbox.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::outbox::enqueue_now(&pool, &outbox, rows).await {
                tracing::error!(error = %e, "could not record velocity.recovered");
            }
        });
    }
}

/// The answer to a reservation that was refused before any budget decided on it: 503
/// `service_unavailable` with `Retry-After`, saying which budget was busy and why.
pub fn admission_error(entity: &EntityKey, error: &RegistryError) -> ApiError {
    let busy = |why: String| {
        tracing::warn!(entity = %entity, reason = %why, "reservation refused: budget busy");
        ApiError::new(
            ErrorCode::ServiceUnavailable,
            format!("The budget for {} {} is busy: {why}", entity.entity_type.as_str(), entity.entity_id),
        )
        .with_header(actix_web::http::header::RETRY_AFTER, "1")
    };
    match error {
        RegistryError::DeadlinePassed { .. } | RegistryError::Overloaded { .. } => busy(error.to_string()),
        _ => ApiError::unavailable(format!("budget of {entity} unavailable: {error}")),
    }
}

/// Threshold percentages of a budget that names none (events at each crossing).
pub const DEFAULT_THRESHOLDS: [i64; 4] = [50, 80, 90, 95];

/// Handle to the budget actors.
#[derive(Clone)]
pub struct BudgetService {
    registry: Arc<BudgetRegistry>,
    /// This instance's budget leases (shared budgets with leases on).
    leases: Option<Arc<crate::leases::LeaseBook>>,
}

impl BudgetService {
    /// Starts the registry (its arbiter threads). Must run inside the actix system.
    pub fn start(
        pool: Pool,
        outbox: crate::outbox::Outbox,
        config: RegistryConfig,
        leases: Option<Arc<crate::leases::LeaseBook>>,
    ) -> Result<Self, String> {
        let store = Arc::new(DbBudgetStore { pool: pool.clone() });
        let sink: Arc<dyn EventSink> = Arc::new(OutboxSink { pool, outbox });
        let registry = BudgetRegistry::new(config, store, Some(sink)).map_err(|e| e.to_string())?;
        Ok(Self { registry: Arc::new(registry), leases })
    }

    pub fn registry(&self) -> &BudgetRegistry {
        &self.registry
    }

    /// A budget row changed (upsert, reset, delete): a live actor re-reads it before
    /// its next decision, keeping its in-flight reservations.
    pub async fn invalidate(&self, entity: &EntityRef) {
        if let Some(key) = entity.key() {
            self.changed(&key).await;
        }
    }

    /// The budget of `key` changed, here or on another instance (the change feed): the
    /// live actor re-reads it, and this instance's lease on it returns its free room.
    pub async fn changed(&self, key: &EntityKey) {
        if let Err(e) = self.registry.invalidate(key).await {
            tracing::warn!(error = %e, entity = %key, "budget reload failed; the actor retries");
        }
        if let Some(leases) = &self.leases {
            leases.revoke(key).await;
        }
    }

    /// This instance's budget leases, when calls are admitted against them.
    pub fn leases(&self) -> Option<&Arc<crate::leases::LeaseBook>> {
        self.leases.as_ref()
    }

    /// Reservations currently held in memory for an entity (0 when none is live).
    pub async fn reserved(&self, entity: &EntityRef) -> i64 {
        match entity.key() {
            Some(key) => self.registry.snapshot_if_live(&key).await.map_or(0, |s| s.reserved),
            None => 0,
        }
    }

    /// Live velocity windows and breaker states of an organization's entities.
    pub async fn velocity_state(&self, org_id: &str) -> Vec<Value> {
        self.registry.velocity_state(org_id).await
    }

    /// The reservations settled by one accounting commit (each with its committed
    /// cost): one message per budget entity however many calls the commit held, so the
    /// settles of a busy commit do not flood a hot entity's mailbox. Each carries the
    /// commit's mark on the entity's budget row (from `changes`), by which the actor
    /// tells exactly whether the row it last read already counts the commit.
    pub fn settle_committed(&self, settled: Vec<(ReservationTicket, i64)>, changes: &[SpendChange]) {
        if settled.is_empty() {
            return;
        }
        let mut batches: Vec<EntitySettles> = Vec::new();
        let mut index: std::collections::HashMap<EntityKey, usize> = std::collections::HashMap::new();
        for (ticket, actual) in settled {
            for key in ticket.keys {
                let at = *index.entry(key.clone()).or_insert_with(|| {
                    batches.push(EntitySettles { key, mark: None, settles: Vec::new() });
                    batches.len() - 1
                });
                if let Some(batch) = batches.get_mut(at) {
                    batch.settles.push((ticket.reservation_id, actual));
                }
            }
        }
        for change in changes {
            let Some(key) = entity_key(change) else {
                continue;
            };
            if let Some(batch) = index.get(&key).and_then(|&at| batches.get_mut(at)) {
                batch.mark = Some(mark(change));
            }
        }
        let registry = self.registry.clone();
        let now = crate::util::time::now_ms();
        // The writer task is a plain tokio task (no actix local set): spawn likewise.
        tokio::spawn(async move {
            registry.settle_batch(batches, now).await;
        });
    }

    /// Spend committed by the accounting writer without a reservation (SDK cost
    /// events): live actors count it; others read it from storage when they start.
    pub fn spend_committed(&self, changes: &[SpendChange]) {
        let registry = self.registry.clone();
        let spends: Vec<(EntityKey, i64, SpendMark)> = changes
            .iter()
            .filter(|c| c.unreserved != 0)
            .filter_map(|c| Some((entity_key(c)?, c.unreserved, mark(c))))
            .collect();
        if spends.is_empty() {
            return;
        }
        let now = crate::util::time::now_ms();
        // The writer task is a plain tokio task (no actix local set): spawn likewise.
        tokio::spawn(async move {
            for (key, added, mark) in spends {
                registry.record_committed_spend(&key, added, Some(mark), now).await;
            }
        });
    }
}

/// The budget entity whose row a commit updated.
fn entity_key(change: &SpendChange) -> Option<EntityKey> {
    let entity_type: EntityType = change.target.entity_type.parse().ok()?;
    Some(EntityKey::new(change.target.org_id.clone(), entity_type, change.target.entity_id.clone()))
}

/// Where a commit put its spend (see [`SpendMark`]).
fn mark(change: &SpendChange) -> SpendMark {
    SpendMark { budget_id: change.budget_id.as_str().into(), seq: change.spend_seq }
}
