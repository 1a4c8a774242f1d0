//! The two local tool-protocol (MCP) endpoints of the proxy.
//!
//! - `POST /v1/mcp/budget/check` asks, before a tool call, whether an estimated cost
//!   would pass every budget the call counts against (key, user, tags, customer). It
//!   reserves and at once releases, so it applies exactly the rules a real call meets,
//!   but changes nothing (loop detection is not fed by a check).
//!   Body: `{ estimateMicrodollars (integer >= 0, required), toolName?, toolServer?,
//!   sessionId?, customer?, tags? }`. Answer 200:
//!   `{ allowed, code (null or the denial code), message, budget (tightest, or null) }`.
//! - `POST /v1/mcp/events` records what a tool call cost (`source: mcp`,
//!   `eventType: tool`, provider `mcp`, model = `toolName`). Its cost is reserved on the
//!   same budgets first, all or nothing: a call that would pass a strict budget is
//!   refused with the proxy's 429 codes and `X-Service-Denied: 1`, and not recorded.
//!   Body: `{ toolName, toolServer (1-200 chars), costMicrodollars (>= 0), durationMs?,
//!   sessionId? (<= 200), traceId?, requestId? (dedup key), customer?, tags? }`.
//!   Answer 201 `{ data: { id, createdAt, budgetStatus } }`; a repeated `requestId`
//!   answers 200 with the first event's id.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use actors::budget::Reserve;
use actors::registry::ReserveAllError;
use serde::Deserialize;
use serde_json::json;

use super::events;
use super::route::{
    acquire_shared, call_of, denial_error, entity_keys, record_denial, release_holds, tightest,
    with_budget_headers,
};
use crate::api::cost_events_ingest::budget_targets;
use crate::auth::keys::KeyIdentity;
use crate::db::cost_events::{NewCostEvent, Outcome};
use crate::db::models::CostEvent;
use crate::error::{ApiError, Issues};
use crate::state::AppState;
use crate::util::json::JsonBody;
use crate::util::validate::{check_tags, is_customer_id};
use crate::util::{ids, time};
use actors::budget::BudgetSnapshot;
use actors::store::EntityKey;

const PROVIDER: &str = "mcp";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckInput {
    pub estimate_microdollars: i64,
    #[serde(default)]
    pub tool_name: Option<String>,
    #[serde(default)]
    pub tool_server: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub customer: Option<String>,
    #[serde(default)]
    pub tags: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventInput {
    pub tool_name: String,
    pub tool_server: String,
    pub cost_microdollars: i64,
    #[serde(default)]
    pub duration_ms: Option<i64>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub trace_id: Option<String>,
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default)]
    pub customer: Option<String>,
    #[serde(default)]
    pub tags: Option<BTreeMap<String, String>>,
}

async fn authenticate(req: &HttpRequest, state: &AppState) -> Result<Arc<KeyIdentity>, ApiError> {
    super::check_ip(req, state)?;
    let key = super::key_of(req, state).await?;
    if !state.rate_limits.check_key(&key.key_id).allowed {
        return Err(super::rate_limited());
    }
    Ok(key)
}

fn len_ok(s: &Option<String>, max: usize) -> bool {
    s.as_ref().is_none_or(|v| !v.is_empty() && v.chars().count() <= max)
}

/// Effective tags (key defaults under the request's) and the customer.
fn context(
    key: &KeyIdentity,
    tags: Option<BTreeMap<String, String>>,
    customer: Option<String>,
) -> (BTreeMap<String, String>, Option<String>) {
    let mut effective = key.default_tags.clone();
    effective.extend(tags.unwrap_or_default());
    let customer = customer.or_else(|| effective.get("customer").filter(|c| is_customer_id(c)).cloned());
    (effective, customer)
}

fn check_common(
    issues: &mut Issues,
    session: &Option<String>,
    customer: &Option<String>,
    tags: &Option<BTreeMap<String, String>>,
) {
    issues.check(len_ok(session, 200), &["sessionId"], "must be 1 to 200 characters");
    issues.check(
        customer.as_deref().is_none_or(is_customer_id),
        &["customer"],
        "must match [a-zA-Z0-9._:-]+, 1-256 chars",
    );
    if let Some(tags) = tags {
        check_tags(tags, "tags", issues);
    }
}

