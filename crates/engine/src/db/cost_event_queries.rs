//! Cost events, read side: the filtered list and export, single events, sessions,
//! the spend summary, attribution and the recent tag keys. The writer lives in
//! [`super::cost_events`].
//!
//! Summary, attribution and the recent tag keys add up rollup rows (see
//! [`super::rollups`]), never raw events; the raw-event scans they replaced are kept
//! in [`super::cost_event_scans`] as the reference of the equivalence test. Lists,
//! single events and sessions read raw events through their indexes. Every sum is
//! exact and cannot fail on overflow: it is loaded as two partial sums and joined in
//! Rust (see [`super::exact_sum`]).

use diesel::dsl::sql;
use diesel::expression::SqlLiteral;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::RunQueryDsl;

use std::collections::BTreeMap;

use crate::db::exact_sum::{self, join, SumParts};
use crate::db::models::CostEvent;
use crate::db::rollup_labels::{window_labels, LabelRow};
use crate::db::rollup_top;
use crate::db::rollups::{
    self, sat, Spec, Sums, WindowRow, KEY_MODEL, MODEL, SOURCE, TAG_KEY, TAG_MODEL, TOOL, TOTAL,
};
use crate::db::schema::{api_keys, cost_event_tags, cost_events};
use crate::db::{DbResult, Pool};
use crate::util::pagination::After;
use crate::with_conn;

/// Milliseconds in a UTC day: day buckets are `created_at / DAY_MS`.
pub const DAY_MS: i64 = 86_400_000;

const COST: &str = "cost_events.cost_microdollars";
const ROW_COUNT: &str = "COUNT(*)";

/// The partial sums of `cost_events.<column>` (see [`exact_sum::parts`]).
fn sum_of(column: &str) -> (SqlLiteral<BigInt>, SqlLiteral<BigInt>) {
    exact_sum::parts(&format!("cost_events.{column}"))
}

/// The partial sums of the events' cost.
fn cost_sum() -> (SqlLiteral<BigInt>, SqlLiteral<BigInt>) {
    exact_sum::parts(COST)
}

/// The filters of the list and export calls; every one narrows the set (AND).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EventFilter {
    pub request_id: Option<String>,
    /// Bare UUID of the API key.
    pub api_key_id: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub source: Option<String>,
    pub trace_id: Option<String>,
    pub session_id: Option<String>,
    pub budget_status: Option<String>,
    /// The event's customer identifier.
    pub customer_id: Option<String>,
    /// `(key, value)` pairs the event's tags must all contain.
    pub tags: Vec<(String, String)>,
}

/// The time window of an aggregate: events created at or after `since`, optionally
/// without the cancelled-stream estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub since: i64,
    pub exclude_estimated: bool,
}

/// What attribution groups events by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping<'a> {
    ApiKey,
    /// The value of this tag key.
    Tag(&'a str),
}

/// One attribution group, as a filter. `None` is the group of events without an API
/// key, or without the tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member<'a> {
    /// Bare API key UUID.
    ApiKey(Option<&'a str>),
    Tag {
        key: &'a str,
        value: Option<&'a str>,
    },
}

/// An event with the name of the API key it was recorded under.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub event: CostEvent,
    pub key_name: Option<String>,
}

/// Cost and event count of a set of events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub cost: i64,
    pub count: i64,
}

/// The events of one UTC day; `day` counts days since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayTotal {
    pub day: i64,
    pub cost: i64,
    pub count: i64,
}

/// Spend under one label (provider, source, trace, API key, model, tag value).
/// `label` is `None` for the group of events that lack it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelTotal {
    pub label: Option<String>,
    pub cost: i64,
    pub count: i64,
}

/// Spend and token usage of one provider's model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTotal {
    pub provider: String,
    pub model: String,
    pub cost: i64,
    pub count: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_input_tokens: i64,
    pub reasoning_tokens: i64,
}

/// Spend of one tool; durations are summed over the events that reported one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolTotal {
    pub name: String,
    pub cost: i64,
    pub count: i64,
    pub duration_sum: i64,
    pub duration_count: i64,
}

