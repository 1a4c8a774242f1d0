//! Reservation, the stage between admission and the upstream call: the call's estimate
//! is reserved on every budget it counts against, all or nothing, on the budget actors
//! and, with shared budgets (several instances on one PostgreSQL), in the database too.
//!
//! A [`Reservation`] owns every hold it took. Release is a property of ownership, not
//! of each exit path: dropping it (an early return, an upstream error, a client gone
//! before the answer, a handler future dropped, shutdown) releases the actors'
//! reservation and the database holds at once. Otherwise it is consumed by
//! [`Reservation::committed`]: its [ticket](Reservation::ticket) rides with the cost
//! event, and the commit that frees the database holds and adds the spend settles it on
//! the actors together with the other calls of the same commit.

use actors::budget::{Admission, BudgetSnapshot, DenialReason, EntityType, Policy, Reserve};
use actors::registry::{ReservationGuard, ReservationTicket, ReserveAllError};
use actors::store::EntityKey;
use serde_json::json;

use super::denial::{self, denial_error, with_budget_headers, Refused};
use super::events::{self, Call};
use spendgate_engine::budgets::admission_error;
use spendgate_engine::db::cost_events::NewCostEvent;
use spendgate_engine::db::shared_budgets::{self, AcquireError, Acquired, HoldRequest, SharedHold};
use spendgate_engine::db::Pool;
use spendgate_engine::error::ApiError;
use spendgate_engine::leases::{LeaseHolds, LeaseRequest};
use spendgate_engine::state::AppState;
use spendgate_engine::util::time;
use spendgate_llm::pricing::Bound;

/// Database holds outlive the upstream timeout by this margin before the reaper may
/// free them (a process that died cannot release its own).
const SHARED_HOLD_MARGIN_MS: i64 = 60_000;

/// The holds of one admitted call.
#[must_use = "dropping the reservation releases it"]
pub struct Reservation {
    guard: Option<ReservationGuard>,
    holds: Vec<SharedHold>,
    /// Holds on this instance's budget leases (shared budgets with leases on): taken
    /// in memory, consumed by the commit, released when dropped.
    leased: Option<LeaseHolds>,
    pool: Pool,
    /// What every budget holds: the estimate, or less when an `exactCeiling` budget
    /// granted the call only its room (the call is then clamped to it).
    granted: i64,
}

/// What to reserve, and who asks (for the denial record).
pub struct Ask<'a> {
    pub keys: &'a [EntityKey],
    pub reserve: &'a Reserve,
    pub call: Call<'a>,
    pub refused: Refused<'a>,
    /// A model call's bound, so that a refusal can name the output bound the room
    /// pays for; `None` for tool calls and gates.
    pub bound: Option<Bound>,
}

impl Reservation {
    /// Reserves `ask.reserve.estimate` everywhere, or refuses: a denial is recorded and
    /// answered with the spec's code and the budget's proximity headers.
    pub async fn acquire(state: &AppState, ask: Ask<'_>) -> Result<Reservation, ApiError> {
        let registry = state.budgets.registry();
        let guard = match registry.reserve_guarded(ask.keys, ask.reserve).await {
            Ok(guard) => guard,
            Err(ReserveAllError::Denied { key: entity, denial }) => {
                // An exact-ceiling budget refused even the floor.
                let estimate = match ask.reserve.floor {
                    Some(floor) if denial.snapshot.exact_ceiling => floor,
                    _ => ask.reserve.estimate,
                };
                let err =
                    denial_error(&entity, &denial.reason, &denial.snapshot, estimate, ask.refused.session);
                let err = denial::with_suggestions(err, &denial.reason, ask.bound.as_ref(), &denial.snapshot);
                let mut rows = events::from_ledger(&ask.call, &entity, &denial.events);
                let announced = rows
                    .iter()
                    .any(|r| r.event_type.ends_with("exceeded") || r.event_type == "loop.detected");
                if !announced && matches!(denial.reason, DenialReason::BudgetExceeded) {
                    let spend = denial.snapshot.committed();
                    rows.push(events::exceeded(&ask.call, &entity, denial.snapshot.limit, spend, estimate));
                }
                rows.push(blocked(&ask.call, &err, &entity));
                denial::record(state, &ask.refused, rows).await;
                return Err(with_budget_headers(err, &[(entity, denial.snapshot)]));
            }
            Err(ReserveAllError::Unavailable { key: entity, error }) => {
                return Err(admission_error(&entity, &error));
            }
        };
        let admitted: Vec<_> = guard
            .admissions()
            .iter()
            .flat_map(|(k, a)| events::from_ledger(&ask.call, k, &a.events))
            .collect();
        if !admitted.is_empty() {
            denial::record_events(state, admitted).await;
        }
        let granted = guard.granted(ask.reserve.estimate);
        let mut reservation = Reservation {
            guard: Some(guard),
            holds: Vec::new(),
            leased: None,
            pool: state.pool.clone(),
            granted,
        };
        let acquired = acquire_shared(state, reservation.admissions(), &ask, granted).await?;
        let acquired = match acquired {
            Shared::Holds(acquired) => acquired,
            Shared::Leased(leased) => {
                let granted = leased.granted();
                reservation.leased = Some(leased);
                Acquired { holds: Vec::new(), granted }
            }
        };
        reservation.holds = acquired.holds;
        if acquired.granted < reservation.granted {
            // Another instance took room meanwhile: the database granted less.
            reservation.granted = acquired.granted;
            if let Some(guard) = reservation.guard.as_mut() {
                guard.shrink(acquired.granted).await;
            }
        }
        Ok(reservation)
    }

