//! The costliest labels of one rollup dimension in a window, ranked by the database
//! (`GROUP BY` + `ORDER BY` + `LIMIT`) instead of loading every row: the summary's
//! top traces read ~17k trace rows at 1M events otherwise.
//!
//! Stored rows (whole days and hours) are ranked in SQL; the window's partial first
//! hour comes from raw events ([`rollups::raw_rows`]) and can move any label it
//! holds up or down (refunds are negative). The answer stays exact: a label without
//! raw events keeps its stored sum, so if it is in the final top `n` then fewer than
//! `n` labels without raw events rank above it, and it is within the stored top
//! `n + e` (`e` labels with raw events). Those `n + e` plus the `e` (with their
//! stored sums) are ranked again in Rust with the same order: cost descending, then
//! label in byte order.

use std::collections::BTreeMap;

use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;

use crate::db::rollups::{self, Spec, Sums};
use crate::db::schema::cost_rollups;
use crate::db::{DbError, DbResult, Pool};
use crate::with_conn;

const COST_HI: &str = "CAST(COALESCE(SUM(cost_rollups.cost_hi), 0) AS BIGINT)";
const COST_LO: &str = "CAST(COALESCE(SUM(cost_rollups.cost_lo), 0) AS BIGINT)";
const COUNT: &str = "CAST(COALESCE(SUM(cost_rollups.event_count), 0) AS BIGINT)";
/// Exact on PostgreSQL (NUMERIC); on SQLite exact inside `i64` (see `exact_sum::order_key`).
const COST_ORDER: &str = "(SUM(cost_rollups.cost_hi) * 1000000 + SUM(cost_rollups.cost_lo))";

/// Which stored rows and which label set one ranking query reads.
struct Stored<'a> {
    org_id: &'a str,
    dim: &'static str,
    days: (i64, i64),
    hours: (i64, i64),
    exclude_estimated: bool,
}

/// The `n` costliest labels (`label1`) of `dim` (rows without a tag key) among the
/// organization's events created at or after `since`, with their sums.
pub async fn top_labels(
    pool: &Pool,
    org_id: &str,
    (since, exclude_estimated): (i64, bool),
    dim: &'static str,
    n: usize,
) -> DbResult<Vec<(String, Sums)>> {
    crate::db::fold::catch_up(pool).await?;
    let c = rollups::cover(since, None);
    let spec = Spec { dim, name: Some(""), label1: None };
    let mut edge: BTreeMap<String, Sums> = BTreeMap::new();
    for r in rollups::raw_rows(pool, org_id, &c.raw, exclude_estimated, &[spec]).await? {
        edge.entry(r.label1).or_default().add(&r.sums);
    }
    let stored = Stored {
        org_id,
        dim,
        days: c.days.unwrap_or((0, 0)),
        hours: <[(i64, i64)]>::first(&c.hours).copied().unwrap_or((0, 0)),
        exclude_estimated,
    };
    let limit = i64::try_from(n.saturating_add(edge.len())).unwrap_or(i64::MAX);
    let mut all: BTreeMap<String, Sums> =
        ranked(pool, &stored, Some(limit), None).await?.into_iter().collect();
    let edge_labels: Vec<&str> = edge.keys().map(String::as_str).collect();
    for chunk in edge_labels.chunks(500) {
        all.extend(ranked(pool, &stored, None, Some(chunk)).await?);
    }
    for (label, s) in edge {
        all.entry(label).or_default().add(&s);
    }
    let mut out: Vec<(String, Sums)> = all.into_iter().filter(|(_, s)| s.count != 0).collect();
    out.sort_by(|a, b| rollups::sat(b.1.cost).cmp(&rollups::sat(a.1.cost)).then_with(|| a.0.cmp(&b.0)));
    out.truncate(n);
    Ok(out)
}

/// Stored sums per label: the `limit` costliest, or those of `labels`.
async fn ranked(
    pool: &Pool,
    q: &Stored<'_>,
    limit: Option<i64>,
    labels: Option<&[&str]>,
) -> DbResult<Vec<(String, Sums)>> {
    // Byte order on both backends, whatever PostgreSQL's collation.
    let label_order = match pool {
        Pool::Pg(_) => "cost_rollups.label1 COLLATE \"C\"",
        Pool::Sqlite(_) => "cost_rollups.label1",
    };
    let rows: Vec<(String, i64, i64, i64)> = with_conn!(pool, read, |conn| {
        let (d0, d1) = q.days;
        let (h0, h1) = q.hours;
        let in_days =
            cost_rollups::grain.eq("d").and(cost_rollups::bucket.ge(d0)).and(cost_rollups::bucket.lt(d1));
        let in_hours =
            cost_rollups::grain.eq("h").and(cost_rollups::bucket.ge(h0)).and(cost_rollups::bucket.lt(h1));
        let mut query = cost_rollups::table
            .filter(cost_rollups::org_id.eq(q.org_id))
            .filter(cost_rollups::dim.eq(q.dim))
            .filter(cost_rollups::name.eq(""))
            .filter(in_days.or(in_hours))
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
        if let Some(labels) = labels {
            query = query.filter(cost_rollups::label1.eq_any(labels));
        }
        if let Some(limit) = limit {
            query =
                query.order((sql::<BigInt>(COST_ORDER).desc(), sql::<Text>(label_order).asc())).limit(limit);
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
