//! `GET /api/cost-events/daily`: spend per UTC day split into series (by model, API
//! key, tag value or customer), the costliest few each with its own days and the
//! rest as one "other" series, for the dashboard's stacked charts. The series and
//! "other" add up to the period's total of every day, the summary's `daily`.

use std::collections::{BTreeMap, BTreeSet};

use actix_web::{get, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};

use crate::cost_events::{hour_start, parse_flag, Period, NO_KEY};
use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::db::rollup_series::{daily_series, Days, SeriesBy, SeriesScope};
use spendgate_engine::db::rollups::{sat, Sums, DAY_MS};
use spendgate_engine::db::{self};
use spendgate_engine::error::{ApiError, Issues};
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::{ids, time, validate};

pub const DEFAULT_SERIES: usize = 6;
pub const MAX_SERIES: usize = 20;
/// Customers split out org-wide: the organization's bound and budgeted ones, at most this many.
pub const MAX_CUSTOMERS: usize = 100;

/// Query of `GET /api/cost-events/daily`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct DailyQuery {
    /// Required: `model`, `api_key`, `customer` or `tag`.
    by: Option<String>,
    /// The tag key whose values are the series; required with `by=tag`.
    tag_key: Option<String>,
    /// `7d`, `30d` or `90d` (default `30d`).
    period: Option<String>,
    /// Series listed apart, 1-20 (default 6); the rest is `other`.
    limit: Option<String>,
    /// `true` leaves out cancelled-stream estimates (default `false`).
    exclude_estimated: Option<String>,
    /// Only this key's spend (`svc_key_<uuid>`), split by `model`.
    api_key_id: Option<String>,
    /// Only this customer's spend, split by `model` or `api_key`.
    customer_id: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DayCost {
    /// `YYYY-MM-DD`, UTC.
    date: String,
    cost: i64,
    count: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpendSeries {
    /// The model, `svc_key_<uuid>` (or `(no key)`), the tag value or the customer id.
    key: String,
    /// The API key's name (by `api_key`); null otherwise.
    name: Option<String>,
    total_cost_microdollars: i64,
    request_count: i64,
    /// Days with events only, ascending.
    daily: Vec<DayCost>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OtherSeries {
    total_cost_microdollars: i64,
    request_count: i64,
    daily: Vec<DayCost>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DailyTotals {
    total_cost_microdollars: i64,
    total_requests: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DailySpend {
    period: &'static str,
    by: String,
    /// Costliest first, at most `limit`.
    series: Vec<SpendSeries>,
    /// How many values there were before `limit`.
    total_series: i64,
    /// Everything outside `series`: further values, and the events without one.
    other: OtherSeries,
    /// The total per day.
    daily: Vec<DayCost>,
    totals: DailyTotals,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DailySpendEnvelope {
    data: DailySpend,
}

/// What was asked, checked.
struct Ask {
    by: String,
    tag_key: Option<String>,
    period: Period,
    limit: usize,
    exclude_estimated: bool,
    api_key: Option<String>,
    customer: Option<String>,
}

fn parse(q: DailyQuery) -> Result<Ask, ApiError> {
    let mut issues = Issues::new();
    let by = q.by.unwrap_or_default();
    if !["model", "api_key", "customer", "tag"].contains(&by.as_str()) {
        issues.push(&["by"], "must be one of model, api_key, customer, tag");
    }
    if by == "tag" && !q.tag_key.as_deref().is_some_and(validate::is_tag_key) {
        issues.push(&["tagKey"], "is required with by=tag: 1-64 characters from [a-zA-Z0-9_-]");
    }
    let limit = match q.limit.as_deref() {
        None => Some(DEFAULT_SERIES),
        Some(raw) => raw.parse::<usize>().ok().filter(|n| (1..=MAX_SERIES).contains(n)),
    };
    if limit.is_none() {
        issues.push(&["limit"], "must be an integer from 1 to 20");
    }
    let api_key = q.api_key_id.as_deref().map(|raw| ids::parse_prefixed(ids::API_KEY, raw));
    if api_key.as_ref().is_some_and(Option::is_none) {
        issues.push(&["apiKeyId"], "must be an API key ID (svc_key_<uuid>)");
    }
    if q.customer_id.as_deref().is_some_and(|c| !validate::is_customer_id(c)) {
        issues.push(&["customerId"], "must be 1-256 characters from [a-zA-Z0-9._:-]");
    }
    match (&api_key, &q.customer_id) {
        (Some(_), Some(_)) => issues.push(&["customerId"], "cannot be combined with apiKeyId"),
        (Some(_), None) if by != "model" => issues.push(&["by"], "must be model with apiKeyId"),
        (None, Some(_)) if by != "model" && by != "api_key" => {
            issues.push(&["by"], "must be model or api_key with customerId");
        }
        _ => {}
    }
    let period = Period::parse(q.period.as_deref());
    if period.is_err() {
        issues.push(&["period"], "must be one of 7d, 30d, 90d");
    }
    let exclude_estimated = parse_flag(q.exclude_estimated.as_deref(), "excludeEstimated");
    if exclude_estimated.is_err() {
        issues.push(&["excludeEstimated"], "must be true or false");
    }
    issues.finish()?;
    Ok(Ask {
        by,
        tag_key: q.tag_key,
        period: period?,
        limit: limit.unwrap_or(DEFAULT_SERIES),
        exclude_estimated: exclude_estimated?,
        api_key: api_key.flatten(),
        customer: q.customer_id,
    })
}

fn days_of(days: &Days) -> Vec<DayCost> {
    days.iter()
        .filter(|(_, s)| s.count != 0)
        .map(|(day, s)| DayCost {
            date: time::date(day.saturating_mul(DAY_MS)),
            cost: sat(s.cost),
            count: sat(s.count),
        })
        .collect()
}

fn sum(days: &Days) -> Sums {
    let mut total = Sums::default();
    for s in days.values() {
        total.add(s);
    }
    total
}

/// The organization's customers: those bound and those with a budget.
async fn known_customers(state: &AppState, org_id: &str) -> Result<Vec<String>, ApiError> {
    let mut out: BTreeSet<String> =
        db::bindings::list(&state.pool, org_id).await?.into_iter().map(|b| b.customer_id).collect();
    let budgets = db::budgets::list(&state.pool, org_id).await?;
    out.extend(budgets.into_iter().filter(|b| b.entity_type == "customer").map(|b| b.entity_id));
    Ok(out.into_iter().take(MAX_CUSTOMERS).collect())
}

/// Spend per day split into the costliest series and the rest.
#[utoipa::path(get, path = "/api/cost-events/daily", tag = "cost-events", security(("session" = [])), params(DailyQuery),
    description = "Session, viewer and above. From the day and hour rollups. `by=customer` splits out the \
        organization's bound and budgeted customers (at most 100); with `apiKeyId` or `customerId` only that \
        entity's spend is split. `series` and `other` add up to `daily`, the summary's daily totals.",
    responses((status = 200, body = DailySpendEnvelope), (status = 400, description = "validation_error"),
        (status = 401, description = "authentication_required")))]
#[get("/cost-events/daily")]
pub async fn get_daily_spend(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let q = web::Query::<DailyQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::invalid_field(&[], format!("invalid query string: {e}")))?
        .into_inner();
    let ask = parse(q)?;
    let customers =
        if ask.by == "customer" { known_customers(&state, &auth.org.id).await? } else { Vec::new() };
    let by = match ask.by.as_str() {
        "model" => SeriesBy::Model,
        "api_key" => SeriesBy::ApiKey,
        "customer" => SeriesBy::Customers(&customers),
        _ => SeriesBy::Tag(ask.tag_key.as_deref().unwrap_or_default()),
    };
    let scope = match (&ask.api_key, &ask.customer) {
        (Some(key), _) => SeriesScope::ApiKey(key),
        (None, Some(customer)) => SeriesScope::Customer(customer),
        (None, None) => SeriesScope::Org,
    };
    let since = hour_start(time::now_ms().saturating_sub(ask.period.days().saturating_mul(DAY_MS)));
    let split = daily_series(&state.pool, &auth.org.id, (since, ask.exclude_estimated), scope, by)
        .await?
        .ok_or_else(|| ApiError::invalid_field(&["by"], "cannot split this scope that way"))?;
    let mut ranked: Vec<(String, Sums)> = split.values.iter().map(|(k, d)| (k.clone(), sum(d))).collect();
    ranked.retain(|(_, s)| s.count != 0);
    ranked.sort_by(|a, b| b.1.cost.cmp(&a.1.cost).then_with(|| a.0.cmp(&b.0)));
    let total_series = i64::try_from(ranked.len()).unwrap_or(i64::MAX);
    ranked.truncate(ask.limit);
    let names = if ask.by == "api_key" {
        let keys: Vec<String> = ranked.iter().map(|(k, _)| k.clone()).filter(|k| !k.is_empty()).collect();
        db::budgets::key_names(&state.pool, &auth.org.id, &keys).await?
    } else {
        Default::default()
    };
    // Each day's total less the listed series is "other".
    let mut other: Days = split.total.clone();
    let mut series = Vec::with_capacity(ranked.len());
    for (value, s) in &ranked {
        let days = &split.values[value];
        for (day, sums) in days {
            let o = other.entry(*day).or_default();
            o.cost -= sums.cost;
            o.count -= sums.count;
        }
        let (key, name) = match ask.by.as_str() {
            "api_key" if value.is_empty() => (NO_KEY.to_owned(), None),
            "api_key" => (ids::prefixed(ids::API_KEY, value), names.get(value).cloned()),
            _ => (value.clone(), None),
        };
        series.push(SpendSeries {
            key,
            name,
            total_cost_microdollars: sat(s.cost),
            request_count: sat(s.count),
            daily: days_of(days),
        });
    }
    let (all, rest) = (sum(&split.total), sum(&other));
    let daily: BTreeMap<i64, Sums> = split.total;
    Ok(HttpResponse::Ok().json(DailySpendEnvelope {
        data: DailySpend {
            period: ask.period.as_str(),
            by: ask.by,
            series,
            total_series,
            other: OtherSeries {
                total_cost_microdollars: sat(rest.cost),
                request_count: sat(rest.count),
                daily: days_of(&other),
            },
            daily: days_of(&daily),
            totals: DailyTotals { total_cost_microdollars: sat(all.cost), total_requests: sat(all.count) },
        },
    }))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_daily_spend);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(get_daily_spend))]
