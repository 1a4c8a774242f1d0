//! Trace spans: one row per trace with its all-time sums and the first and last time
//! it was active, kept by the fold next to the rollups (and by a rebuild), so that the
//! summary's top traces stop growing with the traces of the window
//! ([`crate::db::rollup_top`]).
//!
//! A window of the summary runs from `since` to now. A trace whose first event is at
//! or after `since` has all its events in the window: its window sum is its all-time
//! sum, and the costliest of those are a walk of an index by cost. Every other trace
//! active in the window started before `since` and was last active at or after it;
//! those are found by span class: a trace whose span is under a class's length
//! started less than that length before `since`, so each class is one index range.
//!
//! `first_at` and `last_at` never lie inside the true span (a row seeded by the
//! migration has whole days), which keeps both cases exact. Costs are sums saturated
//! at ±(2^63 − 1), like every `i64` answer of the summary.

use std::collections::BTreeMap;

use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;

use crate::db::models::CostEvent;
use crate::db::rollups::{DAY_MS, HOUR_MS};
use crate::db::schema::trace_spans;
use crate::db::{DbError, DbResult, Pool};
use crate::with_conn;

/// The longest span (exclusive) of each span class but the last, which has no bound;
/// the class of a span is the first whose length it is under. Also in the migration
/// and in [`SpanUpsert`]'s SQL.
pub const CLASS_LENGTHS: [i64; 5] = [HOUR_MS, DAY_MS, 7 * DAY_MS, 35 * DAY_MS, 366 * DAY_MS];

/// The class of a span of `length` milliseconds.
pub fn span_class(length: i64) -> i64 {
    CLASS_LENGTHS.iter().position(|&l| length < l).unwrap_or(CLASS_LENGTHS.len()) as i64
}

/// A trace's sums over some events: what the fold adds to its row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanSums {
    pub first_at: i64,
    pub last_at: i64,
    pub cost: i128,
    pub count: i64,
    pub firm_cost: i128,
    pub firm_count: i64,
}

impl SpanSums {
    fn of_event(e: &CostEvent) -> Self {
        let firm = i64::from(!e.estimated);
        Self {
            first_at: e.created_at,
            last_at: e.created_at,
            cost: e.cost_microdollars.into(),
            count: 1,
            firm_cost: i128::from(firm) * i128::from(e.cost_microdollars),
            firm_count: firm,
        }
    }

    fn add(&mut self, o: &Self) {
        if self.count == 0 {
            *self = *o;
            return;
        }
        self.first_at = self.first_at.min(o.first_at);
        self.last_at = self.last_at.max(o.last_at);
        self.cost += o.cost;
        self.count += o.count;
        self.firm_cost += o.firm_cost;
        self.firm_count += o.firm_count;
    }
}

/// Sums per (organization, trace id).
pub type Spans = BTreeMap<(String, String), SpanSums>;

/// Adds the events that carry a trace id into `acc`.
pub fn add_events<'a>(acc: &mut Spans, events: impl IntoIterator<Item = &'a CostEvent>) {
    for e in events {
        if let Some(trace) = &e.trace_id {
            acc.entry((e.org_id.clone(), trace.clone())).or_default().add(&SpanSums::of_event(e));
        }
    }
}

/// Adds the spans of `from` into `into`.
pub fn merge(into: &mut Spans, from: Spans) {
    for (key, sums) in from {
        into.entry(key).or_default().add(&sums);
    }
}

/// A stored cost: the sum saturated at ±(2^63 − 1), as the SQL upsert keeps it.
fn clamp(x: i128) -> i64 {
    i64::try_from(x.clamp(-i128::from(i64::MAX), i128::from(i64::MAX))).unwrap_or_default()
}

/// One row to upsert.
#[derive(Debug, Clone)]
pub struct SpanRow {
    pub org_id: String,
    pub trace_id: String,
    pub first_at: i64,
    pub last_at: i64,
    pub span_class: i64,
    pub cost: i64,
    pub event_count: i64,
    pub firm_cost: i64,
    pub firm_count: i64,
}

