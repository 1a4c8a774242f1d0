//! Action rows: creation with its `action.created` event, lookups, the list page, the
//! cost events of an action, and the one conditional write behind every transition
//! (with its events and, for an approved budget increase, the raised limit), each in a
//! single transaction.

use actors::action::{ActionStatus, Change, Command};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::actions::events;
use crate::budgets::EntityRef;
use crate::db::models::{ActionRow, ActionUpdate, Budget, CostEvent};
use crate::db::schema::{actions, budget_changes, budgets, cost_events};
use crate::db::{DbError, DbResult, Pool};
use crate::outbox::Outbox;
use crate::util::bounds::MAX_BUDGET_MICRODOLLARS;
use crate::util::pagination::After;
use crate::{with_conn, with_tx};

/// Writes one webhook event to the outbox inside the caller's transaction (only when
/// an endpoint subscribes to its kind; see `outbox::enqueue!`). The single place
/// action events enter the outbox.
macro_rules! enqueue {
    ($conn:ident, $outbox:expr, $org_id:expr, $event_type:expr, $object:expr, $now:expr) => {{
        let row = crate::db::cost_events::outbox_event($org_id, $event_type, $object, $now);
        crate::enqueue!($conn, $outbox, vec![row]);
    }};
}

/// The outcome of [`apply`].
#[derive(Debug)]
pub enum Applied {
    /// Written; the new row, and the budget whose limit an approval raised.
    Done(Box<ActionRow>, Option<EntityRef>),
    /// The row's version moved since the change was decided: nothing written.
    Stale,
    /// The budget an approved increase names no longer exists: nothing written.
    NoBudget,
}

/// Inserts a new pending action and its `action.created` event; `false` (nothing
/// written) when the organization would hold more than `max_pending` pending actions.
pub async fn insert(pool: &Pool, outbox: &Outbox, row: &ActionRow, max_pending: i64) -> DbResult<bool> {
    with_tx!(pool, |conn| {
        // The insert takes the write lock first, so concurrent creates count in turn.
        diesel::insert_into(actions::table).values(row).execute(conn).await?;
        let pending: i64 = actions::table
            .filter(actions::org_id.eq(&row.org_id))
            .filter(actions::status.eq(ActionStatus::Pending.as_str()))
            .count()
            .get_result(conn)
            .await?;
        if pending > max_pending {
            // Nothing of this action may stay; the caller answers 409.
            diesel::delete(actions::table.find(&row.id)).execute(conn).await?;
            return Ok(false);
        }
        enqueue!(conn, outbox, &row.org_id, "action.created", events::created(row), row.created_at);
        Ok(true)
    })
}

/// An action by its bare id, whatever its organization (actors check ownership).
pub async fn load(pool: &Pool, id: &str) -> DbResult<Option<ActionRow>> {
    with_conn!(pool, read, |conn| {
        Ok(actions::table.find(id).select(ActionRow::as_select()).first(conn).await.optional()?)
    })
}

/// An action of an organization.
pub async fn find(pool: &Pool, org_id: &str, id: &str) -> DbResult<Option<ActionRow>> {
    Ok(load(pool, id).await?.filter(|a| a.org_id == org_id))
}

/// Up to `limit` actions of an organization in `statuses` (all when empty), newest
/// first, strictly after `after`.
pub async fn list_page(
    pool: &Pool,
    org_id: &str,
    statuses: &[String],
    after: Option<&After>,
    limit: i64,
) -> DbResult<Vec<ActionRow>> {
    with_conn!(pool, read, |conn| {
        let mut query = actions::table
            .filter(actions::org_id.eq(org_id))
            .order((actions::created_at.desc(), actions::id.desc()))
            .limit(limit)
            .select(ActionRow::as_select())
            .into_boxed();
        if !statuses.is_empty() {
            query = query.filter(actions::status.eq_any(statuses.to_vec()));
        }
        if let Some(a) = after {
            query = query.filter(
                actions::created_at
                    .lt(a.created_at)
                    .or(actions::created_at.eq(a.created_at).and(actions::id.lt(a.id.clone()))),
            );
        }
        Ok(query.load(conn).await?)
    })
}

/// Pending actions that can expire: their timers run again after a restart.
pub async fn pending_with_expiry(pool: &Pool) -> DbResult<Vec<ActionRow>> {
    with_conn!(pool, read, |conn| {
        Ok(actions::table
            .filter(actions::status.eq(ActionStatus::Pending.as_str()))
            .filter(actions::expires_at.is_not_null())
            .select(ActionRow::as_select())
            .load(conn)
            .await?)
    })
}

/// The newest `limit` cost events recorded with `X-Service-Action-Id` of this action.
pub async fn costs(pool: &Pool, org_id: &str, id: &str, limit: i64) -> DbResult<Vec<CostEvent>> {
    with_conn!(pool, read, |conn| {
        Ok(cost_events::table
            .filter(cost_events::org_id.eq(org_id))
            .filter(cost_events::action_id.eq(id))
            .order((cost_events::created_at.desc(), cost_events::id.desc()))
            .limit(limit)
            .select(CostEvent::as_select())
            .load(conn)
            .await?)
    })
}

