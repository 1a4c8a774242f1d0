//! The two local tool-protocol (MCP) endpoints of the proxy.
//!
//! - `POST /v1/mcp/budget/check` asks, before a tool call, whether an estimated cost
//!   would pass every budget the call counts against (key, user, tags, customer). It
//!   reserves and at once releases, so it applies exactly the rules a real call meets,
//!   but changes nothing (loop detection is not fed by a check).
//!   Body: `{ estimateMicrodollars? (integer >= 0), toolName?, toolServer?,
//!   sessionId?, customer?, tags? }`; without an estimate, the configured cost of
//!   `toolServer`/`toolName` (see `spendgate_engine::tool_costs`; 0 for a tool never discovered)
//!   is the estimate, and one of the two is required. Answer 200:
//!   `{ allowed, code (null or the denial code), message, budget (tightest, or null) }`.
//! - `POST /v1/mcp/events` records what a tool call cost (`source: mcp`,
//!   `eventType: tool`, provider `mcp`, model = `toolName`). Its cost is reserved on the
//!   same budgets first, all or nothing: a call that would pass a strict budget is
//!   refused with the proxy's 429 codes and `X-Service-Denied: 1`, and leaves a denial
//!   record (cost 0, `budgetStatus: denied`).
//!   Body: `{ toolName, toolServer (1-200 chars), costMicrodollars? (0 to 10^12;
//!   absent: the tool's configured cost, or 0 and tag `_svc_unpriced_tool` for a
//!   tool never discovered), durationMs? (0 to one week), sessionId? (<= 200), traceId?, requestId?
//!   (correlation only), customer?, tags? }`. Answer 201
//!   `{ data: { id, createdAt, budgetStatus } }`. Every event is charged: a repeated
//!   `requestId` is a second tool call, not a duplicate.
//!
//! Both authenticate before they read the body, so a call without a valid key is 401
//! whatever it sends.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use actors::budget::{BudgetSnapshot, Reserve};
use actors::registry::ReserveAllError;
use actors::store::EntityKey;
use serde::Deserialize;
use serde_json::json;

use super::admitted::call_of;
use super::denial::{denial_error, tightest, Refused};
use super::reservation::{Ask, Reservation};
use spendgate_engine::accounting::event::{self, Dedup, EventSpec};
use spendgate_engine::accounting::targets::entity_keys;
use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::db::cost_events::Outcome;
use spendgate_engine::error::{ApiError, Issues};
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::read_json;
use spendgate_engine::util::validate::{check_tags, is_customer_id};
use spendgate_engine::util::{ids, time};

