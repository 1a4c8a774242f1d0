//! Customer bindings on the control plane (not in the spec, which has no way to
//! change a binding's status): `GET /api/customer-bindings` and
//! `GET /api/customer-bindings/{customerId}` (unit economics; session viewer) and
//! `POST /api/customer-bindings/{customerId}/suspend|archive|reactivate` (session
//! admin). A suspended or archived binding makes gate answer `bind_not_found` and
//! bind answer 409 `binding_inactive`; reactivating makes it `active` again. The
//! customer's budget stays in force throughout (proxied calls naming the customer
//! keep counting against it).

use actix_web::{get, post, web, HttpResponse};
use serde_json::json;

use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::customers::{self, BindingView};
use spendgate_engine::db::bindings::{self, ACTIVE, ARCHIVED, SUSPENDED};
use spendgate_engine::error::ApiError;
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::time;

#[utoipa::path(get, path = "/api/customer-bindings", tag = "customers", security(("session" = [])),
    description = "Session, viewer and above. The organization's bindings, newest first.",
    responses((status = 200, body = Data<Vec<BindingView>>), (status = 401, description = "authentication_required")))]
#[get("/customer-bindings")]
pub async fn list_bindings(state: web::Data<AppState>, auth: SessionAuth) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let rows = bindings::list(&state.pool, &auth.org.id).await?;
    Ok(HttpResponse::Ok().json(json!({ "data": rows.iter().map(BindingView::from).collect::<Vec<_>>() })))
}

#[utoipa::path(get, path = "/api/customer-bindings/{customerId}", tag = "customers", security(("session" = [])),
    params(("customerId" = String, Path, description = "The customer id")),
    description = "Session, viewer and above. The customer's unit economics, in the shape of the proxy's `GET /v1/customers/{customerId}/unit-economics`.",
    responses((status = 200, description = "`{ data: { customerId, binding, budget, cost, latestBudgetCheck } }`"),
        (status = 400, description = "invalid_customer_id"), (status = 401, description = "authentication_required"),
        (status = 404, description = "not_found: no binding of this customer in the organization")))]
#[get("/customer-bindings/{customerId}")]
pub async fn get_binding(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let customer = customers::customer_id(Some(&path.into_inner()))?;
    let binding = bindings::find(&state.pool, &auth.org.id, &customer)
        .await?
        .ok_or_else(|| ApiError::not_found("Binding"))?;
    let figures = spendgate_engine::unit_economics::of(&state, &auth.org.id, &binding).await?;
    Ok(HttpResponse::Ok().json(json!({ "data": figures })))
}

#[utoipa::path(post, path = "/api/customer-bindings/{customerId}/{transition}", tag = "customers",
    security(("session" = [])),
    params(("customerId" = String, Path, description = "The customer id"),
        ("transition" = String, Path, description = "`suspend`, `archive` or `reactivate`")),
    description = "Session, admin and above. Sets the binding's status.",
    responses((status = 200, body = Data<BindingView>), (status = 400, description = "invalid_customer_id"),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found: no such binding or transition")))]
#[post("/customer-bindings/{customerId}/{transition}")]
pub async fn set_binding_status(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let (customer, transition) = path.into_inner();
    let status = match transition.as_str() {
        "suspend" => SUSPENDED,
        "archive" => ARCHIVED,
        "reactivate" => ACTIVE,
        _ => return Err(ApiError::not_found("Transition")),
    };
    let customer = customers::customer_id(Some(&customer))?;
    let row = bindings::set_status(&state.pool, &auth.org.id, &customer, status, time::now_ms())
        .await?
        .ok_or_else(|| ApiError::not_found("Binding"))?;
    state.bindings.invalidate(&auth.org.id, &customer);
    Ok(HttpResponse::Ok().json(json!({ "data": BindingView::from(&row) })))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_bindings).service(get_binding).service(set_binding_status);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_bindings, get_binding, set_binding_status))]
pub struct ApiDoc;