pub fn rows(acc: Spans) -> Vec<SpanRow> {
    acc.into_iter()
        .map(|((org_id, trace_id), s)| SpanRow {
            org_id,
            trace_id,
            first_at: s.first_at,
            last_at: s.last_at,
            span_class: span_class(s.last_at.saturating_sub(s.first_at)),
            cost: clamp(s.cost),
            event_count: s.count,
            firm_cost: clamp(s.firm_cost),
            firm_count: s.firm_count,
        })
        .collect()
}

/// Upserts `$rows: &[SpanRow]` inside the caller's transaction, in the fixed chunks of
/// [`crate::db::cost_events::for_fixed_chunks`] (`$($aw)*` is `.await` or nothing).
macro_rules! upsert_spans {
    ($conn:ident, $rows:expr, $($aw:tt)*) => {{
        let refs: Vec<&$crate::db::trace_spans::SpanRow> = $rows.iter().collect();
        $crate::db::cost_events::for_fixed_chunks!(refs.as_slice(), |chunk| {
            $crate::db::trace_spans::SpanUpsert(chunk).execute($conn) $($aw)* ?;
        });
    }};
}
pub(crate) use upsert_spans;

/// The upsert of `N` span rows, written out (like `rollups::RollupUpsert`) so that its
/// SQL depends on `N` alone and each connection keeps it prepared. An existing row
/// takes the earlier first and the later last time, the class of the span between
/// them, and the sums added (the costs saturating).
pub struct SpanUpsert<'a, const N: usize>(pub [&'a SpanRow; N]);

pub struct SpanUpsertId<const N: usize>;

impl<const N: usize> diesel::query_builder::QueryId for SpanUpsert<'_, N> {
    type QueryId = SpanUpsertId<N>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn, const N: usize> diesel::RunQueryDsl<Conn> for SpanUpsert<'_, N> {}

const FIRST: &str = "CASE WHEN excluded.first_at < trace_spans.first_at \
     THEN excluded.first_at ELSE trace_spans.first_at END";
const LAST: &str = "CASE WHEN excluded.last_at > trace_spans.last_at \
     THEN excluded.last_at ELSE trace_spans.last_at END";

/// `column = column + excluded.column`, saturating at ±(2^63 − 1). Nested `CASE`s, so
/// that no branch that could overflow is ever evaluated (PostgreSQL raises on it).
fn saturating_add(column: &str) -> String {
    let (old, new) = (format!("trace_spans.{column}"), format!("excluded.{column}"));
    format!(
        "{column} = CASE WHEN {new} > 0 THEN \
         (CASE WHEN {old} > 9223372036854775807 - {new} THEN 9223372036854775807 ELSE {old} + {new} END) \
         ELSE (CASE WHEN {old} < -9223372036854775807 - {new} THEN -9223372036854775807 ELSE {old} + {new} END) END"
    )
}

/// The `ON CONFLICT` clause of [`SpanUpsert`], built once.
static ON_CONFLICT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let span = format!("({LAST}) - ({FIRST})");
    let mut class = String::from("CASE");
    for (i, length) in CLASS_LENGTHS.iter().enumerate() {
        class.push_str(&format!(" WHEN {span} < {length} THEN {i}"));
    }
    class.push_str(&format!(" ELSE {} END", CLASS_LENGTHS.len()));
    format!(
        " ON CONFLICT (org_id, trace_id) DO UPDATE SET first_at = {FIRST}, last_at = {LAST}, \
         span_class = {class}, {}, event_count = trace_spans.event_count + excluded.event_count, {}, \
         firm_count = trace_spans.firm_count + excluded.firm_count",
        saturating_add("cost"),
        saturating_add("firm_cost"),
    )
});