const PROVIDER: &str = "mcp";
/// Largest cost one tool event may report: one million dollars.
const MAX_TOOL_COST_MICRODOLLARS: i64 = 1_000_000_000_000;
/// Longest duration one tool event may report: one week.
const MAX_DURATION_MS: i64 = 604_800_000;
/// Marks a tool event charged 0 because it carried no cost and its tool has none
/// configured.
pub const UNPRICED_TOOL_TAG: &str = "_svc_unpriced_tool";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckInput {
    #[serde(default)]
    pub estimate_microdollars: Option<i64>,
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
    #[serde(default)]
    pub cost_microdollars: Option<i64>,
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

/// The proxy's key check for its local (non-provider) routes: allowed address, key,
/// per-key rate limit.
pub(super) async fn authenticate(req: &HttpRequest, state: &AppState) -> Result<Arc<KeyIdentity>, ApiError> {
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
pub(crate) fn context(
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
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let key = authenticate(&req, &state).await?;
    let input: CheckInput = read_json(&req, payload.into_inner()).await?;
    let mut issues = Issues::new();
    issues.check(
        input.estimate_microdollars.is_none_or(|e| (0..=MAX_TOOL_COST_MICRODOLLARS).contains(&e)),
        &["estimateMicrodollars"],
        "must be an integer from 0 to 1,000,000,000,000 (one million dollars)",
    );
    issues.check(
        input.estimate_microdollars.is_some() || (input.tool_name.is_some() && input.tool_server.is_some()),
        &["estimateMicrodollars"],
        "is required unless toolServer and toolName name a tool with a configured cost",
    );
    issues.check(len_ok(&input.tool_name, 200), &["toolName"], "must be 1 to 200 characters");
    issues.check(len_ok(&input.tool_server, 200), &["toolServer"], "must be 1 to 200 characters");
    check_common(&mut issues, &input.session_id, &input.customer, &input.tags);
    issues.finish()?;
    let estimate = match (input.estimate_microdollars, &input.tool_server, &input.tool_name) {
        (Some(e), _, _) => e,
        (None, Some(server), Some(tool)) => configured_cost(&state, &key, server, tool).await?.unwrap_or(0),
        (None, _, _) => 0,
    };
    let (tags, customer) = context(&key, input.tags, input.customer);
    let keys = entity_keys(&key, &tags, customer.as_deref());
    let registry = state.budgets.registry();
    let reserve = Reserve {
        reservation_id: registry.next_reservation_id(),
        estimate,
        session_id: input.session_id.as_deref().map(Arc::from),
        finalize: false,
        fingerprint: None,
        now_ms: time::now_ms(),
        floor: None,
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
                    s.reserved -= estimate;
                    s.remaining += estimate;
                    (k, s)
                })
                .collect();
            json!({ "allowed": true, "code": null, "message": null, "budget": budget_of(&snapshots) })
        }
        Err(ReserveAllError::Denied { key: entity, denial }) => {
            let err = denial_error(&entity, &denial.reason, &denial.snapshot, estimate, None);
            json!({
                "allowed": false,
                "code": err.code,
                "message": err.message,
                "budget": budget_of(&[(entity.clone(), denial.snapshot)]),
            })
        }
        Err(ReserveAllError::Unavailable { key: entity, error }) => {
            return Err(spendgate_engine::budgets::admission_error(&entity, &error));
        }
    };
    spendgate_engine::telemetry::governed::note(&req, |attrs| {
        use opentelemetry::KeyValue;
        let allowed = answer["allowed"].as_bool().unwrap_or(false);
        attrs.push(KeyValue::new("spendgate.api_key.id", key.key_id.clone()));
        attrs.push(KeyValue::new("spendgate.decision", if allowed { "allowed" } else { "denied" }));
        attrs.push(KeyValue::new("spendgate.estimate_microdollars", estimate));
        if let Some(code) = answer["code"].as_str() {
            attrs.push(KeyValue::new("spendgate.denial_code", code.to_owned()));
        }
        let budget = &answer["budget"];
        if let (Some(t), Some(id)) = (budget["entity_type"].as_str(), budget["entity_id"].as_str()) {
            attrs.push(KeyValue::new("spendgate.budget.entity", format!("{t}:{id}")));
        }
        if let Some(tool) = &input.tool_name {
            attrs.push(KeyValue::new("gen_ai.tool.name", tool.clone()));
        }
    });
    Ok(HttpResponse::Ok().json(answer))
}

