//! Budget leases on PostgreSQL: the slice of a budget's room one instance holds and
//! admits calls against in memory (`crate::leases` keeps the in-memory side).
//!
//! # Why the limit still holds
//!
//! A lease's amount is part of its budget's `reserved_microdollars`, taken by the same
//! kind of conditional UPDATE as a per-call hold ([`crate::db::shared_budgets`]): the
//! WHERE clause is the policy's admission rule, evaluated by PostgreSQL on the locked
//! row. An instance admits a call only against room its lease already holds, so the
//! sum of every instance's slices and the committed spend never passes a strict limit.
//! When a call's cost is committed, the same transaction moves what it consumed from
//! its lease to the spend ([`consume_leases!`]): `reserved` goes down by exactly what
//! `spend` goes up by (a cost above its hold, which a strict budget's estimate rules
//! out, passes as it would without leases).
//!
//! # Lock order
//!
//! Lease rows before budget rows, and lease rows among themselves by id: extending
//! ([`extend`]) updates its lease rows in id order first, then the budgets in
//! `(org_id, entity_type, entity_id)` order; the accounting commit updates the lease
//! rows it consumes in id order (after the reservation rows it deletes) before any
//! budget; returning room ([`give_back`]) and reaping ([`reap_gone`]) touch one lease
//! row, then its budget.

use actors::budget::Policy;
use diesel::{ExpressionMethods, JoinOnDsl, OptionalExtension, QueryDsl};

use crate::db::prepared::Prepared;
use crate::db::schema::{budget_changes, budget_leases, budgets, instances};
use crate::db::shared_budgets::{free_reserved, AcquireError};
use crate::db::{DbError, DbResult, Pool};
use crate::util::{ids, time};
use crate::{with_conn, with_tx};

/// A slice is at most this fraction of the room left (1/`SHARE_OF_ROOM`): several
/// instances can each hold one, and near the limit the slices shrink to the call.
pub const SHARE_OF_ROOM: i64 = 4;

/// What a conditional UPDATE granted a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// Added to the lease (and to the budget's `reserved`).
    pub amount: i64,
    /// The room left limited the slice: the lease holds no room beyond its calls (see
    /// `crate::leases`), exactly as per-call arbitration would.
    pub tight: bool,
}

/// The slice a budget with these figures grants a lease that needs `needed` more for
/// the call in hand and would like `target`, or `None` when the policy refuses
/// (the rule the conditional UPDATE of [`extend`] states in SQL). `floor`: the least
/// the call accepts when the budget has `exactCeiling` (strict only): the whole room
/// left is then granted down to it.
pub fn slice(
    policy: Policy,
    figures: (i64, i64, i64),
    keep_free: i64,
    needed: i64,
    floor: Option<i64>,
    target: i64,
) -> Option<Slice> {
    let (limit, spend, reserved) = figures;
    let room = i128::from(limit) - i128::from(keep_free) - i128::from(spend) - i128::from(reserved);
    let needed = i128::from(needed.max(1));
    let target = i128::from(target).max(needed);
    let open = match policy {
        Policy::StrictBlock => room >= needed,
        Policy::SoftBlock => room > 0,
        Policy::Warn => true,
    };
    let to_i64 = |v: i128| i64::try_from(v).unwrap_or(i64::MAX);
    if !open {
        return match (policy, floor) {
            (Policy::StrictBlock, Some(floor)) if room > 0 && room >= i128::from(floor.max(1)) => {
                Some(Slice { amount: to_i64(room), tight: true })
            }
            _ => None,
        };
    }
    // Room for a whole slice (a share of the room, so that other instances find some
    // too), or else the call alone: near the limit every call is arbitrated here.
    let share = room.max(0) / i128::from(SHARE_OF_ROOM);
    if share >= target {
        Some(Slice { amount: to_i64(target), tight: false })
    } else {
        Some(Slice { amount: to_i64(needed), tight: true })
    }
}

/// One budget whose lease is to grow.
#[derive(Debug, Clone)]
pub struct LeaseAsk {
    /// The lease row this instance holds on the budget, if any.
    pub lease_id: Option<String>,
    pub org_id: String,
    pub entity_type: String,
    pub entity_id: String,
    pub policy: Policy,
    pub keep_free: i64,
    /// What the call needs beyond the lease's free room (> 0).
    pub needed: i64,
    /// `exactCeiling`: the least the call accepts beyond the free room.
    pub floor: Option<i64>,
    /// The slice this instance would like.
    pub target: i64,
}