/// The sums of the events' `{ input, output, cached, reasoning }` cost breakdowns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BreakdownTotals {
    pub input: i64,
    pub output: i64,
    pub cached: i64,
    pub reasoning: i64,
}

impl BreakdownTotals {
    /// Adds one stored breakdown. Missing or non-integer parts count as zero, and so
    /// does text that is not a JSON object: a bad row must not fail the summary.
    pub fn add_stored(&mut self, stored: &str) {
        let Ok(serde_json::Value::Object(parts)) = serde_json::from_str::<serde_json::Value>(stored) else {
            return;
        };
        let part = |name: &str| parts.get(name).and_then(serde_json::Value::as_i64).unwrap_or(0);
        self.input = self.input.saturating_add(part("input"));
        self.output = self.output.saturating_add(part("output"));
        self.cached = self.cached.saturating_add(part("cached"));
        self.reasoning = self.reasoning.saturating_add(part("reasoning"));
    }
}

/// Everything the summary endpoint reports. The lists come unsorted except
/// `traces` (the costliest first, already cut to the requested number).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub totals: Totals,
    pub daily: Vec<DayTotal>,
    pub models: Vec<ModelTotal>,
    pub providers: Vec<LabelTotal>,
    /// Labelled by bare API key UUID.
    pub keys: Vec<LabelTotal>,
    pub tools: Vec<ToolTotal>,
    pub sources: Vec<LabelTotal>,
    pub traces: Vec<LabelTotal>,
    pub breakdown: BreakdownTotals,
}

/// One page of attribution groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Costliest first, at most the requested number. Labels are bare API key UUIDs
    /// or tag values; `None` is the "no key" group.
    pub groups: Vec<LabelTotal>,
    /// Groups in all, the "no key" group included.
    pub total_groups: i64,
    /// All events of the window.
    pub totals: Totals,
}

/// One attribution group in detail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttributionDetail {
    pub totals: Totals,
    /// Days with events, ascending.
    pub daily: Vec<DayTotal>,
    /// Labelled by model, unsorted.
    pub models: Vec<LabelTotal>,
}

/// Totals over all events of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionTotals {
    pub event_count: i64,
    pub cost: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub duration_ms: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
}

/// A session in the list of recent sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub session_id: String,
    pub event_count: i64,
    pub cost: i64,
    pub started_at: i64,
    pub ended_at: i64,
}

/// A decoded sessions cursor: sessions whose last event is strictly older than
/// `(ended_at, session_id)` come next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionsAfter {
    pub ended_at: i64,
    pub session_id: String,
}

/// Narrows a boxed query over `cost_events` (possibly joined) to `$filter`, its tag
/// filters from the `$skip`-th on (the first may drive the query instead, see
/// [`events_by_tag`]).
macro_rules! apply_filter {
    ($query:ident, $org_id:expr, $filter:expr, $skip:expr) => {
        if let Some(v) = &$filter.request_id {
            $query = $query.filter(cost_events::request_id.eq(v));
        }
        if let Some(v) = &$filter.api_key_id {
            $query = $query.filter(cost_events::api_key_id.eq(v));
        }
        if let Some(v) = &$filter.model {
            $query = $query.filter(cost_events::model.eq(v));
        }
        if let Some(v) = &$filter.provider {
            $query = $query.filter(cost_events::provider.eq(v));
        }
        if let Some(v) = &$filter.source {
            $query = $query.filter(cost_events::source.eq(v));
        }
        if let Some(v) = &$filter.trace_id {
            $query = $query.filter(cost_events::trace_id.eq(v));
        }
        if let Some(v) = &$filter.session_id {
            $query = $query.filter(cost_events::session_id.eq(v));
        }
        if let Some(v) = &$filter.budget_status {
            $query = $query.filter(cost_events::budget_status.eq(v));
        }
        if let Some(v) = &$filter.customer_id {
            $query = $query.filter(cost_events::customer_id.eq(v));
        }
        for (key, value) in $filter.tags.iter().skip($skip) {
            // Aliased: the query may walk `cost_event_tags` itself (`events_by_tag`).
            let tags = diesel::alias!(cost_event_tags as tag_filter);
            $query = $query.filter(
                cost_events::id.eq_any(
                    tags.filter(tags.field(cost_event_tags::org_id).eq($org_id))
                        .filter(tags.field(cost_event_tags::tag_key).eq(key))
                        .filter(tags.field(cost_event_tags::tag_value).eq(value))
                        .select(tags.field(cost_event_tags::event_id)),
                ),
            );
        }
    };
}

