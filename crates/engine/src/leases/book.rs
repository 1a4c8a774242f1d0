//! The leases of this instance, and the calls' way to take room from them.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actors::budget::Policy;
use actors::store::EntityKey;
use dashmap::DashMap;
use prometheus::IntCounterVec;

use super::holds::{LeaseHold, LeaseHolds};
use super::lease::{Lease, LeaseState, Returns};
use crate::db::budget_leases::{self, LeaseAsk, LeaseGrant};
use crate::db::shared_budgets::AcquireError;
use crate::db::Pool;
use crate::util::time;

/// How long a refused call waits at most for other instances to return their unused
/// room (they read the request from the change feed, polled every 500 ms), and how
/// often it looks meanwhile.
const ASK_BACK_PATIENCE: Duration = Duration::from_secs(3);
const ASK_BACK_POLL: Duration = Duration::from_millis(200);
/// Times the slow path grows the leases for one call before giving up (another call of
/// this instance may take the new room first).
const GROW_ROUNDS: usize = 8;

/// One budget a call counts against.
#[derive(Debug, Clone)]
pub struct LeaseRequest {
    pub key: EntityKey,
    pub policy: Policy,
    /// Finalization reserve to keep free.
    pub keep_free: i64,
    /// The budget has `exactCeiling`: it may grant the call less than its estimate.
    pub exact_ceiling: bool,
}

/// The leases of this instance (one per budget entity it served), with the metrics
/// operators see them by.
pub struct LeaseBook {
    pool: Pool,
    instance_id: String,
    leases: DashMap<EntityKey, Arc<Lease>>,
    /// Leases admit only until then (ms): the last heartbeat plus half the lapse after
    /// which other instances reap this one's leases.
    live_until: AtomicI64,
    idle_ms: i64,
    /// `budget_lease_operations_total{operation}`: grown, refused, returned, reaped.
    operations: IntCounterVec,
    returns: Arc<Returns>,
}

