//! Cost events, read side: the filtered list and export, single events, sessions,
//! the spend summary, attribution and the recent tag keys. The writer lives in
//! [`super::cost_events`].
//!
//! Aggregates are computed by the database with portable SQL: `GROUP BY` with
//! `SUM`/`COUNT`, and UTC days as `created_at / 86400000` (integer division on both
//! backends). Every sum is exact and cannot fail on overflow: it is loaded as two
//! partial sums and joined in Rust (see [`super::exact_sum`]).
//! Column references inside those SQL fragments are always table-qualified, because
//! some queries join `cost_event_tags`, which shares `org_id` and `created_at`.
//!
//! The one aggregate done in Rust is the cost breakdown: it lives in a JSON text
//! column, and JSON extraction is spelled differently by the two backends.

use diesel::dsl::sql;
use diesel::expression::SqlLiteral;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::RunQueryDsl;

use crate::db::exact_sum::{self, join, SumParts};
use crate::db::models::CostEvent;
use crate::db::schema::{api_keys, cost_event_tags, cost_events};
use crate::db::{DbResult, Pool};
use crate::util::pagination::After;
use crate::with_conn;

/// Milliseconds in a UTC day: day buckets are `created_at / DAY_MS`.
pub const DAY_MS: i64 = 86_400_000;

const COST: &str = "cost_events.cost_microdollars";
const ROW_COUNT: &str = "COUNT(*)";
const DAY_BUCKET: &str = "(cost_events.created_at / 86400000)";
/// Tool events are named by their tool, falling back to the model for tool events
/// that did not report one.
const TOOL_LABEL: &str = "COALESCE(cost_events.tool_name, cost_events.model)";
const IS_TOOL_EVENT: &str = "(cost_events.event_type = 'tool' OR cost_events.tool_name IS NOT NULL)";

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
#[derive(Debug, Clone, Default)]
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
#[derive(Debug, Clone, Default)]
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
#[derive(Debug, Clone, Default)]
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

/// Narrows a boxed query over `cost_events` (possibly joined) to `$filter`.
macro_rules! apply_filter {
    ($query:ident, $org_id:expr, $filter:expr) => {
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
        for (key, value) in &$filter.tags {
            $query = $query.filter(
                cost_events::id.eq_any(
                    cost_event_tags::table
                        .filter(cost_event_tags::org_id.eq($org_id))
                        .filter(cost_event_tags::tag_key.eq(key))
                        .filter(cost_event_tags::tag_value.eq(value))
                        .select(cost_event_tags::event_id),
                ),
            );
        }
    };
}

/// Narrows a boxed query over `cost_events` (possibly joined) to an organization's
/// events of `$window`.
macro_rules! apply_window {
    ($query:ident, $org_id:expr, $window:expr) => {
        $query =
            $query.filter(cost_events::org_id.eq($org_id)).filter(cost_events::created_at.ge($window.since));
        if $window.exclude_estimated {
            $query = $query.filter(cost_events::estimated.eq(false));
        }
    };
}

