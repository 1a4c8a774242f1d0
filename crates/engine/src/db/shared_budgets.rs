//! Budgets shared by several instances on one PostgreSQL database: the database
//! arbitrates with atomic conditional updates of `budgets.reserved_microdollars`, and
//! `budget_reservations` records who holds what until when (the reaper frees the rows
//! of requests and instances that died).
//!
//! # Why a conditional UPDATE is enough
//!
//! Each instance's budget actors decide in memory and only see that instance's
//! reservations in flight. Before a request goes upstream, [`acquire`] moves its
//! estimate into `reserved_microdollars` with one UPDATE per budget whose WHERE clause
//! is the policy's admission rule (`spend + reserved + amount <= max - keep_free` for
//! `strict_block`). Under READ COMMITTED, PostgreSQL evaluates that WHERE clause on
//! the row it has locked: an UPDATE that waited for another transaction's lock
//! re-reads the committed row and re-checks the condition before writing. So two
//! instances racing for the last room in a budget are serialized by the row lock,
//! and the second one sees the first one's reservation: together they never pass
//! the limit. No SERIALIZABLE isolation, no retry loop, no advisory locks.
//!
//! A hold leaves `reserved` in the same transaction that adds the request's actual
//! cost to `spend` (the accounting commit, `cost_events::commit_statements!`), in
//! [`release`] when the request produced no cost event, or in [`reap`] when it
//! expired (its request or instance died). Each of these frees only the
//! `budget_reservations` rows its own DELETE removed, so a hold is never subtracted
//! twice, and `reserved` never goes below 0.
//!
//! # Lock order
//!
//! Every transaction that touches several budget rows locks them in one global
//! order, `(org_id, entity_type, entity_id)` (the order of
//! [`BudgetTarget`](crate::db::cost_events::BudgetTarget)), and a transaction that
//! both deletes reservations and updates budgets deletes the reservations first. So
//! acquisitions, accounting commits, releases and the reaper cannot deadlock one
//! another.

use std::time::Duration;

use actors::budget::ledger::grant;
use actors::budget::Policy;
use diesel::{ExpressionMethods, OptionalExtension, QueryDsl};

use crate::db::schema::{budget_reservations, budgets};
use crate::db::{DbError, DbResult, Pool};
use crate::util::{ids, time};
use crate::{with_conn, with_tx};

/// How often [`start_reaper`] frees expired reservations.
pub const REAP_EVERY: Duration = Duration::from_secs(10);

/// Expired reservations read per reaper round trip.
const REAP_BATCH: i64 = 500;

/// Reservation ids per `DELETE … WHERE id IN (…)`: well under both backends'
/// bind-parameter limits.
pub const FREE_CHUNK: usize = 1_000;

/// One reservation held in the database on one budget row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedHold {
    /// `budget_reservations.id`.
    pub id: String,
    pub budget_id: String,
    pub amount: i64,
}

/// One budget to reserve on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRequest {
    pub org_id: String,
    /// `user`, `api_key`, `tag` or `customer`.
    pub entity_type: String,
    /// The entity in its wire form (as stored in `budgets.entity_id`).
    pub entity_id: String,
    /// The estimate to hold, > 0.
    pub amount: i64,
    pub policy: Policy,
    /// Finalization reserve to keep free (0 when `X-Service-Finalize` is honoured).
    pub keep_free: i64,
    /// The least the call can be clamped to (see `exactCeiling`): a strict budget row
    /// with `exact_ceiling` grants the room it has left, down to this. `None`: the
    /// whole amount is needed.
    pub floor: Option<i64>,
}

/// Why [`acquire`] held nothing.
#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    /// The database refused: the budget of this entity has no room. The figures are
    /// the row's as read when the refusal was decided (`limit` is
    /// `max_budget_microdollars`, without the finalization reserve taken off).
    #[error("budget of {entity_type} {entity_id} has no room")]
    Denied { entity_type: String, entity_id: String, limit: i64, spend: i64, reserved: i64 },
    #[error(transparent)]
    Db(DbError),
}

impl From<DbError> for AcquireError {
    fn from(err: DbError) -> Self {
        Self::Db(err)
    }
}

impl From<diesel::result::Error> for AcquireError {
    fn from(err: diesel::result::Error) -> Self {
        Self::Db(DbError::from(err))
    }
}

