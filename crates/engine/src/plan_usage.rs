//! The governed-request cap of each tier: proxied requests per organization per
//! calendar month (UTC). Free hard-blocks at its cap with `plan_limit_exceeded`; paid
//! tiers are never blocked, their organization is alerted once per month instead.
//!
//! Counts live in memory and are seeded, the first time an organization is seen in a
//! month, from the proxied cost events already recorded that month, so a restart does
//! not reset them. Several instances each count their own share on top of the seed: a
//! cap is a commercial limit, not a money limit, and may be passed by at most the
//! requests the other instances served since this one was seeded.

use chrono::{Datelike, TimeZone, Utc};
use dashmap::DashMap;
use std::sync::Arc;
use std::sync::Mutex;

use crate::db::rollups::{self, Spec};
use crate::db::{DbResult, Pool};

/// What the cap says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanDecision {
    Allowed,
    /// A paid tier passed its cap for the first time this month: allowed, alert once.
    AllowedOverCap {
        current_count: i64,
        block_at: i64,
    },
    /// Free tier at its cap.
    Blocked {
        current_count: i64,
        block_at: i64,
    },
}

#[derive(Debug)]
struct Counter {
    /// `year * 12 + month0` of the count.
    month: i32,
    count: i64,
    alerted: bool,
}

/// Per-organization counters of the current month.
#[derive(Default)]
pub struct PlanUsage {
    orgs: DashMap<String, Arc<Mutex<Counter>>>,
}

/// `year * 12 + month0` and the month's first instant (epoch ms) of `now_ms`.
fn month_of(now_ms: i64) -> (i32, i64) {
    let now = Utc.timestamp_millis_opt(now_ms).single().unwrap_or_default();
    let index = now.year() * 12 + i32::try_from(now.month0()).unwrap_or(0);
    let start = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .map_or(0, |t| t.timestamp_millis());
    (index, start)
}

/// Proxied requests of an organization recorded since `since_ms` that were not
/// refused (refused calls leave a record but were never governed requests). From
/// the `governed` rollups: a month start is a UTC midnight, so day rows answer it.
pub async fn recorded_since(pool: &Pool, org_id: &str, since_ms: i64) -> DbResult<i64> {
    let spec = Spec { dim: rollups::GOVERNED, name: Some(""), label1: None };
    let rows =
        crate::db::rollup_labels::window_labels(pool, org_id, (since_ms, None), false, &[spec]).await?;
    let mut total = rollups::Sums::default();
    for r in &rows {
        total.add(&r.sums);
    }
    Ok(rollups::sat(total.count))
}

impl PlanUsage {
    /// Counts one governed request of `org_id` against `cap` (`None`: not counted) and
    /// says whether it may pass. `hard` blocks at the cap (Free); otherwise the first
    /// request over the cap in a month reports `AllowedOverCap`.
    pub async fn check(
        &self,
        pool: &Pool,
        org_id: &str,
        cap: Option<i64>,
        hard: bool,
        now_ms: i64,
    ) -> DbResult<PlanDecision> {
        let Some(cap) = cap else { return Ok(PlanDecision::Allowed) };
        let (month, start) = month_of(now_ms);
        let fresh = self
            .orgs
            .get(org_id)
            .map(|c| c.clone())
            .filter(|c| c.lock().map(|c| c.month == month).unwrap_or(false));
        let counter = match fresh {
            Some(c) => c,
            None => {
                let seeded = recorded_since(pool, org_id, start).await?;
                let entry = self
                    .orgs
                    .entry(org_id.to_owned())
                    .or_insert_with(|| Arc::new(Mutex::new(Counter { month, count: seeded, alerted: false })))
                    .clone();
                if let Ok(mut c) = entry.lock() {
                    if c.month != month {
                        *c = Counter { month, count: seeded, alerted: false };
                    }
                }
                entry
            }
        };
        let Ok(mut c) = counter.lock() else { return Ok(PlanDecision::Allowed) };
        if c.count >= cap {
            if hard {
                return Ok(PlanDecision::Blocked { current_count: c.count, block_at: cap });
            }
            c.count += 1;
            if !c.alerted {
                c.alerted = true;
                return Ok(PlanDecision::AllowedOverCap { current_count: c.count, block_at: cap });
            }
            return Ok(PlanDecision::Allowed);
        }
        c.count += 1;
        Ok(PlanDecision::Allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::month_of;

    #[test]
    fn months_start_at_midnight_utc_on_the_first() {
        // 2026-11-22T10:00:00Z
        let (index, start) = month_of(1_795_341_600_000);
        assert_eq!(index, 2026 * 12 + 10);
        assert_eq!(start, 1_793_491_200_000); // 2026-11-01T00:00:00Z
    }
}
