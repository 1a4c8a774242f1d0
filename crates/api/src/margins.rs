//! `/api/margins*`: each mapped customer's revenue, cost, margin and health tier
//! per month, as JSON or CSV; one customer's detail; and what is not matched yet.
//! Paid tiers only. The arithmetic lives in `spendgate_engine::margins`.

use std::collections::{BTreeMap, HashMap};

use actix_web::http::header;
use actix_web::{get, web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Value};

use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::db::{margins as store, processor};
use spendgate_engine::error::ApiError;
use spendgate_engine::margins::health::{self, Tier};
use spendgate_engine::margins::months::Month;
use spendgate_engine::margins::report::{self, CustomerMargin};
use spendgate_engine::margins::sync::CUSTOMER_TAG;
use spendgate_engine::state::AppState;
use spendgate_engine::util::time;

use super::payprocessor::require_paid;

/// Months in a sparkline and in `revenueOverTime` (the requested one included).
const TRAILING_MONTHS: usize = 6;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MarginsQuery {
    /// `YYYY-MM`; default the current month (UTC).
    period: Option<String>,
    /// `json` (default) or `csv`.
    format: Option<String>,
}

fn period(raw: Option<&str>) -> Result<Month, ApiError> {
    match raw {
        None => Ok(Month::of_ms(time::now_ms())),
        Some(p) => Month::parse(p).ok_or_else(|| ApiError::invalid_field(&["period"], "must be YYYY-MM")),
    }
}

/// Each mapping's margins over the months ending with `month`, oldest first.
async fn history(state: &AppState, org_id: &str, month: Month) -> Result<Vec<Vec<CustomerMargin>>, ApiError> {
    let mut out = Vec::new();
    for m in month.trailing(TRAILING_MONTHS) {
        out.push(report::month_margins(&state.pool, org_id, m).await?);
    }
    Ok(out)
}

fn customer_view(cm: &CustomerMargin, series: &[(Month, Option<f64>)], month: Month) -> Value {
    let tier = cm.tier();
    let mut sparkline: Vec<Value> =
        series.iter().map(|(m, p)| json!({ "period": m.label(), "marginPercent": p })).collect();
    let percents: Vec<Option<f64>> = series.iter().map(|(_, p)| *p).collect();
    let projected = health::project_next(&percents);
    if let Some(p) = projected {
        sparkline.push(json!({ "period": month.next().label(), "marginPercent": p, "projected": true }));
    }
    json!({
        "processorCustomerId": cm.mapping.processor_customer_id,
        "customerName": cm.name,
        "avatarUrl": Value::Null,
        "tagValue": cm.mapping.tag_value,
        "revenueMicrodollars": cm.revenue,
        "costMicrodollars": cm.cost,
        "marginMicrodollars": cm.margin(),
        "marginPercent": cm.percent(),
        "healthTier": tier,
        "sparkline": sparkline,
        "projectedTierWorsening": projected.is_some_and(|p| tier.worsens_to(Tier::of_percent(p))),
        "budgetSuggestionMicrodollars": health::budget_suggestion(cm.revenue),
    })
}

/// Every mapped customer's margin in a month (viewer), JSON or CSV.
#[utoipa::path(get, path = "/api/margins", tag = "margins", params(MarginsQuery), security(("session" = [])),
    description = "Session, viewer and above; paid tiers (Free: 403 `forbidden`). Tiers: healthy >= 50 %, \
        moderate >= 20 %, at_risk >= 0 %, critical below. The sparkline holds six months and, with two or more \
        known points, a `projected: true` point for the next month on their least-squares line. \
        `budgetSuggestionMicrodollars` = floor(revenue / 2), the cost that keeps a 50 % margin. \
        CSV: `Content-Disposition: attachment; filename=margins-<YYYY-MM>.csv`.",
    responses((status = 200, description = "`{ data: { summary, customers } }` or CSV"),
        (status = 400, description = "validation_error")))]
#[get("/margins")]
pub async fn list_margins(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    require_paid(&auth)?;
    let q: MarginsQuery = super::orgs::query(&req)?;
    let month = period(q.period.as_deref())?;
    let csv = match q.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(_) => return Err(ApiError::invalid_field(&["format"], "must be json or csv")),
    };
    let months = history(&state, &auth.org.id, month).await?;
    let current = months.last().cloned().unwrap_or_default();
    if csv {
        return csv_response(&current, month);
    }
    let labels = month.trailing(TRAILING_MONTHS);
    let mut series: HashMap<&str, Vec<(Month, Option<f64>)>> = HashMap::new();
    for (m, rows) in labels.iter().zip(&months) {
        for cm in rows {
            series.entry(cm.mapping.id.as_str()).or_default().push((*m, cm.percent()));
        }
    }
    let customers: Vec<Value> = current
        .iter()
        .map(|cm| customer_view(cm, series.get(cm.mapping.id.as_str()).map_or(&[][..], Vec::as_slice), month))
        .collect();
    let summary = summary(&state, &auth.org.id, &current).await?;
    Ok(HttpResponse::Ok().json(json!({ "data": { "summary": summary, "customers": customers } })))
}

