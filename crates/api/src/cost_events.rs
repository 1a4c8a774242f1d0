//! Cost events, read side (dashboard session, viewer and above): the filtered list,
//! single events, sessions, the spend summary, attribution, recent tag keys and the
//! CSV export (paid tiers). Ingest is `cost_events_ingest`.
//!
//! Choices the spec leaves open, made here:
//! - `daily` lists (summary, attribution detail) hold only UTC days with events.
//! - Summary `tools` groups the events that are tool calls (`eventType` `tool`, or a
//!   `toolName`) by tool name, falling back to the model when a tool event has no
//!   name; the name goes in the element's `model` field. `avgDurationMs` averages
//!   the events that reported a duration and is null when none did.
//! - Averages are integer microdollars, truncated toward zero (`total / count`).
//! - Attribution by a tag puts events without that tag in a `(no key)` group, as
//!   grouping by API key does for events without a key; `(no key)` in the detail
//!   path always means that group, never a tag value spelled the same.
//! - `GET /api/cost-events/sessions` (shape not in the spec) lists sessions by most
//!   recent activity: `{ data: [{ sessionId, eventCount, totalCostMicrodollars,
//!   startedAt, endedAt }], cursor }`, the cursor being `{ createdAt: endedAt, id:
//!   sessionId }` of the last row.
//! - Money in CSV files is formatted from integers (`cost_usd` = `1.234567`), never
//!   through floating point.

use std::collections::{BTreeMap, HashMap};

use actix_web::http::header;
use actix_web::{get, web, HttpRequest, HttpResponse};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::schemas::EventBodies;
use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::db::cost_event_queries::{
    self as queries, DayTotal, EventFilter, EventRow, Grouping, LabelTotal, Member, SessionsAfter, Window,
    DAY_MS,
};
use spendgate_engine::db::rollups::HOUR_MS;
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::pagination::{self, Cursor};
use spendgate_engine::util::{ids, time, validate};

pub const DEFAULT_PAGE_SIZE: i64 = 25;
pub const SESSION_EVENTS_CAP: i64 = 200;
pub const MAX_SESSION_ID_CHARS: usize = 200;
pub const MAX_REQUEST_ID_CHARS: usize = 200;
pub const MAX_PROVIDER_CHARS: usize = 100;
pub const MAX_MODEL_CHARS: usize = 200;
pub const EXPORT_MAX_ROWS: i64 = 10_000;
pub const ATTRIBUTION_DEFAULT_LIMIT: i64 = 100;
pub const ATTRIBUTION_MAX_LIMIT: i64 = 500;
pub const MAX_GROUP_BY_CHARS: usize = 100;
pub const TAG_KEYS_MAX: i64 = 50;
pub const TAG_KEYS_WINDOW_MS: i64 = 7 * DAY_MS;
pub const TOP_TRACES: i64 = 50;
/// The attribution group of events without an API key (or without the tag).
pub const NO_KEY: &str = "(no key)";
pub const SOURCES: &[&str] = &["proxy", "sdk", "api", "mcp"];
pub const BUDGET_STATUSES: &[&str] = &["skipped", "approved", "denied"];
const TAG_PARAM_PREFIX: &str = "tag.";

/// The CSV export's columns, in order.
pub const EXPORT_COLUMNS: [&str; 16] = [
    "id",
    "request_id",
    "provider",
    "model",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
    "cost_microdollars",
    "cost_usd",
    "duration_ms",
    "source",
    "session_id",
    "trace_id",
    "key_name",
    "created_at",
];

/// The attribution CSV's columns, in order.
pub const ATTRIBUTION_COLUMNS: [&str; 7] = [
    "key",
    "key_id",
    "total_cost_microdollars",
    "total_cost_usd",
    "request_count",
    "avg_cost_microdollars",
    "avg_cost_usd",
];

// ---------------------------------------------------------------------------
// Queries

/// Query of `GET /api/cost-events`. Tag filters come as `tag.<key>=<value>`
/// (the event's tags must contain each of them).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ListEventsQuery {
    /// Page size, 1-100 (default 25).
    limit: Option<String>,
    /// The previous page's `cursor`, JSON-encoded.
    cursor: Option<String>,
    /// 1-200 characters.
    request_id: Option<String>,
    /// `svc_key_<uuid>`.
    api_key_id: Option<String>,
    model: Option<String>,
    provider: Option<String>,
    /// `proxy`, `sdk`, `api` or `mcp`.
    source: Option<String>,
    /// 32 lowercase hex characters.
    trace_id: Option<String>,
    /// 1-200 characters.
    session_id: Option<String>,
    /// `skipped`, `approved` or `denied`.
    budget_status: Option<String>,
    /// The event's customer identifier (1-256 characters of `[a-zA-Z0-9._:-]`).
    customer_id: Option<String>,
}

/// Query of `GET /api/cost-events/export`. Tag filters come as `tag.<key>=<value>`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    provider: Option<String>,
    model: Option<String>,
    /// `svc_key_<uuid>`.
    api_key_id: Option<String>,
    /// `proxy`, `sdk`, `api` or `mcp`.
    source: Option<String>,
    session_id: Option<String>,
    /// 32 lowercase hex characters.
    trace_id: Option<String>,
}

/// Query of `GET /api/cost-events/sessions`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListSessionsQuery {
    /// Page size, 1-100 (default 25).
    limit: Option<String>,
    /// The previous page's `cursor`, JSON-encoded.
    cursor: Option<String>,
}

/// Query of `GET /api/cost-events/summary`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct SummaryQuery {
    /// `7d`, `30d` or `90d` (default `30d`).
    period: Option<String>,
    /// `true` leaves out cancelled-stream estimates (default `false`).
    exclude_estimated: Option<String>,
}

/// Query of `GET /api/cost-events/attribution`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AttributionQuery {
    /// Required: `api_key`, or a tag key (1-100 characters of `[a-zA-Z0-9_-]`).
    group_by: Option<String>,
    /// `7d`, `30d` or `90d` (default `30d`).
    period: Option<String>,
    /// Groups to return, 1-500 (default 100).
    limit: Option<String>,
    /// `true` leaves out cancelled-stream estimates (default `false`).
    exclude_estimated: Option<String>,
    /// `json` (default) or `csv`.
    format: Option<String>,
}

