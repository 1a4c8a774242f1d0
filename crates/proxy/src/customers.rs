//! The per-customer budget endpoints of the proxy (`X-Service-Key`):
//!
//! - `POST /v1/bind` binds a customer to a plan reference and a budget cap (the
//!   customer's budget, written in the same transaction).
//! - `POST /v1/gate` decides whether a customer may spend an estimate. With
//!   `sendEvent: true` the decision reserves on the same budget actors a proxied call
//!   with `X-Service-Customer` meets (and, with shared budgets, in the database), and an
//!   allowed decision is a durable cost event (`provider: gate`): concurrent gates can
//!   never both pass the cap. With `sendEvent: false` it only reads the customer's
//!   budget. A denial is 200 `allowed: false`; its record and its
//!   `customer_budget.exceeded` event are written after the answer was stored for
//!   idempotent replay, so a replay never fires it again.
//! - `GET /v1/customers/{customerId}/unit-economics` shows the binding, the budget,
//!   lifetime cost and the latest gate decision.
//!
//! Replays of bind and gate carry `Idempotent-Replayed: true`.

use std::sync::Arc;

use actix_web::http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use actors::budget::{BudgetSnapshot, EntityType, Reserve};
use actors::store::EntityKey;
use serde_json::{json, Value};

use super::admitted::call_of;
use super::denial::{self, Deferred, Refused};
use super::mcp::authenticate;
use super::reservation::{Ask, Reservation};
use spendgate_engine::accounting::event::{self, Dedup, EventSpec};
use spendgate_engine::accounting::targets::entity_keys;
use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::customers::{self, BindingView, GateRequest};
use spendgate_engine::db::bindings::{self, Bound, GATE_PROVIDER};
use spendgate_engine::db::models::{Budget, CustomerBinding};
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::idempotency::{self, Ran, Scope};
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::read_json_body;
use spendgate_engine::util::{ids, time};

pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The API version the per-customer endpoints are pinned to (spec: Versioning): they
/// answer in it, and say so, whatever `Service-Version` the request or key asks for.
pub const PINNED_VERSION: &str = "2026-04-01";

/// The answer (or the error's envelope) with the pinned `Service-Version`.
fn pinned(result: Result<HttpResponse, ApiError>) -> HttpResponse {
    use actix_web::ResponseError;
    let mut res = result.unwrap_or_else(|e| e.error_response());
    res.headers_mut().insert(spendgate_engine::SERVICE_VERSION, HeaderValue::from_static(PINNED_VERSION));
    res
}

fn not_allowed() -> ApiError {
    ApiError::new(ErrorCode::CustomerNotAllowed, "This API key may not act for that customer")
}

fn customer_key(key: &KeyIdentity, customer: &str) -> EntityKey {
    EntityKey::new(key.org_id.clone(), EntityType::Customer, customer.to_owned())
}

/// The idempotency scope of bind and gate: replays carry `Idempotent-Replayed`.
fn scope<'a>(
    state: &'a AppState,
    key: &'a KeyIdentity,
    idempotency_key: Option<String>,
    route: &'a str,
    body: &'a [u8],
) -> Scope<'a> {
    Scope {
        pool: &state.pool,
        instance: &state.instance_id,
        key: idempotency_key,
        key_hash: &key.key_hash,
        route,
        body,
        replay_header: REPLAYED,
    }
}

/// `POST /v1/bind`.
pub async fn bind(req: HttpRequest, state: web::Data<AppState>, payload: web::Payload) -> HttpResponse {
    pinned(bind_answer(req, state, payload).await)
}