/// A query over `cost_events` joined with the name of each event's API key.
macro_rules! events_with_key_names {
    () => {
        cost_events::table
            .left_join(
                api_keys::table.on(api_keys::id
                    .nullable()
                    .eq(cost_events::api_key_id)
                    .and(api_keys::org_id.eq(cost_events::org_id))),
            )
            .select((CostEvent::as_select(), api_keys::name.nullable()))
    };
}

/// The events carrying tag `$key=$value`, walked newest first through the tag rows'
/// `(org_id, tag_key, tag_value, created_at, event_id)` index and joined with the
/// name of each event's API key. A tag row carries its event's `created_at`, so this
/// order is the list's `(created_at, id)` order; walking the tag index instead of
/// the organization's events reads only the tagged events, however rare the tag.
macro_rules! events_by_tag {
    ($org_id:expr, $key:expr, $value:expr) => {
        cost_event_tags::table
            .inner_join(cost_events::table.on(cost_events::id.eq(cost_event_tags::event_id)))
            .left_join(
                api_keys::table.on(api_keys::id
                    .nullable()
                    .eq(cost_events::api_key_id)
                    .and(api_keys::org_id.eq(cost_events::org_id))),
            )
            .filter(cost_event_tags::org_id.eq($org_id))
            .filter(cost_event_tags::tag_key.eq($key))
            .filter(cost_event_tags::tag_value.eq($value))
            .filter(cost_events::org_id.eq($org_id))
            .order((cost_event_tags::created_at.desc(), cost_event_tags::event_id.desc()))
            .select((CostEvent::as_select(), api_keys::name.nullable()))
    };
}

/// Up to `limit` events of an organization matching `filter` (newest first,
/// strictly after `after`), when the filter has a tag: [`events_by_tag`] on the
/// first, the others as filters.
async fn tagged_page(
    pool: &Pool,
    org_id: &str,
    filter: &EventFilter,
    (key, value): (&str, &str),
    after: Option<&After>,
    limit: i64,
) -> DbResult<Vec<EventRow>> {
    with_conn!(pool, read, |conn| {
        let mut query = events_by_tag!(org_id, key, value).limit(limit).into_boxed();
        apply_filter!(query, org_id, filter, 1);
        if let Some(a) = after {
            query = query.filter(cost_event_tags::created_at.lt(a.created_at).or(
                cost_event_tags::created_at.eq(a.created_at).and(cost_event_tags::event_id.lt(a.id.clone())),
            ));
        }
        Ok(event_rows(query.load(conn).await?))
    })
}

fn event_rows(rows: Vec<(CostEvent, Option<String>)>) -> Vec<EventRow> {
    rows.into_iter().map(|(event, key_name)| EventRow { event, key_name }).collect()
}

/// Up to `limit + 1` events of an organization matching `filter`, newest first,
/// strictly after `after` in that order (the extra row tells whether a next page
/// exists).
pub async fn list_page(
    pool: &Pool,
    org_id: &str,
    filter: &EventFilter,
    after: Option<&After>,
    limit: i64,
) -> DbResult<Vec<EventRow>> {
    if let Some((key, value)) = <[_]>::first(&filter.tags) {
        return tagged_page(pool, org_id, filter, (key, value), after, limit.saturating_add(1)).await;
    }
    with_conn!(pool, read, |conn| {
        let mut query = events_with_key_names!()
            .filter(cost_events::org_id.eq(org_id))
            .order((cost_events::created_at.desc(), cost_events::id.desc()))
            .limit(limit.saturating_add(1))
            .into_boxed();
        apply_filter!(query, org_id, filter, 0);
        if let Some(a) = after {
            query = query.filter(
                cost_events::created_at
                    .lt(a.created_at)
                    .or(cost_events::created_at.eq(a.created_at).and(cost_events::id.lt(a.id.clone()))),
            );
        }
        Ok(event_rows(query.load(conn).await?))
    })
}