/// Whether a budget with these figures admits a new hold of `amount` under `policy`:
/// the rule the conditional UPDATE of [`acquire`] states in SQL.
pub fn admits(policy: Policy, limit: i64, spend: i64, reserved: i64, amount: i64, keep_free: i64) -> bool {
    let used = i128::from(spend) + i128::from(reserved);
    let room = i128::from(limit) - i128::from(keep_free);
    match policy {
        Policy::StrictBlock => used + i128::from(amount) <= room,
        Policy::SoftBlock => used < room,
        Policy::Warn => true,
    }
}

/// A budget whose `reserved_microdollars` is to go down by `amount`: what the
/// reservations a transaction deleted had held on it. Carries the budget's entity so
/// the frees can follow the lock order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freed {
    pub org_id: String,
    pub entity_type: String,
    pub entity_id: String,
    pub budget_id: String,
    pub amount: i64,
}

impl Freed {
    /// Whether this budget comes at or before the entity `(org, entity_type, entity_id)`
    /// in the lock order (byte order, as `BudgetTarget` sorts: never the database
    /// collation, which may differ).
    pub fn at_or_before(&self, org_id: &str, entity_type: &str, entity_id: &str) -> bool {
        (self.org_id.as_str(), self.entity_type.as_str(), self.entity_id.as_str())
            <= (org_id, entity_type, entity_id)
    }
}

/// The free-side statements are macros so that the accounting commit can expand them
/// for its synchronous SQLite connection too: `$($aw)*` is `.await` or nothing, as in
/// `cost_events::commit_statements!`. They use `?`, so they expand inside a function
/// or closure returning `Result<_, E>` with `E: From<diesel::result::Error>`, and need
/// diesel's `ExpressionMethods`, `QueryDsl` and a `RunQueryDsl` in scope.
///
/// `take_holds!(conn, holds, held, aw)`: deletes the `budget_reservations` rows of
/// `holds` (an iterator of `&SharedHold`) and adds what each held to `held` (a
/// `&mut HashMap<String, i64>` of budget id → amount to free). Only rows this DELETE
/// removed count: a hold the reaper (or anyone) freed first is not subtracted again.
/// No query at all when `holds` is empty.
macro_rules! take_holds {
    ($conn:expr, $holds:expr, $held:expr, $($aw:tt)*) => {{
        use $crate::db::schema::budget_reservations as r;
        let held: &mut std::collections::HashMap<String, i64> = $held;
        let ids: Vec<&str> = $holds.map(|h: &$crate::db::shared_budgets::SharedHold| h.id.as_str()).collect();
        for chunk in ids.chunks($crate::db::shared_budgets::FREE_CHUNK) {
            let rows: Vec<(String, i64)> = diesel::delete(r::table.filter(r::id.eq_any(chunk)))
                .returning((r::budget_id, r::amount_microdollars))
                .get_results($conn) $($aw)* ?;
            for (budget_id, amount) in rows {
                let sum = held.entry(budget_id).or_insert(0);
                *sum = sum.saturating_add(amount);
            }
        }
    }};
}
pub(crate) use take_holds;

/// `freed_in_lock_order!(conn, held, aw)`: the [`Freed`] budgets of `held` (budget id →
/// amount, as [`take_holds!`] and `budget_leases::consume_leases!` fill it), with their
/// entities, sorted in lock order. No query when `held` is empty.
macro_rules! freed_in_lock_order {
    ($conn:expr, $held:expr, $($aw:tt)*) => {{
        use $crate::db::schema::budgets as b;
        let held: std::collections::HashMap<String, i64> = $held;
        let mut freed: Vec<$crate::db::shared_budgets::Freed> = Vec::with_capacity(held.len());
        if !held.is_empty() {
            let rows: Vec<(String, String, String, String)> = b::table
                .filter(b::id.eq_any(held.keys()))
                .select((b::id, b::org_id, b::entity_type, b::entity_id))
                .load($conn) $($aw)* ?;
            for (budget_id, org_id, entity_type, entity_id) in rows {
                let amount = held.get(&budget_id).copied().unwrap_or(0);
                freed.push($crate::db::shared_budgets::Freed { org_id, entity_type, entity_id, budget_id, amount });
            }
            freed.sort_by(|x, y| {
                (&x.org_id, &x.entity_type, &x.entity_id).cmp(&(&y.org_id, &y.entity_type, &y.entity_id))
            });
        }
        freed
    }};
}
pub(crate) use freed_in_lock_order;