async fn bind_answer(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let key = authenticate(&req, &state).await?;
    let idempotency_key = idempotency::header_key(&req)?;
    let body = read_json_body::<Value>(&req, payload.into_inner()).await?;
    let bind = customers::parse_bind(&body.value)?;
    if !customers::allowed(&key, &bind.customer_id) {
        return Err(not_allowed());
    }
    let scope = scope(&state, &key, idempotency_key, "/v1/bind", &body.raw);
    let (response, _) = idempotency::run_in(scope, || async {
        let now = time::now_ms();
        let row = CustomerBinding {
            id: uuid::Uuid::new_v4().to_string(),
            org_id: key.org_id.clone(),
            customer_id: bind.customer_id.clone(),
            plan_ref: bind.plan_ref,
            budget_cap_microdollars: bind.budget_cap,
            margin_target_percent: bind.margin_target_percent,
            status: bindings::ACTIVE.to_owned(),
            created_at: now,
            updated_at: now,
        };
        let budget = customer_budget(&key.org_id, &bind.customer_id, bind.budget_cap, now);
        let bound = bindings::bind(&state.pool, row, budget).await.map_err(|e| {
            ApiError::new(ErrorCode::InternalError, format!("Could not store the binding: {e}"))
        })?;
        match bound {
            Bound::Active(saved) => {
                state.bindings.invalidate(&key.org_id, &saved.customer_id);
                state.budgets.registry().invalidate(&customer_key(&key, &saved.customer_id)).await.ok();
                Ok((StatusCode::OK, json!(BindingView::from(&saved))))
            }
            Bound::Inactive(existing) => Err(ApiError::new(
                ErrorCode::BindingInactive,
                format!("The binding of this customer is {}; nothing was changed", existing.status),
            )),
        }
    })
    .await?;
    Ok(response)
}

/// The customer's budget as bind creates it: strict, the cap as its limit, no period.
fn customer_budget(org_id: &str, customer: &str, cap: i64, now: i64) -> Budget {
    Budget {
        id: ids::new_id(),
        org_id: org_id.to_owned(),
        entity_type: EntityType::Customer.as_str().to_owned(),
        entity_id: customer.to_owned(),
        max_budget_microdollars: cap,
        spend_microdollars: 0,
        reserved_microdollars: 0,
        policy: "strict_block".to_owned(),
        reset_interval: None,
        current_period_start: None,
        threshold_percentages: serde_json::to_string(&spendgate_engine::budgets::DEFAULT_THRESHOLDS)
            .unwrap_or_default(),
        velocity_limit_microdollars: None,
        velocity_window_seconds: None,
        velocity_cooldown_seconds: None,
        session_limit_microdollars: None,
        finalization_reserve_microdollars: None,
        loop_max_calls: None,
        loop_window_seconds: None,
        loop_aggregate_max_keys: None,
        created_at: now,
        updated_at: now,
        exact_ceiling: false,
    }
}

/// `POST /v1/gate`.
pub async fn gate(req: HttpRequest, state: web::Data<AppState>, payload: web::Payload) -> HttpResponse {
    pinned(gate_answer(req, state, payload).await)
}

async fn gate_answer(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let key = authenticate(&req, &state).await?;
    let idempotency_key = idempotency::header_key(&req)?;
    let body = read_json_body::<Value>(&req, payload.into_inner()).await?;
    let gate = customers::parse_gate(&body.value)?;
    if !customers::allowed(&key, &gate.customer_id) {
        return Err(not_allowed());
    }
    let decision_id = format!("dec_{}", uuid::Uuid::now_v7());
    let request_id = idempotency_key.clone().unwrap_or_else(|| decision_id.clone());
    let deferred = Deferred::default();
    let scope = scope(&state, &key, idempotency_key, "/v1/gate", &body.raw);
    let ctx =
        GateContext { state: &state, key: &key, gate: &gate, request_id: &request_id, defer: &deferred };
    let (response, ran) = idempotency::run_in(scope, || async {
        let answer = decide(&ctx, &decision_id).await?;
        spendgate_engine::telemetry::governed::note(&req, |attrs| note_gate(attrs, &ctx, &answer));
        Ok((StatusCode::OK, answer))
    })
    .await?;
    let rows = deferred.take();
    if ran == Ran::Handler && !rows.is_empty() {
        denial::record(&state, &ctx.refused(None), rows).await;
    }
    Ok(response)
}