/// What [`extend`] added to one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    pub lease_id: String,
    pub budget_id: String,
    pub slice: Slice,
}

/// Attempts per budget when another transaction changed its room between the read and
/// the conditional UPDATE.
const ATTEMPTS: usize = 16;

/// Grows the lease of every ask, all or nothing, in one transaction (lease rows first,
/// then budgets, see the lock order). An entity without a budget row is answered
/// `None`. A budget that refuses rolls everything back: [`AcquireError::Denied`].
pub async fn extend(
    pool: &Pool,
    instance_id: &str,
    asks: &[LeaseAsk],
) -> Result<Vec<Option<LeaseGrant>>, AcquireError> {
    let mut order: Vec<usize> = (0..asks.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&asks[a], &asks[b]);
        (&a.org_id, &a.entity_type, &a.entity_id).cmp(&(&b.org_id, &b.entity_type, &b.entity_id))
    });
    let order = &order;
    let now = time::now_ms();
    with_conn!(pool, write, |c| {
        use diesel_async::AsyncConnection as _;
        c.transaction::<_, AcquireError, _>(async |conn| {
            use diesel_async::RunQueryDsl;
            let mut held: Vec<&str> = asks.iter().filter_map(|a| a.lease_id.as_deref()).collect();
            held.sort_unstable();
            let mut live = std::collections::HashSet::new();
            for id in held {
                let n = Prepared(
                    diesel::update(budget_leases::table.find(id)).set(budget_leases::updated_at.eq(now)),
                )
                .execute(conn)
                .await?;
                if n == 1 {
                    live.insert(id);
                }
            }
            let mut grants: Vec<Option<LeaseGrant>> = vec![None; asks.len()];
            for &i in order {
                let ask = &asks[i];
                // The budget's room is read, its slice decided, then taken by an UPDATE
                // whose WHERE clause is the policy's rule (PostgreSQL evaluates it on the
                // locked, committed row): a transaction that took the room in between
                // sends this one back to read again.
                let entity = budgets::table
                    .filter(budgets::org_id.eq(&ask.org_id))
                    .filter(budgets::entity_type.eq(&ask.entity_type))
                    .filter(budgets::entity_id.eq(&ask.entity_id));
                let mut taken = None;
                for _ in 0..ATTEMPTS {
                    // Ample room (a whole slice is at most a quarter of it) is taken by one
                    // conditional UPDATE, with no read first (on SQLite a write first
                    // also takes the write lock before anything is read).
                    let whole = ask.target.max(ask.needed);
                    let ample = whole.saturating_mul(SHARE_OF_ROOM);
                    let used = budgets::spend_microdollars + budgets::reserved_microdollars;
                    let room = budgets::max_budget_microdollars - ask.keep_free;
                    let at_once: Option<String> = Prepared(
                        diesel::update(entity.filter((used + ample).le(room)))
                            .set(budgets::reserved_microdollars.eq(budgets::reserved_microdollars + whole))
                            .returning(budgets::id),
                    )
                    .get_result(conn)
                    .await
                    .optional()?;
                    if let Some(budget_id) = at_once {
                        taken = Some((budget_id, Slice { amount: whole, tight: false }));
                        break;
                    }
                    let row: Option<(String, i64, i64, i64, bool)> = entity
                        .select((
                            budgets::id,
                            budgets::max_budget_microdollars,
                            budgets::spend_microdollars,
                            budgets::reserved_microdollars,
                            budgets::exact_ceiling,
                        ))
                        .first(conn)
                        .await
                        .optional()?;
                    let Some((budget_id, limit, spend, reserved, exact)) = row else { break };
                    let floor = ask.floor.filter(|_| exact);
                    let figures = (limit, spend, reserved);
                    let Some(slice) =
                        slice(ask.policy, figures, ask.keep_free, ask.needed, floor, ask.target)
                    else {
                        return Err(AcquireError::Denied {
                            entity_type: ask.entity_type.clone(),
                            entity_id: ask.entity_id.clone(),
                            limit,
                            spend,
                            reserved,
                        });
                    };
                    let row = budgets::table.filter(budgets::id.eq(&budget_id));
                    let used = budgets::spend_microdollars + budgets::reserved_microdollars;
                    let room = budgets::max_budget_microdollars - ask.keep_free;
                    let add =
                        budgets::reserved_microdollars.eq(budgets::reserved_microdollars + slice.amount);
                    let n = match ask.policy {
                        Policy::StrictBlock => {
                            diesel::update(row.filter((used + slice.amount).le(room)))
                                .set(add)
                                .execute(conn)
                                .await?
                        }
                        Policy::SoftBlock => {
                            diesel::update(row.filter(used.lt(room))).set(add).execute(conn).await?
                        }
                        Policy::Warn => diesel::update(row).set(add).execute(conn).await?,
                    };
                    if n == 1 {
                        taken = Some((budget_id, slice));
                        break;
                    }
                    taken = None;
                }
                let Some((budget_id, slice)) = taken else {
                    if entity.select(budgets::id).first::<String>(conn).await.optional()?.is_none() {
                        continue;
                    }
                    return Err(AcquireError::Db(DbError::unavailable("budget room kept moving; try again")));
                };
                let lease_id = match ask.lease_id.as_deref().filter(|id| live.contains(id)) {
                    Some(id) => {
                        Prepared(
                            diesel::update(budget_leases::table.find(id)).set((
                                budget_leases::amount_microdollars
                                    .eq(budget_leases::amount_microdollars + slice.amount),
                                budget_leases::tight.eq(slice.tight),
                            )),
                        )
                        .execute(conn)
                        .await?;
                        id.to_owned()
                    }
                    None => {
                        let id = ids::new_id();
                        diesel::insert_into(budget_leases::table)
                            .values((
                                budget_leases::id.eq(&id),
                                budget_leases::budget_id.eq(&budget_id),
                                budget_leases::instance_id.eq(instance_id),
                                budget_leases::amount_microdollars.eq(slice.amount),
                                budget_leases::tight.eq(slice.tight),
                                budget_leases::updated_at.eq(now),
                            ))
                            .execute(conn)
                            .await?;
                        id
                    }
                };
                grants[i] = Some(LeaseGrant { lease_id, budget_id, slice });
            }
            Ok(grants)
        })
        .await
    })
}