/// `free_upto!(conn, freed, bound, aw)`: `freed` is a `Peekable` iterator of
/// [`Freed`] in lock order; frees (see `free_reserved!`) every one at or before
/// `bound`, an `Option<(&str, &str, &str)>` entity (`None`: all that are left). A
/// commit calls it before each budget it updates, so that all its budget rows are
/// locked in one order.
macro_rules! free_upto {
    ($conn:expr, $freed:ident, $bound:expr, $($aw:tt)*) => {{
        let bound: Option<(&str, &str, &str)> = $bound;
        while let Some(f) =
            $freed.next_if(|f: &$crate::db::shared_budgets::Freed| bound.is_none_or(|(o, t, e)| f.at_or_before(o, t, e)))
        {
            $crate::db::shared_budgets::free_reserved!($conn, &f.budget_id, f.amount, $($aw)*);
        }
    }};
}
pub(crate) use free_upto;

/// `free_reserved!(conn, budget_id, amount, aw)`: subtracts `amount` from the
/// `reserved_microdollars` of one budget, never below 0, in portable SQL: an UPDATE
/// conditional on there being enough reserved, and only when that matched nothing,
/// one that clears what is left.
macro_rules! free_reserved {
    ($conn:expr, $budget_id:expr, $amount:expr, $($aw:tt)*) => {{
        use $crate::db::schema::budgets as b;
        let (budget_id, amount): (&str, i64) = ($budget_id, $amount);
        let subtracted = $crate::db::prepared::Prepared(
            diesel::update(b::table.filter(b::id.eq(budget_id)).filter(b::reserved_microdollars.ge(amount)))
                .set(b::reserved_microdollars.eq(b::reserved_microdollars - amount)),
        )
        .execute($conn) $($aw)* ?;
        if subtracted == 0 {
            diesel::update(b::table.filter(b::id.eq(budget_id)).filter(b::reserved_microdollars.lt(amount)))
                .set(b::reserved_microdollars.eq(0_i64))
                .execute($conn) $($aw)* ?;
        }
    }};
}
pub(crate) use free_reserved;

/// What [`acquire`] held: one hold per budget row, each of `granted`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    pub holds: Vec<SharedHold>,
    /// The requests' amount, or less when an `exact_ceiling` budget granted less: the
    /// tightest budget decides, and every hold is of this.
    pub granted: i64,
}

/// Attempts per budget row when an `exact_ceiling` grant is taken by another
/// transaction between the read of the room and the conditional UPDATE.
const GRANT_ATTEMPTS: usize = 16;