impl LeaseBook {
    pub fn new(
        pool: Pool,
        instance_id: String,
        idle: Duration,
        metrics: &crate::metrics::Metrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            instance_id,
            leases: DashMap::new(),
            live_until: AtomicI64::new(0),
            idle_ms: i64::try_from(idle.as_millis()).unwrap_or(i64::MAX),
            operations: metrics.lease_operations.clone(),
            returns: Arc::new(Returns {
                pool: pool.clone(),
                operations: metrics.lease_operations.clone(),
                held: metrics.lease_held.clone(),
            }),
            pool,
        })
    }

    /// This process's heartbeat was written at `at`.
    pub fn beat(&self, at: i64) {
        let until = at + crate::instances::STALE_AFTER_MS / 2;
        let before = self.live_until.swap(until, Ordering::AcqRel);
        if before != 0 && before < at {
            // The heartbeat lapsed meanwhile: other instances may have reaped this
            // one's leases. Nothing held before counts.
            tracing::warn!("heartbeat lapsed; budget leases forgotten");
            for lease in &self.leases {
                lease.state().forget();
                self.returns.publish(&lease);
            }
        }
    }

    fn live(&self, now: i64) -> bool {
        now < self.live_until.load(Ordering::Acquire)
    }

    fn lease(&self, key: &EntityKey) -> Arc<Lease> {
        if let Some(lease) = self.leases.get(key) {
            return lease.clone();
        }
        self.leases
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Lease {
                    key: key.clone(),
                    state: Mutex::default(),
                    grow: tokio::sync::Mutex::new(()),
                })
            })
            .clone()
    }

    /// Takes `amount` for a call from the lease of every budget in `requests`, growing
    /// them as needed; with `floor`, an `exactCeiling` budget may grant less (down to
    /// it). `Ok(None)`: leases cannot be used now (the heartbeat is late): the caller
    /// arbitrates the call alone.
    pub async fn acquire(
        self: &Arc<Self>,
        requests: &[LeaseRequest],
        amount: i64,
        floor: Option<i64>,
    ) -> Result<Option<LeaseHolds>, AcquireError> {
        let now = time::now_ms();
        if !self.live(now) {
            return Ok(None);
        }
        if amount <= 0 {
            // Nothing to hold (a free tool call): no lease is taken from or grown, so a
            // budget whose lease has no room left still admits it (its rules were
            // checked by the budget actors before any lease is asked).
            return Ok(Some(LeaseHolds::new(self.returns.clone(), Vec::new(), 0)));
        }
        let mut requests: Vec<&LeaseRequest> = requests.iter().collect();
        requests.sort_by(|a, b| entity_order(&a.key).cmp(&entity_order(&b.key)));
        let mut leases: Vec<(Arc<Lease>, &LeaseRequest)> =
            requests.iter().map(|r| (self.lease(&r.key), *r)).collect();
        // A tight lease is taken from under its growth lock only (not here), so that
        // the room a growth brings goes to the call that asked for it.
        if let Some(holds) = self.take(&leases, Take { amount, least: amount, tight_too: false }, now) {
            return Ok(Some(holds));
        }
        let (started, mut asked_back) = (std::time::Instant::now(), false);
        loop {
            match self.grow_and_take(&mut leases, amount, floor).await {
                Ok(holds) => return Ok(Some(holds)),
                Err(AcquireError::Denied { entity_type, entity_id, limit, spend, reserved }) => {
                    // Refused while other instances may hold free room: they are asked
                    // to return it, and the call waits a moment for it.
                    let entity = (requests[0].key.org_id.as_str(), entity_type.as_str(), entity_id.as_str());
                    let others = budget_leases::held_by_others(&self.pool, &self.instance_id, entity).await;
                    if started.elapsed() >= ASK_BACK_PATIENCE || !others.is_ok_and(|held| held > 0) {
                        self.operations.with_label_values(&["refused"]).inc();
                        return Err(AcquireError::Denied { entity_type, entity_id, limit, spend, reserved });
                    }
                    if !asked_back && self.first_to_ask(&leases, &entity_type, &entity_id) {
                        budget_leases::ask_back(&self.pool, entity).await.map_err(AcquireError::Db)?;
                    }
                    asked_back = true;
                    tokio::time::sleep(ASK_BACK_POLL).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The slow path: under each short lease's growth lock (taken in entity order), the
    /// leases still short grow in one transaction, then the call takes its hold.
    async fn grow_and_take(
        self: &Arc<Self>,
        leases: &mut Vec<(Arc<Lease>, &LeaseRequest)>,
        amount: i64,
        floor: Option<i64>,
    ) -> Result<LeaseHolds, AcquireError> {
        for _ in 0..GROW_ROUNDS {
            let locks: Vec<Arc<Lease>> = leases.iter().map(|(l, _)| l.clone()).collect();
            let mut guards = Vec::with_capacity(locks.len());
            for lease in &locks {
                guards.push(lease.grow.lock().await);
            }
            let now = time::now_ms();
            if let Some(holds) = self.take(leases, Take { amount, least: amount, tight_too: true }, now) {
                return Ok(holds);
            }
            let asks: Vec<(usize, LeaseAsk)> = leases
                .iter()
                .enumerate()
                .filter_map(|(i, (lease, request))| {
                    let state = lease.state();
                    let free = if state.row.is_some() { state.free() } else { 0 };
                    (free < amount).then(|| {
                        let ask = LeaseAsk {
                            lease_id: state.row.clone(),
                            org_id: request.key.org_id.clone(),
                            entity_type: request.key.entity_type.as_str().to_owned(),
                            entity_id: request.key.entity_id.clone(),
                            policy: request.policy,
                            keep_free: request.keep_free,
                            needed: amount - free,
                            floor: floor.map(|f| (f - free).max(1)),
                            target: state.target(amount),
                        };
                        (i, ask)
                    })
                })
                .collect();
            let only: Vec<LeaseAsk> = asks.iter().map(|(_, a)| a.clone()).collect();
            let grants = budget_leases::extend(&self.pool, &self.instance_id, &only).await?;
            self.operations.with_label_values(&["grown"]).inc();
            let mut without_budget = Vec::new();
            for ((i, _), grant) in asks.iter().zip(grants) {
                match grant {
                    Some(grant) => {
                        apply(&leases[*i].0, grant);
                        self.returns.publish(&leases[*i].0);
                    }
                    None => without_budget.push(*i),
                }
            }
            for i in without_budget.into_iter().rev() {
                leases.remove(i);
            }
            let least = floor.unwrap_or(amount).min(amount);
            if let Some(holds) = self.take(leases, Take { amount, least, tight_too: true }, time::now_ms()) {
                return Ok(holds);
            }
            drop(guards);
        }
        Err(AcquireError::Db(crate::db::DbError::unavailable("budget leases kept running short; try again")))
    }

    /// Asking other instances for their room back is written once per budget and
    /// [`ASK_BACK_PATIENCE`] by this instance, however many of its calls are refused.
    fn first_to_ask(
        &self,
        leases: &[(Arc<Lease>, &LeaseRequest)],
        entity_type: &str,
        entity_id: &str,
    ) -> bool {
        let Some((lease, _)) = leases
            .iter()
            .find(|(l, _)| l.key.entity_type.as_str() == entity_type && l.key.entity_id == entity_id)
        else {
            return true;
        };
        let now = time::now_ms();
        let patience = i64::try_from(ASK_BACK_PATIENCE.as_millis()).unwrap_or(i64::MAX);
        let mut state = lease.state();
        if now - state.asked_back_at < patience {
            return false;
        }
        state.asked_back_at = now;
        true
    }

    /// Takes the same hold from every lease's free room, all or nothing (see [`Take`]).
    /// Locks the leases in entity order.
    fn take(
        self: &Arc<Self>,
        leases: &[(Arc<Lease>, &LeaseRequest)],
        take: Take,
        now: i64,
    ) -> Option<LeaseHolds> {
        let Take { amount, least, tight_too } = take;
        let mut states: Vec<MutexGuard<'_, LeaseState>> = leases.iter().map(|(l, _)| l.state()).collect();
        if states.iter().any(|s| s.row.is_none() || (s.tight && !tight_too)) {
            return None;
        }
        // Only an `exactCeiling` budget may grant less than the whole amount.
        let mut granted = amount;
        for ((_, request), state) in leases.iter().zip(states.iter()) {
            let free = state.free();
            if free < amount && !request.exact_ceiling {
                return None;
            }
            granted = granted.min(free);
        }
        if granted < least.max(1) {
            return None;
        }
        let mut holds = Vec::with_capacity(leases.len());
        for ((lease, _), state) in leases.iter().zip(states.iter_mut()) {
            state.in_flight = state.in_flight.saturating_add(granted);
            state.note_taken(granted, now);
            let row = state.row.clone().unwrap_or_default();
            holds.push(LeaseHold::new(lease.clone(), row, state.generation, granted));
        }
        Some(LeaseHolds::new(self.returns.clone(), holds, granted))
    }

    /// The budget of `key` changed (limit, reset, delete, approved increase): the lease
    /// returns its free room at once and grows again under the new figures; a lease
    /// whose row went with its budget is forgotten.
    pub async fn revoke(self: &Arc<Self>, key: &EntityKey) {
        let Some(lease) = self.leases.get(key).map(|l| l.clone()) else { return };
        let (row, free) = {
            let mut state = lease.state();
            let Some(row) = state.row.clone() else { return };
            let free = state.free();
            state.total -= free;
            // Nothing beyond its calls until it grows again under the new figures.
            state.tight = true;
            (row, free)
        };
        if free > 0 {
            self.returns.give_back(&lease, &row, free).await;
        } else if let Ok(false) = budget_leases::exists(&self.pool, &row).await {
            {
                let mut state = lease.state();
                if state.row.as_deref() == Some(row.as_str()) {
                    state.forget();
                }
            }
            self.returns.publish(&lease);
        }
    }

    /// Returns the room of leases that went quiet, and of tight ones, and refreshes the
    /// metrics (a lease's series goes once it holds nothing, see [`Returns::publish`]).
    /// Runs every quarter of the idle time.
    fn maintain(self: &Arc<Self>) {
        let now = time::now_ms();
        for entry in &self.leases {
            let lease = entry.value();
            let (free, tight, last_used) = {
                let s = lease.state();
                (s.free(), s.tight, s.last_used)
            };
            if free > 0 && (tight || now - last_used >= self.idle_ms) {
                // Shown again once the room is back.
                self.returns.trim(lease);
            }
            self.returns.publish(lease);
        }
    }

    /// Starts the maintenance and the reaper of dead instances' leases.
    pub fn start(self: &Arc<Self>) {
        let book = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(
                u64::try_from(book.idle_ms / 4).unwrap_or(250).max(50),
            ));
            loop {
                tick.tick().await;
                book.maintain();
            }
        });
        let book = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REAP_EVERY);
            loop {
                tick.tick().await;
                let fresh_since = time::now_ms() - crate::instances::STALE_AFTER_MS;
                match budget_leases::reap_gone(&book.pool, &book.instance_id, fresh_since).await {
                    Ok((0, _)) => {}
                    Ok((leases, amount)) => {
                        book.operations
                            .with_label_values(&["reaped"])
                            .inc_by(u64::try_from(leases).unwrap_or(0));
                        tracing::info!(leases, amount, "freed the budget leases of instances that died");
                    }
                    Err(e) => tracing::warn!(error = %e, "reaping budget leases failed; retrying next round"),
                }
            }
        });
    }

    /// At shutdown, once no call of this process is left to commit: every lease row goes
    /// and its room returns to its budget.
    pub async fn shutdown(&self) {
        for lease in &self.leases {
            lease.state().forget();
            self.returns.publish(&lease);
        }
        match budget_leases::drop_all(&self.pool, &self.instance_id).await {
            Ok(amount) => tracing::info!(amount, "budget leases returned"),
            Err(e) => {
                tracing::warn!(error = %e, "could not return the budget leases; other instances reap them")
            }
        }
    }
}

/// What a call takes from its leases: `amount`, or down to `least` when an
/// `exactCeiling` budget's lease has less; `tight_too`: also from tight leases (only
/// under their growth locks).
#[derive(Debug, Clone, Copy)]
struct Take {
    amount: i64,
    least: i64,
    tight_too: bool,
}

/// How often each instance looks for leases of dead instances.
const REAP_EVERY: Duration = Duration::from_secs(2);

fn entity_order(key: &EntityKey) -> (&str, &str, &str) {
    (key.org_id.as_str(), key.entity_type.as_str(), key.entity_id.as_str())
}

/// A growth of the lease's row is in: its room counts now (a new row replaces one the
/// database no longer had).
fn apply(lease: &Lease, grant: LeaseGrant) {
    let mut state = lease.state();
    if state.row.as_deref() != Some(grant.lease_id.as_str()) {
        state.forget();
        state.row = Some(grant.lease_id);
    }
    state.total = state.total.saturating_add(grant.slice.amount);
    state.tight = grant.slice.tight;
}
