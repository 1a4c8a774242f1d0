//! Human-in-the-loop actions: `POST /api/actions` and `/:id/result` (API key),
//! `GET /api/actions` and `/:id/approve|reject` (session), `GET /api/actions/:id` and
//! `/:id/costs` (either). Transitions go through the action's actor
//! (`spendgate_engine::actions`), which serializes them and writes them conditionally.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{get, post, web, HttpRequest, HttpResponse};
use actors::action::actor::ActionError;
use actors::action::{ActionStatus, Command, Report, TransitionError};
use serde::Deserialize;
use serde_json::json;

use crate::actions_input::{self as input, CreateActionBody, ResultBody};
use spendgate_engine::actions::events::BUDGET_INCREASE;
use spendgate_engine::auth::dual::DualAuth;
use spendgate_engine::auth::keys::KeyAuth;
use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::db::{self, models::ActionRow};
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::idempotency;
use spendgate_engine::plans::{Plan, Role};
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::JsonBody;
use spendgate_engine::util::pagination;
use spendgate_engine::util::{ids, time};

const DEFAULT_PAGE_SIZE: i64 = 50;
pub const MAX_WAIT_SECONDS: u64 = 60;
/// Cost events listed per action, newest first.
pub const MAX_COSTS: i64 = 1_000;

/// The bare id of a path's `svc_act_…`; anything else is not found.
fn action_id(raw: &str) -> Result<String, ApiError> {
    ids::parse_prefixed(ids::ACTION, raw).ok_or_else(|| ApiError::not_found("Action"))
}

fn action_error(e: ActionError) -> ApiError {
    match e {
        ActionError::NotFound => ApiError::not_found("Action"),
        ActionError::Transition(TransitionError::Invalid) => ApiError::new(
            ErrorCode::InvalidActionTransition,
            "The action is not in the status this transition requires",
        ),
        ActionError::Transition(TransitionError::Expired) => {
            ApiError::new(ErrorCode::ActionExpired, "The action has expired")
        }
        ActionError::Stale => {
            ApiError::new(ErrorCode::StaleAction, "The action was changed concurrently; read it again")
        }
        ActionError::Refused(why) => ApiError::new(ErrorCode::Conflict, why),
        ActionError::Unavailable(why) => ApiError::unavailable(why),
    }
}

/// Creates a pending action. `budget_increase` needs Pro or above and a budget for
/// the named entity.
#[utoipa::path(post, path = "/api/actions", tag = "actions", request_body = CreateActionBody,
    security(("serviceKey" = [])),
    params(("Idempotency-Key" = Option<String>, Header, description = "Replays the first answer for 24 hours")),
    responses((status = 201, description = "`{ data: { id, status: pending, expiresAt } }`"),
        (status = 400, description = "validation_error, invalid_json or invalid_idempotency_key"),
        (status = 403, description = "forbidden: budget_increase on the Free tier"),
        (status = 409, description = "idempotency_conflict, or limit_exceeded: max_pending_actions pending already"),
        (status = 503, description = "request_in_progress, idempotency_unavailable or service_unavailable")))]
#[post("/actions")]
pub async fn create_action(
    state: web::Data<AppState>,
    req: HttpRequest,
    key: KeyAuth,
    body: JsonBody<CreateActionBody>,
) -> Result<HttpResponse, ApiError> {
    let header_key = idempotency::header_key(&req)?;
    let mut issues = Issues::new();
    let expires_in = input::validate_create(&body.value, &mut issues);
    issues.finish()?;
    let key = key.0;
    if body.value.action_type == BUDGET_INCREASE && key.plan == Plan::Free {
        return Err(ApiError::forbidden("budget_increase actions require the Pro tier or above"));
    }
    let input = body.value;
    idempotency::run(
        &state.pool,
        &state.instance_id,
        header_key,
        &key.key_hash,
        "/api/actions",
        &body.raw,
        || async {
            if let Some(increase) = budget_entity(&input) {
                let found =
                    db::budgets::find_by_entity(&state.pool, &key.org_id, &increase.0, &increase.1).await?;
                if found.is_none() {
                    return Err(ApiError::invalid_field(
                        &["payload", "entityId"],
                        "no budget exists for this entity",
                    ));
                }
            }
            let now = time::now_ms();
            let row = ActionRow {
                id: ids::new_id(),
                org_id: key.org_id.clone(),
                api_key_id: Some(key.key_id.clone()),
                agent_id: input.agent_id,
                action_type: input.action_type,
                status: ActionStatus::Pending.as_str().to_owned(),
                payload: input.payload.to_string(),
                metadata: input.metadata.map(|m| m.to_string()),
                result: None,
                error_message: None,
                environment: input.environment,
                source_framework: input.source_framework,
                approved_by: None,
                rejected_by: None,
                created_at: now,
                approved_at: None,
                rejected_at: None,
                executed_at: None,
                expires_at: expires_in.map(|s| now + s * 1_000),
                expired_at: None,
                updated_at: now,
                version: 0,
            };
            let max_pending = state.config.max_pending_actions;
            if !db::actions::insert(&state.pool, &state.outbox, &row, max_pending).await? {
                return Err(ApiError::new(
                    ErrorCode::LimitExceeded,
                    format!("The organization already has {max_pending} pending actions; decide or let some expire"),
                ));
            }
            state.actions.created(&row);
            let data = json!({
                "id": ids::prefixed(ids::ACTION, &row.id),
                "status": row.status,
                "expiresAt": row.expires_at.map(time::iso),
            });
            Ok((StatusCode::CREATED, json!({ "data": data })))
        },
    )
    .await
}