/// Up to `max_rows` events of an organization matching `filter`, newest first.
pub async fn export(
    pool: &Pool,
    org_id: &str,
    filter: &EventFilter,
    max_rows: i64,
) -> DbResult<Vec<EventRow>> {
    if let Some((key, value)) = <[_]>::first(&filter.tags) {
        return tagged_page(pool, org_id, filter, (key, value), None, max_rows).await;
    }
    with_conn!(pool, read, |conn| {
        let mut query = events_with_key_names!()
            .filter(cost_events::org_id.eq(org_id))
            .order((cost_events::created_at.desc(), cost_events::id.desc()))
            .limit(max_rows)
            .into_boxed();
        apply_filter!(query, org_id, filter, 0);
        Ok(event_rows(query.load(conn).await?))
    })
}

/// One event of an organization, by bare UUID.
pub async fn find(pool: &Pool, org_id: &str, id: &str) -> DbResult<Option<EventRow>> {
    with_conn!(pool, read, |conn| {
        let row: Option<(CostEvent, Option<String>)> = events_with_key_names!()
            .filter(cost_events::org_id.eq(org_id))
            .filter(cost_events::id.eq(id))
            .first(conn)
            .await
            .optional()?;
        Ok(row.map(|(event, key_name)| EventRow { event, key_name }))
    })
}

/// The first `cap` events of a session, oldest first, and totals over all of them.
pub async fn session(
    pool: &Pool,
    org_id: &str,
    session_id: &str,
    cap: i64,
) -> DbResult<(SessionTotals, Vec<EventRow>)> {
    with_conn!(pool, read, |conn| {
        let events = events_with_key_names!()
            .filter(cost_events::org_id.eq(org_id))
            .filter(cost_events::session_id.eq(session_id))
            .order((cost_events::created_at.asc(), cost_events::id.asc()))
            .limit(cap)
            .load(conn)
            .await?;
        let (event_count, cost, input_tokens, output_tokens, duration_ms, started_at, ended_at) =
            cost_events::table
                .filter(cost_events::org_id.eq(org_id))
                .filter(cost_events::session_id.eq(session_id))
                .select((
                    sql::<BigInt>(ROW_COUNT),
                    cost_sum(),
                    sum_of("input_tokens"),
                    sum_of("output_tokens"),
                    sum_of("duration_ms"),
                    sql::<Nullable<BigInt>>("MIN(cost_events.created_at)"),
                    sql::<Nullable<BigInt>>("MAX(cost_events.created_at)"),
                ))
                .get_result::<(i64, SumParts, SumParts, SumParts, SumParts, Option<i64>, Option<i64>)>(conn)
                .await?;
        let totals = SessionTotals {
            event_count,
            cost: join(cost),
            input_tokens: join(input_tokens),
            output_tokens: join(output_tokens),
            duration_ms: join(duration_ms),
            started_at,
            ended_at,
        };
        Ok((totals, event_rows(events)))
    })
}

/// Up to `limit + 1` sessions of an organization, the most recently active first,
/// strictly after `after` in that order.
pub async fn list_sessions(
    pool: &Pool,
    org_id: &str,
    after: Option<&SessionsAfter>,
    limit: i64,
) -> DbResult<Vec<SessionRow>> {
    const ENDED_AT: &str = "MAX(cost_events.created_at)";
    with_conn!(pool, read, |conn| {
        let mut query = cost_events::table
            .group_by(cost_events::session_id)
            .select((
                cost_events::session_id,
                sql::<BigInt>(ROW_COUNT),
                cost_sum(),
                sql::<BigInt>("MIN(cost_events.created_at)"),
                sql::<BigInt>(ENDED_AT),
            ))
            .into_boxed()
            .filter(cost_events::org_id.eq(org_id))
            .filter(cost_events::session_id.is_not_null())
            .order((sql::<BigInt>(ENDED_AT).desc(), cost_events::session_id.desc()))
            .limit(limit.saturating_add(1));
        if let Some(a) = after {
            query = query.having(
                sql::<Bool>(&format!("{ENDED_AT} < "))
                    .bind::<BigInt, _>(a.ended_at)
                    .sql(&format!(" OR ({ENDED_AT} = "))
                    .bind::<BigInt, _>(a.ended_at)
                    .sql(" AND cost_events.session_id < ")
                    .bind::<Text, _>(a.session_id.clone())
                    .sql(")"),
            );
        }
        let rows: Vec<(Option<String>, i64, SumParts, i64, i64)> = query.load(conn).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(session_id, event_count, cost, started_at, ended_at)| {
                Some(SessionRow {
                    session_id: session_id?,
                    event_count,
                    cost: join(cost),
                    started_at,
                    ended_at,
                })
            })
            .collect())
    })
}

