//! What one call holds of this instance's leases, from admission to its commit.

use std::sync::Arc;

use super::lease::{Lease, Returns};
use crate::db::budget_leases::LeaseUse;

/// The call's hold on one lease.
pub(super) struct LeaseHold {
    lease: Arc<Lease>,
    /// The lease row the hold was taken from (its consumption goes there).
    row: String,
    generation: u64,
    held: i64,
    /// What the commit consumes of the lease, once the cost is known.
    consume: i64,
}

impl LeaseHold {
    pub(super) fn new(lease: Arc<Lease>, row: String, generation: u64, held: i64) -> Self {
        Self { lease, row, generation, held, consume: 0 }
    }
}

/// The holds of one admitted call. Dropped without [`committed`](Self::committed) (no
/// cost event, or its commit failed), they are released: the room is free for the next
/// call again (returned to the budget at once when the lease is tight).
#[must_use = "dropping the holds releases them"]
pub struct LeaseHolds {
    returns: Arc<Returns>,
    holds: Vec<LeaseHold>,
    granted: i64,
}

impl LeaseHolds {
    pub(super) fn new(returns: Arc<Returns>, holds: Vec<LeaseHold>, granted: i64) -> Self {
        Self { returns, holds, granted }
    }

    /// What every budget holds for the call.
    pub fn granted(&self) -> i64 {
        self.granted
    }

    /// The call's cost is known before its commit: each hold is lowered to it, and the
    /// surplus is free for the next call; on a tight lease it is back in the budget
    /// when this returns (the next call of any instance finds it).
    pub async fn shrink(&mut self, cost: i64) {
        let cost = cost.max(0);
        let mut tight = Vec::new();
        for hold in &mut self.holds {
            let surplus = hold.held - cost;
            if surplus <= 0 {
                continue;
            }
            hold.held = cost;
            let mut state = hold.lease.state();
            if state.generation != hold.generation {
                continue;
            }
            state.in_flight -= surplus;
            if state.tight {
                tight.push(hold.lease.clone());
            }
        }
        for lease in tight {
            self.returns.trim_now(&lease).await;
        }
        self.granted = self.granted.min(cost);
    }

    /// What the commit of a call that cost `cost` moves from each lease to the spend:
    /// the cost, up to the hold; on a tight lease the whole hold (its unused part goes
    /// back to the budget in the same transaction).
    pub fn uses(&mut self, cost: i64) -> Vec<LeaseUse> {
        let cost = cost.max(0);
        self.holds
            .iter_mut()
            .map(|hold| {
                let tight = hold.lease.state().tight;
                hold.consume = if tight { hold.held } else { cost.min(hold.held) };
                LeaseUse { lease_id: hold.row.clone(), amount: hold.consume }
            })
            .collect()
    }

    /// The commit carrying [`uses`](Self::uses) is in: the leases hold that much less.
    pub fn committed(mut self) {
        for hold in std::mem::take(&mut self.holds) {
            self.settle(&hold, hold.consume);
        }
    }

    fn settle(&self, hold: &LeaseHold, consumed: i64) {
        let trim = {
            let mut state = hold.lease.state();
            if state.generation != hold.generation {
                return;
            }
            state.in_flight -= hold.held;
            state.total -= consumed;
            state.tight && state.free() > 0
        };
        if trim {
            self.returns.trim(&hold.lease);
        }
    }
}

impl Drop for LeaseHolds {
    fn drop(&mut self) {
        for hold in std::mem::take(&mut self.holds) {
            self.settle(&hold, 0);
        }
    }
}