pub struct ApiDoc;

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(v: serde_json::Value) -> Result<Ask, ApiError> {
        parse(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn by_is_required_and_checked() {
        assert!(ask(serde_json::json!({})).is_err());
        assert!(ask(serde_json::json!({ "by": "trace" })).is_err());
        assert!(ask(serde_json::json!({ "by": "tag" })).is_err(), "tag needs its key");
        assert!(ask(serde_json::json!({ "by": "tag", "tagKey": "a b" })).is_err());
        let a = ask(serde_json::json!({ "by": "tag", "tagKey": "team" })).unwrap();
        assert_eq!((a.tag_key.as_deref(), a.limit, a.period.as_str()), (Some("team"), DEFAULT_SERIES, "30d"));
    }

    #[test]
    fn limits_and_scopes() {
        for bad in ["0", "21", "-1", "x"] {
            assert!(ask(serde_json::json!({ "by": "model", "limit": bad })).is_err(), "{bad}");
        }
        assert_eq!(ask(serde_json::json!({ "by": "model", "limit": "20" })).unwrap().limit, 20);
        let key = format!("svc_key_{}", uuid::Uuid::new_v4());
        assert!(ask(serde_json::json!({ "by": "model", "apiKeyId": key })).is_ok());
        assert!(ask(serde_json::json!({ "by": "api_key", "apiKeyId": key })).is_err());
        assert!(ask(serde_json::json!({ "by": "model", "apiKeyId": "svc_key_nope" })).is_err());
        assert!(ask(serde_json::json!({ "by": "api_key", "customerId": "acme" })).is_ok());
        assert!(ask(serde_json::json!({ "by": "customer", "customerId": "acme" })).is_err());
        assert!(ask(serde_json::json!({ "by": "model", "customerId": "a b" })).is_err());
        assert!(ask(serde_json::json!({ "by": "model", "customerId": "acme", "apiKeyId": key })).is_err());
    }
}