/// Spec of the rows of `dim` (no tag key, every label).
fn all_of(dim: &'static str) -> Spec<'static> {
    Spec { dim, name: Some(""), label1: None }
}

/// Adds up window rows by a key of each row.
fn fold<'r, K: Ord>(
    rows: impl Iterator<Item = &'r WindowRow>,
    key: impl Fn(&WindowRow) -> K,
) -> BTreeMap<K, Sums> {
    let mut out: BTreeMap<K, Sums> = BTreeMap::new();
    for r in rows {
        out.entry(key(r)).or_default().add(&r.sums);
    }
    out
}

/// [`fold`] of the label rows of one dimension.
fn label_fold<K: Ord>(rows: &[LabelRow], dim: &str, key: impl Fn(&LabelRow) -> K) -> BTreeMap<K, Sums> {
    let mut out: BTreeMap<K, Sums> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.dim == dim) {
        out.entry(key(r)).or_default().add(&r.sums);
    }
    out
}

fn of_dim<'r>(rows: &'r [WindowRow], dim: &'static str) -> impl Iterator<Item = &'r WindowRow> + 'r {
    rows.iter().filter(move |r| r.dim == dim)
}

fn totals_of(s: &Sums) -> Totals {
    Totals { cost: sat(s.cost), count: sat(s.count) }
}

fn label_total(label: Option<String>, s: &Sums) -> LabelTotal {
    LabelTotal { label, cost: sat(s.cost), count: sat(s.count) }
}

fn day_list(days: BTreeMap<i64, Sums>) -> Vec<DayTotal> {
    days.into_iter()
        .filter(|(_, s)| s.count != 0)
        .map(|(day, s)| DayTotal { day, cost: sat(s.cost), count: sat(s.count) })
        .collect()
}

/// Costliest first, ties by label (byte order, `None` first).
fn by_cost_desc(groups: &mut [LabelTotal]) {
    groups.sort_by(|a, b| b.cost.cmp(&a.cost).then_with(|| a.label.cmp(&b.label)));
}

/// The spend summary of an organization's events in `window`; `top_traces` caps
/// the trace list. From the rollups: the total per day ([`rollups::window`]), every
/// other list one total per label ([`window_labels`], summed by the database).
pub async fn summary(pool: &Pool, org_id: &str, window: Window, top_traces: i64) -> DbResult<Summary> {
    let days =
        rollups::window(pool, org_id, window.since, window.exclude_estimated, &[all_of(TOTAL)]).await?;
    let total = fold(days.iter(), |_| ()).remove(&()).unwrap_or_default();
    let specs = [MODEL, KEY_MODEL, SOURCE, TOOL].map(all_of);
    let rows = window_labels(pool, org_id, (window.since, None), window.exclude_estimated, &specs).await?;
    let models = label_fold(&rows, MODEL, |r| (r.label1.clone(), r.label2.clone()))
        .into_iter()
        .map(|((provider, model), s)| ModelTotal {
            provider,
            model,
            cost: sat(s.cost),
            count: sat(s.count),
            input_tokens: sat(s.input),
            output_tokens: sat(s.output),
            cached_input_tokens: sat(s.cached),
            reasoning_tokens: sat(s.reasoning),
        })
        .collect();
    let labelled = |dim, none_if_empty: bool| -> Vec<LabelTotal> {
        label_fold(&rows, dim, |r| r.label1.clone())
            .into_iter()
            .map(|(l, s)| label_total(if none_if_empty && l.is_empty() { None } else { Some(l) }, &s))
            .collect()
    };
    let providers = label_fold(&rows, MODEL, |r| r.label1.clone())
        .into_iter()
        .map(|(l, s)| label_total(Some(l), &s))
        .collect();
    let tools = label_fold(&rows, TOOL, |r| r.label1.clone())
        .into_iter()
        .map(|(name, s)| ToolTotal {
            name,
            cost: sat(s.cost),
            count: sat(s.count),
            duration_sum: sat(s.duration),
            duration_count: sat(s.duration_count),
        })
        .collect();
    let top = usize::try_from(top_traces).unwrap_or(0);
    let traces = rollup_top::top_traces(pool, org_id, (window.since, window.exclude_estimated), top)
        .await?
        .into_iter()
        .map(|(label, s)| label_total(Some(label), &s))
        .collect();
    let [input, output, cached, reasoning] = total.breakdown.map(sat);
    Ok(Summary {
        totals: totals_of(&total),
        daily: day_list(fold(days.iter(), |r| r.day)),
        models,
        providers,
        keys: labelled(KEY_MODEL, true),
        tools,
        sources: labelled(SOURCE, false),
        traces,
        breakdown: BreakdownTotals { input, output, cached, reasoning },
    })
}

