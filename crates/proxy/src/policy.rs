//! `GET /v1/policy`: the key's policy document ([`spendgate_engine::policy`]) on the proxy.

use actix_web::{web, HttpRequest, HttpResponse};

use spendgate_engine::error::ApiError;
use spendgate_engine::policy::policy_of;
use spendgate_engine::state::AppState;

/// `GET /v1/policy`.
#[utoipa::path(get, path = "/v1/policy", tag = "proxy", operation_id = "get_proxy_policy", security(("serviceKey" = [])),
    description = "The key's budget, allowed models and providers, the cheapest allowed models, and the price table's age with the organization's unpriced models.",
    responses((status = 200, body = spendgate_engine::policy::PolicyView)))]
pub async fn get_policy(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let key = super::key_of(&req, &state).await?;
    Ok(HttpResponse::Ok().json(policy_of(&state, &key).await?))
}
