//! The OpenAPI part of the per-customer endpoints (`customers.rs` registers them with
//! `web::route`, which carries no annotations).

#![allow(dead_code, reason = "the functions and fields exist for the OpenAPI document only")]

use utoipa::ToSchema;

use spendgate_engine::customers::BindingView;

/// `POST /v1/bind`. `customer_data` / `customerData` are refused.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct BindInput {
    /// `[a-zA-Z0-9._:-]`, 1-256 characters.
    customer_id: String,
    /// 1-256 characters.
    plan_ref: String,
    /// 0 to 10^15 µ$: the customer's budget.
    budget_cap: i64,
    /// 0-100 or null.
    margin_target_percent: Option<i64>,
}

/// `POST /v1/gate`.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct GateInput {
    customer_id: String,
    /// 1 to 10^12 µ$.
    estimated_cost_microdollars: i64,
    /// 1-256 characters or null; the cost event's model.
    feature: Option<String>,
    /// Default false: a read-only advisory check.
    send_event: Option<bool>,
    /// Default false.
    with_preview: Option<bool>,
}

/// The gate's decision (always 200).
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct GateDecision {
    allowed: bool,
    /// `budget_exceeded` or `bind_not_found` (denials only).
    reason: Option<String>,
    /// Microdollars left after this decision, when known.
    remaining: Option<i64>,
    /// `dec_<uuid>`.
    decision_id: String,
    /// `{ retryable, owner_action_required, retry_after_seconds, docs }` (denials).
    #[schema(value_type = Option<Object>)]
    recovery: Option<serde_json::Value>,
    /// `{ scenario, title, message, customerId, currentBalance, requiredBalance,
    /// upgradeUrl }` (denials with `withPreview: true`).
    #[schema(value_type = Option<Object>)]
    preview: Option<serde_json::Value>,
}

/// `GET /v1/customers/{customerId}/unit-economics`.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct UnitEconomics {
    customer_id: String,
    #[schema(value_type = Object)]
    binding: serde_json::Value,
    /// `{ maxMicrodollars, spendMicrodollars, remainingMicrodollars, propagated }`.
    #[schema(value_type = Object)]
    budget: serde_json::Value,
    /// `{ lifetimeCostMicrodollars, eventCount }`.
    #[schema(value_type = Object)]
    cost: serde_json::Value,
    /// `{ decision (approved, denied, skipped or null), at }`.
    #[schema(value_type = Object)]
    latest_budget_check: serde_json::Value,
}

#[utoipa::path(post, path = "/v1/bind", tag = "customers", security(("serviceKey" = [])), request_body = BindInput,
    params(("Idempotency-Key" = Option<String>, Header, description = "1-256 printable ASCII; replays carry Idempotent-Replayed: true")),
    responses((status = 200, description = "The active binding", body = BindingView),
        (status = 400, description = "invalid_customer_id, invalid_plan_ref, invalid_budget_cap, invalid_margin_target, customer_data_unsupported, invalid_idempotency_key, invalid_json"),
        (status = 401, description = "unauthorized"), (status = 403, description = "customer_not_allowed"),
        (status = 409, description = "binding_inactive or idempotency_conflict"),
        (status = 500, description = "internal_error"), (status = 503, description = "idempotency_unavailable")))]
fn bind() {}

#[utoipa::path(post, path = "/v1/gate", tag = "customers", security(("serviceKey" = [])), request_body = GateInput,
    params(("Idempotency-Key" = Option<String>, Header, description = "1-256 printable ASCII; replays carry Idempotent-Replayed: true")),
    responses((status = 200, description = "Allowed or denied", body = GateDecision),
        (status = 400, description = "invalid_customer_id, invalid_estimate, invalid_feature, invalid_idempotency_key, invalid_json"),
        (status = 401, description = "unauthorized"), (status = 403, description = "customer_not_allowed"),
        (status = 409, description = "idempotency_conflict"),
        (status = 500, description = "internal_error"), (status = 503, description = "idempotency_unavailable")))]
fn gate() {}

#[utoipa::path(get, path = "/v1/customers/{customerId}/unit-economics", tag = "customers",
    security(("serviceKey" = [])),
    params(("customerId" = String, Path, description = "URL-encoded customer id")),
    responses((status = 200, body = UnitEconomics),
        (status = 400, description = "invalid_customer_id"), (status = 401, description = "unauthorized"),
        (status = 404, description = "not_found: unbound, other organization, or not allowed for the key")))]
fn unit_economics() {}

#[derive(utoipa::OpenApi)]
#[openapi(paths(bind, gate, unit_economics))]
pub struct ApiDoc;