/// Returns `amount` of a lease's room to its budget; the lease is tight from then on
/// (until it grows again). `false`: the lease row is gone (its budget was deleted, or
/// the reaper took it) or holds less, and nothing was returned.
pub async fn give_back(pool: &Pool, lease_id: &str, amount: i64) -> DbResult<bool> {
    if amount <= 0 {
        return Ok(true);
    }
    let now = time::now_ms();
    with_tx!(pool, |conn| {
        use diesel_async::RunQueryDsl;
        let budget_id: Option<String> = diesel::update(
            budget_leases::table
                .filter(budget_leases::id.eq(lease_id))
                .filter(budget_leases::amount_microdollars.ge(amount)),
        )
        .set((
            budget_leases::amount_microdollars.eq(budget_leases::amount_microdollars - amount),
            budget_leases::tight.eq(true),
            budget_leases::updated_at.eq(now),
        ))
        .returning(budget_leases::budget_id)
        .get_result(conn)
        .await
        .optional()?;
        match budget_id {
            Some(budget_id) => {
                free_reserved!(conn, &budget_id, amount, .await);
                Ok(true)
            }
            None => Ok(false),
        }
    })
}

/// Whether a lease row is still there (its budget was not deleted, nor the lease reaped).
pub async fn exists(pool: &Pool, lease_id: &str) -> DbResult<bool> {
    with_conn!(pool, read, |conn| {
        use diesel_async::RunQueryDsl;
        let found: Option<String> = budget_leases::table
            .find(lease_id)
            .select(budget_leases::id)
            .first(conn)
            .await
            .optional()
            .map_err(DbError::from)?;
        Ok(found.is_some())
    })
}

/// What a committed call consumed of one lease: moved from the budget's `reserved` to
/// its `spend` by the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseUse {
    pub lease_id: String,
    pub amount: i64,
}