/// `POST /v1/mcp/budget/check`.
pub async fn budget_check(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: JsonBody<CheckInput>,
) -> Result<HttpResponse, ApiError> {
    let key = authenticate(&req, &state).await?;
    let input = body.value;
    let mut issues = Issues::new();
    issues.check(input.estimate_microdollars >= 0, &["estimateMicrodollars"], "must be an integer >= 0");
    issues.check(len_ok(&input.tool_name, 200), &["toolName"], "must be 1 to 200 characters");
    issues.check(len_ok(&input.tool_server, 200), &["toolServer"], "must be 1 to 200 characters");
    check_common(&mut issues, &input.session_id, &input.customer, &input.tags);
    issues.finish()?;
    let (tags, customer) = context(&key, input.tags, input.customer);
    let keys = entity_keys(&key, &tags, customer.as_deref());
    let registry = state.budgets.registry();
    let reserve = Reserve {
        reservation_id: registry.next_reservation_id(),
        estimate: input.estimate_microdollars,
        session_id: input.session_id.as_deref().map(Arc::from),
        finalize: false,
        fingerprint: None,
        now_ms: time::now_ms(),
    };
    let budget_of = |snapshots: &[(EntityKey, BudgetSnapshot)]| {
        tightest(snapshots).map(|(entity, s)| {
            json!({
                "entity_type": entity.entity_type.as_str(),
                "entity_id": entity.entity_id,
                "limit_microdollars": s.limit,
                "spent_microdollars": s.committed(),
                "remaining_microdollars": s.remaining,
            })
        })
    };
    let answer = match registry.reserve_guarded(&keys, &reserve).await {
        Ok(guard) => {
            let snapshots: Vec<_> = guard.admissions().iter().map(|(k, a)| (k.clone(), a.snapshot)).collect();
            guard.release().await;
            // The figures before this (released) probe.
            let snapshots: Vec<_> = snapshots
                .into_iter()
                .map(|(k, mut s)| {
                    s.reserved -= input.estimate_microdollars;
                    s.remaining += input.estimate_microdollars;
                    (k, s)
                })
                .collect();
            json!({ "allowed": true, "code": null, "message": null, "budget": budget_of(&snapshots) })
        }
        Err(ReserveAllError::Denied { key: entity, denial }) => {
            let err =
                denial_error(&entity, &denial.reason, &denial.snapshot, input.estimate_microdollars, None);
            json!({
                "allowed": false,
                "code": err.code,
                "message": err.message,
                "budget": budget_of(&[(entity.clone(), denial.snapshot)]),
            })
        }
        Err(ReserveAllError::Unavailable { key: entity, error }) => {
            return Err(ApiError::unavailable(format!("budget of {entity} unavailable: {error}")));
        }
    };
    Ok(HttpResponse::Ok().json(answer))
}