async fn summary(state: &AppState, org_id: &str, rows: &[CustomerMargin]) -> Result<Value, ApiError> {
    let sum = |f: fn(&CustomerMargin) -> i64| rows.iter().fold(0i64, |a, cm| a.saturating_add(f(cm)));
    let (revenue, cost) = (sum(|c| c.revenue), sum(|c| c.cost));
    let count = |t: Tier| rows.iter().filter(|cm| cm.tier() == t).count();
    let conn = processor::connection(&state.pool, org_id).await?;
    let skipped: BTreeMap<String, i64> =
        conn.as_ref().and_then(|c| serde_json::from_str(&c.skipped_currencies).ok()).unwrap_or_default();
    Ok(json!({
        "blendedMarginPercent": health::margin_percent(revenue, cost),
        "totalRevenueMicrodollars": revenue,
        "totalCostMicrodollars": cost,
        "criticalCount": count(Tier::Critical),
        "atRiskCount": count(Tier::AtRisk),
        "lastSyncAt": time::iso_opt(conn.as_ref().and_then(|c| c.last_sync_at)),
        "syncStatus": conn.as_ref().map_or("disconnected", |c| c.sync_status.as_str()),
        "skippedCurrencies": skipped,
    }))
}

/// Microdollars as exact dollars with six decimals (no float rounding).
fn dollars(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    format!("{sign}{}.{:06}", abs / 1_000_000, abs % 1_000_000)
}

fn csv_response(rows: &[CustomerMargin], month: Month) -> Result<HttpResponse, ApiError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let header_row = [
        "Customer",
        "Processor ID",
        "Tag Value",
        "Revenue ($)",
        "Cost ($)",
        "Margin (%)",
        "Margin ($)",
        "Health Tier",
    ];
    w.write_record(header_row).map_err(ApiError::internal)?;
    for cm in rows {
        w.write_record([
            cm.name.clone().unwrap_or_default(),
            cm.mapping.processor_customer_id.clone(),
            cm.mapping.tag_value.clone(),
            dollars(cm.revenue),
            dollars(cm.cost),
            cm.percent().map(|p| format!("{p:.2}")).unwrap_or_default(),
            dollars(cm.margin()),
            cm.tier().as_str().to_owned(),
        ])
        .map_err(ApiError::internal)?;
    }
    let body = w.into_inner().map_err(ApiError::internal)?;
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=margins-{}.csv", month.label()),
        ))
        .body(body))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PeriodQuery {
    /// `YYYY-MM`; default the current month (UTC).
    period: Option<String>,
}

/// Processor customers without a mapping, `customer` tag values without one, and
/// auto mappings awaiting confirmation (viewer).
#[utoipa::path(get, path = "/api/margins/unmatched", tag = "margins", security(("session" = [])),
    description = "Session, viewer and above; paid tiers. Totals are over all stored time. An auto mapping is \
        pending until an admin confirms it (POST it again as `manual`) or deletes it.",
    responses((status = 200, description = "`{ data: { unmatchedProcessorCustomers, unmappedTagValues, pendingAutoMatches, customerNames } }`")))]
#[get("/margins/unmatched")]
pub async fn unmatched_margins(
    state: web::Data<AppState>,
    auth: SessionAuth,
) -> Result<HttpResponse, ApiError> {
    require_paid(&auth)?;
    let org = &auth.org.id;
    let mappings = store::mappings(&state.pool, org).await?;
    let customers = processor::customers(&state.pool, org).await?;
    let revenue = processor::revenue_by_customer(&state.pool, org, None).await?;
    let costs = store::cost_by_tag_value(&state.pool, org, CUSTOMER_TAG, i64::MIN, i64::MAX).await?;
    let names: BTreeMap<&str, Option<&str>> =
        customers.iter().map(|c| (c.processor_customer_id.as_str(), c.name.as_deref())).collect();
    let unmatched: Vec<Value> = customers
        .iter()
        .filter(|c| !mappings.iter().any(|m| m.processor_customer_id == c.processor_customer_id))
        .map(|c| {
            json!({
                "processorCustomerId": c.processor_customer_id,
                "customerName": c.name,
                "customerEmail": c.email,
                "totalRevenueMicrodollars": revenue.get(&c.processor_customer_id).copied().unwrap_or(0),
            })
        })
        .collect();
    let mut unmapped: Vec<(&String, &store::CostCount)> = costs
        .iter()
        .filter(|(v, _)| !mappings.iter().any(|m| m.tag_key == CUSTOMER_TAG && &m.tag_value == *v))
        .collect();
    unmapped.sort_by(|a, b| b.1.cost.cmp(&a.1.cost).then(a.0.cmp(b.0)));
    let unmapped: Vec<Value> = unmapped
        .into_iter()
        .map(|(v, c)| json!({ "tagValue": v, "totalCostMicrodollars": c.cost, "requestCount": c.requests }))
        .collect();
    let pending: Vec<Value> = mappings
        .iter()
        .filter(|m| m.match_type == "auto")
        .map(|m| {
            json!({
                "id": m.id,
                "processorCustomerId": m.processor_customer_id,
                "customerName": names.get(m.processor_customer_id.as_str()).copied().flatten(),
                "tagValue": m.tag_value,
                "confidence": m.confidence,
            })
        })
        .collect();
    let customer_names: BTreeMap<&str, &str> =
        names.iter().filter_map(|(id, n)| n.map(|n| (*id, n))).collect();
    Ok(HttpResponse::Ok().json(json!({ "data": {
        "unmatchedProcessorCustomers": unmatched,
        "unmappedTagValues": unmapped,
        "pendingAutoMatches": pending,
        "customerNames": customer_names,
    } })))
}

