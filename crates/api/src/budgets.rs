//! Budgets: list, upsert, delete and manual reset (dashboard session), where a
//! budget's spend comes from (`/sources`), the live status of an API key's own
//! entities (`/status`, the key itself), and the proxy's velocity breakers
//! (`/velocity-status`).
//!
//! Roles: every member of the organization may read; changing a budget (upsert,
//! delete, reset) takes the admin role. Budgets are the organization's spending
//! controls, and a member who could edit them could lift or reset the very limit that
//! caps their own spending — the same reasoning that puts webhook, tool-cost and
//! margin writes at admin in the spec.
//!
//! Every change invalidates the entity's live budget state (`BudgetService`) after
//! it is committed, so the next proxied request is decided on the new row.

use actix_web::{delete, get, post, web, FromRequest, HttpRequest, HttpResponse};
use actors::budget::{EntityType, Policy, ResetInterval};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use spendgate_engine::auth::keys::KeyAuth;
use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::auth::INTERNAL_SECRET_HEADER as SECRET_HEADER;
use spendgate_engine::budgets::EntityRef;
use spendgate_engine::db::budgets::{SpendFilter, Upserted};
use spendgate_engine::db::{self, models::Budget};
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::bounds::{check_range, MAX_BUDGET_MICRODOLLARS};
use spendgate_engine::util::json::JsonBody;
use spendgate_engine::util::{ids, time, validate};

use super::budget_names::entity_names;

/// The least role that may create, change, reset or delete a budget.
pub const WRITE_ROLE: Role = Role::Admin;
/// Alert thresholds of a budget created without `thresholdPercentages`: a warning at
/// half the budget, another at 80%, and critical alerts at 90% and 95% — the last
/// one still leaves room to act before `budget.exceeded` at 100%.
pub use spendgate_engine::budgets::DEFAULT_THRESHOLDS;
pub const MAX_THRESHOLDS: usize = 10;
/// Velocity window and cooldown bounds, also used for the loop window (spec Limits).
pub const MIN_WINDOW_SECONDS: i64 = 10;
pub const MAX_WINDOW_SECONDS: i64 = 3600;
/// Window and cooldown of a velocity limit given without them.
pub const DEFAULT_VELOCITY_WINDOW_SECONDS: i64 = 60;
pub const DEFAULT_VELOCITY_COOLDOWN_SECONDS: i64 = 60;
/// Upper bound of `loopMaxCalls`; the spec gives none, this keeps it a sane count.
pub const MAX_LOOP_CALLS: i64 = 1_000_000;
/// Upper bound of `loopAggregateMaxKeys`: the loop detector tracks at most 1,024
/// fingerprints per entity, so a larger value could never be honored.
pub const MAX_LOOP_AGGREGATE_KEYS: i64 = 1_024;
/// Total time `velocity-status` waits for the proxy (spec Limits).
pub const VELOCITY_POLL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
/// The largest velocity-state document accepted from the proxy.
const VELOCITY_STATE_MAX_BYTES: usize = 4 * 1_048_576;

/// Body of `POST /api/budgets`: the entity and its whole configuration. An upsert
/// replaces the configuration of an existing budget, so an optional field left out
/// takes its default (an update is not a patch); the spend is kept.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpsertBudgetBody {
    /// `user`, `api_key`, `tag` or `customer`; any other value is 403 `forbidden`.
    entity_type: String,
    /// user: `svc_usr_<uuid>` of a member; api_key: `svc_key_<uuid>` of an active key
    /// of the organization; tag: `key=value`; customer: a customer identifier.
    entity_id: String,
    /// Positive; at most the tier's budget cap.
    max_budget_microdollars: i64,
    /// `strict_block` (default), `soft_block` or `warn`.
    policy: Option<String>,
    /// `daily`, `weekly`, `monthly`, or null for no automatic reset.
    reset_interval: Option<String>,
    /// Up to 10 ascending, distinct values of 1-100. Default `[50, 80, 90, 95]`.
    threshold_percentages: Option<Vec<i64>>,
    /// Positive, or null for no velocity limit.
    velocity_limit_microdollars: Option<i64>,
    /// 10-3600; default 60 when a velocity limit is set. Ignored (stored as null)
    /// without a velocity limit.
    velocity_window_seconds: Option<i64>,
    /// 10-3600; default 60 when a velocity limit is set. Ignored (stored as null)
    /// without a velocity limit.
    velocity_cooldown_seconds: Option<i64>,
    /// Positive, or null for no per-session limit.
    session_limit_microdollars: Option<i64>,
    /// Zero or more and less than `maxBudgetMicrodollars` (else 400 `invalid_input`),
    /// or null.
    finalization_reserve_microdollars: Option<i64>,
    /// 0 disables loop detection; null = system default (50).
    loop_max_calls: Option<i64>,
    /// 10-3600; null = system default.
    loop_window_seconds: Option<i64>,
    /// 1-1024; null = system default (5).
    loop_aggregate_max_keys: Option<i64>,
    /// `strict_block` only (else 400 `validation_error`): a call whose full estimate
    /// does not fit is admitted with its output bound clamped to what the room left
    /// pays for, instead of refused. Default false.
    exact_ceiling: Option<bool>,
}

