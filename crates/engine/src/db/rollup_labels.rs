//! Window sums per label, added up by the database: for reads that want one total
//! per (dimension, name, label1, label2) over the whole window, not per day. The
//! stored rows of each range of the window (whole days, whole hours) are summed with
//! `GROUP BY` in SQL, so the database returns one row per label instead of one per
//! label and day: the margins' all-time cost per customer tag value reads a few
//! thousand rows instead of a few hundred thousand. The window's partial hours come
//! from the raw events, as in [`rollups::window_between`]. An all-time window
//! (`since = i64::MIN`, no end) of dimensions kept at the all-time grain reads those
//! rows only: one per label, however many days the events span.

use std::collections::BTreeMap;

use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Text};
use diesel_async::RunQueryDsl;

use crate::db::rollups::{self, RollupRow, Spec, Sums};
use crate::db::schema::cost_rollups;
use crate::db::{DbError, DbResult, Pool};
use crate::with_conn;

/// The sums of one label over a whole window.
#[derive(Debug, Clone)]
pub struct LabelRow {
    pub dim: String,
    pub name: String,
    pub label1: String,
    pub label2: String,
    pub sums: Sums,
}

/// `SUM` of one stored sum column, as `BIGINT` on both backends (each column is an
/// exact-sum part, far inside `i64` when added up, see [`rollups`]).
macro_rules! summed {
    ($column:literal) => {
        sql::<BigInt>(concat!("CAST(COALESCE(SUM(cost_rollups.", $column, "), 0) AS BIGINT)"))
    };
}

/// The organization's sums of `specs` per label for the events created in
/// `[since, until)` (`until: None`: no end), without estimates when
/// `exclude_estimated`; labels whose events add up to nothing are left out.
pub async fn window_labels(
    pool: &Pool,
    org_id: &str,
    (since, until): (i64, Option<i64>),
    exclude_estimated: bool,
    specs: &[Spec<'_>],
) -> DbResult<Vec<LabelRow>> {
    crate::db::fold::catch_up(pool).await?;
    let (c, ranges) = ranges_of((since, until), specs);
    let mut acc: BTreeMap<(String, String, String, String), Sums> = BTreeMap::new();
    for spec in specs {
        for &range in &ranges {
            for r in stored(pool, org_id, spec, range, exclude_estimated).await? {
                let sums = rollups::sums_of(&r);
                acc.entry((r.dim, r.name, r.label1, r.label2)).or_default().add(&sums);
            }
        }
    }
    for r in rollups::raw_rows(pool, org_id, &c.raw, exclude_estimated, specs).await? {
        acc.entry((r.dim, r.name, r.label1, r.label2)).or_default().add(&r.sums);
    }
    Ok(acc
        .into_iter()
        .filter(|(_, s)| s.count != 0)
        .map(|((dim, name, label1, label2), sums)| LabelRow { dim, name, label1, label2, sums })
        .collect())
}

/// How a window is read: the stored ranges of buckets (`grain`, `[from, to)`), and
/// the cover whose raw edges come from events. An all-time window of dimensions kept
/// at the all-time grain is its one bucket.
fn ranges_of(
    (since, until): (i64, Option<i64>),
    specs: &[Spec<'_>],
) -> (rollups::Cover, Vec<(&'static str, i64, i64)>) {
    let all_time = since == i64::MIN
        && until.is_none_or(|u| u == i64::MAX)
        && specs.iter().all(|s| rollups::has_grain(s.dim, rollups::ALL_TIME));
    if all_time {
        return (rollups::Cover::default(), vec![(rollups::ALL_TIME, 0, 1)]);
    }
    let c = rollups::cover(since, until);
    let ranges = c
        .days
        .map(|(a, b)| (rollups::DAY, a, b))
        .into_iter()
        .chain(c.hours.iter().map(|&(a, b)| (rollups::HOUR, a, b)))
        .collect();
    (c, ranges)
}

/// Cost and count per first label of one `spec` over `[since, until)`, estimates
/// included: [`window_labels`] for a read that wants only those two sums (the
/// margins' cost per tag value). The database returns one row of four values per
/// label, not one of thirty per (label1, label2): SQLite's driver copies every value
/// of a loaded row into its own allocation, and at 1,000 customer values × 6 models
/// those copies were most of `margins/unmatched`'s time.
pub async fn window_costs(
    pool: &Pool,
    org_id: &str,
    (since, until): (i64, Option<i64>),
    spec: Spec<'_>,
) -> DbResult<BTreeMap<String, Sums>> {
    crate::db::fold::catch_up(pool).await?;
    let (c, ranges) = ranges_of((since, until), &[spec]);
    let mut acc: BTreeMap<String, Sums> = BTreeMap::new();
    for range in ranges {
        let rows: Vec<(String, i64, i64, i64)> = with_conn!(pool, read, |conn| {
            let q = cost_rollups::table
                .filter(rollups::stored_rows(org_id, spec, range, false))
                .group_by(cost_rollups::label1)
                .select((
                    cost_rollups::label1,
                    summed!("event_count"),
                    summed!("cost_hi"),
                    summed!("cost_lo"),
                ));
            Ok::<_, DbError>(q.load(conn).await?)
        })?;
        for (label, count, hi, lo) in rows {
            let sums = Sums { count: count.into(), cost: rollups::joined(hi, lo), ..Sums::default() };
            acc.entry(label).or_default().add(&sums);
        }
    }
    for r in rollups::raw_rows(pool, org_id, &c.raw, false, &[spec]).await? {
        acc.entry(r.label1).or_default().add(&r.sums);
    }
    acc.retain(|_, s| s.count != 0);
    Ok(acc)
}

/// The stored rows of `spec` in one range of buckets, summed per label by the
/// database (`grain`, `bucket` and `estimated` of the answer carry no meaning).
async fn stored(
    pool: &Pool,
    org_id: &str,
    spec: &Spec<'_>,
    (grain, from, to): (&str, i64, i64),
    exclude_estimated: bool,
) -> DbResult<Vec<RollupRow>> {
    with_conn!(pool, read, |conn| {
        let q = cost_rollups::table
            .filter(rollups::stored_rows(org_id, *spec, (grain, from, to), exclude_estimated))
            .group_by((
                cost_rollups::org_id,
                cost_rollups::dim,
                cost_rollups::name,
                cost_rollups::label1,
                cost_rollups::label2,
            ))
            .select((
                cost_rollups::org_id,
                cost_rollups::dim,
                cost_rollups::name,
                sql::<Text>("''"),
                sql::<BigInt>("CAST(0 AS BIGINT)"),
                cost_rollups::label1,
                cost_rollups::label2,
                sql::<Bool>("FALSE"),
                summed!("event_count"),
                summed!("cost_hi"),
                summed!("cost_lo"),
                summed!("input_hi"),
                summed!("input_lo"),
                summed!("output_hi"),
                summed!("output_lo"),
                summed!("cached_hi"),
                summed!("cached_lo"),
                summed!("reasoning_hi"),
                summed!("reasoning_lo"),
                summed!("duration_hi"),
                summed!("duration_lo"),
                summed!("duration_count"),
                summed!("bd_input_hi"),
                summed!("bd_input_lo"),
                summed!("bd_output_hi"),
                summed!("bd_output_lo"),
                summed!("bd_cached_hi"),
                summed!("bd_cached_lo"),
                summed!("bd_reasoning_hi"),
                summed!("bd_reasoning_lo"),
            ));
        Ok::<_, DbError>(q.load::<RollupRow>(conn).await?)
    })
}