/// Narrows a boxed query over `cost_events` to one attribution group.
macro_rules! apply_member {
    ($query:ident, $org_id:expr, $member:expr) => {
        match $member {
            Member::ApiKey(Some(id)) => $query = $query.filter(cost_events::api_key_id.eq(id)),
            Member::ApiKey(None) => $query = $query.filter(cost_events::api_key_id.is_null()),
            Member::Tag { key, value: Some(value) } => {
                $query = $query.filter(
                    cost_events::id.eq_any(
                        cost_event_tags::table
                            .filter(cost_event_tags::org_id.eq($org_id))
                            .filter(cost_event_tags::tag_key.eq(key))
                            .filter(cost_event_tags::tag_value.eq(value))
                            .select(cost_event_tags::event_id),
                    ),
                )
            }
            // NOT IN is safe here: `event_id` is never NULL.
            Member::Tag { key, value: None } => {
                $query = $query.filter(
                    cost_events::id.ne_all(
                        cost_event_tags::table
                            .filter(cost_event_tags::org_id.eq($org_id))
                            .filter(cost_event_tags::tag_key.eq(key))
                            .select(cost_event_tags::event_id),
                    ),
                )
            }
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

fn event_rows(rows: Vec<(CostEvent, Option<String>)>) -> Vec<EventRow> {
    rows.into_iter().map(|(event, key_name)| EventRow { event, key_name }).collect()
}

fn label_totals(rows: Vec<(Option<String>, SumParts, i64)>) -> Vec<LabelTotal> {
    rows.into_iter().map(|(label, cost, count)| LabelTotal { label, cost: join(cost), count }).collect()
}

fn day_totals(rows: Vec<(i64, SumParts, i64)>) -> Vec<DayTotal> {
    let mut days: Vec<DayTotal> =
        rows.into_iter().map(|(day, cost, count)| DayTotal { day, cost: join(cost), count }).collect();
    days.sort_by_key(|d| d.day);
    days
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
    with_conn!(pool, read, |conn| {
        let mut query = events_with_key_names!()
            .filter(cost_events::org_id.eq(org_id))
            .order((cost_events::created_at.desc(), cost_events::id.desc()))
            .limit(limit.saturating_add(1))
            .into_boxed();
        apply_filter!(query, org_id, filter);
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
    with_conn!(pool, read, |conn| {
        let mut query = events_with_key_names!()
            .filter(cost_events::org_id.eq(org_id))
            .order((cost_events::created_at.desc(), cost_events::id.desc()))
            .limit(max_rows)
            .into_boxed();
        apply_filter!(query, org_id, filter);
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

/// The spend summary of an organization's events in `window`; `top_traces` caps
/// the trace list.
pub async fn summary(pool: &Pool, org_id: &str, window: Window, top_traces: i64) -> DbResult<Summary> {
    with_conn!(pool, read, |conn| {
        let mut totals_query = cost_events::table.select((cost_sum(), sql::<BigInt>(ROW_COUNT))).into_boxed();
        apply_window!(totals_query, org_id, window);
        let (cost, count): (SumParts, i64) = totals_query.get_result(conn).await?;
        let cost = join(cost);

        let mut daily_query = cost_events::table
            .group_by(sql::<BigInt>(DAY_BUCKET))
            .select((sql::<BigInt>(DAY_BUCKET), cost_sum(), sql::<BigInt>(ROW_COUNT)))
            .into_boxed();
        apply_window!(daily_query, org_id, window);
        let daily = day_totals(daily_query.load(conn).await?);

        let mut models_query = cost_events::table
            .group_by((cost_events::provider, cost_events::model))
            .select((
                cost_events::provider,
                cost_events::model,
                cost_sum(),
                sql::<BigInt>(ROW_COUNT),
                sum_of("input_tokens"),
                sum_of("output_tokens"),
                sum_of("cached_input_tokens"),
                sum_of("reasoning_tokens"),
            ))
            .into_boxed();
        apply_window!(models_query, org_id, window);
        let models = models_query
            .load::<(String, String, SumParts, i64, SumParts, SumParts, SumParts, SumParts)>(conn)
            .await?
            .into_iter()
            .map(|(provider, model, cost, count, input, output, cached, reasoning)| ModelTotal {
                provider,
                model,
                cost: join(cost),
                count,
                input_tokens: join(input),
                output_tokens: join(output),
                cached_input_tokens: join(cached),
                reasoning_tokens: join(reasoning),
            })
            .collect();

        let mut providers_query = cost_events::table
            .group_by(cost_events::provider)
            .select((cost_events::provider.nullable(), cost_sum(), sql::<BigInt>(ROW_COUNT)))
            .into_boxed();
        apply_window!(providers_query, org_id, window);
        let providers = label_totals(providers_query.load(conn).await?);

        let mut keys_query = cost_events::table
            .group_by(cost_events::api_key_id)
            .select((cost_events::api_key_id, cost_sum(), sql::<BigInt>(ROW_COUNT)))
            .into_boxed();
        apply_window!(keys_query, org_id, window);
        let keys = label_totals(keys_query.load(conn).await?);

        let mut tools_query = cost_events::table
            .group_by(sql::<Text>(TOOL_LABEL))
            .select((
                sql::<Text>(TOOL_LABEL),
                cost_sum(),
                sql::<BigInt>(ROW_COUNT),
                sum_of("duration_ms"),
                sql::<BigInt>("COUNT(cost_events.duration_ms)"),
            ))
            .into_boxed()
            .filter(sql::<Bool>(IS_TOOL_EVENT));
        apply_window!(tools_query, org_id, window);
        let tools = tools_query
            .load::<(String, SumParts, i64, SumParts, i64)>(conn)
            .await?
            .into_iter()
            .map(|(name, cost, count, duration_sum, duration_count)| ToolTotal {
                name,
                cost: join(cost),
                count,
                duration_sum: join(duration_sum),
                duration_count,
            })
            .collect();

        let mut sources_query = cost_events::table
            .group_by(cost_events::source)
            .select((cost_events::source.nullable(), cost_sum(), sql::<BigInt>(ROW_COUNT)))
            .into_boxed();
        apply_window!(sources_query, org_id, window);
        let sources = label_totals(sources_query.load(conn).await?);

        let mut traces_query = cost_events::table
            .group_by(cost_events::trace_id)
            .select((cost_events::trace_id, cost_sum(), sql::<BigInt>(ROW_COUNT)))
            .into_boxed()
            .filter(cost_events::trace_id.is_not_null())
            .order((exact_sum::order_key(COST).desc(), cost_events::trace_id.asc()))
            .limit(top_traces);
        apply_window!(traces_query, org_id, window);
        let traces = label_totals(traces_query.load(conn).await?);

        let mut breakdown_query = cost_events::table
            .select(cost_events::cost_breakdown.assume_not_null())
            .filter(cost_events::cost_breakdown.is_not_null())
            .into_boxed();
        apply_window!(breakdown_query, org_id, window);
        let mut breakdown = BreakdownTotals::default();
        for stored in breakdown_query.load::<String>(conn).await? {
            breakdown.add_stored(&stored);
        }

        Ok(Summary {
            totals: Totals { cost, count },
            daily,
            models,
            providers,
            keys,
            tools,
            sources,
            traces,
            breakdown,
        })
    })
}

/// The `limit` costliest attribution groups of an organization's events in
/// `window`, how many groups there are, and the window's totals.
///
/// The keyed groups come from the database already ordered and cut; the "no key"
/// group (events without an API key, or without the tag) is counted separately and
/// merged in, so the cut stays in SQL.
pub async fn attribution(
    pool: &Pool,
    org_id: &str,
    window: Window,
    grouping: Grouping<'_>,
    limit: i64,
) -> DbResult<Attribution> {
    with_conn!(pool, read, |conn| {
        let mut totals_query = cost_events::table.select((cost_sum(), sql::<BigInt>(ROW_COUNT))).into_boxed();
        apply_window!(totals_query, org_id, window);
        let (cost, count): (SumParts, i64) = totals_query.get_result(conn).await?;
        let cost = join(cost);

        let (mut groups, keyed_groups, unkeyed) = match grouping {
            Grouping::ApiKey => {
                let mut top = cost_events::table
                    .group_by(cost_events::api_key_id)
                    .select((cost_events::api_key_id, cost_sum(), sql::<BigInt>(ROW_COUNT)))
                    .into_boxed()
                    .filter(cost_events::api_key_id.is_not_null())
                    .order((exact_sum::order_key(COST).desc(), cost_events::api_key_id.asc()))
                    .limit(limit);
                apply_window!(top, org_id, window);
                let groups = label_totals(top.load(conn).await?);

                let mut distinct = cost_events::table
                    .select(sql::<BigInt>("COUNT(DISTINCT cost_events.api_key_id)"))
                    .into_boxed();
                apply_window!(distinct, org_id, window);
                let keyed_groups: i64 = distinct.get_result(conn).await?;

                let mut none = cost_events::table.select((cost_sum(), sql::<BigInt>(ROW_COUNT))).into_boxed();
                apply_window!(none, org_id, window);
                apply_member!(none, org_id, Member::ApiKey(None));
                let unkeyed: (SumParts, i64) = none.get_result(conn).await?;
                (groups, keyed_groups, unkeyed)
            }
            Grouping::Tag(key) => {
                let mut top = cost_events::table
                    .inner_join(cost_event_tags::table.on(cost_event_tags::event_id.eq(cost_events::id)))
                    .group_by(cost_event_tags::tag_value)
                    .select((cost_event_tags::tag_value.nullable(), cost_sum(), sql::<BigInt>(ROW_COUNT)))
                    .into_boxed()
                    .filter(cost_event_tags::tag_key.eq(key))
                    .order((exact_sum::order_key(COST).desc(), cost_event_tags::tag_value.asc()))
                    .limit(limit);
                apply_window!(top, org_id, window);
                let groups = label_totals(top.load(conn).await?);

                let mut distinct = cost_events::table
                    .inner_join(cost_event_tags::table.on(cost_event_tags::event_id.eq(cost_events::id)))
                    .select(sql::<BigInt>("COUNT(DISTINCT cost_event_tags.tag_value)"))
                    .into_boxed()
                    .filter(cost_event_tags::tag_key.eq(key));
                apply_window!(distinct, org_id, window);
                let keyed_groups: i64 = distinct.get_result(conn).await?;

                let mut none = cost_events::table.select((cost_sum(), sql::<BigInt>(ROW_COUNT))).into_boxed();
                apply_window!(none, org_id, window);
                apply_member!(none, org_id, Member::Tag { key, value: None });
                let unkeyed: (SumParts, i64) = none.get_result(conn).await?;
                (groups, keyed_groups, unkeyed)
            }
        };

        let (unkeyed_cost, unkeyed_count) = (join(unkeyed.0), unkeyed.1);
        let mut total_groups = keyed_groups;
        if unkeyed_count > 0 {
            total_groups = total_groups.saturating_add(1);
            groups.push(LabelTotal { label: None, cost: unkeyed_cost, count: unkeyed_count });
            // Stable: among equal costs the keyed groups keep their SQL order and the
            // "no key" group comes last.
            groups.sort_by_key(|g| std::cmp::Reverse(g.cost));
            groups.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        Ok(Attribution { groups, total_groups, totals: Totals { cost, count } })
    })
}

/// Totals, days and models of one attribution group's events in `window`.
pub async fn attribution_detail(
    pool: &Pool,
    org_id: &str,
    window: Window,
    member: Member<'_>,
) -> DbResult<AttributionDetail> {
    with_conn!(pool, read, |conn| {
        let mut totals_query = cost_events::table.select((cost_sum(), sql::<BigInt>(ROW_COUNT))).into_boxed();
        apply_window!(totals_query, org_id, window);
        apply_member!(totals_query, org_id, member);
        let (cost, count): (SumParts, i64) = totals_query.get_result(conn).await?;
        let cost = join(cost);

        let mut daily_query = cost_events::table
            .group_by(sql::<BigInt>(DAY_BUCKET))
            .select((sql::<BigInt>(DAY_BUCKET), cost_sum(), sql::<BigInt>(ROW_COUNT)))
            .into_boxed();
        apply_window!(daily_query, org_id, window);
        apply_member!(daily_query, org_id, member);
        let daily = day_totals(daily_query.load(conn).await?);

        let mut models_query = cost_events::table
            .group_by(cost_events::model)
            .select((cost_events::model.nullable(), cost_sum(), sql::<BigInt>(ROW_COUNT)))
            .into_boxed();
        apply_window!(models_query, org_id, window);
        apply_member!(models_query, org_id, member);
        let models = label_totals(models_query.load(conn).await?);

        Ok(AttributionDetail { totals: Totals { cost, count }, daily, models })
    })
}

/// Up to `max` distinct tag keys an organization's events carried since `since`,
/// internal `_svc_` keys excluded, in the database's text order (the caller sorts
/// them byte-wise, which PostgreSQL collations need not follow).
pub async fn recent_tag_keys(pool: &Pool, org_id: &str, since: i64, max: i64) -> DbResult<Vec<String>> {
    with_conn!(pool, read, |conn| {
        Ok(cost_event_tags::table
            .filter(cost_event_tags::org_id.eq(org_id))
            .filter(cost_event_tags::created_at.ge(since))
            // `substr` rather than LIKE: SQLite's LIKE ignores case and `_` is a wildcard.
            .filter(sql::<Bool>("substr(cost_event_tags.tag_key, 1, 5) <> '_svc_'"))
            .select(cost_event_tags::tag_key)
            .distinct()
            .order(cost_event_tags::tag_key.asc())
            .limit(max)
            .load(conn)
            .await?)
    })
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