/// A budget as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetView {
    /// `svc_bgt_<uuid>`.
    id: String,
    entity_type: String,
    entity_id: String,
    /// The entity as people name it: the API key's name (a revoked key's too) or the
    /// user's email; null for tags and customers, whose id is their name.
    entity_name: Option<String>,
    max_budget_microdollars: i64,
    /// Settled spend of the current period.
    spend_microdollars: i64,
    /// Held by calls in flight on this instance and not settled yet: with the spend,
    /// what the next call's admission counts against the limit.
    reserved_microdollars: i64,
    policy: String,
    reset_interval: Option<String>,
    /// Null when the budget has no reset interval.
    current_period_start: Option<String>,
    /// When the current period ends and spend resets (the next UTC day, Monday or
    /// 1st of the month); null when the budget has no reset interval.
    current_period_end: Option<String>,
    threshold_percentages: Vec<i64>,
    velocity_limit_microdollars: Option<i64>,
    velocity_window_seconds: Option<i64>,
    velocity_cooldown_seconds: Option<i64>,
    session_limit_microdollars: Option<i64>,
    /// Null when unset in the upsert response; 0 when unset in list, reset and
    /// sources responses (as the spec shows them).
    finalization_reserve_microdollars: Option<i64>,
    loop_max_calls: Option<i64>,
    loop_window_seconds: Option<i64>,
    loop_aggregate_max_keys: Option<i64>,
    /// Calls are clamped to the room left instead of refused (strict budgets).
    exact_ceiling: bool,
    created_at: String,
    updated_at: String,
}

/// What a budget view adds to its row: the entity's name and the holds of calls in
/// flight.
#[derive(Debug, Default, Clone)]
struct Live {
    name: Option<String>,
    reserved: i64,
}

/// [`Live`] of each of `rows`, in order; holds are read from the budget actors
/// already running on this instance (none is started for it).
async fn live(state: &AppState, org_id: &str, rows: &[Budget]) -> Result<Vec<Live>, ApiError> {
    let names = entity_names(&state.pool, org_id, rows).await?;
    let mut out = Vec::with_capacity(rows.len());
    for (b, name) in rows.iter().zip(names) {
        out.push(Live { name, reserved: state.budgets.reserved(&entity_ref(b)).await });
    }
    Ok(out)
}

async fn live_one(state: &AppState, org_id: &str, row: &Budget) -> Result<Live, ApiError> {
    Ok(live(state, org_id, std::slice::from_ref(row)).await?.pop().unwrap_or_default())
}

/// The end of `b`'s current period, when it has a reset interval.
fn period_end(b: &Budget) -> Option<String> {
    let interval = b.reset_interval.as_deref()?.parse::<ResetInterval>().ok()?;
    let end = actors::budget::next_period_start(interval, b.current_period_start?);
    (end != i64::MAX).then(|| time::iso(end))
}

/// How an unset finalization reserve is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnsetReserve {
    Null,
    Zero,
}