/// Query of `GET /api/cost-events/attribution/{key}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AttributionDetailQuery {
    /// Required, as in the list call.
    group_by: Option<String>,
    /// `7d`, `30d` or `90d` (default `30d`).
    period: Option<String>,
    /// `true` leaves out cancelled-stream estimates (default `false`).
    exclude_estimated: Option<String>,
}

// ---------------------------------------------------------------------------
// Views

/// A cost event as listed and shown.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostEventView {
    /// `svc_evt_<uuid>`.
    id: String,
    request_id: String,
    /// `svc_key_<uuid>`, or null for events recorded without a key.
    api_key_id: Option<String>,
    /// The API key's name, or null.
    key_name: Option<String>,
    provider: String,
    model: String,
    input_tokens: i64,
    output_tokens: i64,
    cached_input_tokens: i64,
    reasoning_tokens: i64,
    cost_microdollars: i64,
    duration_ms: Option<i64>,
    session_id: Option<String>,
    trace_id: Option<String>,
    tool_name: Option<String>,
    tool_server: Option<String>,
    tags: BTreeMap<String, String>,
    customer_id: Option<String>,
    /// `{ input, output, cached, reasoning? }` in microdollars, or null.
    #[schema(value_type = Option<Object>)]
    cost_breakdown: Option<Value>,
    source: String,
    budget_status: String,
    created_at: String,
}