    /// The call's cost is known (its answer has ended) but not committed yet: every
    /// hold is lowered to it, on the actors and in the database, so that the room it
    /// held beyond its cost is free for the next call before the commit settles it.
    /// A clamped call holds the whole room left until then; without this, a call sent
    /// right after its answer would be refused for room that is already unused.
    pub async fn give_back(&mut self, cost: i64) {
        if cost >= self.granted {
            return;
        }
        if let Some(guard) = self.guard.as_mut() {
            guard.shrink(cost).await;
        }
        if let Some(leased) = self.leased.as_mut() {
            leased.shrink(cost).await;
        }
        if !self.holds.is_empty() {
            match shared_budgets::shrink(&self.pool, &self.holds, cost).await {
                Ok(holds) => self.holds = holds,
                Err(e) => {
                    tracing::warn!(error = %e, "could not lower shared reservations; the commit frees them")
                }
            }
        }
        self.granted = cost;
    }

    /// What every budget holds for the call: its estimate unless an `exactCeiling`
    /// budget granted less.
    pub fn granted(&self) -> i64 {
        self.granted
    }

    /// Whether a budget with `exactCeiling` admitted the call: its cost must then be
    /// bounded by what is held.
    pub fn exact_ceiling(&self) -> bool {
        self.admissions().iter().any(|(_, a)| a.snapshot.exact_ceiling)
    }

    /// What each entity with a budget admitted.
    pub fn admissions(&self) -> &[(EntityKey, Admission)] {
        self.guard.as_ref().map_or(&[], |g| g.admissions())
    }

    /// Snapshots of the admitting budgets, for proximity headers.
    pub fn snapshots(&self) -> Vec<(EntityKey, BudgetSnapshot)> {
        self.admissions().iter().map(|(k, a)| (k.clone(), a.snapshot)).collect()
    }

    /// `approved` when a budget admitted the call, `skipped` when none applies.
    pub fn budget_status(&self) -> &'static str {
        if self.admissions().is_empty() {
            "skipped"
        } else {
            "approved"
        }
    }

    /// Gives the call's cost event what its commit settles: the database holds it
    /// frees, what it consumes of the leases (by the event's cost) and the actors'
    /// [ticket](Self::ticket).
    pub fn attach(&mut self, event: &mut NewCostEvent) {
        event.holds = self.holds.clone();
        if let Some(leased) = self.leased.as_mut() {
            event.leased = leased.uses(event.row.cost_microdollars);
        }
        event.ticket = self.ticket();
    }

    /// What the commit of this call's cost event settles on the actors (see
    /// [`spendgate_engine::budgets::BudgetService::settle_committed`]); `None` when no actor holds
    /// anything.
    pub fn ticket(&self) -> Option<ReservationTicket> {
        self.guard.as_ref().map(ReservationGuard::ticket)
    }

    /// The cost event carrying this reservation's [ticket](Self::ticket) is committed:
    /// its commit freed the database holds and settles the actors' reservation, so
    /// nothing is left to release.
    pub fn committed(mut self) {
        self.holds.clear();
        if let Some(leased) = self.leased.take() {
            leased.committed();
        }
        if let Some(guard) = self.guard.take() {
            let _ = guard.into_admissions();
        }
    }

    /// Releases everything now and waits until the actors have done it.
    pub async fn release(mut self) {
        if let Some(guard) = self.guard.take() {
            guard.release().await;
        }
        release_holds(&self.pool, std::mem::take(&mut self.holds));
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // The actors' guard releases itself when dropped.
        release_holds(&self.pool, std::mem::take(&mut self.holds));
    }
}

fn release_holds(pool: &Pool, holds: Vec<SharedHold>) {
    if holds.is_empty() {
        return;
    }
    let pool = pool.clone();
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(async move {
                if let Err(e) = shared_budgets::release(&pool, &holds).await {
                    tracing::warn!(error = %e, "could not release shared reservations; the reaper will");
                }
            });
        }
        Err(_) => tracing::warn!("no runtime to release shared reservations on; the reaper will"),
    }
}

fn blocked(call: &Call<'_>, err: &ApiError, entity: &EntityKey) -> spendgate_engine::db::models::OutboxEvent {
    let details = json!({
        "code": err.code,
        "budget_entity_type": entity.entity_type.as_str(),
        "budget_entity_id": entity.entity_id,
    });
    events::request_blocked(call, "budget", Some(details))
}