/// The columns a transition writes, from the row it was decided on.
pub fn next_columns(row: &ActionRow, change: &Change) -> ActionUpdate {
    let now = change.now;
    let mut next = ActionUpdate {
        status: change.to.as_str().to_owned(),
        version: row.version + 1,
        updated_at: now,
        approved_at: row.approved_at,
        approved_by: row.approved_by.clone(),
        rejected_at: row.rejected_at,
        rejected_by: row.rejected_by.clone(),
        executed_at: row.executed_at,
        expired_at: row.expired_at,
        result: row.result.clone(),
        error_message: row.error_message.clone(),
    };
    match &change.command {
        Command::Approve { by } => (next.approved_at, next.approved_by) = (Some(now), Some(by.clone())),
        Command::Reject { by } => (next.rejected_at, next.rejected_by) = (Some(now), Some(by.clone())),
        Command::Expire => next.expired_at = Some(now),
        Command::Report(report) => {
            if let Some(result) = &report.result {
                next.result = Some(result.to_string());
            }
            if let Some(message) = &report.error_message {
                next.error_message = Some(message.clone());
            }
            if change.to == ActionStatus::Executed {
                next.executed_at = Some(now);
            }
        }
    }
    next
}

/// Writes `change` if the action still has the version it was decided on, with its
/// events; an approved budget increase raises the budget's limit (capped at the largest
/// budget) and records a budget change for every instance, all in one transaction.
pub async fn apply(pool: &Pool, outbox: &Outbox, change: &Change) -> DbResult<Applied> {
    let outcome = with_tx!(pool, |conn| {
        let id = &change.before.id;
        let version = change.before.version;
        let row: Option<ActionRow> =
            actions::table.find(id).select(ActionRow::as_select()).first(conn).await.optional()?;
        let Some(row) = row.filter(|r| r.version == version) else { return Ok(Applied::Stale) };
        let next = next_columns(&row, change);
        let updated: Option<ActionRow> =
            diesel::update(actions::table.filter(actions::id.eq(id)).filter(actions::version.eq(version)))
                .set(&next)
                .returning(ActionRow::as_returning())
                .get_result(conn)
                .await
                .optional()?;
        let Some(updated) = updated else { return Ok(Applied::Stale) };
        if let Some((kind, object)) = events::of_transition(&updated) {
            enqueue!(conn, outbox, &updated.org_id, kind, object, change.now);
        }
        let mut raised = None;
        if change.to == ActionStatus::Approved {
            if let Some(increase) = events::BudgetIncrease::of(&updated) {
                let budget: Option<Budget> = budgets::table
                    .filter(budgets::org_id.eq(&updated.org_id))
                    .filter(budgets::entity_type.eq(&increase.entity_type))
                    .filter(budgets::entity_id.eq(&increase.entity_id))
                    .select(Budget::as_select())
                    .first(conn)
                    .await
                    .optional()?;
                // Rolls the whole transition back: the caller answers that the budget
                // is gone.
                let Some(budget) = budget else { return Err(DbError::NotFound) };
                let previous = budget.max_budget_microdollars;
                let new_limit =
                    previous.saturating_add(increase.amount).min(MAX_BUDGET_MICRODOLLARS).max(previous);
                let n = diesel::update(
                    budgets::table
                        .filter(budgets::id.eq(&budget.id))
                        .filter(budgets::max_budget_microdollars.eq(previous)),
                )
                .set((budgets::max_budget_microdollars.eq(new_limit), budgets::updated_at.eq(change.now)))
                .execute(conn)
                .await?;
                if n != 1 {
                    return Err(DbError::unavailable("the budget changed during the approval; retry"));
                }
                diesel::insert_into(budget_changes::table)
                    .values((
                        budget_changes::id.eq(crate::util::ids::new_id()),
                        budget_changes::org_id.eq(&budget.org_id),
                        budget_changes::entity_type.eq(&budget.entity_type),
                        budget_changes::entity_id.eq(&budget.entity_id),
                        budget_changes::changed_at.eq(change.now),
                    ))
                    .execute(conn)
                    .await?;
                let object = events::budget_increased(&updated, &increase, previous, new_limit);
                enqueue!(conn, outbox, &updated.org_id, "budget.increased", object, change.now);
                raised = Some(EntityRef {
                    org_id: budget.org_id,
                    entity_type: budget.entity_type,
                    entity_id: budget.entity_id,
                });
            }
        }
        Ok(Applied::Done(Box::new(updated), raised))
    });
    match outcome {
        Err(DbError::NotFound) => Ok(Applied::NoBudget),
        other => other,
    }
}