impl From<&EventRow> for CostEventView {
    fn from(row: &EventRow) -> Self {
        let e = &row.event;
        CostEventView {
            id: ids::prefixed(ids::COST_EVENT, &e.id),
            request_id: e.request_id.clone(),
            api_key_id: e.api_key_id.as_deref().map(|k| ids::prefixed(ids::API_KEY, k)),
            key_name: row.key_name.clone(),
            provider: e.provider.clone(),
            model: e.model.clone(),
            input_tokens: e.input_tokens,
            output_tokens: e.output_tokens,
            cached_input_tokens: e.cached_input_tokens,
            reasoning_tokens: e.reasoning_tokens,
            cost_microdollars: e.cost_microdollars,
            duration_ms: e.duration_ms,
            session_id: e.session_id.clone(),
            trace_id: e.trace_id.clone(),
            tool_name: e.tool_name.clone(),
            tool_server: e.tool_server.clone(),
            // Rows are written from validated maps; a row that does not parse was
            // edited by hand and shows as untagged rather than failing the page.
            tags: serde_json::from_str(&e.tags).unwrap_or_default(),
            customer_id: e.customer_id.clone(),
            cost_breakdown: e
                .cost_breakdown
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .filter(Value::is_object),
            source: e.source.clone(),
            budget_status: e.budget_status.clone(),
            created_at: time::iso(e.created_at),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CostEventPage {
    data: Vec<CostEventView>,
    cursor: Option<Cursor>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CostEventEnvelope {
    data: CostEventView,
}

/// A session in the list of recent sessions.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionListItem {
    session_id: String,
    event_count: i64,
    total_cost_microdollars: i64,
    started_at: String,
    ended_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionPage {
    data: Vec<SessionListItem>,
    /// `{ createdAt: endedAt, id: sessionId }` of the last row, or null.
    cursor: Option<Cursor>,
}

/// Totals over every event of a session (not only the listed ones).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    event_count: i64,
    total_cost_microdollars: i64,
    total_input_tokens: i64,
    total_output_tokens: i64,
    total_duration_ms: i64,
    /// Null for a session without events.
    started_at: Option<String>,
    ended_at: Option<String>,
}

/// `GET /api/cost-events/sessions/{sessionId}`: not wrapped in `data`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionDetail {
    session_id: String,
    summary: SessionSummary,
    /// Oldest first, at most 200.
    events: Vec<CostEventView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DailyCost {
    /// `YYYY-MM-DD`, UTC.
    date: String,
    total_cost_microdollars: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSpend {
    provider: String,
    model: String,
    total_cost_microdollars: i64,
    request_count: i64,
    input_tokens: i64,
    output_tokens: i64,
    cached_input_tokens: i64,
    reasoning_tokens: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSpend {
    provider: String,
    total_cost_microdollars: i64,
    request_count: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeySpend {
    /// `svc_key_<uuid>`, or null for events without a key.
    api_key_id: Option<String>,
    key_name: Option<String>,
    total_cost_microdollars: i64,
    request_count: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpend {
    /// The tool's name (the model, for tool events without one).
    model: String,
    total_cost_microdollars: i64,
    request_count: i64,
    /// Mean over the events that reported a duration, truncated; null when none did.
    avg_duration_ms: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceSpend {
    source: String,
    total_cost_microdollars: i64,
    request_count: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TraceSpend {
    trace_id: String,
    total_cost_microdollars: i64,
    request_count: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummaryTotals {
    total_cost_microdollars: i64,
    total_requests: i64,
    /// `7d`, `30d` or `90d`.
    period: &'static str,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostBreakdownTotals {
    input_cost: i64,
    output_cost: i64,
    cached_cost: i64,
    reasoning_cost: i64,
}

/// The spend summary of a period. Lists are costliest first, except `daily`
/// (ascending by date, days with events only).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpendSummary {
    daily: Vec<DailyCost>,
    models: Vec<ModelSpend>,
    providers: Vec<ProviderSpend>,
    keys: Vec<KeySpend>,
    tools: Vec<ToolSpend>,
    sources: Vec<SourceSpend>,
    /// The 50 costliest traces.
    traces: Vec<TraceSpend>,
    totals: SummaryTotals,
    cost_breakdown: CostBreakdownTotals,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SpendSummaryEnvelope {
    data: SpendSummary,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttributionGroup {
    /// The key's name, the tag value, or `(no key)`.
    key: String,
    /// `svc_key_<uuid>` when grouping by API key; null for tags and `(no key)`.
    key_id: Option<String>,
    total_cost_microdollars: i64,
    request_count: i64,
    /// `total / count`, truncated.
    avg_cost_microdollars: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttributionTotals {
    total_cost_microdollars: i64,
    total_requests: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttributionReport {
    /// Costliest first.
    groups: Vec<AttributionGroup>,
    period: &'static str,
    group_by: String,
    total_groups: i64,
    has_more: bool,
    /// Organization-wide for the period, not only the listed groups.
    totals: AttributionTotals,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttributionEnvelope {
    data: AttributionReport,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DailyPoint {
    /// `YYYY-MM-DD`, UTC.
    date: String,
    cost: i64,
    count: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ModelPoint {
    model: String,
    cost: i64,
    count: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttributionDetail {
    key: String,
    total_cost_microdollars: i64,
    request_count: i64,
    avg_cost_microdollars: i64,
    /// Ascending by date, days with events only.
    daily: Vec<DailyPoint>,
    /// Costliest first.
    models: Vec<ModelPoint>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttributionDetailEnvelope {
    data: AttributionDetail,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TagKeys {
    data: Vec<String>,
}

// ---------------------------------------------------------------------------
// Pure helpers

/// The look-back window of the summary and attribution calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Days7,
    Days30,
    Days90,
}

impl Period {
    /// Parses `period`; absent means `30d`.
    pub fn parse(raw: Option<&str>) -> Result<Period, ApiError> {
        match raw {
            None => Ok(Period::Days30),
            Some("7d") => Ok(Period::Days7),
            Some("30d") => Ok(Period::Days30),
            Some("90d") => Ok(Period::Days90),
            Some(_) => Err(ApiError::invalid_field(&["period"], "must be one of 7d, 30d, 90d")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Days7 => "7d",
            Period::Days30 => "30d",
            Period::Days90 => "90d",
        }
    }

    pub fn days(self) -> i64 {
        match self {
            Period::Days7 => 7,
            Period::Days30 => 30,
            Period::Days90 => 90,
        }
    }

    /// The window ending at `now`: the period's days back, from the start of that
    /// UTC hour (see [`hour_start`]).
    fn window(self, now: i64, exclude_estimated: bool) -> Window {
        Window {
            since: hour_start(now.saturating_sub(self.days().saturating_mul(DAY_MS))),
            exclude_estimated,
        }
    }
}

/// The start of the UTC hour holding `ms`. Dashboard windows (`period`, the tag-key
/// look-back) start on an hour: whole hours and days are what the rollups hold, so a
/// window read adds up stored rows only and never scans raw events, whatever their
/// number. A `30d` window is therefore the 30 days back plus the part of that first
/// hour before them: exact for that start, and at most an hour longer.
pub fn hour_start(ms: i64) -> i64 {
    ms.saturating_sub(ms.rem_euclid(HOUR_MS))
}

/// Parses a `true`/`false` query flag; absent means false.
pub fn parse_flag(raw: Option<&str>, name: &str) -> Result<bool, ApiError> {
    match raw {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(ApiError::invalid_field(&[name], "must be true or false")),
    }
}

/// Formats microdollars as an exact USD decimal with six places (`1234567` →
/// `1.234567`, `-5` → `-0.000005`), by integer arithmetic only.
pub fn format_usd(microdollars: i64) -> String {
    let sign = if microdollars < 0 { "-" } else { "" };
    let abs = microdollars.unsigned_abs();
    format!("{sign}{}.{:06}", abs / 1_000_000, abs % 1_000_000)
}

/// `total / count` truncated toward zero; 0 for no events.
pub fn average(total: i64, count: i64) -> i64 {
    if count > 0 {
        total.checked_div(count).unwrap_or(0)
    } else {
        0
    }
}

/// What attribution groups by, as requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBy {
    ApiKey,
    Tag(String),
}

impl GroupBy {
    /// Parses the required `groupBy`: `api_key`, or a tag key of 1-100 characters
    /// from `[a-zA-Z0-9_-]`.
    pub fn parse(raw: Option<&str>) -> Result<GroupBy, ApiError> {
        let raw = raw.ok_or_else(|| ApiError::invalid_field(&["groupBy"], "is required"))?;
        if raw == "api_key" {
            return Ok(GroupBy::ApiKey);
        }
        let ok = !raw.is_empty()
            && raw.len() <= MAX_GROUP_BY_CHARS
            && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok {
            Ok(GroupBy::Tag(raw.to_owned()))
        } else {
            Err(ApiError::invalid_field(
                &["groupBy"],
                "must be api_key or a tag key of 1-100 characters from [a-zA-Z0-9_-]",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            GroupBy::ApiKey => "api_key",
            GroupBy::Tag(key) => key,
        }
    }

    fn grouping(&self) -> Grouping<'_> {
        match self {
            GroupBy::ApiKey => Grouping::ApiKey,
            GroupBy::Tag(key) => Grouping::Tag(key),
        }
    }
}

fn invalid_key(message: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidKey, message)
}

/// Refuses attribution path keys that look like path traversal.
pub fn check_key_shape(raw: &str) -> Result<(), ApiError> {
    if raw.contains('/') || raw.contains("..") {
        Err(invalid_key("The key must not contain '/' or '..'"))
    } else {
        Ok(())
    }
}

/// Resolves the attribution detail's path key under `group_by`: `None` is the
/// `(no key)` group, otherwise the bare API key UUID or the tag value.
pub fn parse_member_key(group_by: &GroupBy, raw: &str) -> Result<Option<String>, ApiError> {
    check_key_shape(raw)?;
    if raw == NO_KEY {
        return Ok(None);
    }
    match group_by {
        GroupBy::ApiKey => ids::parse_prefixed(ids::API_KEY, raw)
            .map(Some)
            .ok_or_else(|| invalid_key("The key must be an API key ID (svc_key_<uuid>) or (no key)")),
        GroupBy::Tag(_) if raw.chars().count() > validate::MAX_TAG_VALUE => {
            Err(ApiError::invalid_field(&["key"], "a tag value is at most 256 characters"))
        }
        GroupBy::Tag(_) => Ok(Some(raw.to_owned())),
    }
}

/// Checks an optional text parameter's length in characters.
fn check_len(issues: &mut Issues, name: &str, value: Option<&str>, max: usize) {
    if let Some(v) = value {
        let n = v.chars().count();
        if n == 0 || n > max {
            issues.push(&[name], format!("must be 1-{max} characters"));
        }
    }
}

fn check_one_of(issues: &mut Issues, name: &str, value: Option<&str>, allowed: &[&str]) {
    if let Some(v) = value {
        if !allowed.contains(&v) {
            issues.push(&[name], format!("must be one of {}", allowed.join(", ")));
        }
    }
}

/// The `tag.<key>=<value>` pairs of a query string, checked against the tag rules.
pub fn tag_filters(query_string: &str, issues: &mut Issues) -> Vec<(String, String)> {
    let mut tags = Vec::new();
    for (name, value) in url::form_urlencoded::parse(query_string.as_bytes()) {
        let Some(key) = name.strip_prefix(TAG_PARAM_PREFIX) else { continue };
        if !validate::is_tag_key(key) {
            issues.push(&[name.as_ref()], "tag key must match [a-zA-Z0-9_-]+ and be at most 64 characters");
        } else if value.chars().count() > validate::MAX_TAG_VALUE {
            issues.push(&[name.as_ref()], "tag value must be at most 256 characters");
        } else {
            tags.push((key.to_owned(), value.into_owned()));
        }
    }
    if tags.len() > validate::MAX_TAGS {
        issues.push(&["tag"], format!("at most {} tag filters", validate::MAX_TAGS));
    }
    tags
}

/// Checks the list and export filters; every problem is reported at once.
fn event_filter(q: ListEventsQuery, query_string: &str) -> Result<EventFilter, ApiError> {
    let mut issues = Issues::new();
    check_len(&mut issues, "requestId", q.request_id.as_deref(), MAX_REQUEST_ID_CHARS);
    check_len(&mut issues, "model", q.model.as_deref(), MAX_MODEL_CHARS);
    check_len(&mut issues, "provider", q.provider.as_deref(), MAX_PROVIDER_CHARS);
    check_len(&mut issues, "sessionId", q.session_id.as_deref(), MAX_SESSION_ID_CHARS);
    check_one_of(&mut issues, "source", q.source.as_deref(), SOURCES);
    check_one_of(&mut issues, "budgetStatus", q.budget_status.as_deref(), BUDGET_STATUSES);
    if q.trace_id.as_deref().is_some_and(|t| !spendgate_engine::util::validate::is_trace_id(t)) {
        issues.push(&["traceId"], "must be 32 lowercase hex characters, not all zeros");
    }
    let api_key_id = match q.api_key_id.as_deref() {
        None => None,
        Some(raw) => {
            let id = ids::parse_prefixed(ids::API_KEY, raw);
            if id.is_none() {
                issues.push(&["apiKeyId"], "must be an API key ID (svc_key_<uuid>)");
            }
            id
        }
    };
    if q.customer_id.as_deref().is_some_and(|c| !validate::is_customer_id(c)) {
        issues.push(&["customerId"], "must be 1-256 characters from [a-zA-Z0-9._:-]");
    }
    let tags = tag_filters(query_string, &mut issues);
    issues.finish()?;
    Ok(EventFilter {
        request_id: q.request_id,
        api_key_id,
        model: q.model,
        provider: q.provider,
        source: q.source,
        trace_id: q.trace_id,
        session_id: q.session_id,
        budget_status: q.budget_status,
        customer_id: q.customer_id,
        tags,
    })
}

/// Parses the query string into `T`, answering in the error envelope.
fn query<T: DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    web::Query::<T>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| ApiError::invalid_field(&[], format!("invalid query string: {e}")))
}

fn date_of_day(day: i64) -> String {
    time::date(day.saturating_mul(DAY_MS))
}

/// Sorts costliest first, ties by `tie` ascending, so output is deterministic.
fn by_cost_desc<T, K: Ord>(items: &mut [T], cost: impl Fn(&T) -> i64, tie: impl Fn(&T) -> K) {
    items.sort_by(|a, b| cost(b).cmp(&cost(a)).then_with(|| tie(a).cmp(&tie(b))));
}

fn csv_error(err: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("writing CSV: {err}"))
}

/// Serializes `rows` under `columns` as CSV.
fn write_csv(columns: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> Result<Vec<u8>, ApiError> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(columns).map_err(csv_error)?;
    for row in rows {
        writer.write_record(&row).map_err(csv_error)?;
    }
    writer.into_inner().map_err(csv_error)
}

fn csv_response(filename: &str, body: Vec<u8>) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/csv; charset=utf-8"))
        .insert_header((header::CONTENT_DISPOSITION, format!("attachment; filename={filename}")))
        .body(body)
}

/// API key names by bare UUID, for the keys among `labels`.
async fn names_of(
    state: &AppState,
    org_id: &str,
    labels: &[&LabelTotal],
) -> Result<HashMap<String, String>, ApiError> {
    let ids: Vec<String> = labels.iter().filter_map(|l| l.label.clone()).collect();
    Ok(queries::key_names(&state.pool, org_id, &ids).await?.into_iter().collect())
}

// ---------------------------------------------------------------------------
// Handlers

/// Lists the organization's cost events, newest first, narrowed by the filters.
#[utoipa::path(get, path = "/api/cost-events", tag = "cost-events", security(("session" = [])), params(ListEventsQuery,
        ("tag.<key>" = Option<String>, Query, description = "Containment filter: the event carries this tag \
            with this value. Repeat for several tags (all must match).")),
    description = "Session, viewer and above.",
    responses((status = 200, body = CostEventPage), (status = 400, description = "validation_error"),
        (status = 401, description = "authentication_required")))]
#[get("/cost-events")]
pub async fn list_cost_events(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let q: ListEventsQuery = query(&req)?;
    let (limit, after) =
        pagination::parse(q.limit.as_deref(), q.cursor.as_deref(), DEFAULT_PAGE_SIZE, ids::COST_EVENT)?;
    let filter = event_filter(q, req.query_string())?;
    let rows = queries::list_page(&state.pool, &auth.org.id, &filter, after.as_ref(), limit).await?;
    let (rows, cursor) =
        pagination::page(rows, limit, ids::COST_EVENT, |r| (r.event.created_at, r.event.id.clone()));
    Ok(HttpResponse::Ok()
        .json(CostEventPage { data: rows.iter().map(CostEventView::from).collect(), cursor }))
}

/// Shows one cost event of the organization.
#[utoipa::path(get, path = "/api/cost-events/{id}", tag = "cost-events", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_evt_<uuid>` or a bare UUID")),
    description = "Session, viewer and above. Events of other organizations are not found.",
    responses((status = 200, body = CostEventEnvelope), (status = 400, description = "validation_error"),
        (status = 401, description = "authentication_required"), (status = 404, description = "not_found")))]
#[get("/cost-events/{id}")]
pub async fn get_cost_event(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let id = ids::parse_prefixed_or_raw(ids::COST_EVENT, &path)
        .ok_or_else(|| ApiError::invalid_field(&["id"], "must be svc_evt_<uuid> or a UUID"))?;
    let row = queries::find(&state.pool, &auth.org.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("Cost event"))?;
    Ok(HttpResponse::Ok().json(CostEventEnvelope { data: CostEventView::from(&row) }))
}

/// The request and response bodies kept for a proxied call (Pro and above; 1 MB each,
/// longer streams truncated in storage).
#[utoipa::path(get, path = "/api/cost-events/{id}/bodies", tag = "cost-events", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_evt_<uuid>` or a bare UUID")),
    description = "Session, viewer and above, Pro tier and above. `{ data: { eventId, requestBody, responseBody, \
        requestTruncated, responseTruncated, createdAt } }`; 404 when the event has no recorded bodies.",
    responses((status = 200, description = "the bodies", body = Data<EventBodies>),
        (status = 400, description = "validation_error: malformed id"), (status = 403, description = "forbidden (Free tier)"),
        (status = 404, description = "not_found")))]
#[get("/cost-events/{id}/bodies")]
pub async fn get_cost_event_bodies(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    if !auth.plan().is_paid() {
        return Err(ApiError::forbidden("Request and response bodies are kept on Pro and above"));
    }
    let id = ids::parse_prefixed_or_raw(ids::COST_EVENT, &path)
        .ok_or_else(|| ApiError::invalid_field(&["id"], "must be svc_evt_<uuid> or a UUID"))?;
    let body = queries::find_bodies(&state.pool, &auth.org.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("Cost event bodies"))?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "data": {
        "eventId": ids::prefixed(ids::COST_EVENT, &body.event_id),
        "requestBody": body.request_body,
        "responseBody": body.response_body,
        "requestTruncated": body.request_truncated,
        "responseTruncated": body.response_truncated,
        "createdAt": time::iso(body.created_at),
    }})))
}

/// Lists the organization's sessions, the most recently active first.
#[utoipa::path(get, path = "/api/cost-events/sessions", tag = "cost-events", security(("session" = [])), params(ListSessionsQuery),
    description = "Session, viewer and above. The cursor is `{ createdAt, id }` holding the last row's \
        `endedAt` and `sessionId`.",
    responses((status = 200, body = SessionPage), (status = 400, description = "validation_error"),
        (status = 401, description = "authentication_required")))]
#[get("/cost-events/sessions")]
pub async fn list_sessions(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let q: ListSessionsQuery = query(&req)?;
    let (limit, after) = pagination::parse(q.limit.as_deref(), q.cursor.as_deref(), DEFAULT_PAGE_SIZE, "")?;
    let after = after.map(|a| SessionsAfter { ended_at: a.created_at, session_id: a.id });
    let rows = queries::list_sessions(&state.pool, &auth.org.id, after.as_ref(), limit).await?;
    let (rows, cursor) = pagination::page(rows, limit, "", |s| (s.ended_at, s.session_id.clone()));
    let data = rows
        .into_iter()
        .map(|s| SessionListItem {
            session_id: s.session_id,
            event_count: s.event_count,
            total_cost_microdollars: s.cost,
            started_at: time::iso(s.started_at),
            ended_at: time::iso(s.ended_at),
        })
        .collect();
    Ok(HttpResponse::Ok().json(SessionPage { data, cursor }))
}

/// Answers the empty session ID (`/api/cost-events/sessions/`), which the
/// `{sessionId}` route cannot match, with the spec's validation error.
#[utoipa::path(get, path = "/api/cost-events/sessions/", tag = "cost-events", security(("session" = [])),
    description = "The empty session ID: always 400 validation_error (sessionId must be 1-200 characters).",
    responses((status = 400, description = "validation_error")))]