impl BudgetView {
    fn new(b: &Budget, unset_reserve: UnsetReserve, live: Live) -> Self {
        let reserve = match (b.finalization_reserve_microdollars, unset_reserve) {
            (None, UnsetReserve::Zero) => Some(0),
            (reserve, _) => reserve,
        };
        BudgetView {
            id: ids::prefixed(ids::BUDGET, &b.id),
            entity_type: b.entity_type.clone(),
            entity_id: b.entity_id.clone(),
            entity_name: live.name,
            max_budget_microdollars: b.max_budget_microdollars,
            spend_microdollars: b.spend_microdollars,
            reserved_microdollars: live.reserved,
            policy: b.policy.clone(),
            reset_interval: b.reset_interval.clone(),
            current_period_start: time::iso_opt(b.current_period_start),
            current_period_end: period_end(b),
            threshold_percentages: stored_thresholds(&b.threshold_percentages),
            velocity_limit_microdollars: b.velocity_limit_microdollars,
            velocity_window_seconds: b.velocity_window_seconds,
            velocity_cooldown_seconds: b.velocity_cooldown_seconds,
            session_limit_microdollars: b.session_limit_microdollars,
            finalization_reserve_microdollars: reserve,
            loop_max_calls: b.loop_max_calls,
            loop_window_seconds: b.loop_window_seconds,
            loop_aggregate_max_keys: b.loop_aggregate_max_keys,
            exact_ceiling: b.exact_ceiling,
            created_at: time::iso(b.created_at),
            updated_at: time::iso(b.updated_at),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BudgetList {
    data: Vec<BudgetView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeletedBudget {
    deleted: bool,
}

/// The live status of one of the calling key's entities.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntityStatus {
    entity_type: String,
    entity_id: String,
    /// The budget's `maxBudgetMicrodollars`.
    limit_microdollars: i64,
    /// Settled spend plus the reservations of requests in flight.
    spend_microdollars: i64,
    /// `limit - spend`, never below 0.
    remaining_microdollars: i64,
    policy: String,
    reset_interval: Option<String>,
    current_period_start: Option<String>,
    threshold_percentages: Vec<i64>,
    velocity_limit_microdollars: Option<i64>,
    velocity_window_seconds: Option<i64>,
    velocity_cooldown_seconds: Option<i64>,
    session_limit_microdollars: Option<i64>,
    /// 0 when unset.
    finalization_reserve_microdollars: i64,
    /// Calls are clamped to the room left instead of refused (strict budgets).
    exact_ceiling: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BudgetStatus {
    entities: Vec<EntityStatus>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VelocityStatus {
    /// Live velocity windows and breaker states of the organization's entities, as
    /// the proxy reports them; empty when the proxy cannot be asked.
    #[schema(value_type = Vec<Object>)]
    velocity_state: Vec<Value>,
}

/// Cost of one (API key, provider, model) group counted by a budget.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpendSourceView {
    /// `svc_key_<uuid>`, or null for events recorded without a key.
    api_key_id: Option<String>,
    /// Null when there is no key.
    key_name: Option<String>,
    model: String,
    provider: String,
    total_cost_microdollars: i64,
    request_count: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BudgetSources {
    budget: BudgetView,
    /// Costliest first.
    sources: Vec<SpendSourceView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BudgetSourcesBody {
    data: BudgetSources,
}

/// Decodes stored thresholds; unreadable text reads as none.
fn stored_thresholds(json: &str) -> Vec<i64> {
    serde_json::from_str(json).unwrap_or_default()
}

fn entity_ref(b: &Budget) -> EntityRef {
    EntityRef { org_id: b.org_id.clone(), entity_type: b.entity_type.clone(), entity_id: b.entity_id.clone() }
}

/// Parses a path id; anything that is not `svc_bgt_<uuid>` names no budget (404).
fn budget_id(raw: &str) -> Result<String, ApiError> {
    ids::parse_prefixed(ids::BUDGET, raw).ok_or_else(|| ApiError::not_found("Budget"))
}

/// What the organization must own for a budget on an entity to be allowed. Tags and
/// customers are names inside the organization, so they are always its own.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ownership {
    /// The user (bare id) must be a member.
    Member(String),
    /// The key (bare id) must be an active key of the organization.
    ActiveKey(String),
    Inherent,
}

/// A validated upsert: the row to write and what remains to check against storage.
#[derive(Debug)]
struct ValidBudget {
    row: Budget,
    ownership: Ownership,
}

/// `key=value` with a tag key and a non-empty tag value (the key may not be a
/// reserved `_svc_` one, and values may not carry a null byte).
fn parse_tag_entity(raw: &str) -> Option<(&str, &str)> {
    let (key, value) = raw.split_once('=')?;
    let ok = validate::is_tag_key(key)
        && !key.starts_with(validate::RESERVED_TAG_PREFIX)
        && !value.is_empty()
        && value.chars().count() <= validate::MAX_TAG_VALUE
        && !value.contains('\0');
    ok.then_some((key, value))
}

/// Checks `entityId` against its type; returns the stored (canonical) form and what
/// the organization must own.
fn check_entity_id(kind: EntityType, raw: &str, issues: &mut Issues) -> Option<(String, Ownership)> {
    let checked = match kind {
        EntityType::User => ids::parse_prefixed(ids::USER, raw)
            .map(|id| (ids::prefixed(ids::USER, &id), Ownership::Member(id)))
            .ok_or("must be a user id (svc_usr_<uuid>) for entityType user"),
        EntityType::ApiKey => ids::parse_prefixed(ids::API_KEY, raw)
            .map(|id| (ids::prefixed(ids::API_KEY, &id), Ownership::ActiveKey(id)))
            .ok_or("must be an API key id (svc_key_<uuid>) for entityType api_key"),
        EntityType::Tag => parse_tag_entity(raw).map(|_| (raw.to_owned(), Ownership::Inherent)).ok_or(
            "must be key=value for entityType tag: a key of [a-zA-Z0-9_-] (1-64 characters, not starting \
             with _svc_) and a value of 1-256 characters",
        ),
        EntityType::Customer => validate::is_customer_id(raw)
            .then(|| (raw.to_owned(), Ownership::Inherent))
            .ok_or("must be 1 to 256 characters of [a-zA-Z0-9._:-] for entityType customer"),
    };
    checked.map_err(|message| issues.push(&["entityId"], message)).ok()
}

fn check_thresholds(thresholds: &[i64], issues: &mut Issues) {
    if thresholds.len() > MAX_THRESHOLDS {
        issues.push(&["thresholdPercentages"], format!("at most {MAX_THRESHOLDS} values"));
    }
    for (i, p) in thresholds.iter().enumerate() {
        if !(1..=100).contains(p) {
            issues.push(&["thresholdPercentages", &i.to_string()], "must be an integer from 1 to 100");
        }
    }
    if thresholds.windows(2).any(|w| w[0] >= w[1]) {
        issues.push(&["thresholdPercentages"], "must be in ascending order without duplicates");
    }
}

fn check_window(value: Option<i64>, field: &str, issues: &mut Issues) {
    if let Some(v) = value {
        if !(MIN_WINDOW_SECONDS..=MAX_WINDOW_SECONDS).contains(&v) {
            issues.push(&[field], "must be from 10 to 3600 seconds");
        }
    }
}

/// A positive amount of money, at most [`MAX_BUDGET_MICRODOLLARS`].
fn check_positive(value: Option<i64>, field: &str, issues: &mut Issues) {
    if let Some(v) = value {
        check_range(v, 1, MAX_BUDGET_MICRODOLLARS, &[field], issues);
    }
}

/// Validates an upsert body into the row to write (new id, zero spend, a period
/// starting at `now` when there is a reset interval). Order of refusals: an
/// unsupported entity type (403 `forbidden`), then every field problem at once
/// (400 `validation_error`), then a reserve not below the limit (400 `invalid_input`).
fn validate_upsert(body: UpsertBudgetBody, org_id: &str, now: i64) -> Result<ValidBudget, ApiError> {
    let kind: EntityType = body
        .entity_type
        .parse()
        .map_err(|_| ApiError::forbidden("Unsupported entity type: use user, api_key, tag or customer"))?;
    let mut issues = Issues::new();
    let entity = check_entity_id(kind, &body.entity_id, &mut issues);
    let max = body.max_budget_microdollars;
    check_positive(Some(max), "maxBudgetMicrodollars", &mut issues);
    let policy = match body.policy.as_deref().map(str::parse::<Policy>).transpose() {
        Ok(p) => p.unwrap_or_default(),
        Err(_) => {
            issues.push(&["policy"], "must be one of strict_block, soft_block, warn");
            Policy::default()
        }
    };
    let reset_interval = body.reset_interval.as_deref().map(str::parse::<ResetInterval>).transpose();
    let reset_interval = reset_interval.unwrap_or_else(|_| {
        issues.push(&["resetInterval"], "must be one of daily, weekly, monthly, or null");
        None
    });
    let thresholds = body.threshold_percentages.unwrap_or_else(|| DEFAULT_THRESHOLDS.to_vec());
    check_thresholds(&thresholds, &mut issues);

    check_positive(body.velocity_limit_microdollars, "velocityLimitMicrodollars", &mut issues);
    check_window(body.velocity_window_seconds, "velocityWindowSeconds", &mut issues);
    check_window(body.velocity_cooldown_seconds, "velocityCooldownSeconds", &mut issues);
    // Window and cooldown mean something only with a limit: without one they are not
    // kept, so the budget never shows velocity settings that do nothing.
    let (velocity_window, velocity_cooldown) = match body.velocity_limit_microdollars {
        Some(_) => (
            Some(body.velocity_window_seconds.unwrap_or(DEFAULT_VELOCITY_WINDOW_SECONDS)),
            Some(body.velocity_cooldown_seconds.unwrap_or(DEFAULT_VELOCITY_COOLDOWN_SECONDS)),
        ),
        None => (None, None),
    };
    check_positive(body.session_limit_microdollars, "sessionLimitMicrodollars", &mut issues);
    if let Some(r) = body.finalization_reserve_microdollars {
        check_range(r, 0, MAX_BUDGET_MICRODOLLARS, &["finalizationReserveMicrodollars"], &mut issues);
    }
    if body.loop_max_calls.is_some_and(|n| !(0..=MAX_LOOP_CALLS).contains(&n)) {
        issues.push(&["loopMaxCalls"], format!("must be an integer from 0 (disabled) to {MAX_LOOP_CALLS}"));
    }
    check_window(body.loop_window_seconds, "loopWindowSeconds", &mut issues);
    if body.loop_aggregate_max_keys.is_some_and(|n| !(1..=MAX_LOOP_AGGREGATE_KEYS).contains(&n)) {
        issues.push(
            &["loopAggregateMaxKeys"],
            format!("must be an integer from 1 to {MAX_LOOP_AGGREGATE_KEYS}"),
        );
    }
    let exact_ceiling = body.exact_ceiling.unwrap_or(false);
    if exact_ceiling && policy != Policy::StrictBlock {
        issues.push(&["exactCeiling"], "can be true only on a strict_block budget");
    }
    issues.finish()?;
    let (entity_id, ownership) = entity.ok_or_else(|| ApiError::internal("validated entity missing"))?;

    if body.finalization_reserve_microdollars.is_some_and(|r| r >= max) {
        return Err(ApiError::new(
            ErrorCode::InvalidInput,
            "finalizationReserveMicrodollars must be less than maxBudgetMicrodollars",
        ));
    }

    let row = Budget {
        id: ids::new_id(),
        org_id: org_id.to_owned(),
        entity_type: kind.as_str().to_owned(),
        entity_id,
        max_budget_microdollars: max,
        spend_microdollars: 0,
        reserved_microdollars: 0,
        policy: policy.as_str().to_owned(),
        reset_interval: reset_interval.map(|i| i.as_str().to_owned()),
        current_period_start: reset_interval.map(|_| now),
        threshold_percentages: serde_json::to_string(&thresholds).map_err(ApiError::internal)?,
        velocity_limit_microdollars: body.velocity_limit_microdollars,
        velocity_window_seconds: velocity_window,
        velocity_cooldown_seconds: velocity_cooldown,
        session_limit_microdollars: body.session_limit_microdollars,
        finalization_reserve_microdollars: body.finalization_reserve_microdollars,
        loop_max_calls: body.loop_max_calls,
        loop_window_seconds: body.loop_window_seconds,
        loop_aggregate_max_keys: body.loop_aggregate_max_keys,
        created_at: now,
        updated_at: now,
        exact_ceiling,
    };
    Ok(ValidBudget { row, ownership })
}

/// Refuses with 403 `forbidden` an entity the organization does not own.
async fn check_ownership(state: &AppState, org_id: &str, ownership: &Ownership) -> Result<(), ApiError> {
    let owned = match ownership {
        Ownership::Member(user_id) => db::orgs::membership(&state.pool, org_id, user_id).await?.is_some(),
        Ownership::ActiveKey(key_id) => db::keys::find_active(&state.pool, org_id, key_id).await?.is_some(),
        Ownership::Inherent => true,
    };
    if owned {
        Ok(())
    } else {
        Err(ApiError::forbidden("The entity does not belong to this organization"))
    }
}

/// Lists every budget of the organization (users, keys, tags and customers), newest
/// first.
#[utoipa::path(get, path = "/api/budgets", tag = "budgets", security(("session" = [])),
    description = "Session, viewer and above. An unset finalization reserve shows as 0.",
    responses((status = 200, description = "`{ data: Budget[] }`", body = BudgetList),
        (status = 401, description = "authentication_required")))]
#[get("/budgets")]
pub async fn list_budgets(state: web::Data<AppState>, auth: SessionAuth) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let rows = db::budgets::list(&state.pool, &auth.org.id).await?;
    let live = live(&state, &auth.org.id, &rows).await?;
    let data = rows.iter().zip(live).map(|(b, l)| BudgetView::new(b, UnsetReserve::Zero, l)).collect();
    Ok(HttpResponse::Ok().json(BudgetList { data }))
}

/// Creates the budget of an entity, or replaces the configuration of the entity's
/// existing budget (its id and spend are kept). Answers 201 with the bare budget in
/// both cases.
#[utoipa::path(post, path = "/api/budgets", tag = "budgets", security(("session" = [])), request_body = UpsertBudgetBody,
    description = "Session, admin and above. Upserts on (entityType, entityId); the body is the whole \
        configuration. New budgets count against the tier's budget limit (Free 20, Pro 500); \
        maxBudgetMicrodollars may not exceed the tier's cap.",
    responses((status = 201, description = "The bare Budget object (no `data` wrapper)", body = BudgetView),
        (status = 400, description = "validation_error; invalid_input (finalization reserve >= limit); \
            spend_cap_exceeded (over the tier cap)"),
        (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden: role, unsupported entity type, entity not owned, or tier \
            budget-count limit")))]
#[post("/budgets")]
pub async fn upsert_budget(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    auth.require(WRITE_ROLE)?;
    // The body is read only once the caller is known to be allowed: an anonymous or
    // read-only caller learns nothing from body validation, and the session lookup
    // is never abandoned half-way because a concurrently extracted body failed.
    let body = JsonBody::<UpsertBudgetBody>::from_request(&req, &mut payload.into_inner()).await?;
    let valid = validate_upsert(body.value, &auth.org.id, time::now_ms())?;
    let plan = auth.plan();
    let limits = plan.limits();
    if let Some(cap) = limits.budget_cap_microdollars {
        if valid.row.max_budget_microdollars > cap {
            return Err(ApiError::new(
                ErrorCode::SpendCapExceeded,
                format!("The {} plan caps a budget at {cap} microdollars", plan.as_str()),
            )
            .with_details(json!({ "capMicrodollars": cap, "plan": plan.as_str() })));
        }
    }
    check_ownership(&state, &auth.org.id, &valid.ownership).await?;
    let saved = match db::budgets::upsert(&state.pool, valid.row, limits.budgets).await? {
        Upserted::Created(b) | Upserted::Updated(b) => b,
        Upserted::LimitReached => {
            return Err(ApiError::forbidden(format!(
                "The {} plan allows {} budgets; delete one or upgrade",
                plan.as_str(),
                limits.budgets.unwrap_or_default()
            ))
            .with_details(json!({ "limit": limits.budgets, "plan": plan.as_str() })))
        }
    };
    state.budgets.invalidate(&entity_ref(&saved)).await;
    let live = live_one(&state, &auth.org.id, &saved).await?;
    Ok(HttpResponse::Created().json(BudgetView::new(&saved, UnsetReserve::Null, live)))
}

/// Deletes a budget; enforcement of its entity stops.
#[utoipa::path(delete, path = "/api/budgets/{id}", tag = "budgets", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_bgt_<uuid>`")),
    description = "Session, admin and above.",
    responses((status = 200, description = "`{ deleted: true }`", body = DeletedBudget),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found: missing or another organization's")))]
#[delete("/budgets/{id}")]
pub async fn delete_budget(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(WRITE_ROLE)?;
    let id = budget_id(&path)?;
    let deleted = db::budgets::delete(&state.pool, &auth.org.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("Budget"))?;
    state.budgets.invalidate(&entity_ref(&deleted)).await;
    Ok(HttpResponse::Ok().json(DeletedBudget { deleted: true }))
}

/// Resets a budget's spend to 0; with a reset interval a new period starts now.
/// The configuration is unchanged.
#[utoipa::path(post, path = "/api/budgets/{id}", tag = "budgets", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_bgt_<uuid>`")),
    description = "Session, admin and above. No body. An unset finalization reserve shows as 0.",
    responses((status = 200, description = "The bare Budget object", body = BudgetView),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found: missing or another organization's")))]
#[post("/budgets/{id}")]
pub async fn reset_budget(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(WRITE_ROLE)?;
    let id = budget_id(&path)?;
    let reset = db::budgets::reset(&state.pool, &auth.org.id, &id, time::now_ms())
        .await?
        .ok_or_else(|| ApiError::not_found("Budget"))?;
    state.budgets.invalidate(&entity_ref(&reset)).await;
    let live = live_one(&state, &auth.org.id, &reset).await?;
    Ok(HttpResponse::Ok().json(BudgetView::new(&reset, UnsetReserve::Zero, live)))
}

/// The live status of the calling key's user entity and of the key itself, for
/// those of the two that have a budget.
#[utoipa::path(get, path = "/api/budgets/status", tag = "budgets", security(("serviceKey" = [])),
    description = "API key. Spend includes reservations of requests in flight; remaining is clamped at 0.",
    responses((status = 200, body = BudgetStatus), (status = 401, description = "authentication_required"),
        (status = 429, description = "rate_limit_exceeded; Retry-After: 60")))]
#[get("/budgets/status")]
pub async fn get_budget_status(state: web::Data<AppState>, key: KeyAuth) -> Result<HttpResponse, ApiError> {
    let entities = [
        (EntityType::User.as_str(), ids::prefixed(ids::USER, &key.user_id)),
        (EntityType::ApiKey.as_str(), ids::prefixed(ids::API_KEY, &key.key_id)),
    ];
    let rows = db::budgets::for_entities(&state.pool, &key.org_id, &entities).await?;
    let mut reserved = Vec::with_capacity(rows.len());
    for b in &rows {
        reserved.push(state.budgets.reserved(&entity_ref(b)).await);
    }
    let entities = rows
        .iter()
        .zip(reserved)
        .map(|(b, reserved)| {
            let spend = b.spend_microdollars.saturating_add(reserved);
            EntityStatus {
                entity_type: b.entity_type.clone(),
                entity_id: b.entity_id.clone(),
                limit_microdollars: b.max_budget_microdollars,
                spend_microdollars: spend,
                remaining_microdollars: b.max_budget_microdollars.saturating_sub(spend).max(0),
                policy: b.policy.clone(),
                reset_interval: b.reset_interval.clone(),
                current_period_start: time::iso_opt(b.current_period_start),
                threshold_percentages: stored_thresholds(&b.threshold_percentages),
                velocity_limit_microdollars: b.velocity_limit_microdollars,
                velocity_window_seconds: b.velocity_window_seconds,
                velocity_cooldown_seconds: b.velocity_cooldown_seconds,
                session_limit_microdollars: b.session_limit_microdollars,
                finalization_reserve_microdollars: b.finalization_reserve_microdollars.unwrap_or(0),
                exact_ceiling: b.exact_ceiling,
            }
        })
        .collect();
    Ok(HttpResponse::Ok().json(BudgetStatus { entities }))
}

thread_local! {
    /// One client per worker thread: `awc::Client` is not `Send`.
    static PROXY_CLIENT: awc::Client = awc::Client::builder().timeout(VELOCITY_POLL_TIMEOUT).finish();
}

/// Asks the proxy (`GET /internal/budget/velocity-state`) for the organization's
/// velocity state, within [`VELOCITY_POLL_TIMEOUT`] in total.
async fn fetch_velocity_state(state: &AppState, org_id: &str) -> Result<Vec<Value>, String> {
    let secret = state.config.internal_secret.as_deref().ok_or("no internal secret is configured")?;
    let url = format!("http://{}/internal/budget/velocity-state", state.proxy_addr());
    let client = PROXY_CLIENT.with(Clone::clone);
    let org = ids::prefixed(ids::ORG, org_id);
    let poll = async {
        let mut res = client
            .get(&url)
            .query(&[("orgId", org.as_str())])
            .map_err(|e| e.to_string())?
            .insert_header((SECRET_HEADER, secret))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !res.status().is_success() {
            return Err(format!("proxy answered {}", res.status()));
        }
        let body: VelocityStatus =
            res.json().limit(VELOCITY_STATE_MAX_BYTES).await.map_err(|e| e.to_string())?;
        Ok(body.velocity_state)
    };
    tokio::time::timeout(VELOCITY_POLL_TIMEOUT, poll).await.map_err(|_| "timed out".to_owned())?
}

/// The proxy's live velocity windows and breaker states for the organization. Any
/// failure to ask the proxy (none configured, unreachable, timeout, non-2xx) yields
/// an empty list rather than an error: the dashboard shows "no live state".
#[utoipa::path(get, path = "/api/budgets/velocity-status", tag = "budgets", security(("session" = [])),
    description = "Session, viewer and above. Polls the proxy with a 3-second timeout.",
    responses((status = 200, description = "`{ velocityState: [...] }`", body = VelocityStatus),
        (status = 401, description = "authentication_required")))]
#[get("/budgets/velocity-status")]
pub async fn get_velocity_status(
    state: web::Data<AppState>,
    auth: SessionAuth,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let velocity_state = fetch_velocity_state(&state, &auth.org.id).await.unwrap_or_else(|reason| {
        tracing::debug!(%reason, "velocity state unavailable");
        Vec::new()
    });
    Ok(HttpResponse::Ok().json(VelocityStatus { velocity_state }))
}

/// The cost events a budget counts, by API key, provider and model.
fn spend_filter(b: &Budget) -> Option<SpendFilter> {
    match b.entity_type.parse::<EntityType>().ok()? {
        EntityType::User => ids::parse_prefixed(ids::USER, &b.entity_id).map(SpendFilter::User),
        EntityType::ApiKey => ids::parse_prefixed(ids::API_KEY, &b.entity_id).map(SpendFilter::ApiKey),
        EntityType::Tag => parse_tag_entity(&b.entity_id)
            .map(|(key, value)| SpendFilter::Tag { key: key.to_owned(), value: value.to_owned() }),
        EntityType::Customer => Some(SpendFilter::Customer(b.entity_id.clone())),
    }
}

/// What makes up a budget's spend in its current period (all time without a reset
/// interval): the entity's cost events grouped by API key, provider and model.
#[utoipa::path(get, path = "/api/budgets/{id}/sources", tag = "budgets", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_bgt_<uuid>`")),
    description = "Session, viewer and above.",
    responses((status = 200, description = "`{ data: { budget, sources } }`", body = BudgetSourcesBody),
        (status = 401, description = "authentication_required"),
        (status = 404, description = "not_found: missing or another organization's")))]
