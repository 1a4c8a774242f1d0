//! `/api/customer-mappings`: which processor customer a cost-event tag value is.
//! A mapping links every invoice of the processor customer to every cost event
//! whose tag `tagKey` (default `customer`) equals `tagValue`. Paid tiers only.

use actix_web::{delete, get, post, web, FromRequest, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;

use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::db::margins::{self, Mapping};
use spendgate_engine::error::{ApiError, Issues};
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::JsonBody;
use spendgate_engine::util::{ids, time, validate};

use super::payprocessor::require_paid;

/// Longest processor customer id and tag value (the spec: under 255 characters).
const MAX_LEN: usize = 254;

/// A customer mapping.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MappingView {
    /// A plain UUID.
    id: String,
    org_id: String,
    processor_customer_id: String,
    tag_key: String,
    tag_value: String,
    /// `manual` or `auto`.
    match_type: String,
    /// 1.0 for manual mappings; the auto-match confidence otherwise.
    confidence: Option<f64>,
    created_at: String,
}

impl From<Mapping> for MappingView {
    fn from(m: Mapping) -> Self {
        MappingView {
            id: m.id,
            org_id: ids::prefixed(ids::ORG, &m.org_id),
            processor_customer_id: m.processor_customer_id,
            tag_key: m.tag_key,
            tag_value: m.tag_value,
            match_type: m.match_type,
            confidence: m.confidence,
            created_at: time::iso(m.created_at),
        }
    }
}

/// The organization's customer mappings, newest first (viewer).
#[utoipa::path(get, path = "/api/customer-mappings", tag = "margins", security(("session" = [])),
    description = "Session, viewer and above; paid tiers.",
    responses((status = 200, description = "`{ data: CustomerMapping[] }`", body = Data<Vec<MappingView>>)))]
#[get("/customer-mappings")]
pub async fn list_customer_mappings(
    state: web::Data<AppState>,
    auth: SessionAuth,
) -> Result<HttpResponse, ApiError> {
    require_paid(&auth)?;
    let rows = margins::mappings(&state.pool, &auth.org.id).await?;
    let data: Vec<MappingView> = rows.into_iter().map(MappingView::from).collect();
    Ok(HttpResponse::Ok().json(json!({ "data": data })))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MappingBody {
    processor_customer_id: Option<String>,
    tag_value: Option<String>,
    /// Default `customer`.
    tag_key: Option<String>,
    /// `manual` (default) or `auto`.
    match_type: Option<String>,
}

fn text_field(value: Option<String>, path: &str, issues: &mut Issues) -> String {
    let v = value.unwrap_or_default();
    if v.is_empty() {
        issues.push(&[path], "is required");
    } else if v.chars().count() > MAX_LEN || v.chars().any(char::is_control) {
        issues.push(&[path], "must be under 255 characters without control characters");
    }
    v
}

/// Creates or updates the mapping of (processor customer, tag key) (admin).
#[utoipa::path(post, path = "/api/customer-mappings", tag = "margins", request_body = MappingBody,
    security(("session" = [])),
    description = "Session, admin and above; paid tiers. Upserts on (organization, processorCustomerId, tagKey).",
    responses((status = 201, description = "`{ data: CustomerMapping }`", body = Data<MappingView>),
        (status = 400, description = "validation_error")))]
#[post("/customer-mappings")]
pub async fn upsert_customer_mapping(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    require_paid(&auth)?;
    auth.require(Role::Admin)?;
    let body = JsonBody::<MappingBody>::from_request(&req, &mut payload.into_inner()).await?.value;
    let mut issues = Issues::new();
    let customer = text_field(body.processor_customer_id, "processorCustomerId", &mut issues);
    let value = text_field(body.tag_value, "tagValue", &mut issues);
    let key = body.tag_key.unwrap_or_else(|| "customer".to_owned());
    issues.check(validate::is_tag_key(&key), &["tagKey"], "must match [a-zA-Z0-9_-]+, at most 64 characters");
    let match_type = body.match_type.unwrap_or_else(|| "manual".to_owned());
    issues.check(matches!(match_type.as_str(), "manual" | "auto"), &["matchType"], "must be manual or auto");
    issues.finish()?;
    let row = Mapping {
        id: ids::new_id(),
        org_id: auth.org.id.clone(),
        processor_customer_id: customer,
        tag_key: key,
        tag_value: value,
        confidence: (match_type == "manual").then_some(1.0),
        match_type,
        created_at: time::now_ms(),
    };
    let stored = margins::upsert_mapping(&state.pool, &row).await?;
    Ok(HttpResponse::Created().json(json!({ "data": MappingView::from(stored) })))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// The mapping's UUID.
    id: Option<String>,
}

/// Deletes a mapping (admin).
#[utoipa::path(delete, path = "/api/customer-mappings", tag = "margins", params(DeleteQuery),
    security(("session" = [])), description = "Session, admin and above; paid tiers.",
    responses((status = 200, description = "`{ data: { deleted: true } }`"),
        (status = 400, description = "validation_error: id missing or not a UUID"),
        (status = 404, description = "not_found")))]
#[delete("/customer-mappings")]
pub async fn delete_customer_mapping(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    require_paid(&auth)?;
    auth.require(Role::Admin)?;
    let q: DeleteQuery = super::orgs::query(&req)?;
    let raw = q.id.unwrap_or_default();
    let id = ids::parse_uuid(&raw).ok_or_else(|| ApiError::invalid_field(&["id"], "must be a UUID"))?;
    if !margins::delete_mapping(&state.pool, &auth.org.id, &id).await? {
        return Err(ApiError::not_found("Customer mapping"));
    }
    Ok(HttpResponse::Ok().json(json!({ "data": { "deleted": true } })))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_customer_mappings).service(upsert_customer_mapping).service(delete_customer_mapping);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_customer_mappings, upsert_customer_mapping, delete_customer_mapping))]
pub struct ApiDoc;