/// The gate's decision on its span.
fn note_gate(attrs: &mut Vec<opentelemetry::KeyValue>, ctx: &GateContext<'_>, answer: &Value) {
    use opentelemetry::KeyValue;
    let allowed = answer["allowed"].as_bool().unwrap_or(false);
    attrs.push(KeyValue::new("spendgate.api_key.id", ctx.key.key_id.clone()));
    attrs.push(KeyValue::new("spendgate.customer.id", ctx.gate.customer_id.clone()));
    attrs.push(KeyValue::new("spendgate.decision", if allowed { "allowed" } else { "denied" }));
    attrs.push(KeyValue::new("spendgate.estimate_microdollars", ctx.gate.estimate));
    if let Some(reason) = answer["reason"].as_str() {
        attrs.push(KeyValue::new("spendgate.denial_code", reason.to_owned()));
    }
    if let Some(feature) = &ctx.gate.feature {
        attrs.push(KeyValue::new("spendgate.feature", feature.clone()));
    }
}

struct GateContext<'a> {
    state: &'a AppState,
    key: &'a Arc<KeyIdentity>,
    gate: &'a GateRequest,
    request_id: &'a str,
    defer: &'a Deferred,
}

impl GateContext<'_> {
    fn model(&self) -> &str {
        self.gate.feature.as_deref().unwrap_or("")
    }

    fn refused<'s>(&'s self, defer: Option<&'s Deferred>) -> Refused<'s> {
        Refused {
            key: self.key,
            provider: GATE_PROVIDER,
            model: self.model(),
            request_id: self.request_id,
            tags: &self.key.default_tags,
            customer: Some(&self.gate.customer_id),
            session: None,
            trace_id: None,
            source: "api",
            event_type: "custom",
            defer,
        }
    }
}

/// The decision's answer body (always 200).
async fn decide(ctx: &GateContext<'_>, decision_id: &str) -> Result<Value, ApiError> {
    let state = ctx.state;
    if !state.bindings.is_active(&state.pool, &ctx.key.org_id, &ctx.gate.customer_id).await? {
        return Ok(denied(ctx, decision_id, "bind_not_found", None, None).await);
    }
    let customer = customer_key(ctx.key, &ctx.gate.customer_id);
    if !ctx.gate.send_event {
        let snapshot = state.budgets.registry().snapshot(&customer).await.map_err(ApiError::unavailable)?;
        let Some(s) = snapshot else {
            return Ok(denied(ctx, decision_id, "bind_not_found", None, None).await);
        };
        return Ok(if s.remaining >= ctx.gate.estimate {
            allowed(decision_id, s.remaining - ctx.gate.estimate)
        } else {
            denied(ctx, decision_id, "budget_exceeded", Some(s.remaining), None).await
        });
    }
    charge(ctx, decision_id, &customer).await
}