/// What [`acquire_shared`] held.
enum Shared {
    /// Per-call holds in the database (or none, without shared budgets).
    Holds(Acquired),
    /// Holds on this instance's budget leases.
    Leased(LeaseHolds),
}

/// With shared budgets, holds the reservation for every admitted budget that can refuse
/// (strict and soft): on this instance's leases of them when leases are on, else in the
/// database by one conditional update per budget. A refusal there is answered and
/// recorded like the actors' budget denial. Without shared budgets, nothing to hold.
async fn acquire_shared(
    state: &AppState,
    admissions: &[(EntityKey, Admission)],
    ask: &Ask<'_>,
    amount: i64,
) -> Result<Shared, ApiError> {
    let none = Shared::Holds(Acquired { holds: Vec::new(), granted: amount });
    if !state.config.shared_budgets {
        return Ok(none);
    }
    let counted: Vec<&(EntityKey, Admission)> =
        admissions.iter().filter(|(_, a)| a.snapshot.policy != Policy::Warn).collect();
    if counted.is_empty() {
        return Ok(none);
    }
    let keep_free = |a: &Admission| if ask.reserve.finalize { 0 } else { a.snapshot.finalization_reserve };
    // A call allowed into a finalization reserve is arbitrated alone: a lease's room
    // was granted with the reserve kept free.
    let into_reserve =
        ask.reserve.finalize && counted.iter().any(|(_, a)| a.snapshot.finalization_reserve > 0);
    if let Some(book) = state.budgets.leases().filter(|_| !into_reserve) {
        let requests: Vec<LeaseRequest> = counted
            .iter()
            .map(|(k, a)| LeaseRequest {
                key: k.clone(),
                policy: a.snapshot.policy,
                keep_free: keep_free(a),
                exact_ceiling: a.snapshot.exact_ceiling,
            })
            .collect();
        match book.acquire(&requests, amount, ask.reserve.floor).await {
            Ok(Some(leased)) => return Ok(Shared::Leased(leased)),
            Ok(None) => {}
            Err(e) => return Err(refuse(state, admissions, ask, amount, e).await),
        }
    }
    let requests: Vec<HoldRequest> = counted
        .iter()
        .map(|(k, a)| HoldRequest {
            org_id: k.org_id.clone(),
            entity_type: k.entity_type.as_str().to_owned(),
            entity_id: k.entity_id.clone(),
            amount,
            policy: a.snapshot.policy,
            keep_free: keep_free(a),
            floor: ask.reserve.floor,
        })
        .collect();
    let timeout_ms = i64::try_from(state.config.upstream_timeout.as_millis()).unwrap_or(i64::MAX);
    let expires_at = time::now_ms().saturating_add(timeout_ms).saturating_add(SHARED_HOLD_MARGIN_MS);
    match shared_budgets::acquire(&state.pool, &state.instance_id, &requests, expires_at).await {
        Ok(holds) => Ok(Shared::Holds(holds)),
        Err(e) => Err(refuse(state, admissions, ask, amount, e).await),
    }
}

/// The database refused (a budget has no room) or failed: the answer, with a denial
/// recorded like the actors' budget denial.
async fn refuse(
    state: &AppState,
    admissions: &[(EntityKey, Admission)],
    ask: &Ask<'_>,
    amount: i64,
    error: AcquireError,
) -> ApiError {
    let (entity_type, entity_id, limit, spend, reserved) = match error {
        AcquireError::Denied { entity_type, entity_id, limit, spend, reserved } => {
            (entity_type, entity_id, limit, spend, reserved)
        }
        AcquireError::Db(e) => return ApiError::unavailable(e.to_string()),
    };
    let entity_type: EntityType = entity_type.parse().unwrap_or(EntityType::ApiKey);
    let Some(snapshot) = admissions
        .iter()
        .find(|(k, _)| k.entity_type == entity_type && k.entity_id == entity_id)
        .map(|(_, a)| BudgetSnapshot {
            limit,
            spend,
            reserved,
            remaining: limit.saturating_sub(spend).saturating_sub(reserved),
            ..a.snapshot
        })
    else {
        return ApiError::unavailable("shared budget refused an unknown entity");
    };
    let entity = EntityKey::new(ask.call.org_id.to_owned(), entity_type, entity_id);
    let shown = match ask.reserve.floor {
        Some(floor) if snapshot.exact_ceiling => floor,
        _ => amount,
    };
    let err = denial_error(&entity, &DenialReason::BudgetExceeded, &snapshot, shown, None);
    let rows = vec![
        events::exceeded(&ask.call, &entity, snapshot.limit, snapshot.committed(), amount),
        blocked(&ask.call, &err, &entity),
    ];
    denial::record(state, &ask.refused, rows).await;
    with_budget_headers(err, &[(entity, snapshot)])
}