/// The `limit` costliest attribution groups of an organization's events in
/// `window`, how many groups there are, and the window's totals. From the rollups:
/// per API key (`key_model`, the "no key" group is the key `""`) or per value of the
/// tag (`tag_model`; the "no tag" group is the total minus every tagged group).
pub async fn attribution(
    pool: &Pool,
    org_id: &str,
    window: Window,
    grouping: Grouping<'_>,
    limit: i64,
) -> DbResult<Attribution> {
    let (group_spec, tagged) = match grouping {
        Grouping::ApiKey => (all_of(KEY_MODEL), false),
        Grouping::Tag(key) => (Spec { dim: TAG_MODEL, name: Some(key), label1: None }, true),
    };
    let specs = [all_of(TOTAL), group_spec];
    let rows = window_labels(pool, org_id, (window.since, None), window.exclude_estimated, &specs).await?;
    let total = label_fold(&rows, TOTAL, |_| ()).remove(&()).unwrap_or_default();
    let mut by_label = label_fold(&rows, group_spec.dim, |r| r.label1.clone());
    let unkeyed = if tagged {
        let mut rest = total;
        for s in by_label.values() {
            rest.sub(s);
        }
        rest
    } else {
        by_label.remove("").unwrap_or_default()
    };
    let keyed_groups = i64::try_from(by_label.len()).unwrap_or(i64::MAX);
    let mut groups: Vec<LabelTotal> = by_label.into_iter().map(|(l, s)| label_total(Some(l), &s)).collect();
    by_cost_desc(&mut groups);
    groups.truncate(usize::try_from(limit).unwrap_or(0));

    let mut total_groups = keyed_groups;
    if unkeyed.count > 0 {
        total_groups = total_groups.saturating_add(1);
        groups.push(label_total(None, &unkeyed));
        // Stable: among equal costs the keyed groups keep their order and the
        // "no key" group comes last.
        groups.sort_by_key(|g| std::cmp::Reverse(g.cost));
        groups.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(Attribution { groups, total_groups, totals: totals_of(&total) })
}

/// Totals, days and models of one attribution group's events in `window`, from the
/// rollups (the "no tag" group is every model's rows minus the tagged ones).
pub async fn attribution_detail(
    pool: &Pool,
    org_id: &str,
    window: Window,
    member: Member<'_>,
) -> DbResult<AttributionDetail> {
    let cells: BTreeMap<(i64, String), Sums> = match member {
        Member::ApiKey(id) => {
            let spec = Spec { dim: KEY_MODEL, name: Some(""), label1: Some(id.unwrap_or("")) };
            let rows = rollups::window(pool, org_id, window.since, window.exclude_estimated, &[spec]).await?;
            fold(rows.iter(), |r| (r.day, r.label2.clone()))
        }
        Member::Tag { key, value: Some(value) } => {
            let spec = Spec { dim: TAG_MODEL, name: Some(key), label1: Some(value) };
            let rows = rollups::window(pool, org_id, window.since, window.exclude_estimated, &[spec]).await?;
            fold(rows.iter(), |r| (r.day, r.label2.clone()))
        }
        Member::Tag { key, value: None } => {
            let specs = [all_of(MODEL), Spec { dim: TAG_MODEL, name: Some(key), label1: None }];
            let rows = rollups::window(pool, org_id, window.since, window.exclude_estimated, &specs).await?;
            let mut cells = fold(of_dim(&rows, MODEL), |r| (r.day, r.label2.clone()));
            for r in of_dim(&rows, TAG_MODEL) {
                cells.entry((r.day, r.label2.clone())).or_default().sub(&r.sums);
            }
            cells
        }
    };
    let cells: Vec<((i64, String), Sums)> = cells.into_iter().filter(|(_, s)| s.count != 0).collect();
    let mut total = Sums::default();
    let mut days: BTreeMap<i64, Sums> = BTreeMap::new();
    let mut models: BTreeMap<String, Sums> = BTreeMap::new();
    for ((day, model), s) in &cells {
        total.add(s);
        days.entry(*day).or_default().add(s);
        models.entry(model.clone()).or_default().add(s);
    }
    Ok(AttributionDetail {
        totals: totals_of(&total),
        daily: day_list(days),
        models: models.into_iter().map(|(m, s)| label_total(Some(m), &s)).collect(),
    })
}

/// Up to `max` distinct tag keys an organization's events carried since `since`,
/// internal `_svc_` keys excluded, in byte order; from the `tag_key` rollups.
pub async fn recent_tag_keys(pool: &Pool, org_id: &str, since: i64, max: i64) -> DbResult<Vec<String>> {
    let spec = Spec { dim: TAG_KEY, name: None, label1: None };
    let rows = window_labels(pool, org_id, (since, None), false, &[spec]).await?;
    let keys: std::collections::BTreeSet<String> =
        rows.into_iter().filter(|r| !r.name.starts_with("_svc_")).map(|r| r.name).collect();
    Ok(keys.into_iter().take(usize::try_from(max).unwrap_or(0)).collect())
}

/// Names of an organization's API keys (revoked ones included), by bare UUID.
pub async fn key_names(pool: &Pool, org_id: &str, ids: &[String]) -> DbResult<Vec<(String, String)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    with_conn!(pool, read, |conn| {
        Ok(api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::id.eq_any(ids))
            .select((api_keys::id, api_keys::name))
            .load(conn)
            .await?)
    })
}