/// `sendEvent: true`: reserve everywhere the customer's calls count, record the spend,
/// settle; or answer the denial (recorded by the caller after the answer is stored).
async fn charge(ctx: &GateContext<'_>, decision_id: &str, customer: &EntityKey) -> Result<Value, ApiError> {
    let state = ctx.state;
    let now = time::now_ms();
    let keys = entity_keys(ctx.key, &ctx.key.default_tags, Some(&ctx.gate.customer_id));
    let estimate = ctx.gate.estimate;
    let reserve = Reserve {
        reservation_id: state.budgets.registry().next_reservation_id(),
        estimate,
        session_id: None,
        finalize: false,
        fingerprint: None,
        now_ms: now,
        floor: None,
    };
    let call = call_of(ctx.key, GATE_PROVIDER, ctx.model(), now);
    let ask =
        Ask { keys: &keys, reserve: &reserve, call, refused: ctx.refused(Some(ctx.defer)), bound: None };
    let mut reservation = match Reservation::acquire(state, ask).await {
        Ok(r) => r,
        Err(err) if err.code.status() == StatusCode::TOO_MANY_REQUESTS => {
            let remaining = remaining_of(state, customer).await;
            let retry_after =
                err.headers.iter().find(|(n, _)| n == RETRY_AFTER).and_then(|(_, v)| v.parse().ok());
            return Ok(denied(ctx, decision_id, "budget_exceeded", remaining, retry_after).await);
        }
        Err(err) => return Err(err),
    };
    let remaining = reservation
        .snapshots()
        .iter()
        .find(|(k, _)| k == customer)
        .map(|(_, s): &(EntityKey, BudgetSnapshot)| s.remaining);
    let mut event = event::build(
        EventSpec {
            key: ctx.key,
            request_id: ctx.request_id.to_owned(),
            provider: GATE_PROVIDER.to_owned(),
            model: ctx.model().to_owned(),
            source: "api",
            event_type: "custom",
            tags: ctx.key.default_tags.clone(),
            customer: Some(ctx.gate.customer_id.clone()),
            budget_status: reservation.budget_status(),
            dedup: Dedup::Never,
            now,
        },
        true,
    );
    event.row.cost_microdollars = estimate;
    reservation.attach(&mut event);
    state
        .writer
        .commit(vec![event])
        .await
        .map_err(|e| ApiError::new(ErrorCode::InternalError, format!("Could not record the spend: {e}")))?;
    reservation.committed();
    Ok(allowed(decision_id, remaining.unwrap_or(0)))
}

async fn remaining_of(state: &AppState, customer: &EntityKey) -> Option<i64> {
    state.budgets.registry().snapshot(customer).await.ok().flatten().map(|s| s.remaining)
}

fn allowed(decision_id: &str, remaining: i64) -> Value {
    json!({ "allowed": true, "decisionId": decision_id, "remaining": remaining.max(0) })
}

async fn denied(
    ctx: &GateContext<'_>,
    decision_id: &str,
    reason: &str,
    remaining: Option<i64>,
    retry_after: Option<i64>,
) -> Value {
    let bind_missing = reason == "bind_not_found";
    let mut answer = json!({
        "allowed": false,
        "reason": reason,
        "decisionId": decision_id,
        "recovery": {
            "retryable": bind_missing || retry_after.is_some(),
            "owner_action_required": retry_after.is_none(),
            "retry_after_seconds": retry_after,
            "docs": null,
        },
    });
    if let Some(r) = remaining {
        answer["remaining"] = json!(r.max(0));
    }
    if ctx.gate.with_preview {
        answer["preview"] = preview(ctx, bind_missing, remaining.unwrap_or(0).max(0)).await;
    }
    answer
}

async fn preview(ctx: &GateContext<'_>, bind_missing: bool, balance: i64) -> Value {
    let upgrade_url = spendgate_engine::db::orgs::find(&ctx.state.pool, &ctx.key.org_id)
        .await
        .ok()
        .flatten()
        .and_then(|o| o.customer_upgrade_url);
    let (scenario, title, message) = if bind_missing {
        ("feature_flag", "Not available yet", "This feature is not enabled for your account.")
    } else {
        ("budget_exceeded", "Budget reached", "Your usage budget does not cover this request.")
    };
    json!({
        "scenario": scenario,
        "title": title,
        "message": message,
        "customerId": ctx.gate.customer_id,
        "currentBalance": balance,
        "requiredBalance": ctx.gate.estimate,
        "upgradeUrl": upgrade_url,
    })
}

/// `GET /v1/customers/{customerId}/unit-economics`.
pub async fn unit_economics(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> HttpResponse {
    pinned(unit_economics_answer(req, state, path).await)
}

async fn unit_economics_answer(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let key = authenticate(&req, &state).await?;
    let customer_id = customers::customer_id(Some(&path.into_inner()))?;
    let hidden = || ApiError::not_found("Customer");
    if !customers::allowed(&key, &customer_id) {
        return Err(hidden());
    }
    let binding = bindings::find(&state.pool, &key.org_id, &customer_id).await?.ok_or_else(hidden)?;
    Ok(HttpResponse::Ok().json(spendgate_engine::unit_economics::of(&state, &key.org_id, &binding).await?))
}