/// `consume_leases!(conn, uses, held, aw)`: in the accounting commit, lowers each lease
/// of `uses` (an iterator of `&LeaseUse`) by what its calls consumed, in id order, and
/// adds that to `held` (budget id → amount to free, see
/// `shared_budgets::freed_in_lock_order!`): their `reserved` goes down by as much, in
/// lock order with the spend updates. A lease that is gone or holds less than that is
/// left alone (its budget's `reserved` then stays higher than its slices: safe, and
/// returned when the lease row goes). Same conventions as `shared_budgets::take_holds!`.
macro_rules! consume_leases {
    ($conn:expr, $uses:expr, $held:expr, $($aw:tt)*) => {{
        use $crate::db::schema::budget_leases as l;
        use diesel::OptionalExtension as _;
        let held: &mut std::collections::HashMap<String, i64> = $held;
        let mut by_lease: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
        for u in $uses {
            let u: &$crate::db::budget_leases::LeaseUse = u;
            if u.amount > 0 {
                let sum = by_lease.entry(u.lease_id.as_str()).or_insert(0);
                *sum = sum.saturating_add(u.amount);
            }
        }
        for (lease_id, amount) in by_lease {
            let budget_id: Option<String> = $crate::db::prepared::Prepared(
                diesel::update(l::table.filter(l::id.eq(lease_id)).filter(l::amount_microdollars.ge(amount)))
                    .set(l::amount_microdollars.eq(l::amount_microdollars - amount))
                    .returning(l::budget_id),
            )
            .get_result($conn) $($aw)*
            .optional()?;
            if let Some(budget_id) = budget_id {
                let sum = held.entry(budget_id).or_insert(0);
                *sum = sum.saturating_add(amount);
            }
        }
    }};
}
pub(crate) use consume_leases;

/// What other instances hold in leases on the budget of an entity that are not tight:
/// room that may be free, which they return when asked ([`ask_back`]).
pub async fn held_by_others(
    pool: &Pool,
    instance_id: &str,
    (org_id, entity_type, entity_id): (&str, &str, &str),
) -> DbResult<i64> {
    with_conn!(pool, read, |conn| {
        use diesel_async::RunQueryDsl;
        let amounts: Vec<i64> = budget_leases::table
            .inner_join(budgets::table.on(budgets::id.eq(budget_leases::budget_id)))
            .filter(budgets::org_id.eq(org_id))
            .filter(budgets::entity_type.eq(entity_type))
            .filter(budgets::entity_id.eq(entity_id))
            .filter(budget_leases::instance_id.ne(instance_id))
            .filter(budget_leases::tight.eq(false))
            .filter(budget_leases::amount_microdollars.gt(0))
            .select(budget_leases::amount_microdollars)
            .load(conn)
            .await
            .map_err(DbError::from)?;
        Ok(amounts.into_iter().fold(0_i64, i64::saturating_add))
    })
}

/// Asks every instance to return the unused room of its lease on the budget of an
/// entity at once: a `budget_changes` row, which each instance's change watcher reads
/// within about a second (and which refreshes its budget actor, harmlessly).
pub async fn ask_back(pool: &Pool, (org_id, entity_type, entity_id): (&str, &str, &str)) -> DbResult<()> {
    with_conn!(pool, write, |conn| {
        use diesel_async::RunQueryDsl;
        diesel::insert_into(budget_changes::table)
            .values((
                budget_changes::id.eq(ids::new_id()),
                budget_changes::org_id.eq(org_id),
                budget_changes::entity_type.eq(entity_type),
                budget_changes::entity_id.eq(entity_id),
                budget_changes::changed_at.eq(time::now_ms()),
            ))
            .execute(conn)
            .await
            .map_err(DbError::from)?;
        Ok(())
    })
}

/// Deletes one lease row and returns what it held to its budget, in one transaction
/// (lease row, then budget). Returns what was returned.
async fn drop_lease(pool: &Pool, lease_id: &str) -> DbResult<i64> {
    with_tx!(pool, |conn| {
        use diesel_async::RunQueryDsl;
        let row: Option<(String, i64)> = diesel::delete(budget_leases::table.find(lease_id))
            .returning((budget_leases::budget_id, budget_leases::amount_microdollars))
            .get_result(conn)
            .await
            .optional()?;
        match row {
            Some((budget_id, amount)) => {
                if amount > 0 {
                    free_reserved!(conn, &budget_id, amount, .await);
                }
                Ok(amount)
            }
            None => Ok(0),
        }
    })
}

async fn leases_of(pool: &Pool, instance_id: &str) -> DbResult<Vec<String>> {
    with_conn!(pool, read, |conn| {
        use diesel_async::RunQueryDsl;
        budget_leases::table
            .filter(budget_leases::instance_id.eq(instance_id))
            .select(budget_leases::id)
            .load(conn)
            .await
            .map_err(DbError::from)
    })
}