/// The (entity type, entity id) a `budget_increase` body names.
fn budget_entity(body: &CreateActionBody) -> Option<(String, String)> {
    if body.action_type != BUDGET_INCREASE {
        return None;
    }
    let text = |f: &str| body.payload.get(f).and_then(|v| v.as_str()).map(str::to_owned);
    Some((text("entityType")?, text("entityId")?))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    status: Option<String>,
    statuses: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// The organization's actions, newest first; `status` and `statuses` filter (together:
/// either).
#[utoipa::path(get, path = "/api/actions", tag = "actions", security(("session" = [])),
    params(("status" = Option<String>, Query, description = "One status"),
        ("statuses" = Option<String>, Query, description = "Comma-separated statuses"),
        ("limit" = Option<i64>, Query, description = "1-100, default 50"),
        ("cursor" = Option<String>, Query, description = "JSON-encoded `{ createdAt, id }`")),
    responses((status = 200, description = "`{ data: Action[], cursor }`"),
        (status = 400, description = "validation_error")))]
#[get("/actions")]
pub async fn list_actions(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let query = web::Query::<ListQuery>::from_query(req.query_string())
        .map_err(|_| ApiError::invalid_field(&[], "malformed query string"))?
        .into_inner();
    let mut statuses: Vec<String> = Vec::new();
    let mut issues = Issues::new();
    for (field, value) in [("status", query.status.as_deref()), ("statuses", query.statuses.as_deref())] {
        let Some(value) = value else { continue };
        let list: Vec<&str> =
            if field == "status" { vec![value] } else { value.split(',').map(str::trim).collect() };
        for s in list {
            if s.parse::<ActionStatus>().is_ok() {
                statuses.push(s.to_owned());
            } else {
                issues.push(
                    &[field],
                    "must be pending, approved, rejected, expired, executing, executed or failed",
                );
            }
        }
    }
    issues.finish()?;
    let (limit, after) =
        pagination::parse(query.limit.as_deref(), query.cursor.as_deref(), DEFAULT_PAGE_SIZE, ids::ACTION)?;
    let rows =
        db::actions::list_page(&state.pool, &auth.org.id, &statuses, after.as_ref(), limit + 1).await?;
    let (rows, cursor) = pagination::page(rows, limit, ids::ACTION, |a| (a.created_at, a.id.clone()));
    let data: Vec<_> = rows.iter().map(input::view).collect();
    Ok(HttpResponse::Ok().json(json!({ "data": data, "cursor": cursor })))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetQuery {
    wait_seconds: Option<String>,
}

/// One action. With `waitSeconds` (0-60) a pending action is answered as soon as it
/// leaves `pending`, or when the time is up (still pending).
#[utoipa::path(get, path = "/api/actions/{id}", tag = "actions", security(("serviceKey" = []), ("session" = [])),
    params(("id" = String, Path, description = "`svc_act_…`"),
        ("waitSeconds" = Option<u64>, Query, description = "Wait up to this many seconds (max 60) for a decision")),
    responses((status = 200, description = "`{ data: Action }`"), (status = 400, description = "validation_error"),
        (status = 404, description = "not_found")))]
#[get("/actions/{id}")]
pub async fn get_action(
    state: web::Data<AppState>,
    auth: DualAuth,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let query = web::Query::<GetQuery>::from_query(req.query_string())
        .map_err(|_| ApiError::invalid_field(&[], "malformed query string"))?
        .into_inner();
    let wait =
        match query.wait_seconds.as_deref() {
            None => 0,
            Some(s) => s.parse::<u64>().ok().filter(|n| *n <= MAX_WAIT_SECONDS).ok_or_else(|| {
                ApiError::invalid_field(&["waitSeconds"], "must be an integer from 0 to 60")
            })?,
        };
    let id = action_id(&path)?;
    let org_id = auth.org_id();
    let mut row =
        db::actions::find(&state.pool, org_id, &id).await?.ok_or_else(|| ApiError::not_found("Action"))?;
    if wait > 0 && row.status == ActionStatus::Pending.as_str() {
        state.actions.wait_decided(org_id, &id, Duration::from_secs(wait)).await.map_err(action_error)?;
        row = db::actions::find(&state.pool, org_id, &id)
            .await?
            .ok_or_else(|| ApiError::not_found("Action"))?;
    }
    Ok(HttpResponse::Ok().json(json!({ "data": input::view(&row) })))
}

