//! Customer bindings: bind (binding and the customer's budget in one transaction),
//! status changes, and what unit economics reads (lifetime cost, latest gate decision).

use diesel::dsl::count_star;
use diesel::prelude::*;
use diesel::upsert::excluded;
use diesel_async::RunQueryDsl;

use crate::db::budgets::note_change;
use crate::db::exact_sum::{self, SumParts};
use crate::db::models::{Budget, CustomerBinding};
use crate::db::schema::{budget_changes, budgets, cost_events, customer_bindings, organizations};
use crate::db::{DbResult, Pool};
use crate::{with_conn, with_tx};

pub const ACTIVE: &str = "active";
pub const SUSPENDED: &str = "suspended";
pub const ARCHIVED: &str = "archived";
/// The provider of the cost events gate writes.
pub const GATE_PROVIDER: &str = "gate";

pub enum Bound {
    /// The binding, active, with the customer's budget set to its cap.
    Active(CustomerBinding),
    /// The customer's binding is suspended or archived: nothing changed.
    Inactive(CustomerBinding),
}

/// Binds `row.customer_id` (a new row, or the existing active binding updated) and
/// sets the customer's budget limit to the cap, in one transaction. Concurrent binds of
/// one customer converge on one row (the unique index). `budget` is the budget to
/// create when the customer has none; an existing one keeps its other settings.
pub async fn bind(pool: &Pool, row: CustomerBinding, budget: Budget) -> DbResult<Bound> {
    with_tx!(pool, |conn| {
        // Write first: the transaction takes the write lock before it reads (on SQLite a
        // read that later writes fails at once if another process wrote in between).
        diesel::update(organizations::table.find(&row.org_id))
            .set(organizations::updated_at.eq(organizations::updated_at))
            .execute(conn)
            .await?;
        let existing: Option<CustomerBinding> = customer_bindings::table
            .filter(customer_bindings::org_id.eq(&row.org_id))
            .filter(customer_bindings::customer_id.eq(&row.customer_id))
            .select(CustomerBinding::as_select())
            .first(conn)
            .await
            .optional()?;
        if let Some(b) = existing.filter(|b| b.status != ACTIVE) {
            return Ok(Bound::Inactive(b));
        }
        let saved: CustomerBinding = diesel::insert_into(customer_bindings::table)
            .values(&row)
            .on_conflict((customer_bindings::org_id, customer_bindings::customer_id))
            .do_update()
            .set((
                customer_bindings::plan_ref.eq(excluded(customer_bindings::plan_ref)),
                customer_bindings::budget_cap_microdollars
                    .eq(excluded(customer_bindings::budget_cap_microdollars)),
                customer_bindings::margin_target_percent
                    .eq(excluded(customer_bindings::margin_target_percent)),
                customer_bindings::updated_at.eq(excluded(customer_bindings::updated_at)),
            ))
            .returning(CustomerBinding::as_returning())
            .get_result(conn)
            .await?;
        if saved.status != ACTIVE {
            // A concurrent status change won the row between the read and the write.
            return Ok(Bound::Inactive(saved));
        }
        let budget: Budget = diesel::insert_into(budgets::table)
            .values(&budget)
            .on_conflict((budgets::org_id, budgets::entity_type, budgets::entity_id))
            .do_update()
            .set((
                budgets::max_budget_microdollars.eq(excluded(budgets::max_budget_microdollars)),
                budgets::updated_at.eq(excluded(budgets::updated_at)),
            ))
            .returning(Budget::as_returning())
            .get_result(conn)
            .await?;
        note_change!(conn, &budget);
        Ok(Bound::Active(saved))
    })
}

pub async fn find(pool: &Pool, org_id: &str, customer_id: &str) -> DbResult<Option<CustomerBinding>> {
    with_conn!(pool, read, |conn| {
        Ok(customer_bindings::table
            .filter(customer_bindings::org_id.eq(org_id))
            .filter(customer_bindings::customer_id.eq(customer_id))
            .select(CustomerBinding::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// The organization's bindings, newest first.
pub async fn list(pool: &Pool, org_id: &str) -> DbResult<Vec<CustomerBinding>> {
    with_conn!(pool, read, |conn| {
        Ok(customer_bindings::table
            .filter(customer_bindings::org_id.eq(org_id))
            .order((customer_bindings::created_at.desc(), customer_bindings::id.desc()))
            .select(CustomerBinding::as_select())
            .load(conn)
            .await?)
    })
}

/// Sets a binding's status; `None` when the customer has no binding.
pub async fn set_status(
    pool: &Pool,
    org_id: &str,
    customer_id: &str,
    status: &str,
    now: i64,
) -> DbResult<Option<CustomerBinding>> {
    with_conn!(pool, write, |conn| {
        Ok(diesel::update(
            customer_bindings::table
                .filter(customer_bindings::org_id.eq(org_id))
                .filter(customer_bindings::customer_id.eq(customer_id)),
        )
        .set((customer_bindings::status.eq(status), customer_bindings::updated_at.eq(now)))
        .returning(CustomerBinding::as_returning())
        .get_result(conn)
        .await
        .optional()?)
    })
}

/// Lifetime cost and event count of a customer, by the customer id stored on each
/// event (rebinding rewrites no history). The sum is exact (see `exact_sum`).
pub async fn lifetime_cost(pool: &Pool, org_id: &str, customer_id: &str) -> DbResult<(i64, i64)> {
    let (parts, count): (SumParts, i64) = with_conn!(pool, read, |conn| {
        Ok::<_, crate::db::DbError>(
            cost_events::table
                .filter(cost_events::org_id.eq(org_id))
                .filter(cost_events::customer_id.eq(customer_id))
                .select((exact_sum::parts("cost_events.cost_microdollars"), count_star()))
                .first(conn)
                .await?,
        )
    })?;
    Ok((exact_sum::join(parts), count))
}

/// The latest gate decision recorded for a customer: (budget status, when). Refunds
/// (negative `gate` events) are not decisions.
pub async fn latest_gate_decision(
    pool: &Pool,
    org_id: &str,
    customer_id: &str,
) -> DbResult<Option<(String, i64)>> {
    with_conn!(pool, read, |conn| {
        Ok(cost_events::table
            .filter(cost_events::org_id.eq(org_id))
            .filter(cost_events::customer_id.eq(customer_id))
            .filter(cost_events::provider.eq(GATE_PROVIDER))
            .filter(cost_events::cost_microdollars.ge(0))
            .order((cost_events::created_at.desc(), cost_events::id.desc()))
            .select((cost_events::budget_status, cost_events::created_at))
            .first(conn)
            .await
            .optional()?)
    })
}
