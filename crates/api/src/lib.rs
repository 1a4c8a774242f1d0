//! The control plane: `/api/*` JSON endpoints, one module per resource family.

pub mod actions;
pub mod actions_input;
pub mod audit;
pub mod auth;
mod budget_names;
pub mod budgets;
pub mod cost_events;
pub mod cost_events_daily;
pub mod cost_events_ingest;
pub mod cost_events_input;
pub mod cost_events_refund;
pub mod customer_bindings;
pub mod customer_mappings;
pub mod dashboard;
pub mod health;
pub mod keys;
pub mod margins;
pub mod mcp_servers;
pub mod model_prices;
pub mod openapi;
pub mod orgs;
pub mod payprocessor;
pub mod policy;
pub mod provider_credentials;
pub mod schemas;
pub mod tool_costs;
pub mod webhooks;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderValue;
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage, HttpResponse};

use spendgate_engine::auth::keys::KeyApiVersion;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::ratelimit::RateLimitSnapshot;

/// `YYYY-MM-DD` and a real date.
pub fn is_api_version(v: &str) -> bool {
    v.len() == 10 && chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d").is_ok()
}

/// Wraps the whole control-plane app (see `crate::serve`), so every response of
/// the listener carries `Service-Version`, 404s outside `/api` included.
/// Resolution order: the request's `Service-Version`, then the key's version
/// setting, then the current default. Also reports the per-key rate limit.
pub async fn service_version(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let requested = req
        .headers()
        .get(&spendgate_engine::SERVICE_VERSION)
        .and_then(|v| v.to_str().ok())
        .filter(|v| is_api_version(v))
        .map(str::to_owned);
    let mut res = next.call(req).await?;
    let version = requested
        .or_else(|| res.request().extensions().get::<KeyApiVersion>().map(|v| v.0.clone()))
        .unwrap_or_else(|| spendgate_engine::API_VERSION.to_owned());
    if let Ok(value) = HeaderValue::from_str(&version) {
        res.headers_mut().insert(spendgate_engine::SERVICE_VERSION, value);
    }
    // Key authentication leaves the per-key rate-limit state behind for the
    // `X-RateLimit-*` headers of key-authenticated endpoints.
    let rate_limit = res.request().extensions().get::<RateLimitSnapshot>().copied();
    if let Some(snapshot) = rate_limit {
        for (name, value) in snapshot.headers() {
            res.headers_mut().insert(name, value);
        }
    }
    Ok(res)
}

async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(ErrorCode::NotFound, "No such endpoint"))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/api")
            .configure(health::configure)
            .configure(actions::configure)
            .configure(auth::configure)
            .configure(orgs::configure)
            .configure(keys::configure)
            .configure(provider_credentials::configure)
            .configure(mcp_servers::configure)
            .configure(model_prices::configure)
            .configure(audit::configure)
            .configure(budgets::configure)
            .configure(cost_events_ingest::configure)
            // Before `/cost-events/{id}`, which would take `daily` for an id.
            .configure(cost_events_daily::configure)
            .configure(cost_events::configure)
            .configure(policy::configure)
            .configure(tool_costs::configure)
            .configure(customer_bindings::configure)
            .configure(payprocessor::configure)
            .configure(customer_mappings::configure)
            .configure(margins::configure)
            .configure(webhooks::configure)
            .configure(openapi::configure)
            .default_service(web::to(not_found)),
    );
}
