//! The summary's costliest traces in a window that runs to now, without ranking every
//! trace of the window: at 10M events a 30-day window holds ~170k trace rows.
//!
//! Every trace active in the window is one of two kinds ([`trace_spans`]):
//! - it started at or after the window's start: its window sum is its all-time sum,
//!   and the `n` costliest of these are an index walk by cost that stops after `n`;
//! - it started before and was active since: few (a trace spans minutes, rarely
//!   days), found by span class, and summed exactly over the window from the stored
//!   trace rows (whole days and hours, [`stored_sums`]) and the raw
//!   events of the window's partial first hour ([`rollups::raw_rows`]).
//!
//! The final top `n` is among those `n` and the second kind, ranked again in Rust with
//! the same order: cost descending, then trace id in byte order. Exact: a trace of the
//! first kind outside the walk's `n` has at least `n` of its kind ranked above it.

use std::collections::{BTreeMap, BTreeSet};

use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool};
use diesel_async::RunQueryDsl;

use crate::db::rollups::{self, Spec, Sums, TRACE};
use crate::db::schema::cost_rollups;
use crate::db::trace_spans;
use crate::db::{DbError, DbResult, Pool};
use crate::with_conn;

const COST_HI: &str = "CAST(COALESCE(SUM(cost_rollups.cost_hi), 0) AS BIGINT)";
const COST_LO: &str = "CAST(COALESCE(SUM(cost_rollups.cost_lo), 0) AS BIGINT)";
const COUNT: &str = "CAST(COALESCE(SUM(cost_rollups.event_count), 0) AS BIGINT)";

/// Which stored rows the window sums read.
struct Stored<'a> {
    org_id: &'a str,
    days: (i64, i64),
    hours: (i64, i64),
    exclude_estimated: bool,
}

/// The `n` costliest traces among the organization's events created at or after
/// `since`, with their cost and count.
pub async fn top_traces(
    pool: &Pool,
    org_id: &str,
    (since, exclude_estimated): (i64, bool),
    n: usize,
) -> DbResult<Vec<(String, Sums)>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    crate::db::fold::catch_up(pool).await?;
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let started = trace_spans::started_since(pool, org_id, (since, exclude_estimated), limit).await?;
    let mut out: Vec<(String, Sums)> = started
        .into_iter()
        .map(|(label, cost, count)| {
            (label, Sums { cost: cost.into(), count: count.into(), ..Sums::default() })
        })
        .collect();
    let straddling = trace_spans::straddling(pool, org_id, since).await?;
    out.extend(window_sums(pool, org_id, (since, exclude_estimated), &straddling).await?);
    out.retain(|(_, s)| s.count != 0);
    out.sort_by(|a, b| rollups::sat(b.1.cost).cmp(&rollups::sat(a.1.cost)).then_with(|| a.0.cmp(&b.0)));
    out.truncate(n);
    Ok(out)
}

/// The exact sums of `traces` over the events created at or after `since`.
async fn window_sums(
    pool: &Pool,
    org_id: &str,
    (since, exclude_estimated): (i64, bool),
    traces: &[String],
) -> DbResult<BTreeMap<String, Sums>> {
    let mut all: BTreeMap<String, Sums> = BTreeMap::new();
    if traces.is_empty() {
        return Ok(all);
    }
    let c = rollups::cover(since, None);
    let stored = Stored {
        org_id,
        days: c.days.unwrap_or((0, 0)),
        hours: <[(i64, i64)]>::first(&c.hours).copied().unwrap_or((0, 0)),
        exclude_estimated,
    };
    let labels: Vec<&str> = traces.iter().map(String::as_str).collect();
    for chunk in labels.chunks(500) {
        all.extend(stored_sums(pool, &stored, chunk).await?);
    }
    let wanted: BTreeSet<&str> = labels.into_iter().collect();
    let spec = Spec { dim: TRACE, name: Some(""), label1: None };
    for r in rollups::raw_rows(pool, org_id, &c.raw, exclude_estimated, &[spec]).await? {
        if wanted.contains(r.label1.as_str()) {
            all.entry(r.label1).or_default().add(&r.sums);
        }
    }
    Ok(all)
}

/// The stored sums of the traces `labels` over the days and hours of `q`: lookups in
/// the partial index of trace rows by label (migration `2026-11-27-000024`), not a walk
/// of every trace row of the window.
async fn stored_sums(pool: &Pool, q: &Stored<'_>, labels: &[&str]) -> DbResult<Vec<(String, Sums)>> {
    let rows: Vec<(String, i64, i64, i64)> = with_conn!(pool, read, |conn| {
        let (d0, d1) = q.days;
        let (h0, h1) = q.hours;
        let in_days =
            cost_rollups::grain.eq("d").and(cost_rollups::bucket.ge(d0)).and(cost_rollups::bucket.lt(d1));
        let in_hours =
            cost_rollups::grain.eq("h").and(cost_rollups::bucket.ge(h0)).and(cost_rollups::bucket.lt(h1));
        let mut query = cost_rollups::table
            .filter(cost_rollups::org_id.eq(q.org_id))
            // A literal, so that both backends can use the partial index of trace rows.
            .filter(sql::<Bool>("cost_rollups.dim = 'trace'"))
            .filter(cost_rollups::name.eq(""))
            .filter(in_days.or(in_hours))
            .filter(cost_rollups::label1.eq_any(labels))
            .group_by(cost_rollups::label1)
            .select((
                cost_rollups::label1,
                sql::<BigInt>(COST_HI),
                sql::<BigInt>(COST_LO),
                sql::<BigInt>(COUNT),
            ))
            .into_boxed();
        if q.exclude_estimated {
            query = query.filter(cost_rollups::estimated.eq(false));
        }
        Ok::<_, DbError>(query.load(conn).await?)
    })?;
    Ok(rows
        .into_iter()
        .map(|(label, hi, lo, count)| {
            let cost = i128::from(hi) * 1_000_000 + i128::from(lo);
            (label, Sums { cost, count: count.into(), ..Sums::default() })
        })
        .collect())
}