async fn get_session_without_id(auth: SessionAuth) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    Err(ApiError::invalid_field(&["sessionId"], "must be 1-200 characters"))
}

/// Shows a session: totals over all its events and its first 200 events, oldest
/// first. A session without events answers zeros, not 404.
#[utoipa::path(get, path = "/api/cost-events/sessions/{sessionId}", tag = "cost-events", operation_id = "get_cost_event_session", security(("session" = [])),
    params(("sessionId" = String, Path, description = "1-200 characters")),
    description = "Session, viewer and above. The body is not wrapped in `data`.",
    responses((status = 200, body = SessionDetail), (status = 400, description = "validation_error"),
        (status = 401, description = "authentication_required")))]
#[get("/cost-events/sessions/{sessionId}")]
pub async fn get_session(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let session_id = path.into_inner();
    let n = session_id.chars().count();
    if n == 0 || n > MAX_SESSION_ID_CHARS {
        return Err(ApiError::invalid_field(&["sessionId"], "must be 1-200 characters"));
    }
    let (totals, rows) = queries::session(&state.pool, &auth.org.id, &session_id, SESSION_EVENTS_CAP).await?;
    Ok(HttpResponse::Ok().json(SessionDetail {
        summary: SessionSummary {
            event_count: totals.event_count,
            total_cost_microdollars: totals.cost,
            total_input_tokens: totals.input_tokens,
            total_output_tokens: totals.output_tokens,
            total_duration_ms: totals.duration_ms,
            started_at: time::iso_opt(totals.started_at),
            ended_at: time::iso_opt(totals.ended_at),
        },
        events: rows.iter().map(CostEventView::from).collect(),
        session_id,
    }))
}

