//! Budget periods in storage: a background task resets the spend of every budget
//! whose period has elapsed (`daily`, `weekly`, `monthly`, aligned to UTC) and writes
//! `budget.reset` to the outbox in the same transaction.
//!
//! The reset is a conditional update on the old period start, so when several
//! instances share a PostgreSQL database exactly one of them performs (and
//! announces) each reset. The live actor of the budget is then told to re-read its
//! row. Resets happen within one sweep interval of the boundary.

use std::time::Duration;

use actors::budget::ResetInterval;
use diesel::{ExpressionMethods, QueryDsl, SelectableHelper};
use diesel_async::RunQueryDsl;

use crate::budgets::{BudgetService, EntityRef};
use crate::db::cost_events::{period_due, reset_event};
use crate::db::models::Budget;
use crate::db::schema::budgets;
use crate::db::{DbError, DbResult, Pool};
use crate::util::time;
use crate::{with_conn, with_tx};

pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The new period start when `row`'s period has elapsed at `now`.
pub fn due(row: &Budget, now: i64) -> Option<(ResetInterval, i64)> {
    period_due(row.reset_interval.as_deref(), row.current_period_start, now)
}

/// Resets every due budget; returns the entities that were reset.
pub async fn roll_due(pool: &Pool, outbox: &crate::outbox::Outbox, now: i64) -> DbResult<Vec<EntityRef>> {
    let rows: Vec<Budget> = with_conn!(pool, read, |conn| {
        budgets::table
            .filter(budgets::reset_interval.is_not_null())
            .filter(budgets::current_period_start.is_not_null())
            .select(Budget::as_select())
            .load(conn)
            .await
            .map_err(DbError::from)
    })?;
    let mut rolled = Vec::new();
    for row in rows {
        let Some((interval, new_start)) = due(&row, now) else { continue };
        let old_start = row.current_period_start;
        let entity = (row.org_id.as_str(), row.entity_type.as_str(), row.entity_id.as_str());
        let event = reset_event(
            entity,
            row.max_budget_microdollars,
            row.spend_microdollars,
            interval,
            new_start,
            now,
        );
        let id = row.id.clone();
        let previous_spend = row.spend_microdollars;
        let (done, queued) = with_tx!(pool, |conn| {
            // Conditional on the period we read, so each reset happens once even
            // with several instances. Spend committed after our read stays (it
            // belongs to the new period): we subtract what we announce.
            let updated = diesel::update(
                budgets::table
                    .filter(budgets::id.eq(&id))
                    .filter(budgets::current_period_start.eq(old_start)),
            )
            .set((
                budgets::spend_microdollars.eq(budgets::spend_microdollars - previous_spend),
                budgets::current_period_start.eq(Some(new_start)),
                budgets::updated_at.eq(now),
            ))
            .execute(conn)
            .await?;
            let queued =
                if updated == 1 { crate::outbox::enqueue!(conn, outbox, vec![event.clone()]) } else { 0 };
            Ok((updated == 1, queued))
        })?;
        if queued > 0 {
            outbox.wake();
        }
        if done {
            rolled.push(EntityRef {
                org_id: row.org_id,
                entity_type: row.entity_type,
                entity_id: row.entity_id,
            });
        }
    }
    Ok(rolled)
}

/// Runs [`roll_due`] every [`SWEEP_EVERY`] and refreshes the reset budgets' actors.
pub fn start(pool: Pool, outbox: crate::outbox::Outbox, budgets: BudgetService) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        loop {
            tick.tick().await;
            match roll_due(&pool, &outbox, time::now_ms()).await {
                Ok(rolled) => {
                    for entity in rolled {
                        budgets.invalidate(&entity).await;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "budget period sweep failed; retrying next sweep"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(interval: Option<&str>, start: Option<i64>) -> Budget {
        Budget {
            id: "b".into(),
            org_id: "o".into(),
            entity_type: "user".into(),
            entity_id: "u".into(),
            max_budget_microdollars: 100,
            spend_microdollars: 50,
            reserved_microdollars: 0,
            policy: "strict_block".into(),
            reset_interval: interval.map(str::to_owned),
            current_period_start: start,
            threshold_percentages: "[]".into(),
            velocity_limit_microdollars: None,
            velocity_window_seconds: None,
            velocity_cooldown_seconds: None,
            session_limit_microdollars: None,
            finalization_reserve_microdollars: None,
            loop_max_calls: None,
            loop_window_seconds: None,
            loop_aggregate_max_keys: None,
            created_at: 0,
            updated_at: 0,
            exact_ceiling: false,
        }
    }

    #[test]
    fn daily_budgets_roll_at_utc_midnight() {
        let day = 86_400_000;
        let start = 20_000 * day + 5_000; // mid-day start
        assert_eq!(due(&row(Some("daily"), Some(start)), 20_001 * day - 1), None);
        assert_eq!(
            due(&row(Some("daily"), Some(start)), 20_001 * day),
            Some((ResetInterval::Daily, 20_001 * day))
        );
        // Several missed periods roll once, to the current one.
        assert_eq!(
            due(&row(Some("daily"), Some(start)), 20_005 * day + 7),
            Some((ResetInterval::Daily, 20_005 * day))
        );
        assert_eq!(due(&row(None, None), 20_005 * day), None);
    }
}