/// One mapped customer's margin, its revenue and cost over six months, and its
/// cost per model in the month (viewer).
#[utoipa::path(get, path = "/api/margins/{customer}", tag = "margins", params(("customer" = String, Path,
    description = "A URL-encoded tag value"), PeriodQuery), security(("session" = [])),
    description = "Session, viewer and above; paid tiers.",
    responses((status = 200, description = "`{ data: { processorCustomerId, customerName, avatarUrl, tagValue, \
        healthTier, marginPercent, revenueMicrodollars, costMicrodollars, revenueOverTime, modelBreakdown } }`"),
        (status = 400, description = "validation_error"), (status = 404, description = "not_found: no mapping")))]
#[get("/margins/{customer}")]
pub async fn customer_margin(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    require_paid(&auth)?;
    let q: PeriodQuery = super::orgs::query(&req)?;
    let month = period(q.period.as_deref())?;
    let value = path.into_inner();
    // No mapping can hold such a value (see customer-mappings), and some would not
    // even reach the database as text.
    if value.is_empty() || value.chars().count() > 254 || value.chars().any(char::is_control) {
        return Err(ApiError::not_found("Customer mapping"));
    }
    let months = history(&state, &auth.org.id, month).await?;
    let pick = |rows: &[CustomerMargin]| -> Option<CustomerMargin> {
        let mut matching: Vec<&CustomerMargin> =
            rows.iter().filter(|cm| cm.mapping.tag_value == value).collect();
        matching.sort_by_key(|cm| cm.mapping.tag_key != CUSTOMER_TAG);
        matching.first().map(|cm| (*cm).clone())
    };
    let cm =
        months.last().and_then(|rows| pick(rows)).ok_or_else(|| ApiError::not_found("Customer mapping"))?;
    let over_time: Vec<Value> = month
        .trailing(TRAILING_MONTHS)
        .iter()
        .zip(&months)
        .map(|(m, rows)| {
            let (revenue, cost) = pick(rows).map_or((0, 0), |c| (c.revenue, c.cost));
            json!({ "period": m.label(), "revenue": revenue, "cost": cost })
        })
        .collect();
    let (from, to) = month.bounds_ms();
    let models =
        store::cost_by_model(&state.pool, &auth.org.id, &cm.mapping.tag_key, &cm.mapping.tag_value, from, to)
            .await?;
    let mut breakdown: Vec<Value> = models
        .iter()
        .map(|(model, c)| json!({ "model": model, "cost": c.cost, "requestCount": c.requests }))
        .collect();
    breakdown.sort_by(|a, b| b["cost"].as_i64().cmp(&a["cost"].as_i64()));
    Ok(HttpResponse::Ok().json(json!({ "data": {
        "processorCustomerId": cm.mapping.processor_customer_id,
        "customerName": cm.name,
        "avatarUrl": Value::Null,
        "tagValue": cm.mapping.tag_value,
        "healthTier": cm.tier(),
        "marginPercent": cm.percent(),
        "revenueMicrodollars": cm.revenue,
        "costMicrodollars": cm.cost,
        "revenueOverTime": over_time,
        "modelBreakdown": breakdown,
    } })))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    // `unmatched` before `{customer}`: the literal path wins.
    cfg.service(list_margins).service(unmatched_margins).service(customer_margin);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_margins, unmatched_margins, customer_margin))]
pub struct ApiDoc;

#[cfg(test)]
mod tests {
    use super::dollars;

    #[test]
    fn dollars_are_exact() {
        assert_eq!(dollars(1_234_567), "1.234567");
        assert_eq!(dollars(-5), "-0.000005");
        assert_eq!(dollars(i64::MIN), "-9223372036854.775808");
    }
}