/// Summarizes the organization's spend over a period: by day, model, provider, API
/// key, tool, source and trace, with totals and the summed cost breakdown.
#[utoipa::path(get, path = "/api/cost-events/summary", tag = "cost-events", security(("session" = [])), params(SummaryQuery),
    description = "Session, viewer and above.",
    responses((status = 200, body = SpendSummaryEnvelope), (status = 400, description = "validation_error"),
        (status = 401, description = "authentication_required")))]
#[get("/cost-events/summary")]
pub async fn get_summary(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let q: SummaryQuery = query(&req)?;
    let period = Period::parse(q.period.as_deref())?;
    let exclude_estimated = parse_flag(q.exclude_estimated.as_deref(), "excludeEstimated")?;
    let window = period.window(time::now_ms(), exclude_estimated);
    let s = queries::summary(&state.pool, &auth.org.id, window, TOP_TRACES).await?;

    let names = names_of(&state, &auth.org.id, &s.keys.iter().collect::<Vec<_>>()).await?;
    let mut keys: Vec<KeySpend> = s
        .keys
        .into_iter()
        .map(|k| KeySpend {
            key_name: k.label.as_ref().and_then(|id| names.get(id).cloned()),
            api_key_id: k.label.map(|id| ids::prefixed(ids::API_KEY, &id)),
            total_cost_microdollars: k.cost,
            request_count: k.count,
        })
        .collect();
    by_cost_desc(&mut keys, |k| k.total_cost_microdollars, |k| k.api_key_id.clone());

    let mut models: Vec<ModelSpend> = s
        .models
        .into_iter()
        .map(|m| ModelSpend {
            provider: m.provider,
            model: m.model,
            total_cost_microdollars: m.cost,
            request_count: m.count,
            input_tokens: m.input_tokens,
            output_tokens: m.output_tokens,
            cached_input_tokens: m.cached_input_tokens,
            reasoning_tokens: m.reasoning_tokens,
        })
        .collect();
    by_cost_desc(&mut models, |m| m.total_cost_microdollars, |m| (m.provider.clone(), m.model.clone()));

    let mut providers: Vec<ProviderSpend> = s
        .providers
        .into_iter()
        .map(|p| ProviderSpend {
            provider: p.label.unwrap_or_default(),
            total_cost_microdollars: p.cost,
            request_count: p.count,
        })
        .collect();
    by_cost_desc(&mut providers, |p| p.total_cost_microdollars, |p| p.provider.clone());

    let mut tools: Vec<ToolSpend> = s
        .tools
        .into_iter()
        .map(|t| ToolSpend {
            avg_duration_ms: (t.duration_count > 0).then(|| average(t.duration_sum, t.duration_count)),
            model: t.name,
            total_cost_microdollars: t.cost,
            request_count: t.count,
        })
        .collect();
    by_cost_desc(&mut tools, |t| t.total_cost_microdollars, |t| t.model.clone());

    let mut sources: Vec<SourceSpend> = s
        .sources
        .into_iter()
        .map(|p| SourceSpend {
            source: p.label.unwrap_or_default(),
            total_cost_microdollars: p.cost,
            request_count: p.count,
        })
        .collect();
    by_cost_desc(&mut sources, |p| p.total_cost_microdollars, |p| p.source.clone());

    let mut traces: Vec<TraceSpend> = s
        .traces
        .into_iter()
        .filter_map(|t| {
            Some(TraceSpend { trace_id: t.label?, total_cost_microdollars: t.cost, request_count: t.count })
        })
        .collect();
    by_cost_desc(&mut traces, |t| t.total_cost_microdollars, |t| t.trace_id.clone());

    let summary = SpendSummary {
        daily: s
            .daily
            .iter()
            .map(|d: &DayTotal| DailyCost { date: date_of_day(d.day), total_cost_microdollars: d.cost })
            .collect(),
        models,
        providers,
        keys,
        tools,
        sources,
        traces,
        totals: SummaryTotals {
            total_cost_microdollars: s.totals.cost,
            total_requests: s.totals.count,
            period: period.as_str(),
        },
        cost_breakdown: CostBreakdownTotals {
            input_cost: s.breakdown.input,
            output_cost: s.breakdown.output,
            cached_cost: s.breakdown.cached,
            reasoning_cost: s.breakdown.reasoning,
        },
    };
    Ok(HttpResponse::Ok().json(SpendSummaryEnvelope { data: summary }))
}