/// `POST /v1/mcp/events`.
pub async fn record_event(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let key = authenticate(&req, &state).await?;
    let input: EventInput = read_json(&req, payload.into_inner()).await?;
    validate_event(&input)?;
    let now = time::now_ms();
    let (mut tags, customer) = context(&key, input.tags, input.customer);
    let cost = match input.cost_microdollars {
        Some(cost) => cost,
        None => {
            configured_cost(&state, &key, &input.tool_server, &input.tool_name).await?.unwrap_or_else(|| {
                tags.insert(UNPRICED_TOOL_TAG.to_owned(), "true".to_owned());
                0
            })
        }
    };
    let keys = entity_keys(&key, &tags, customer.as_deref());
    let request_id = input.request_id.unwrap_or_else(|| format!("mcp_{}", uuid::Uuid::now_v7()));
    let reserve = Reserve {
        reservation_id: state.budgets.registry().next_reservation_id(),
        estimate: cost,
        session_id: input.session_id.as_deref().map(Arc::from),
        finalize: false,
        fingerprint: None,
        now_ms: now,
        floor: None,
    };
    let refused = Refused {
        key: &key,
        provider: PROVIDER,
        model: &input.tool_name,
        request_id: &request_id,
        tags: &tags,
        customer: customer.as_deref(),
        session: input.session_id.as_deref(),
        trace_id: input.trace_id.as_deref(),
        source: "mcp",
        event_type: "tool",
        defer: None,
    };
    let call = call_of(&key, PROVIDER, &input.tool_name, now);
    spendgate_engine::telemetry::governed::note(&req, |attrs| {
        use opentelemetry::KeyValue;
        attrs.push(KeyValue::new("spendgate.api_key.id", key.key_id.clone()));
        attrs.push(KeyValue::new("gen_ai.tool.name", input.tool_name.clone()));
        attrs.push(KeyValue::new("spendgate.tool.server", input.tool_server.clone()));
        attrs.push(KeyValue::new("spendgate.cost_microdollars", cost));
        if let Some(c) = &customer {
            attrs.push(KeyValue::new("spendgate.customer.id", c.clone()));
        }
        if let Some(s) = &input.session_id {
            attrs.push(KeyValue::new("spendgate.session.id", s.clone()));
        }
    });
    let mut reservation =
        Reservation::acquire(&state, Ask { keys: &keys, reserve: &reserve, call, refused, bound: None })
            .await?;
    let budget_status = reservation.budget_status();
    spendgate_engine::telemetry::governed::note(&req, |attrs| {
        attrs.push(opentelemetry::KeyValue::new("spendgate.budget_status", budget_status));
    });
    let mut event = event::build(
        EventSpec {
            key: &key,
            request_id,
            provider: PROVIDER.to_owned(),
            model: input.tool_name.clone(),
            source: "mcp",
            event_type: "tool",
            tags,
            customer,
            budget_status,
            dedup: Dedup::Never,
            now,
        },
        true,
    );
    let row = &mut event.row;
    row.cost_microdollars = cost;
    row.duration_ms = input.duration_ms;
    row.session_id = input.session_id;
    row.trace_id = input.trace_id;
    row.tool_name = Some(input.tool_name);
    row.tool_server = Some(input.tool_server);
    reservation.attach(&mut event);
    // A failed commit drops the reservation, which releases every hold.
    let outcomes = state.writer.commit(vec![event]).await?;
    let (id, created_at) = match outcomes.first() {
        Some(Outcome::Inserted { id, created_at } | Outcome::Duplicate { id, created_at }) => {
            (id.clone(), *created_at)
        }
        None => return Err(ApiError::internal("writer returned no outcome")),
    };
    reservation.committed();
    Ok(HttpResponse::build(StatusCode::CREATED).json(json!({ "data": {
        "id": ids::prefixed(ids::COST_EVENT, &id),
        "createdAt": time::iso(created_at),
        "budgetStatus": budget_status,
    }})))
}

/// The configured cost of a tool of the key's organization, `None` when it was never
/// discovered.
async fn configured_cost(
    state: &AppState,
    key: &KeyIdentity,
    server: &str,
    tool: &str,
) -> Result<Option<i64>, ApiError> {
    Ok(state.tool_costs.cost_of(&state.pool, &key.org_id, server, tool).await?)
}

fn validate_event(input: &EventInput) -> Result<(), ApiError> {
    let mut issues = Issues::new();
    issues.check(len_ok(&Some(input.tool_name.clone()), 200), &["toolName"], "must be 1 to 200 characters");
    issues.check(
        len_ok(&Some(input.tool_server.clone()), 200),
        &["toolServer"],
        "must be 1 to 200 characters",
    );
    issues.check(
        input.cost_microdollars.is_none_or(|c| (0..=MAX_TOOL_COST_MICRODOLLARS).contains(&c)),
        &["costMicrodollars"],
        "must be an integer from 0 to 1,000,000,000,000 (one million dollars)",
    );
    issues.check(
        input.duration_ms.is_none_or(|d| (0..=MAX_DURATION_MS).contains(&d)),
        &["durationMs"],
        "must be an integer from 0 to 604,800,000 (one week)",
    );
    issues.check(
        input.trace_id.as_deref().is_none_or(super::trace::is_trace_id),
        &["traceId"],
        "must be 32 lowercase hex characters",
    );
    issues.check(len_ok(&input.request_id, 200), &["requestId"], "must be 1 to 200 characters");
    check_common(&mut issues, &input.session_id, &input.customer, &input.tags);
    issues.finish()
}
