//! This instance's lease on one budget: what its row holds and what calls hold of it,
//! and the way unused room goes back to the budget.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actors::store::EntityKey;
use prometheus::{IntCounterVec, IntGaugeVec};

use crate::db::budget_leases;
use crate::db::Pool;

/// A slice holds at least this many calls of the size in hand.
const CALLS_PER_SLICE: i64 = 16;
/// The window the recent consumption is measured over (a slice lasts about that long).
const WINDOW_MS: i64 = 1_000;

/// This instance's lease on one budget.
pub(super) struct Lease {
    pub(super) key: EntityKey,
    pub(super) state: Mutex<LeaseState>,
    /// One growth at a time per lease: the calls that find it short wait for it.
    pub(super) grow: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
pub(super) struct LeaseState {
    /// The lease row, once one was granted.
    pub(super) row: Option<String>,
    /// Bumped whenever the row is replaced or forgotten: a hold of an older generation
    /// no longer counts here.
    pub(super) generation: u64,
    /// What the row holds once the commits of settled calls are in.
    pub(super) total: i64,
    /// Held by calls in flight.
    pub(super) in_flight: i64,
    pub(super) tight: bool,
    pub(super) last_used: i64,
    /// When this instance last asked the others for their room on this budget.
    pub(super) asked_back_at: i64,
    window_start: i64,
    taken_now: i64,
    taken_before: i64,
}

impl LeaseState {
    pub(super) fn free(&self) -> i64 {
        self.total.saturating_sub(self.in_flight).max(0)
    }

    pub(super) fn note_taken(&mut self, amount: i64, now: i64) {
        if now - self.window_start >= WINDOW_MS {
            self.taken_before = if now - self.window_start >= 2 * WINDOW_MS { 0 } else { self.taken_now };
            self.taken_now = 0;
            self.window_start = now;
        }
        self.taken_now = self.taken_now.saturating_add(amount);
        self.last_used = now;
    }

    /// The slice to ask for: what the last window's calls took, and at least
    /// [`CALLS_PER_SLICE`] calls like this one.
    pub(super) fn target(&self, amount: i64) -> i64 {
        amount.saturating_mul(CALLS_PER_SLICE).max(self.taken_now.saturating_add(self.taken_before))
    }

    /// The row is gone (or unknown): nothing of it counts any more.
    pub(super) fn forget(&mut self) {
        self.row = None;
        self.generation += 1;
        self.total = 0;
        self.in_flight = 0;
        self.tight = false;
    }
}

impl Lease {
    pub(super) fn state(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Returns unused room of leases to their budgets (shared by the book and the calls'
/// holds), and shows what each lease holds.
pub(super) struct Returns {
    pub(super) pool: Pool,
    /// `budget_lease_operations_total`.
    pub(super) operations: IntCounterVec,
    /// `budget_lease_microdollars{org_id, entity_type, entity_id}`: room held per budget.
    pub(super) held: IntGaugeVec,
}

impl Returns {
    /// Shows the room a lease holds while it holds any, and removes the budget's series
    /// once it holds none (returned, consumed, forgotten), so the metrics name only the
    /// budgets leased now, not every budget the instance ever served. Written under the
    /// lease's lock from its state then: whichever call comes last shows the lease as it
    /// is, so a lease that grows again right after a return has its series back.
    pub(super) fn publish(&self, lease: &Lease) {
        let state = lease.state();
        let k = &lease.key;
        let labels = [k.org_id.as_str(), k.entity_type.as_str(), k.entity_id.as_str()];
        if state.total > 0 {
            self.held.with_label_values(&labels).set(state.total);
        } else {
            // Err only when there is no series to remove.
            let _ = self.held.remove_label_values(&labels);
        }
    }

    /// Returns a lease's free room to its budget (all of it), in the background.
    pub(super) fn trim(self: &Arc<Self>, lease: &Arc<Lease>) {
        let (returns, lease) = (self.clone(), lease.clone());
        spawn(async move { returns.trim_now(&lease).await });
    }

    /// Returns a lease's free room to its budget (all of it) and waits until it is back.
    pub(super) async fn trim_now(&self, lease: &Lease) {
        let (row, free) = {
            let mut state = lease.state();
            let free = state.free();
            let Some(row) = state.row.clone().filter(|_| free > 0) else { return };
            state.total -= free;
            (row, free)
        };
        self.give_back(lease, &row, free).await;
    }

    /// Returns `amount` of the lease's row to its budget; a row that is gone is forgotten.
    pub(super) async fn give_back(&self, lease: &Lease, row: &str, amount: i64) {
        self.give_back_row(lease, row, amount).await;
        self.publish(lease);
    }

    async fn give_back_row(&self, lease: &Lease, row: &str, amount: i64) {
        match budget_leases::give_back(&self.pool, row, amount).await {
            Ok(true) => self.operations.with_label_values(&["returned"]).inc(),
            Ok(false) => {
                let mut state = lease.state();
                if state.row.as_deref() == Some(row) {
                    state.forget();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not return a lease's room; it returns at shutdown or when this process's heartbeat lapses")
            }
        }
    }
}

fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(task);
        }
        Err(_) => tracing::warn!("no runtime to return a lease's room on; it returns at shutdown"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_is_a_second_of_consumption_and_at_least_sixteen_calls() {
        let mut state = LeaseState::default();
        assert_eq!(state.target(100), 1_600);
        for i in 0..50 {
            state.note_taken(100, 10_000 + i * 10);
        }
        // 5,000 taken in the current window.
        assert_eq!(state.target(100), 5_000);
        // The next window keeps the last one's figure until it is over.
        state.note_taken(100, 11_000);
        assert_eq!(state.target(100), 5_100);
        // A quiet spell of two windows forgets both.
        state.note_taken(100, 14_000);
        assert_eq!(state.target(100), 1_600);
    }

    #[test]
    fn forgetting_drops_what_the_row_held_and_bumps_the_generation() {
        let mut state = LeaseState {
            row: Some("l1".to_owned()),
            total: 500,
            in_flight: 200,
            tight: true,
            ..LeaseState::default()
        };
        assert_eq!(state.free(), 300);
        state.forget();
        assert_eq!((state.row.as_deref(), state.total, state.in_flight, state.generation), (None, 0, 0, 1));
        assert!(!state.tight);
    }
}