/// Holds `amount` on the budget of every request's entity, all or nothing, in ONE
/// transaction. Budgets are updated in `(org_id, entity_type, entity_id)` order (see
/// the module's lock order), each with a conditional UPDATE stating its policy's rule
/// ([`admits`]). An entity without a budget row (none, or deleted meanwhile) is
/// skipped. A row that refuses rolls everything back: [`AcquireError::Denied`] with
/// its figures. Otherwise one `budget_reservations` row per updated budget is written
/// (owned by `instance_id`, reaped after `expires_at`, epoch ms) and returned.
///
/// A request with a `floor` on a strict row with `exact_ceiling` is granted the room
/// the row has left when the whole amount does not fit (down to the floor: less is a
/// refusal). The same conditional UPDATE takes the grant, so two instances racing for
/// the last room are serialized by the row lock as above; an UPDATE that lost the race
/// reads the room again. Later rows are asked only for the grant so far, and rows
/// updated before a smaller grant give their surplus back in the same transaction.
pub async fn acquire(
    pool: &Pool,
    instance_id: &str,
    requests: &[HoldRequest],
    expires_at: i64,
) -> Result<Acquired, AcquireError> {
    let Some(amount) = requests.iter().map(|r| r.amount).max() else {
        return Ok(Acquired { holds: Vec::new(), granted: 0 });
    };
    let mut ordered: Vec<&HoldRequest> = requests.iter().collect();
    ordered.sort_by(|a, b| {
        (&a.org_id, &a.entity_type, &a.entity_id).cmp(&(&b.org_id, &b.entity_type, &b.entity_id))
    });
    let ordered = &ordered;
    with_conn!(pool, write, |c| {
        use diesel_async::AsyncConnection as _;
        c.transaction::<_, AcquireError, _>(async |conn| {
            use diesel_async::RunQueryDsl;
            let mut holds: Vec<SharedHold> = Vec::with_capacity(ordered.len());
            let mut granted = amount;
            for r in ordered.iter() {
                // Two attempts: when the UPDATE matched nothing and the row read
                // right after admits the hold after all (it was created, or another
                // transaction freed room, in between), the UPDATE is tried once more.
                // An exact-ceiling grant gets more (see above).
                let mut budget_id = None;
                let mut attempt = 0;
                while attempt < GRANT_ATTEMPTS {
                    attempt += 1;
                    let amount = granted;
                    let entity = budgets::table
                        .filter(budgets::org_id.eq(&r.org_id))
                        .filter(budgets::entity_type.eq(&r.entity_type))
                        .filter(budgets::entity_id.eq(&r.entity_id));
                    let used = budgets::spend_microdollars + budgets::reserved_microdollars;
                    let room = budgets::max_budget_microdollars - r.keep_free;
                    let add = budgets::reserved_microdollars.eq(budgets::reserved_microdollars + amount);
                    let updated: Option<String> = match r.policy {
                        Policy::StrictBlock => {
                            diesel::update(entity.filter((used + amount).le(room)))
                                .set(add)
                                .returning(budgets::id)
                                .get_result(conn)
                                .await
                        }
                        Policy::SoftBlock => {
                            diesel::update(entity.filter(used.lt(room)))
                                .set(add)
                                .returning(budgets::id)
                                .get_result(conn)
                                .await
                        }
                        Policy::Warn => {
                            diesel::update(entity).set(add).returning(budgets::id).get_result(conn).await
                        }
                    }
                    .optional()?;
                    if updated.is_some() {
                        budget_id = updated;
                        break;
                    }
                    let row: Option<(i64, i64, i64, bool)> = entity
                        .select((
                            budgets::max_budget_microdollars,
                            budgets::spend_microdollars,
                            budgets::reserved_microdollars,
                            budgets::exact_ceiling,
                        ))
                        .first(conn)
                        .await
                        .optional()?;
                    let Some((limit, spend, reserved, exact)) = row else { break };
                    let denied = || AcquireError::Denied {
                        entity_type: r.entity_type.clone(),
                        entity_id: r.entity_id.clone(),
                        limit,
                        spend,
                        reserved,
                    };
                    match r.floor.filter(|_| exact && r.policy == Policy::StrictBlock) {
                        Some(floor) => {
                            let room = limit
                                .saturating_sub(r.keep_free)
                                .saturating_sub(spend)
                                .saturating_sub(reserved);
                            granted = grant(amount, floor, room).ok_or_else(denied)?;
                            if attempt >= GRANT_ATTEMPTS {
                                return Err(denied());
                            }
                        }
                        None if attempt >= 2
                            || !admits(r.policy, limit, spend, reserved, amount, r.keep_free) =>
                        {
                            return Err(denied());
                        }
                        None => {}
                    }
                }
                let Some(budget_id) = budget_id else { continue };
                holds.push(SharedHold { id: ids::new_id(), budget_id, amount: granted });
            }
            // Rows updated before a smaller grant give the surplus back (they are
            // locked by this transaction already).
            for hold in &mut holds {
                let surplus = hold.amount - granted;
                if surplus > 0 {
                    free_reserved!(conn, &hold.budget_id, surplus, .await);
                    hold.amount = granted;
                }
            }
            for hold in &holds {
                diesel::insert_into(budget_reservations::table)
                    .values((
                        budget_reservations::id.eq(&hold.id),
                        budget_reservations::budget_id.eq(&hold.budget_id),
                        budget_reservations::amount_microdollars.eq(hold.amount),
                        budget_reservations::instance_id.eq(instance_id),
                        budget_reservations::expires_at.eq(expires_at),
                    ))
                    .execute(conn)
                    .await?;
            }
            Ok(Acquired { holds, granted })
        })
        .await
    })
}

/// Frees the holds of a request that produced no cost event (the upstream was never
/// reached, the reservation was released). Holds already freed (by the reaper, or
/// an earlier call) are skipped.
pub async fn release(pool: &Pool, holds: &[SharedHold]) -> DbResult<()> {
    if holds.is_empty() {
        return Ok(());
    }
    with_tx!(pool, |conn| {
        use diesel_async::RunQueryDsl;
        let mut held = std::collections::HashMap::new();
        take_holds!(conn, holds.iter(), &mut held, .await);
        let mut freed = freed_in_lock_order!(conn, held, .await).into_iter().peekable();
        free_upto!(conn, freed, None, .await);
        Ok(())
    })
}