impl<DB, const N: usize> diesel::query_builder::QueryFragment<DB> for SpanUpsert<'_, N>
where
    DB: diesel::backend::Backend
        + diesel::sql_types::HasSqlType<Text>
        + diesel::sql_types::HasSqlType<BigInt>,
    str: diesel::serialize::ToSql<Text, DB>,
    i64: diesel::serialize::ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> diesel::QueryResult<()> {
        out.push_sql(
            "INSERT INTO trace_spans (org_id, trace_id, first_at, last_at, span_class, cost, \
             event_count, firm_cost, firm_count) VALUES ",
        );
        for (i, r) in self.0.iter().enumerate() {
            out.push_sql(if i == 0 { "(" } else { ", (" });
            out.push_bind_param::<Text, str>(r.org_id.as_str())?;
            out.push_sql(", ");
            out.push_bind_param::<Text, str>(r.trace_id.as_str())?;
            let numbers = [
                &r.first_at,
                &r.last_at,
                &r.span_class,
                &r.cost,
                &r.event_count,
                &r.firm_cost,
                &r.firm_count,
            ];
            for n in numbers {
                out.push_sql(", ");
                out.push_bind_param::<BigInt, i64>(n)?;
            }
            out.push_sql(")");
        }
        out.push_sql(ON_CONFLICT.as_str());
        Ok(())
    }
}

/// The `n` costliest traces (cost descending, then trace id in byte order) whose
/// first event is at or after `since`, with their cost and event count (without
/// estimates when `exclude_estimated`; traces with no such events left out).
pub async fn started_since(
    pool: &Pool,
    org_id: &str,
    (since, exclude_estimated): (i64, bool),
    n: i64,
) -> DbResult<Vec<(String, i64, i64)>> {
    let label_order = match pool {
        Pool::Pg(_) => "trace_spans.trace_id COLLATE \"C\"",
        Pool::Sqlite(_) => "trace_spans.trace_id",
    };
    with_conn!(pool, read, |conn| {
        let started =
            trace_spans::table.filter(trace_spans::org_id.eq(org_id)).filter(trace_spans::first_at.ge(since));
        let rows = if exclude_estimated {
            started
                .filter(trace_spans::firm_count.gt(0))
                .order((trace_spans::firm_cost.desc(), sql::<Text>(label_order).asc()))
                .limit(n)
                .select((trace_spans::trace_id, trace_spans::firm_cost, trace_spans::firm_count))
                .load(conn)
                .await?
        } else {
            started
                .filter(trace_spans::event_count.gt(0))
                .order((trace_spans::cost.desc(), sql::<Text>(label_order).asc()))
                .limit(n)
                .select((trace_spans::trace_id, trace_spans::cost, trace_spans::event_count))
                .load(conn)
                .await?
        };
        Ok::<_, DbError>(rows)
    })
}

/// The traces that started before `since` and were active at or after it: one index
/// range per span class.
pub async fn straddling(pool: &Pool, org_id: &str, since: i64) -> DbResult<Vec<String>> {
    with_conn!(pool, read, |conn| {
        let mut out = Vec::new();
        for class in 0..=CLASS_LENGTHS.len() {
            let earliest = CLASS_LENGTHS.get(class).map_or(i64::MIN, |l| since.saturating_sub(*l));
            let ids: Vec<String> = trace_spans::table
                .filter(trace_spans::org_id.eq(org_id))
                .filter(trace_spans::span_class.eq(class as i64))
                .filter(trace_spans::first_at.gt(earliest))
                .filter(trace_spans::first_at.lt(since))
                .filter(trace_spans::last_at.ge(since))
                .select(trace_spans::trace_id)
                .load(conn)
                .await?;
            out.extend(ids);
        }
        Ok::<_, DbError>(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_classes_follow_the_lengths() {
        assert_eq!(span_class(0), 0);
        assert_eq!(span_class(HOUR_MS - 1), 0);
        assert_eq!(span_class(HOUR_MS), 1);
        assert_eq!(span_class(DAY_MS), 2);
        assert_eq!(span_class(366 * DAY_MS - 1), 4);
        assert_eq!(span_class(366 * DAY_MS), 5);
        assert_eq!(span_class(i64::MAX), 5);
    }

    #[test]
    fn costs_saturate_symmetrically() {
        assert_eq!(clamp(i128::from(i64::MAX) * 3), i64::MAX);
        assert_eq!(clamp(i128::from(i64::MIN) * 3), -i64::MAX);
        assert_eq!(clamp(-5), -5);
    }
}
