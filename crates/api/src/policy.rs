//! `GET /api/policy`: the proxy's `/v1/policy` document on the control plane (same
//! key authentication, same shape; see `proxy::policy`).

use actix_web::{get, web, HttpResponse};

use spendgate_engine::auth::keys::KeyAuth;
use spendgate_engine::error::ApiError;
use spendgate_engine::state::AppState;

#[utoipa::path(get, path = "/api/policy", tag = "policy", security(("serviceKey" = [])),
    description = "The key's budget, allowed models and providers, and the cheapest allowed models.",
    responses((status = 200, body = spendgate_engine::policy::PolicyView)))]
#[get("/policy")]
pub async fn get_policy(state: web::Data<AppState>, key: KeyAuth) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(spendgate_engine::policy::policy_of(&state, &key.0).await?))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_policy);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(get_policy))]
pub struct ApiDoc;