/// `POST /v1/mcp/events`.
pub async fn record_event(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: JsonBody<EventInput>,
) -> Result<HttpResponse, ApiError> {
    let key = authenticate(&req, &state).await?;
    let input = body.value;
    let mut issues = Issues::new();
    issues.check(len_ok(&Some(input.tool_name.clone()), 200), &["toolName"], "must be 1 to 200 characters");
    issues.check(
        len_ok(&Some(input.tool_server.clone()), 200),
        &["toolServer"],
        "must be 1 to 200 characters",
    );
    issues.check(input.cost_microdollars >= 0, &["costMicrodollars"], "must be an integer >= 0");
    issues.check(input.duration_ms.is_none_or(|d| d >= 0), &["durationMs"], "must be an integer >= 0");
    issues.check(
        input.trace_id.as_deref().is_none_or(super::trace::is_trace_id),
        &["traceId"],
        "must be 32 lowercase hex characters",
    );
    issues.check(len_ok(&input.request_id, 200), &["requestId"], "must be 1 to 200 characters");
    check_common(&mut issues, &input.session_id, &input.customer, &input.tags);
    issues.finish()?;

    // A repeated request id answers with the first event, before any budget check
    // (the cost was already counted).
    if let Some(request_id) = &input.request_id {
        if let Some((id, created_at)) =
            crate::db::cost_event_queries::find_by_request(&state.pool, &key.org_id, PROVIDER, request_id)
                .await?
        {
            return Ok(HttpResponse::Ok().json(json!({ "data": {
                "id": ids::prefixed(ids::COST_EVENT, &id),
                "createdAt": time::iso(created_at),
                "budgetStatus": "approved",
            }})));
        }
    }
    let now = time::now_ms();
    let (tags, customer) = context(&key, input.tags, input.customer);
    let keys = entity_keys(&key, &tags, customer.as_deref());
    let registry = state.budgets.registry();
    let reserve = Reserve {
        reservation_id: registry.next_reservation_id(),
        estimate: input.cost_microdollars,
        session_id: input.session_id.as_deref().map(Arc::from),
        finalize: false,
        fingerprint: None,
        now_ms: now,
    };
    let call = call_of(&key, PROVIDER, &input.tool_name, now);
    let guard = match registry.reserve_guarded(&keys, &reserve).await {
        Ok(guard) => guard,
        Err(ReserveAllError::Denied { key: entity, denial }) => {
            let err = denial_error(&entity, &denial.reason, &denial.snapshot, input.cost_microdollars, None);
            let mut rows = events::from_ledger(&call, &entity, &denial.events);
            rows.push(events::request_blocked(&call, "budget", Some(json!({ "code": err.code }))));
            record_denial(&state, rows).await;
            return Err(with_budget_headers(err, &[(entity, denial.snapshot)]));
        }
        Err(ReserveAllError::Unavailable { key: entity, error }) => {
            return Err(ApiError::unavailable(format!("budget of {entity} unavailable: {error}")));
        }
    };
    // Several instances on one PostgreSQL: the database arbitrates tool spend like a
    // proxied call's (a conditional hold per budget, freed in the commit that adds the
    // spend), so that no instance's tool calls pass a strict budget the others filled.
    let holds = acquire_shared(&state, &guard, &call, input.cost_microdollars, false).await?;
    let budget_status = if guard.admissions().is_empty() { "skipped" } else { "approved" };
    let row = CostEvent {
        id: ids::new_id(),
        org_id: key.org_id.clone(),
        request_id: input.request_id.unwrap_or_else(|| format!("mcp_{}", uuid::Uuid::now_v7())),
        api_key_id: Some(key.key_id.clone()),
        user_id: Some(key.user_id.clone()),
        provider: PROVIDER.to_owned(),
        model: input.tool_name.clone(),
        input_tokens: 0,
        output_tokens: 0,
        cached_input_tokens: 0,
        reasoning_tokens: 0,
        cost_microdollars: input.cost_microdollars,
        duration_ms: input.duration_ms,
        upstream_duration_ms: None,
        session_id: input.session_id,
        trace_id: input.trace_id,
        event_type: "tool".to_owned(),
        tool_name: Some(input.tool_name),
        tool_server: Some(input.tool_server),
        tags: serde_json::to_string(&tags).unwrap_or_else(|_| "{}".to_owned()),
        customer_id: customer.clone(),
        cost_breakdown: None,
        source: "mcp".to_owned(),
        budget_status: budget_status.to_owned(),
        action_id: None,
        estimated: false,
        created_at: now,
        tool_calls_requested: None,
        tool_definition_tokens: 0,
    };
    let targets = budget_targets(&key, &tags, customer.as_deref());
    let event = NewCostEvent {
        row,
        tags,
        targets,
        outbox: Vec::new(),
        holds: holds.clone(),
        reserved: true,
        body: None,
    };
    let outcomes = match state.writer.commit(vec![event]).await {
        Ok(outcomes) => outcomes,
        Err(e) => {
            drop(guard);
            release_holds(&state, holds);
            return Err(e.into());
        }
    };
    let (status, id, created_at) = match outcomes.first() {
        Some(Outcome::Inserted { id, created_at }) => {
            guard.settle(input.cost_microdollars, time::now_ms()).await;
            (StatusCode::CREATED, id.clone(), *created_at)
        }
        Some(Outcome::Duplicate { id, created_at }) => {
            guard.release().await;
            (StatusCode::OK, id.clone(), *created_at)
        }
        None => return Err(ApiError::internal("writer returned no outcome")),
    };
    Ok(HttpResponse::build(status).json(json!({ "data": {
        "id": ids::prefixed(ids::COST_EVENT, &id),
        "createdAt": time::iso(created_at),
        "budgetStatus": budget_status,
    }})))
}
