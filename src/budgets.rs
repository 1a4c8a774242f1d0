//! The budget service: the bridge between HTTP handlers and the budget actors.
//! Handlers never reach actors directly; they call this.

use serde_json::Value;

/// One budget entity as the actors know it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EntityRef {
    pub org_id: String,
    pub entity_type: String,
    pub entity_id: String,
}

/// Handle to the budget actors (wired in the accounting work).
#[derive(Clone, Default)]
pub struct BudgetService {}

impl BudgetService {
    pub fn new() -> Self {
        Self {}
    }

    /// A budget row changed (upsert, reset, delete): the live actor reloads it from
    /// storage before its next decision.
    pub fn invalidate(&self, _entity: &EntityRef) {}

    /// Spend committed by the accounting writer: live actors add it to their view.
    pub fn spend_committed(&self, _changes: &[crate::db::cost_events::SpendChange]) {}

    /// Reservations currently held in memory for an entity (0 when none is live).
    pub fn reserved(&self, _entity: &EntityRef) -> i64 {
        0
    }

    /// Live velocity windows and breaker states of an organization's entities.
    pub fn velocity_state(&self, _org_id: &str) -> Vec<Value> {
        Vec::new()
    }
}