/// Frees the leases of every other instance that has not beaten since `fresh_since`
/// (its heartbeat lapsed, or its row is gone): what a process that died held returns
/// to its budgets. Returns (leases, microdollars) freed.
pub async fn reap_gone(pool: &Pool, instance_id: &str, fresh_since: i64) -> DbResult<(usize, i64)> {
    let gone: Vec<String> = with_conn!(pool, read, |conn| {
        use diesel_async::RunQueryDsl;
        let alive = instances::table.filter(instances::last_seen.ge(fresh_since)).select(instances::id);
        budget_leases::table
            .filter(budget_leases::instance_id.ne(instance_id))
            .filter(budget_leases::instance_id.ne_all(alive))
            .select(budget_leases::id)
            .load(conn)
            .await
            .map_err(DbError::from)
    })?;
    let mut amount = 0_i64;
    for lease_id in &gone {
        amount = amount.saturating_add(drop_lease(pool, lease_id).await?);
    }
    Ok((gone.len(), amount))
}

/// Deletes every lease row of this instance, returning what they held (at shutdown,
/// once no call of this instance is left to commit).
pub async fn drop_all(pool: &Pool, instance_id: &str) -> DbResult<i64> {
    let mut amount = 0_i64;
    for lease_id in leases_of(pool, instance_id).await? {
        amount = amount.saturating_add(drop_lease(pool, &lease_id).await?);
    }
    Ok(amount)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AMPLE: (i64, i64, i64) = (1_000_000, 0, 0);

    #[test]
    fn ample_room_grants_the_target() {
        assert_eq!(
            slice(Policy::StrictBlock, AMPLE, 0, 10, None, 1_000),
            Some(Slice { amount: 1_000, tight: false })
        );
        // Never less than the call needs.
        assert_eq!(
            slice(Policy::StrictBlock, AMPLE, 0, 5_000, None, 1_000),
            Some(Slice { amount: 5_000, tight: false })
        );
    }

    #[test]
    fn near_the_limit_a_slice_is_the_call_alone() {
        // 8,000 left: a quarter is the 2,000 wanted.
        let s = slice(Policy::StrictBlock, (10_000, 1_000, 1_000), 0, 10, None, 2_000).unwrap();
        assert_eq!(s, Slice { amount: 2_000, tight: false });
        // 4,000 left: a quarter, 1,000, is below it.
        let s = slice(Policy::StrictBlock, (10_000, 5_000, 1_000), 0, 10, None, 2_000).unwrap();
        assert_eq!(s, Slice { amount: 10, tight: true });
        // 40 left.
        let s = slice(Policy::StrictBlock, (10_000, 9_000, 960), 0, 30, None, 2_000).unwrap();
        assert_eq!(s, Slice { amount: 30, tight: true });
    }

    #[test]
    fn strict_refuses_what_does_not_fit_and_keeps_the_reserve() {
        assert_eq!(slice(Policy::StrictBlock, (1_000, 900, 50), 0, 51, None, 100), None);
        assert!(slice(Policy::StrictBlock, (1_000, 900, 50), 0, 50, None, 100).is_some());
        assert_eq!(slice(Policy::StrictBlock, (1_000, 900, 0), 60, 50, None, 100), None);
    }

    #[test]
    fn exact_ceiling_takes_the_whole_room_down_to_the_floor() {
        let s = slice(Policy::StrictBlock, (1_000, 900, 50), 0, 80, Some(20), 100).unwrap();
        assert_eq!(s, Slice { amount: 50, tight: true });
        assert_eq!(slice(Policy::StrictBlock, (1_000, 900, 50), 0, 80, Some(51), 100), None);
        assert_eq!(slice(Policy::StrictBlock, (1_000, 1_000, 0), 0, 80, Some(0), 100), None);
    }

    #[test]
    fn soft_lets_the_crossing_slice_through_then_refuses() {
        let s = slice(Policy::SoftBlock, (1_000, 990, 0), 0, 500, None, 500).unwrap();
        assert_eq!(s, Slice { amount: 500, tight: true });
        assert_eq!(slice(Policy::SoftBlock, (1_000, 990, 10), 0, 1, None, 500), None);
    }

    #[test]
    fn never_overflows() {
        let s = slice(Policy::StrictBlock, (i64::MAX, 0, 0), 0, i64::MAX, None, i64::MAX).unwrap();
        assert_eq!(s.amount, i64::MAX);
        assert_eq!(slice(Policy::StrictBlock, (i64::MAX, i64::MAX, i64::MAX), 0, 1, None, 1), None);
    }
}