#[get("/budgets/{id}/sources")]
pub async fn get_budget_sources(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let id = budget_id(&path)?;
    let budget = db::budgets::find(&state.pool, &auth.org.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("Budget"))?;
    let groups = match spend_filter(&budget) {
        Some(filter) => {
            db::budgets::spend_sources(&state.pool, &auth.org.id, &filter, budget.current_period_start)
                .await?
        }
        None => Vec::new(),
    };
    let key_ids: Vec<String> = groups.iter().filter_map(|g| g.api_key_id.clone()).collect();
    let names = db::budgets::key_names(&state.pool, &auth.org.id, &key_ids).await?;
    let sources = groups
        .into_iter()
        .map(|g| SpendSourceView {
            key_name: g.api_key_id.as_ref().and_then(|k| names.get(k).cloned()),
            api_key_id: g.api_key_id.map(|k| ids::prefixed(ids::API_KEY, &k)),
            model: g.model,
            provider: g.provider,
            total_cost_microdollars: g.total_cost_microdollars,
            request_count: g.request_count,
        })
        .collect();
    let live = live_one(&state, &auth.org.id, &budget).await?;
    Ok(HttpResponse::Ok().json(BudgetSourcesBody {
        data: BudgetSources { budget: BudgetView::new(&budget, UnsetReserve::Zero, live), sources },
    }))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    // The fixed paths come before `{id}` ones.
    cfg.service(get_budget_status)
        .service(get_velocity_status)
        .service(list_budgets)
        .service(upsert_budget)
        .service(get_budget_sources)
        .service(reset_budget)
        .service(delete_budget);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    list_budgets,
    upsert_budget,
    delete_budget,
    reset_budget,
    get_budget_status,
    get_velocity_status,
    get_budget_sources
))]
pub struct ApiDoc;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const USER: &str = "svc_usr_6f1c1c1e-8f5e-4d55-9d7a-2f0a3c1b2d3e";

    fn body(v: Value) -> UpsertBudgetBody {
        serde_json::from_value(v).unwrap()
    }

    fn valid(v: Value) -> Result<ValidBudget, ApiError> {
        validate_upsert(body(v), "org", 1_000)
    }

    fn issue_paths(err: &ApiError) -> Vec<Value> {
        assert_eq!(err.code, ErrorCode::ValidationError, "{err}");
        let details = err.details.as_ref().unwrap();
        details["issues"].as_array().unwrap().iter().map(|i| i["path"].clone()).collect()
    }

    #[test]
    fn defaults_fill_a_minimal_body() {
        let v = valid(json!({ "entityType": "user", "entityId": USER, "maxBudgetMicrodollars": 5 })).unwrap();
        assert_eq!(v.ownership, Ownership::Member(USER[8..].to_owned()));
        assert_eq!(v.row.entity_id, USER);
        assert_eq!(v.row.policy, "strict_block");
        assert_eq!(v.row.threshold_percentages, "[50,80,90,95]");
        assert_eq!(v.row.reset_interval, None);
        assert_eq!(v.row.current_period_start, None);
        assert_eq!(v.row.velocity_window_seconds, None);
        assert_eq!(v.row.spend_microdollars, 0);
    }

    #[test]
    fn velocity_limit_gets_default_window_and_cooldown() {
        let v = valid(json!({ "entityType": "tag", "entityId": "team=a=b", "maxBudgetMicrodollars": 5,
            "velocityLimitMicrodollars": 3, "resetInterval": "daily" }))
        .unwrap();
        assert_eq!(v.row.velocity_window_seconds, Some(60));
        assert_eq!(v.row.velocity_cooldown_seconds, Some(60));
        assert_eq!(v.row.current_period_start, Some(1_000));
        assert_eq!(v.ownership, Ownership::Inherent);
        let v = valid(json!({ "entityType": "customer", "entityId": "acme", "maxBudgetMicrodollars": 5,
            "velocityWindowSeconds": 30 }))
        .unwrap();
        assert_eq!(v.row.velocity_window_seconds, None);
    }

    #[test]
    fn refusal_order_is_type_then_fields_then_reserve() {
        let err =
            valid(json!({ "entityType": "team", "entityId": "x", "maxBudgetMicrodollars": -1 })).unwrap_err();
        assert_eq!(err.code, ErrorCode::Forbidden);
        let err = valid(json!({ "entityType": "user", "entityId": "x", "maxBudgetMicrodollars": 0,
            "finalizationReserveMicrodollars": 5 }))
        .unwrap_err();
        assert_eq!(issue_paths(&err), vec![json!(["entityId"]), json!(["maxBudgetMicrodollars"])]);
        let err = valid(json!({ "entityType": "customer", "entityId": "c", "maxBudgetMicrodollars": 5,
            "finalizationReserveMicrodollars": 5 }))
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
    }

    #[test]
    fn every_field_rule_is_checked() {
        let err = valid(json!({
            "entityType": "api_key", "entityId": "svc_key_nope", "maxBudgetMicrodollars": 5,
            "policy": "block", "resetInterval": "hourly", "thresholdPercentages": [0, 50, 50, 101],
            "velocityLimitMicrodollars": 0, "velocityWindowSeconds": 9, "velocityCooldownSeconds": 3601,
            "sessionLimitMicrodollars": -1, "finalizationReserveMicrodollars": -1, "loopMaxCalls": -1,
            "loopWindowSeconds": 5, "loopAggregateMaxKeys": 0,
        }))
        .unwrap_err();
        let paths = issue_paths(&err);
        for field in [
            "entityId",
            "policy",
            "resetInterval",
            "velocityLimitMicrodollars",
            "velocityWindowSeconds",
            "velocityCooldownSeconds",
            "sessionLimitMicrodollars",
            "finalizationReserveMicrodollars",
            "loopMaxCalls",
            "loopWindowSeconds",
            "loopAggregateMaxKeys",
        ] {
            assert!(paths.contains(&json!([field])), "{field}: {paths:?}");
        }
        assert!(paths.contains(&json!(["thresholdPercentages", "0"])));
        assert!(paths.contains(&json!(["thresholdPercentages", "3"])));
        assert!(paths.contains(&json!(["thresholdPercentages"])));
        let eleven: Vec<i64> = (1..=11).collect();
        let err = valid(json!({ "entityType": "customer", "entityId": "c", "maxBudgetMicrodollars": 5,
            "thresholdPercentages": eleven }))
        .unwrap_err();
        assert_eq!(issue_paths(&err), vec![json!(["thresholdPercentages"])]);
    }

    #[test]
    fn tag_entities() {
        assert_eq!(parse_tag_entity("team=core"), Some(("team", "core")));
        assert_eq!(parse_tag_entity("a=b=c"), Some(("a", "b=c")));
        assert_eq!(
            parse_tag_entity(&format!("{}={}", "k".repeat(64), "v".repeat(256))).map(|_| ()),
            Some(())
        );
        for bad in ["team", "=v", "team=", "bad key=v", "_svc_x=v", "k=a\0b"] {
            assert_eq!(parse_tag_entity(bad), None, "{bad:?}");
        }
        assert_eq!(parse_tag_entity(&format!("k={}", "v".repeat(257))), None);
        assert_eq!(parse_tag_entity(&format!("{}=v", "k".repeat(65))), None);
    }

    #[test]
    fn reserve_zero_in_lists_null_in_upsert() {
        let row = valid(json!({ "entityType": "customer", "entityId": "c", "maxBudgetMicrodollars": 5 }))
            .unwrap()
            .row;
        let listed =
            serde_json::to_value(BudgetView::new(&row, UnsetReserve::Zero, Live::default())).unwrap();
        assert_eq!(listed["finalizationReserveMicrodollars"], 0);
        let upserted =
            serde_json::to_value(BudgetView::new(&row, UnsetReserve::Null, Live::default())).unwrap();
        assert_eq!(upserted["finalizationReserveMicrodollars"], Value::Null);
        assert!(upserted["id"].as_str().unwrap().starts_with("svc_bgt_"));
    }
}
