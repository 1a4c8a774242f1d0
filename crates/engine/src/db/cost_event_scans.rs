//! The raw-event scans that answered summary, attribution and the recent tag keys
//! before the rollups (see [`super::rollups`]). The server no longer calls them: they
//! are the reference that the equivalence test (`tests/rollups.rs`) compares every
//! rollup-backed answer with, on random data and on both backends. The same holds
//! for the budget spend sources, the margins' costs, the unpriced models and the
//! plan cap's count, which scanned raw events until they moved onto the rollups too.

use std::collections::HashMap;

use diesel::dsl::{count_star, max, sql};
use diesel::expression::SqlLiteral;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Text};
use diesel_async::RunQueryDsl;

use crate::db::budgets::{SpendFilter, SpendSource};
use crate::db::cost_event_queries::{
    Attribution, AttributionDetail, BreakdownTotals, DayTotal, Grouping, LabelTotal, Member, ModelTotal,
    Summary, ToolTotal, Totals, Window,
};
use crate::db::exact_sum::{self, join, SumParts};
use crate::db::margins::CostCount;
use crate::db::schema::{cost_event_tags, cost_events};
use crate::db::unpriced::{UnpricedModel, MAX_LISTED, UNKNOWN_MODEL_TAG};
use crate::db::{DbResult, Pool};
use crate::with_conn;

const COST: &str = "cost_events.cost_microdollars";
const ROW_COUNT: &str = "COUNT(*)";
const DAY_BUCKET: &str = "(cost_events.created_at / 86400000)";
const TOOL_LABEL: &str = "COALESCE(cost_events.tool_name, cost_events.model)";
const IS_TOOL_EVENT: &str = "(cost_events.event_type = 'tool' OR cost_events.tool_name IS NOT NULL)";

fn sum_of(column: &str) -> (SqlLiteral<BigInt>, SqlLiteral<BigInt>) {
    exact_sum::parts(&format!("cost_events.{column}"))
}