/// The cost events of calls made with `X-Service-Action-Id` of this action, newest
/// first (at most 1,000).
#[utoipa::path(get, path = "/api/actions/{id}/costs", tag = "actions", security(("serviceKey" = []), ("session" = [])),
    params(("id" = String, Path, description = "`svc_act_…`")),
    responses((status = 200, description = "`{ data: [{ id, provider, model, inputTokens, outputTokens, cachedInputTokens, reasoningTokens, costMicrodollars, tags, createdAt }] }`"),
        (status = 404, description = "not_found")))]
#[get("/actions/{id}/costs")]
pub async fn get_action_costs(
    state: web::Data<AppState>,
    auth: DualAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let id = action_id(&path)?;
    db::actions::find(&state.pool, auth.org_id(), &id).await?.ok_or_else(|| ApiError::not_found("Action"))?;
    let events = db::actions::costs(&state.pool, auth.org_id(), &id, MAX_COSTS).await?;
    let data: Vec<_> = events.iter().map(input::cost_view).collect();
    Ok(HttpResponse::Ok().json(json!({ "data": data })))
}

/// Approves a pending action (member and above). Approving a `budget_increase` raises
/// the budget's limit in the same transaction.
#[utoipa::path(post, path = "/api/actions/{id}/approve", tag = "actions", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_act_…`")),
    responses((status = 200, description = "`{ data: { id, status, approvedAt } }`"), (status = 404, description = "not_found"),
        (status = 409, description = "invalid_action_transition, action_expired, stale_action, or conflict (the budget to raise is gone)")))]
#[post("/actions/{id}/approve")]
pub async fn approve_action(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    decide(&state, &auth, &path, true).await
}

/// Rejects a pending action (member and above).
#[utoipa::path(post, path = "/api/actions/{id}/reject", tag = "actions", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_act_…`")),
    responses((status = 200, description = "`{ data: { id, status, rejectedAt } }`"), (status = 404, description = "not_found"),
        (status = 409, description = "invalid_action_transition, action_expired or stale_action")))]
#[post("/actions/{id}/reject")]
pub async fn reject_action(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    decide(&state, &auth, &path, false).await
}

async fn decide(
    state: &AppState,
    auth: &SessionAuth,
    raw_id: &str,
    approve: bool,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Member)?;
    let id = action_id(raw_id)?;
    let by = auth.user.id.clone();
    let command = if approve { Command::Approve { by } } else { Command::Reject { by } };
    let done = state.actions.transition(&auth.org.id, &id, command).await.map_err(action_error)?;
    let at_field = if approve { "approvedAt" } else { "rejectedAt" };
    let data = json!({ "id": ids::prefixed(ids::ACTION, &id), "status": done.status.as_str(), at_field: time::iso(done.at) });
    Ok(HttpResponse::Ok().json(json!({ "data": data })))
}

/// The agent reports progress: `executing` (from `approved`), then `executed` or
/// `failed` (from `executing`).
#[utoipa::path(post, path = "/api/actions/{id}/result", tag = "actions", request_body = ResultBody,
    security(("serviceKey" = [])),
    params(("id" = String, Path, description = "`svc_act_…`"),
        ("Idempotency-Key" = Option<String>, Header, description = "Replays the first answer for 24 hours")),
    responses((status = 200, description = "`{ data: { id, status, executedAt } }`"),
        (status = 400, description = "validation_error, invalid_json or invalid_idempotency_key"),
        (status = 404, description = "not_found"),
        (status = 409, description = "invalid_action_transition, stale_action or idempotency_conflict"),
        (status = 503, description = "request_in_progress, idempotency_unavailable or service_unavailable")))]
#[post("/actions/{id}/result")]
pub async fn report_result(
    state: web::Data<AppState>,
    req: HttpRequest,
    key: KeyAuth,
    path: web::Path<String>,
    body: JsonBody<ResultBody>,
) -> Result<HttpResponse, ApiError> {
    let header_key = idempotency::header_key(&req)?;
    let id = action_id(&path)?;
    let mut issues = Issues::new();
    input::validate_result(&body.value, &mut issues);
    issues.finish()?;
    let key = key.0;
    let route = format!("/api/actions/{}/result", ids::prefixed(ids::ACTION, &id));
    let input = body.value;
    idempotency::run(&state.pool, &state.instance_id, header_key, &key.key_hash, &route, &body.raw, || async {
        let report = Report {
            status: input.status.parse().map_err(|()| ApiError::invalid_field(&["status"], "unknown status"))?,
            result: input.result,
            error_message: input.error_message,
        };
        let done =
            state.actions.transition(&key.org_id, &id, Command::Report(report)).await.map_err(action_error)?;
        let executed_at = (done.status == ActionStatus::Executed).then(|| time::iso(done.at));
        let data =
            json!({ "id": ids::prefixed(ids::ACTION, &id), "status": done.status.as_str(), "executedAt": executed_at });
        Ok((StatusCode::OK, json!({ "data": data })))
    })
    .await
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(create_action)
        .service(list_actions)
        .service(get_action_costs)
        .service(approve_action)
        .service(reject_action)
        .service(report_result)
        .service(get_action);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create_action,
    list_actions,
    get_action,
    get_action_costs,
    approve_action,
    reject_action,
    report_result
))]
pub struct ApiDoc;
