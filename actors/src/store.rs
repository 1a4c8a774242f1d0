//! The persistence the budget actors read from, as a trait: the main crate implements it
//! with diesel-async, tests and benchmarks use [`MemoryStore`].
//!
//! The trait is deliberately read-only. Spend is written by the main crate's accounting
//! writer (group commit, in the same transaction as the cost event that caused it), and the
//! actor is *told* about committed spend through messages. So no actor handler ever awaits
//! the database: an awaiting handler lets other messages interleave and loses updates (see
//! the "Actor pitfall" in the design notes). The only awaits an actor makes on a store are
//! its initial load, during which its mailbox is paused.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::BoxFuture;

use crate::budget::{BudgetConfig, EntityType};

/// Identifies one budget entity: what a budget caps, within one organization.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EntityKey {
    pub org_id: String,
    pub entity_type: EntityType,
    /// `svc_usr_…`, `svc_key_…`, a tag `key=value` or a customer id.
    pub entity_id: String,
}

impl EntityKey {
    pub fn new(org_id: impl Into<String>, entity_type: EntityType, entity_id: impl Into<String>) -> Self {
        Self { org_id: org_id.into(), entity_type, entity_id: entity_id.into() }
    }
}

impl fmt::Display for EntityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.org_id, self.entity_type, self.entity_id)
    }
}

/// A budget row as storage holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBudget {
    /// `svc_bgt_…`; a different id for the same entity means the budget was deleted and
    /// created again.
    pub budget_id: String,
    pub config: BudgetConfig,
    /// Committed spend of the current period.
    pub spend: i64,
    /// `currentPeriodStart` (epoch ms), `None` without a reset interval.
    pub period_start: Option<i64>,
    /// How many accounting commits have added spend to this row (see [`SpendMark`]).
    pub spend_seq: i64,
}

/// Where a commit put its spend: the budget row and the `spend_seq` the commit gave it
/// (each commit's spend update increments the row's `spend_seq` and reads it back, in
/// one statement). A row read with `spend_seq >= seq` already counts that commit,
/// whenever and on whichever instance the read happened; a row of another budget (the
/// entity's budget was deleted and created again) never counts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpendMark {
    /// `svc_bgt_…` of the row the commit updated.
    pub budget_id: Arc<str>,
    pub seq: i64,
}

impl SpendMark {
    /// Whether the row `budget_id`, read at `spend_seq`, leaves nothing of this commit to
    /// add: the read came after the commit, or it is another budget's row, which the
    /// commit never touched.
    pub fn nothing_to_add(&self, budget_id: &str, spend_seq: i64) -> bool {
        *self.budget_id != *budget_id || self.seq <= spend_seq
    }
}

/// Storage could not answer. The actor that asked stops, and the registry re-creates it
/// (with backoff) on the next request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("budget storage unavailable: {0}")]
    Unavailable(String),
}

/// Where budget actors load their state from.
pub trait BudgetStore: Send + Sync + 'static {
    /// The budget of `key`, or `None` when the entity has no budget (its actor then admits
    /// everything and stays cheap).
    fn load(&self, key: &EntityKey) -> BoxFuture<'static, Result<Option<StoredBudget>, StoreError>>;
}

/// A budget store in memory, for tests and benchmarks: budgets are put in by hand, and it
/// can be told to fail, to exercise supervision.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<MemoryStoreState>>,
}

#[derive(Default)]
struct MemoryStoreState {
    budgets: HashMap<EntityKey, StoredBudget>,
    failing: bool,
    loads: u64,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates or replaces the budget of `key`.
    pub fn put(&self, key: EntityKey, budget: StoredBudget) {
        self.with_state(|state| state.budgets.insert(key, budget));
    }

    /// Deletes the budget of `key`.
    pub fn remove(&self, key: &EntityKey) {
        self.with_state(|state| state.budgets.remove(key));
    }

    /// Makes every following load fail (or succeed again).
    pub fn set_failing(&self, failing: bool) {
        self.with_state(|state| state.failing = failing);
    }

    /// How many loads were asked for, failed ones included.
    pub fn loads(&self) -> u64 {
        self.with_state(|state| state.loads)
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut MemoryStoreState) -> T) -> T {
        // A panic while holding this lock cannot leave the map half-updated (every update
        // is a single call), so a poisoned lock is still usable.
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut state)
    }
}

impl BudgetStore for MemoryStore {
    fn load(&self, key: &EntityKey) -> BoxFuture<'static, Result<Option<StoredBudget>, StoreError>> {
        let result = self.with_state(|state| {
            state.loads += 1;
            if state.failing {
                Err(StoreError::Unavailable("memory store set to fail".to_owned()))
            } else {
                Ok(state.budgets.get(key).cloned())
            }
        });
        Box::pin(std::future::ready(result))
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}