fn cost_sum() -> (SqlLiteral<BigInt>, SqlLiteral<BigInt>) {
    exact_sum::parts(COST)
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

fn label_totals(rows: Vec<(Option<String>, SumParts, i64)>) -> Vec<LabelTotal> {
    rows.into_iter().map(|(label, cost, count)| LabelTotal { label, cost: join(cost), count }).collect()
}

fn day_totals(rows: Vec<(i64, SumParts, i64)>) -> Vec<DayTotal> {
    let mut days: Vec<DayTotal> =
        rows.into_iter().map(|(day, cost, count)| DayTotal { day, cost: join(cost), count }).collect();
    days.sort_by_key(|d| d.day);
    days
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

/// Budget spend sources (see [`crate::db::budgets::spend_sources`]): the
/// organization's events matching `filter` since `since`, grouped by API key,
/// provider and model, costliest first.
pub async fn spend_sources(
    pool: &Pool,
    org_id: &str,
    filter: &SpendFilter,
    since: Option<i64>,
) -> DbResult<Vec<SpendSource>> {
    let mut rows: Vec<SpendSource> = with_conn!(pool, read, |conn| {
        let mut query = cost_events::table
            .group_by((cost_events::api_key_id, cost_events::provider, cost_events::model))
            .select((
                cost_events::api_key_id,
                cost_events::provider,
                cost_events::model,
                cost_sum(),
                count_star(),
            ))
            .filter(cost_events::org_id.eq(org_id))
            .into_boxed();
        if let Some(since) = since {
            query = query.filter(cost_events::created_at.ge(since));
        }
        query = match filter {
            SpendFilter::User(id) => query.filter(cost_events::user_id.eq(id)),
            SpendFilter::ApiKey(id) => query.filter(cost_events::api_key_id.eq(id)),
            SpendFilter::Customer(id) => query.filter(cost_events::customer_id.eq(id)),
            SpendFilter::Tag { key, value } => query.filter(
                cost_events::id.eq_any(
                    cost_event_tags::table
                        .filter(cost_event_tags::org_id.eq(org_id))
                        .filter(cost_event_tags::tag_key.eq(key))
                        .filter(cost_event_tags::tag_value.eq(value))
                        .select(cost_event_tags::event_id),
                ),
            ),
        };
        query.load::<(Option<String>, String, String, SumParts, i64)>(conn).await
    })?
    .into_iter()
    .map(|(api_key_id, provider, model, cost, request_count)| SpendSource {
        api_key_id,
        provider,
        model,
        total_cost_microdollars: join(cost),
        request_count,
    })
    .collect();
    rows.sort_by(|a, b| {
        b.total_cost_microdollars
            .cmp(&a.total_cost_microdollars)
            .then_with(|| (&a.api_key_id, &a.provider, &a.model).cmp(&(&b.api_key_id, &b.provider, &b.model)))
    });
    Ok(rows)
}

/// Margins: cost and requests per value of tag `tag_key` among events created in
/// `[from, to)`.
pub async fn cost_by_tag_value(
    pool: &Pool,
    org_id: &str,
    tag_key: &str,
    from: i64,
    to: i64,
) -> DbResult<HashMap<String, CostCount>> {
    let rows: Vec<(String, SumParts, i64)> = with_conn!(pool, read, |conn| {
        Ok::<_, crate::db::DbError>(
            cost_event_tags::table
                .inner_join(cost_events::table.on(cost_events::id.eq(cost_event_tags::event_id)))
                .filter(cost_event_tags::org_id.eq(org_id))
                .filter(cost_event_tags::tag_key.eq(tag_key))
                .filter(cost_event_tags::created_at.ge(from))
                .filter(cost_event_tags::created_at.lt(to))
                .group_by(cost_event_tags::tag_value)
                .select((cost_event_tags::tag_value, cost_sum(), count_star()))
                .load(conn)
                .await?,
        )
    })?;
    Ok(rows.into_iter().map(|(v, cost, n)| (v, CostCount { cost: join(cost), requests: n })).collect())
}

/// Margins: cost and requests per model of the events tagged `tag_key=tag_value`
/// in `[from, to)`, by model (the database's text order).
pub async fn cost_by_model(
    pool: &Pool,
    org_id: &str,
    (tag_key, tag_value): (&str, &str),
    from: i64,
    to: i64,
) -> DbResult<Vec<(String, CostCount)>> {
    let rows: Vec<(String, SumParts, i64)> = with_conn!(pool, read, |conn| {
        Ok::<_, crate::db::DbError>(
            cost_event_tags::table
                .inner_join(cost_events::table.on(cost_events::id.eq(cost_event_tags::event_id)))
                .filter(cost_event_tags::org_id.eq(org_id))
                .filter(cost_event_tags::tag_key.eq(tag_key))
                .filter(cost_event_tags::tag_value.eq(tag_value))
                .filter(cost_event_tags::created_at.ge(from))
                .filter(cost_event_tags::created_at.lt(to))
                .group_by(cost_events::model)
                .select((cost_events::model, cost_sum(), count_star()))
                .order(cost_events::model)
                .load(conn)
                .await?,
        )
    })?;
    Ok(rows.into_iter().map(|(m, cost, n)| (m, CostCount { cost: join(cost), requests: n })).collect())
}

/// The unpriced models (see [`crate::db::unpriced::recent`]) since `since_ms`, in
/// `org_id` or every organization, most recently seen first, at most `MAX_LISTED`.
pub async fn unpriced_recent(
    pool: &Pool,
    org_id: Option<&str>,
    since_ms: i64,
) -> DbResult<Vec<UnpricedModel>> {
    let mut rows: Vec<UnpricedModel> = with_conn!(pool, read, |conn| {
        let query = cost_events::table
            .group_by((cost_events::provider, cost_events::model))
            .select((cost_events::provider, cost_events::model, count_star(), max(cost_events::created_at)))
            .filter(cost_events::created_at.ge(since_ms))
            .into_boxed();
        let tagged = cost_event_tags::table
            .filter(cost_event_tags::tag_key.eq(UNKNOWN_MODEL_TAG))
            .filter(cost_event_tags::created_at.ge(since_ms));
        let query =
            match org_id {
                Some(org_id) => query.filter(cost_events::org_id.eq(org_id)).filter(cost_events::id.eq_any(
                    tagged.filter(cost_event_tags::org_id.eq(org_id)).select(cost_event_tags::event_id),
                )),
                None => query.filter(cost_events::id.eq_any(tagged.select(cost_event_tags::event_id))),
            };
        query.load::<UnpricedModel>(conn).await
    })?;
    rows.sort_by(|a, b| {
        b.last_seen_ms
            .cmp(&a.last_seen_ms)
            .then_with(|| (&a.provider, &a.model).cmp(&(&b.provider, &b.model)))
    });
    rows.truncate(MAX_LISTED);
    Ok(rows)
}

/// The plan cap's seed: proxied, not refused requests of an organization since `since_ms`.
pub async fn governed_since(pool: &Pool, org_id: &str, since_ms: i64) -> DbResult<i64> {
    with_conn!(pool, read, |conn| {
        let n: i64 = cost_events::table
            .filter(cost_events::org_id.eq(org_id))
            .filter(cost_events::source.eq("proxy"))
            .filter(cost_events::budget_status.ne("denied"))
            .filter(cost_events::created_at.ge(since_ms))
            .count()
            .get_result(conn)
            .await?;
        Ok(n)
    })
}