/// Attributes the organization's spend over a period to API keys or to the values
/// of one tag, costliest first, as JSON or CSV.
#[utoipa::path(get, path = "/api/cost-events/attribution", tag = "cost-events", security(("session" = [])), params(AttributionQuery),
    description = "Session, viewer and above. CSV: columns `key,key_id,total_cost_microdollars,\
        total_cost_usd,request_count,avg_cost_microdollars,avg_cost_usd`, \
        `Content-Disposition: attachment; filename=service-attribution-<groupBy>-<date>.csv`.",
    responses((status = 200, body = AttributionEnvelope, description = "JSON, or `text/csv` with `format=csv`"),
        (status = 400, description = "validation_error"), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden")))]
#[get("/cost-events/attribution")]
pub async fn get_attribution(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let q: AttributionQuery = query(&req)?;
    let group_by = GroupBy::parse(q.group_by.as_deref())?;
    let period = Period::parse(q.period.as_deref())?;
    let (limit, _) = pagination::parse_with_max(
        q.limit.as_deref(),
        None,
        ATTRIBUTION_DEFAULT_LIMIT,
        ATTRIBUTION_MAX_LIMIT,
    )?;
    let exclude_estimated = parse_flag(q.exclude_estimated.as_deref(), "excludeEstimated")?;
    let csv = match q.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(_) => return Err(ApiError::invalid_field(&["format"], "must be json or csv")),
    };
    let now = time::now_ms();
    let window = period.window(now, exclude_estimated);
    let report = queries::attribution(&state.pool, &auth.org.id, window, group_by.grouping(), limit).await?;

    let names = match &group_by {
        GroupBy::ApiKey => names_of(&state, &auth.org.id, &report.groups.iter().collect::<Vec<_>>()).await?,
        GroupBy::Tag(_) => HashMap::new(),
    };
    let groups: Vec<AttributionGroup> = report
        .groups
        .into_iter()
        .map(|g| {
            let (key, key_id) = match (&group_by, g.label) {
                (_, None) => (NO_KEY.to_owned(), None),
                (GroupBy::ApiKey, Some(id)) => {
                    let prefixed = ids::prefixed(ids::API_KEY, &id);
                    (names.get(&id).cloned().unwrap_or_else(|| prefixed.clone()), Some(prefixed))
                }
                (GroupBy::Tag(_), Some(value)) => (value, None),
            };
            AttributionGroup {
                key,
                key_id,
                total_cost_microdollars: g.cost,
                request_count: g.count,
                avg_cost_microdollars: average(g.cost, g.count),
            }
        })
        .collect();

    if csv {
        let rows = groups.iter().map(|g| {
            vec![
                g.key.clone(),
                g.key_id.clone().unwrap_or_default(),
                g.total_cost_microdollars.to_string(),
                format_usd(g.total_cost_microdollars),
                g.request_count.to_string(),
                g.avg_cost_microdollars.to_string(),
                format_usd(g.avg_cost_microdollars),
            ]
        });
        let body = write_csv(&ATTRIBUTION_COLUMNS, rows)?;
        let filename = format!("service-attribution-{}-{}.csv", group_by.as_str(), time::date(now));
        return Ok(csv_response(&filename, body));
    }
    Ok(HttpResponse::Ok().json(AttributionEnvelope {
        data: AttributionReport {
            has_more: report.total_groups > limit,
            groups,
            period: period.as_str(),
            group_by: group_by.as_str().to_owned(),
            total_groups: report.total_groups,
            totals: AttributionTotals {
                total_cost_microdollars: report.totals.cost,
                total_requests: report.totals.count,
            },
        },
    }))
}

