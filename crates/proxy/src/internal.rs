//! The proxy's internal routes, for the control plane only: flush an entity's live
//! budget state, and report the organization's velocity breakers.
//!
//! They authenticate with the shared secret (`X-Internal-Secret`), never with API
//! keys, and answer before anything else of the proxy runs (spec: processing order,
//! step 3). Without a configured secret the routes do not exist (404), so an
//! instance that was given no secret exposes nothing.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use actors::budget::EntityType;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use spendgate_engine::budgets::EntityRef;
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::state::AppState;
use spendgate_engine::util::ids;
use spendgate_engine::util::json::{check_content_length, parse, read_body, require_json_content_type};

/// The header carrying the shared secret.
use spendgate_engine::auth::INTERNAL_SECRET_HEADER as SECRET_HEADER;
/// Internal bodies are three short strings.
const MAX_INTERNAL_BODY_BYTES: usize = 16 * 1024;
/// The longest entity id of any type (a tag: 64 + 1 + 256 characters, in bytes at
/// most four times that).
const MAX_ENTITY_ID_BYTES: usize = 4 * 321;

/// Body of `POST /internal/budget/invalidate`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvalidateBody {
    /// `svc_org_<uuid>` or the bare UUID.
    org_id: String,
    /// `user`, `api_key`, `tag` or `customer`.
    entity_type: String,
    /// The entity id as budgets store it (`svc_usr_…`, `svc_key_…`, `key=value`, customer).
    entity_id: String,
}

/// Query of `GET /internal/budget/velocity-state`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct VelocityStateQuery {
    /// `svc_org_<uuid>` or the bare UUID.
    org_id: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VelocityStateBody {
    #[schema(value_type = Vec<Object>)]
    velocity_state: Vec<Value>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Invalidated {
    invalidated: bool,
}

/// Checks the shared secret: 404 when none is configured, 401 `unauthorized` when the
/// header is missing or wrong. Both sides are hashed first, so the comparison is
/// constant-time and reveals not even the secret's length.
fn authorize(state: &AppState, req: &HttpRequest) -> Result<(), ApiError> {
    let expected = state
        .config
        .internal_secret
        .as_deref()
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, "No such route"))?;
    let given = req.headers().get(SECRET_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    let matches = Sha256::digest(given).as_slice().ct_eq(Sha256::digest(expected.as_bytes()).as_slice());
    if bool::from(matches) {
        Ok(())
    } else {
        Err(ApiError::new(ErrorCode::Unauthorized, "Missing or invalid internal secret"))
    }
}

fn org_id(raw: &str, issues: &mut Issues) -> Option<String> {
    let id = ids::parse_prefixed_or_raw(ids::ORG, raw);
    if id.is_none() {
        issues.push(&["orgId"], "must be an organization id (svc_org_<uuid>)");
    }
    id
}

/// Drops the live budget state of one entity; the next decision reloads it from
/// storage.
#[utoipa::path(post, path = "/internal/budget/invalidate", tag = "proxy-internal",
    request_body = InvalidateBody,
    security(("internalSecret" = [])),
    description = "Shared secret. 404 when the instance has no internal secret configured.",
    responses((status = 200, description = "`{ invalidated: true }`", body = Invalidated),
        (status = 400, description = "validation_error or invalid_json"),
        (status = 401, description = "unauthorized"), (status = 404, description = "not_found")))]
#[post("/internal/budget/invalidate")]
pub async fn invalidate_budget(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    authorize(&state, &req)?;
    require_json_content_type(&req)?;
    check_content_length(&req, MAX_INTERNAL_BODY_BYTES)?;
    let raw = read_body(payload.into_inner(), MAX_INTERNAL_BODY_BYTES).await?;
    let body: InvalidateBody = parse(&raw)?;
    let mut issues = Issues::new();
    let org = org_id(&body.org_id, &mut issues);
    let kind = body.entity_type.parse::<EntityType>().ok();
    issues.check(kind.is_some(), &["entityType"], "must be one of user, api_key, tag, customer");
    issues.check(
        !body.entity_id.is_empty() && body.entity_id.len() <= MAX_ENTITY_ID_BYTES,
        &["entityId"],
        "must be a non-empty entity id",
    );
    issues.finish()?;
    let (Some(org_id), Some(kind)) = (org, kind) else {
        return Err(ApiError::internal("validated fields missing"));
    };
    state
        .budgets
        .invalidate(&EntityRef { org_id, entity_type: kind.as_str().to_owned(), entity_id: body.entity_id })
        .await;
    Ok(HttpResponse::Ok().json(Invalidated { invalidated: true }))
}

/// The live velocity windows and breaker states of an organization's entities.
#[utoipa::path(get, path = "/internal/budget/velocity-state", tag = "proxy-internal",
    params(VelocityStateQuery), security(("internalSecret" = [])),
    description = "Shared secret. 404 when the instance has no internal secret configured.",
    responses((status = 200, body = VelocityStateBody), (status = 400, description = "validation_error"),
        (status = 401, description = "unauthorized"), (status = 404, description = "not_found")))]
#[get("/internal/budget/velocity-state")]
pub async fn get_velocity_state(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&state, &req)?;
    let query = web::Query::<VelocityStateQuery>::from_query(req.query_string())
        .map_err(|_| ApiError::invalid_field(&[], "malformed query string"))?
        .into_inner();
    let mut issues = Issues::new();
    let org = org_id(query.org_id.as_deref().unwrap_or_default(), &mut issues);
    issues.finish()?;
    let org = org.ok_or_else(|| ApiError::internal("validated orgId missing"))?;
    Ok(HttpResponse::Ok()
        .json(VelocityStateBody { velocity_state: state.budgets.velocity_state(&org).await }))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(invalidate_budget).service(get_velocity_state);
}