/// The bodies recorded with one event of the organization.
pub async fn find_bodies(
    pool: &Pool,
    org_id: &str,
    id: &str,
) -> DbResult<Option<crate::db::models::CostEventBody>> {
    use crate::db::schema::cost_event_bodies;
    crate::with_conn!(pool, read, |conn| {
        let row = cost_event_bodies::table
            .filter(cost_event_bodies::org_id.eq(org_id))
            .filter(cost_event_bodies::event_id.eq(id))
            .select(crate::db::models::CostEventBody::as_select())
            .first(conn)
            .await
            .optional()?;
        Ok(row)
    })
}

/// The id and creation time of the event recorded for (provider, request id), if any.
pub async fn find_by_request(
    pool: &Pool,
    org_id: &str,
    provider: &str,
    request_id: &str,
) -> DbResult<Option<(String, i64)>> {
    crate::with_conn!(pool, read, |conn| {
        let row = cost_events::table
            .filter(cost_events::org_id.eq(org_id))
            .filter(cost_events::provider.eq(provider))
            .filter(cost_events::request_id.eq(request_id))
            .select((cost_events::id, cost_events::created_at))
            .first(conn)
            .await
            .optional()?;
        Ok(row)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breakdowns_add_up_and_skip_bad_rows() {
        let mut totals = BreakdownTotals::default();
        totals.add_stored(r#"{"input":100,"output":250,"cached":5}"#);
        totals.add_stored(r#"{"input":1,"output":2,"cached":3,"reasoning":40}"#);
        totals.add_stored("not json");
        totals.add_stored("[1,2]");
        totals.add_stored(r#"{"input":"12","output":-2}"#);
        assert_eq!(totals, BreakdownTotals { input: 101, output: 250, cached: 8, reasoning: 40 });
    }
}