/// Lowers the holds of a call whose cost is known before its record is committed to
/// `amount` (never raises one), giving the surplus back to each budget at once, so
/// the next call does not meet room still held for this one. `holds` are in lock
/// order, as [`acquire`] returned them; a hold already freed or changed (by the
/// reaper, by its commit) is left alone. Returns the holds with their new amounts.
pub async fn shrink(pool: &Pool, holds: &[SharedHold], amount: i64) -> DbResult<Vec<SharedHold>> {
    let amount = amount.max(0);
    if holds.iter().all(|h| h.amount <= amount) {
        return Ok(holds.to_vec());
    }
    with_tx!(pool, |conn| {
        use diesel_async::RunQueryDsl;
        let mut shrunk = Vec::with_capacity(holds.len());
        for hold in holds {
            let surplus = hold.amount - amount;
            let lowered = surplus > 0
                && diesel::update(
                    budget_reservations::table
                        .filter(budget_reservations::id.eq(&hold.id))
                        .filter(budget_reservations::amount_microdollars.eq(hold.amount)),
                )
                .set(budget_reservations::amount_microdollars.eq(amount))
                .execute(conn)
                .await?
                    == 1;
            if lowered {
                free_reserved!(conn, &hold.budget_id, surplus, .await);
            }
            let kept = if lowered { amount } else { hold.amount };
            shrunk.push(SharedHold { amount: kept, ..hold.clone() });
        }
        Ok(shrunk)
    })
}

/// Frees every reservation that expired at `now_ms` (its request or its instance
/// died); returns how many. One short transaction per reservation (delete it, then
/// subtract its amount), so the reaper never holds more than one budget row and
/// never waits in a lock cycle with the request path.
pub async fn reap(pool: &Pool, now_ms: i64) -> DbResult<usize> {
    let mut freed = 0;
    loop {
        let expired: Vec<String> = with_conn!(pool, read, |conn| {
            use diesel_async::RunQueryDsl;
            budget_reservations::table
                .filter(budget_reservations::expires_at.le(now_ms))
                .order(budget_reservations::expires_at)
                .select(budget_reservations::id)
                .limit(REAP_BATCH)
                .load(conn)
                .await
                .map_err(DbError::from)
        })?;
        let batch = expired.len();
        for id in &expired {
            let done = with_tx!(pool, |conn| {
                use diesel_async::RunQueryDsl;
                let row: Option<(String, i64)> = diesel::delete(
                    budget_reservations::table
                        .filter(budget_reservations::id.eq(id))
                        .filter(budget_reservations::expires_at.le(now_ms)),
                )
                .returning((budget_reservations::budget_id, budget_reservations::amount_microdollars))
                .get_result(conn)
                .await
                .optional()?;
                match row {
                    Some((budget_id, amount)) => {
                        free_reserved!(conn, &budget_id, amount, .await);
                        Ok(true)
                    }
                    None => Ok(false),
                }
            })?;
            freed += usize::from(done);
        }
        if i64::try_from(batch).unwrap_or(i64::MAX) < REAP_BATCH {
            break;
        }
    }
    if freed > 0 {
        tracing::info!(freed, "reaped shared reservations");
    }
    Ok(freed)
}

/// Runs [`reap`] every [`REAP_EVERY`] (the first time at once, which frees what
/// instances that died before this start still held).
pub fn start_reaper(pool: Pool) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REAP_EVERY);
        loop {
            tick.tick().await;
            if let Err(e) = reap(&pool, time::now_ms()).await {
                tracing::warn!(error = %e, "reaping shared reservations failed; retrying next round");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_admits_up_to_the_limit_less_the_reserve() {
        assert!(admits(Policy::StrictBlock, 1000, 500, 300, 200, 0));
        assert!(!admits(Policy::StrictBlock, 1000, 500, 300, 201, 0));
        assert!(!admits(Policy::StrictBlock, 1000, 500, 300, 200, 1));
        assert!(admits(Policy::StrictBlock, 1000, 500, 300, 100, 100));
    }

    #[test]
    fn soft_lets_the_crossing_request_through() {
        assert!(admits(Policy::SoftBlock, 1000, 500, 499, 10_000, 0));
        assert!(!admits(Policy::SoftBlock, 1000, 500, 500, 1, 0));
        assert!(!admits(Policy::SoftBlock, 1000, 900, 0, 1, 100));
    }

    #[test]
    fn warn_always_admits() {
        assert!(admits(Policy::Warn, 1000, 5000, 5000, 5000, 999));
    }

    #[test]
    fn no_overflow_at_the_extremes() {
        assert!(!admits(Policy::StrictBlock, i64::MAX, i64::MAX, i64::MAX, i64::MAX, 0));
        assert!(admits(Policy::StrictBlock, i64::MAX, 0, 0, i64::MAX, 0));
    }
}
