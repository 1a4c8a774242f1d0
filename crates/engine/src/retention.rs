//! Retention of raw cost events: with `cost_event_retention_days` set, a background
//! task deletes the events older than that (with their tags and bodies) in small
//! batches, so one organization's backlog never holds the writer for long. The
//! rollups are not touched: summaries, attribution and budgets keep counting the
//! deleted events. Lookups by id, session, trace or request find only kept events.
//!
//! The setting is at least [`MIN_DAYS`]: the longest read window (90 days) takes its
//! first partial hour from raw events (see `db::rollups`), which must still exist.

use std::time::Duration;

use diesel::{BoolExpressionMethods, ExpressionMethods, QueryDsl};
use diesel_async::RunQueryDsl;

use crate::db::rollups::DAY_MS;
use crate::db::schema::{cost_event_bodies, cost_event_tags, cost_events, fold_marks, organizations};
use crate::db::{DbResult, Pool};

/// The shortest retention: the 90-day window plus the day of its first edge.
pub const MIN_DAYS: i64 = 91;
/// Events deleted per transaction.
const BATCH: usize = 500;
/// Pause between two batches, so ingest commits interleave.
const PAUSE: Duration = Duration::from_millis(20);
/// How often a pass runs (the first one right after start).
const EVERY: Duration = Duration::from_secs(3600);

/// Starts the retention task when `days` is set.
pub fn start(pool: Pool, days: Option<i64>) {
    let Some(days) = days else { return };
    tokio::spawn(async move {
        loop {
            let cutoff = crate::util::time::now_ms().saturating_sub(days.saturating_mul(DAY_MS));
            match run_pass(&pool, cutoff).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, days, "cost event retention pass"),
                Err(e) => tracing::warn!(error = %e, "cost event retention pass failed"),
            }
            tokio::time::sleep(EVERY).await;
        }
    });
}

/// Deletes every event created before `cutoff`, batch by batch, organization by
/// organization; returns how many were deleted.
pub async fn run_pass(pool: &Pool, cutoff: i64) -> DbResult<u64> {
    crate::db::fold::fold_pending(pool).await?;
    let orgs: Vec<String> = crate::with_conn!(pool, read, |conn| {
        Ok::<_, crate::db::DbError>(organizations::table.select(organizations::id).load(conn).await?)
    })?;
    let mut deleted = 0u64;
    for org in orgs {
        loop {
            let n = delete_batch(pool, &org, cutoff).await?;
            deleted += u64::try_from(n).unwrap_or(u64::MAX);
            if n < BATCH {
                break;
            }
            tokio::time::sleep(PAUSE).await;
        }
    }
    Ok(deleted)
}

/// Deletes up to [`BATCH`] of the organization's oldest events before `cutoff` in
/// one transaction (found through the `(org_id, created_at, id)` index).
async fn delete_batch(pool: &Pool, org: &str, cutoff: i64) -> DbResult<usize> {
    crate::with_tx!(pool, |conn| {
        // Only events already folded into the rollups (see `db::fold`): the others are
        // deleted by a later pass.
        let folded: i64 = fold_marks::table
            .filter(fold_marks::name.eq(crate::db::fold::FOLDED))
            .select(fold_marks::seq)
            .get_result(conn)
            .await?;
        let ids: Vec<String> = cost_events::table
            .filter(cost_events::org_id.eq(org))
            .filter(cost_events::created_at.lt(cutoff))
            .filter(cost_events::fold_seq.is_null().or(cost_events::fold_seq.le(folded)))
            .order(cost_events::created_at.asc())
            .select(cost_events::id)
            .limit(BATCH as i64)
            .load(conn)
            .await?;
        if ids.is_empty() {
            return Ok(0);
        }
        diesel::delete(cost_event_tags::table.filter(cost_event_tags::event_id.eq_any(&ids)))
            .execute(conn)
            .await?;
        diesel::delete(cost_event_bodies::table.filter(cost_event_bodies::event_id.eq_any(&ids)))
            .execute(conn)
            .await?;
        diesel::delete(cost_events::table.filter(cost_events::id.eq_any(&ids))).execute(conn).await?;
        Ok(ids.len())
    })
}