/// Shows one attribution group over a period: totals, spend by day and by model.
#[utoipa::path(get, path = "/api/cost-events/attribution/{key}", tag = "cost-events", security(("session" = [])),
    params(("key" = String, Path, description = "An API key ID (`svc_key_<uuid>`), a tag value, or \
        `(no key)` for events without a key (or without the tag)"), AttributionDetailQuery),
    description = "Session, viewer and above.",
    responses((status = 200, body = AttributionDetailEnvelope),
        (status = 400, description = "invalid_key (contains `/` or `..`, or a malformed `svc_key_*`), \
            validation_error"),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden")))]
#[get("/cost-events/attribution/{key}")]
pub async fn get_attribution_detail(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let raw_key = path.into_inner();
    // A traversal-shaped key is refused before anything else is looked at.
    check_key_shape(&raw_key)?;
    let q: AttributionDetailQuery = query(&req)?;
    let group_by = GroupBy::parse(q.group_by.as_deref())?;
    let member_key = parse_member_key(&group_by, &raw_key)?;
    let period = Period::parse(q.period.as_deref())?;
    let exclude_estimated = parse_flag(q.exclude_estimated.as_deref(), "excludeEstimated")?;
    let member = match &group_by {
        GroupBy::ApiKey => Member::ApiKey(member_key.as_deref()),
        GroupBy::Tag(key) => Member::Tag { key, value: member_key.as_deref() },
    };
    let window = period.window(time::now_ms(), exclude_estimated);
    let detail = queries::attribution_detail(&state.pool, &auth.org.id, window, member).await?;
    let mut models: Vec<ModelPoint> = detail
        .models
        .into_iter()
        .map(|m| ModelPoint { model: m.label.unwrap_or_default(), cost: m.cost, count: m.count })
        .collect();
    by_cost_desc(&mut models, |m| m.cost, |m| m.model.clone());
    Ok(HttpResponse::Ok().json(AttributionDetailEnvelope {
        data: AttributionDetail {
            key: raw_key,
            total_cost_microdollars: detail.totals.cost,
            request_count: detail.totals.count,
            avg_cost_microdollars: average(detail.totals.cost, detail.totals.count),
            daily: detail
                .daily
                .iter()
                .map(|d| DailyPoint { date: date_of_day(d.day), cost: d.cost, count: d.count })
                .collect(),
            models,
        },
    }))
}

/// Lists the distinct tag keys of the organization's events of the last 7 days,
/// internal ones excluded, alphabetically (byte order), at most 50.
#[utoipa::path(get, path = "/api/cost-events/tag-keys", tag = "cost-events", security(("session" = [])),
    description = "Session, viewer and above.",
    responses((status = 200, body = TagKeys), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden")))]
#[get("/cost-events/tag-keys")]
pub async fn list_tag_keys(state: web::Data<AppState>, auth: SessionAuth) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let since = hour_start(time::now_ms().saturating_sub(TAG_KEYS_WINDOW_MS));
    let mut keys = queries::recent_tag_keys(&state.pool, &auth.org.id, since, TAG_KEYS_MAX).await?;
    keys.retain(|k| !k.starts_with(validate::RESERVED_TAG_PREFIX));
    keys.sort();
    keys.dedup();
    Ok(HttpResponse::Ok().json(TagKeys { data: keys }))
}

/// Exports up to 10,000 of the organization's cost events, newest first, as CSV.
/// Paid tiers only.
#[utoipa::path(get, path = "/api/cost-events/export", tag = "cost-events", security(("session" = [])), params(ExportQuery,
        ("tag.<key>" = Option<String>, Query, description = "Containment filter, as in the list call")),
    description = "Session, viewer and above; Pro tier and above. Columns: `id,request_id,provider,model,\
        input_tokens,output_tokens,cached_input_tokens,reasoning_tokens,cost_microdollars,cost_usd,duration_ms,\
        source,session_id,trace_id,key_name,created_at`.",
    responses((status = 200, content_type = "text/csv; charset=utf-8",
            description = "`Content-Disposition: attachment; filename=service-cost-events-<date>.csv`"),
        (status = 400, description = "validation_error"), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden (Free tier)")))]
#[get("/cost-events/export")]
pub async fn export_cost_events(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    if !auth.plan().is_paid() {
        return Err(ApiError::forbidden("Exporting cost events requires the Pro tier or above"));
    }
    let q: ExportQuery = query(&req)?;
    let filter = event_filter(
        ListEventsQuery {
            provider: q.provider,
            model: q.model,
            api_key_id: q.api_key_id,
            source: q.source,
            session_id: q.session_id,
            trace_id: q.trace_id,
            ..ListEventsQuery::default()
        },
        req.query_string(),
    )?;
    let rows = queries::export(&state.pool, &auth.org.id, &filter, EXPORT_MAX_ROWS).await?;
    let records = rows.into_iter().map(|r| {
        let e = r.event;
        vec![
            ids::prefixed(ids::COST_EVENT, &e.id),
            e.request_id,
            e.provider,
            e.model,
            e.input_tokens.to_string(),
            e.output_tokens.to_string(),
            e.cached_input_tokens.to_string(),
            e.reasoning_tokens.to_string(),
            e.cost_microdollars.to_string(),
            format_usd(e.cost_microdollars),
            e.duration_ms.map(|d| d.to_string()).unwrap_or_default(),
            e.source,
            e.session_id.unwrap_or_default(),
            e.trace_id.unwrap_or_default(),
            r.key_name.unwrap_or_default(),
            time::iso(e.created_at),
        ]
    });
    let body = write_csv(&EXPORT_COLUMNS, records)?;
    let filename = format!("service-cost-events-{}.csv", time::date(time::now_ms()));
    Ok(csv_response(&filename, body))
}

/// Mounts the read endpoints. The fixed paths come before `/cost-events/{id}`,
/// which would otherwise capture them.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_cost_events)
        .service(get_summary)
        .service(list_sessions)
        .service(web::resource("/cost-events/sessions/").route(web::get().to(get_session_without_id)))
        .service(get_session)
        .service(get_attribution)
        .service(get_attribution_detail)
        .service(list_tag_keys)
        .service(export_cost_events)
        .service(get_cost_event_bodies)
        .service(get_cost_event);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    list_cost_events,
    get_cost_event,
    get_cost_event_bodies,
    list_sessions,
    get_session,
    get_session_without_id,
    get_summary,
    get_attribution,
    get_attribution_detail,
    list_tag_keys,
    export_cost_events
))]
pub struct ApiDoc;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn usd_is_exact_and_signed() {
        assert_eq!(format_usd(1_234_567), "1.234567");
        assert_eq!(format_usd(0), "0.000000");
        assert_eq!(format_usd(5), "0.000005");
        assert_eq!(format_usd(1_000_000), "1.000000");
        assert_eq!(format_usd(-5), "-0.000005");
        assert_eq!(format_usd(-1_500_000), "-1.500000");
        assert_eq!(format_usd(i64::MAX), "9223372036854.775807");
        assert_eq!(format_usd(i64::MIN), "-9223372036854.775808");
    }

    #[test]
    fn averages_truncate_toward_zero() {
        assert_eq!(average(10, 3), 3);
        assert_eq!(average(-10, 3), -3);
        assert_eq!(average(10, 0), 0);
    }

    #[test]
    fn periods() {
        assert_eq!(Period::parse(None).unwrap(), Period::Days30);
        assert_eq!(Period::parse(Some("7d")).unwrap().days(), 7);
        assert_eq!(Period::parse(Some("90d")).unwrap().as_str(), "90d");
        for bad in ["", "1d", "30", "30D", "365d"] {
            let err = Period::parse(Some(bad)).unwrap_err();
            assert_eq!(err.code, ErrorCode::ValidationError);
            assert_eq!(err.details.unwrap()["issues"][0]["path"], serde_json::json!(["period"]));
        }
        let w = Period::Days7.window(10 * DAY_MS, true);
        assert_eq!(w, Window { since: 3 * DAY_MS, exclude_estimated: true });
        let w = Period::Days30.window(40 * DAY_MS + 5 * HOUR_MS + 1_234, false);
        assert_eq!(w, Window { since: 10 * DAY_MS + 5 * HOUR_MS, exclude_estimated: false });
        assert_eq!(hour_start(-1), -HOUR_MS);
    }

    #[test]
    fn flags() {
        assert!(!parse_flag(None, "x").unwrap());
        assert!(parse_flag(Some("true"), "x").unwrap());
        assert!(!parse_flag(Some("false"), "x").unwrap());
        assert!(parse_flag(Some("1"), "x").is_err());
        assert!(parse_flag(Some("TRUE"), "x").is_err());
    }

    #[test]
    fn group_by_rules() {
        assert_eq!(GroupBy::parse(Some("api_key")).unwrap(), GroupBy::ApiKey);
        assert_eq!(GroupBy::parse(Some("team-1_x")).unwrap(), GroupBy::Tag("team-1_x".into()));
        assert!(GroupBy::parse(Some(&"a".repeat(100))).is_ok());
        for bad in [None, Some(""), Some("a b"), Some("a.b")] {
            assert_eq!(GroupBy::parse(bad).unwrap_err().code, ErrorCode::ValidationError);
        }
        assert!(GroupBy::parse(Some(&"a".repeat(101))).is_err());
    }

    #[test]
    fn attribution_keys() {
        let uuid = "0b7d9a4e-3c1f-4f5e-9a2b-6c8d0e1f2a3b";
        let key = format!("svc_key_{uuid}");
        assert_eq!(parse_member_key(&GroupBy::ApiKey, &key).unwrap().as_deref(), Some(uuid));
        assert_eq!(parse_member_key(&GroupBy::ApiKey, NO_KEY).unwrap(), None);
        for bad in ["svc_key_nope", uuid, "a/b", "..", "x..y"] {
            assert_eq!(
                parse_member_key(&GroupBy::ApiKey, bad).unwrap_err().code,
                ErrorCode::InvalidKey,
                "{bad}"
            );
        }
        let team = GroupBy::Tag("team".into());
        assert_eq!(parse_member_key(&team, "core").unwrap().as_deref(), Some("core"));
        assert_eq!(parse_member_key(&team, NO_KEY).unwrap(), None);
        assert_eq!(parse_member_key(&team, "a/b").unwrap_err().code, ErrorCode::InvalidKey);
        assert_eq!(parse_member_key(&team, "a..b").unwrap_err().code, ErrorCode::InvalidKey);
        assert_eq!(parse_member_key(&team, &"v".repeat(257)).unwrap_err().code, ErrorCode::ValidationError);
    }

    #[test]
    fn tag_filters_follow_the_tag_rules() {
        let mut issues = Issues::new();
        let tags = tag_filters("limit=5&tag.team=core&tag.env=prod%20eu&tagx=1", &mut issues);
        assert!(issues.is_empty());
        assert_eq!(tags, vec![("team".into(), "core".into()), ("env".into(), "prod eu".into())]);
        let mut issues = Issues::new();
        tag_filters("tag.=x&tag.a%20b=x", &mut issues);
        assert!(issues.finish().is_err());
        let mut issues = Issues::new();
        let many: Vec<String> = (0..11).map(|i| format!("tag.k{i}=v")).collect();
        tag_filters(&many.join("&"), &mut issues);
        assert!(issues.finish().is_err());
    }

    #[test]
    fn list_filters_validate_every_parameter() {
        let q = ListEventsQuery {
            request_id: Some(String::new()),
            api_key_id: Some("key_1".into()),
            source: Some("browser".into()),
            trace_id: Some("ABC".into()),
            session_id: Some("s".repeat(201)),
            budget_status: Some("maybe".into()),
            ..ListEventsQuery::default()
        };
        let err = event_filter(q, "").unwrap_err();
        let issues = err.details.unwrap()["issues"].as_array().unwrap().clone();
        let paths: Vec<String> = issues.iter().map(|i| i["path"][0].as_str().unwrap().to_owned()).collect();
        assert_eq!(paths, ["requestId", "sessionId", "source", "budgetStatus", "traceId", "apiKeyId"]);
        let ok = ListEventsQuery {
            trace_id: Some("0123456789abcdef0123456789abcdef".into()),
            source: Some("mcp".into()),
            ..ListEventsQuery::default()
        };
        assert!(event_filter(ok, "tag.team=core").unwrap().tags.len() == 1);
    }
}
