//! The proxy surface: provider pass-through routes, health and internal routes.
//! Every response carries `X-Service-Trace-Id`.

pub mod admission;
pub mod admitted;
pub mod builtin_tools;
pub mod clamp;
pub mod cloud;
pub mod common;
pub mod credential;
pub mod crossing;
pub mod customers;
mod customers_doc;
pub mod denial;
pub mod durable;
pub mod events;
pub mod forward;
pub mod headers;
pub mod health;
pub mod internal;
pub mod mcp;
pub mod mcp_gateway;
pub mod meter;
pub mod openapi;
pub mod passthrough;
pub mod peer;
pub mod policy;
mod priced;
pub mod reservation;
pub mod route;
pub mod settlement;
pub mod trace;
pub mod traced;
pub mod upstream;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderValue;
use actix_web::middleware::{from_fn, Next};
use actix_web::{web, HttpMessage, HttpResponse};

use spendgate_engine::error::{ApiError, ErrorCode};

/// Step 1 of the processing order: resolve the trace id before anything else, so
/// that even errors carry it.
async fn trace_id(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let resolved = trace::resolve(req.headers());
    let header_value = HeaderValue::from_str(&resolved.trace_id).ok();
    req.extensions_mut().insert(resolved);
    let mut res = next.call(req).await?;
    if let Some(v) = header_value {
        res.headers_mut().insert(trace::TRACE_ID_HEADER, v);
    }
    Ok(res)
}

/// The key of a proxy request (`X-Service-Key`): 401 `unauthorized` when missing,
/// malformed, unknown or revoked; 503 when the database cannot answer.
pub async fn key_of(
    req: &actix_web::HttpRequest,
    state: &spendgate_engine::state::AppState,
) -> Result<std::sync::Arc<spendgate_engine::auth::identity::KeyIdentity>, ApiError> {
    let raw = req.headers().get("x-service-key").and_then(|v| v.to_str().ok()).unwrap_or_default();
    match state.keys.validate(raw).await {
        Ok(Some(key)) => Ok(key),
        Ok(None) => Err(ApiError::new(ErrorCode::Unauthorized, "Missing or invalid X-Service-Key")),
        Err(e) => Err(ApiError::unavailable(e)),
    }
}

/// The per-IP limit of the proxy (checked before the key's), on the client address
/// behind any trusted proxies.
pub fn check_ip(
    req: &actix_web::HttpRequest,
    state: &spendgate_engine::state::AppState,
) -> Result<(), ApiError> {
    match state.config.trusted_proxies.client_ip(req) {
        Some(ip) if !state.rate_limits.check_ip(ip).allowed => Err(rate_limited()),
        _ => Ok(()),
    }
}

/// 429 `rate_limit_exceeded` with `Retry-After: 60`.
pub fn rate_limited() -> ApiError {
    ApiError::new(ErrorCode::RateLimitExceeded, "Rate limit exceeded")
        .with_header(actix_web::http::header::RETRY_AFTER, "60")
}

async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(ErrorCode::NotFound, "No such route"))
}

/// The provider routes, served at the root (the built-in upstreams) and again under
/// `/upstreams/{upstream}` (an operator-defined upstream of the route's format): a new
/// provider route is one line here and is reachable both ways.
fn provider_routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/chat/completions", web::post().to(route::chat_completions))
        .route("/v1/responses", web::post().to(route::responses))
        .route("/v1/responses/input_tokens", web::post().to(passthrough::responses))
        .route("/v1/responses/{id}", web::get().to(passthrough::responses))
        .route("/v1/responses/{id}", web::delete().to(passthrough::responses))
        .route("/v1/responses/{id}/cancel", web::post().to(passthrough::responses))
        .route("/v1/responses/{id}/input_items", web::get().to(passthrough::responses))
        .route("/v1/embeddings", web::post().to(route::embeddings))
        .route("/v1/messages", web::post().to(route::messages))
        .route("/v1beta/models/{tail}", web::post().to(route::gemini));
}

/// The clouds' routes, their own paths under the cloud's prefix.
fn cloud_routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/azure/openai/deployments/{deployment}/chat/completions", web::post().to(route::azure_chat))
        .route("/azure/openai/deployments/{deployment}/responses", web::post().to(route::azure_responses))
        .route("/azure/openai/deployments/{deployment}/embeddings", web::post().to(route::azure_embeddings))
        .route("/azure/openai/v1/chat/completions", web::post().to(route::azure_chat))
        .route("/azure/openai/v1/responses", web::post().to(route::azure_responses))
        .route("/azure/openai/v1/embeddings", web::post().to(route::azure_embeddings))
        .route("/bedrock/model/{model}/converse", web::post().to(route::bedrock))
        .route("/bedrock/model/{model}/converse-stream", web::post().to(route::bedrock))
        .route("/bedrock/model/{model}/invoke", web::post().to(route::bedrock))
        .route("/bedrock/model/{model}/invoke-with-response-stream", web::post().to(route::bedrock));
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("")
            .wrap(from_fn(trace_id))
            .configure(health::configure)
            .configure(internal::configure)
            .configure(provider_routes)
            .service(web::scope(route::UPSTREAM_PREFIX).configure(provider_routes))
            .configure(cloud_routes)
            .route("/v1/policy", web::get().to(policy::get_policy))
            .route("/v1/mcp/budget/check", web::post().to(mcp::budget_check))
            .route("/v1/mcp/events", web::post().to(mcp::record_event))
            .route("/mcp/{name}", web::post().to(mcp_gateway::post))
            .route("/mcp/{name}", web::get().to(mcp_gateway::get))
            .route("/mcp/{name}", web::delete().to(mcp_gateway::delete))
            .route("/v1/bind", web::post().to(customers::bind))
            .route("/v1/gate", web::post().to(customers::gate))
            .route("/v1/customers/{customer_id}/unit-economics", web::get().to(customers::unit_economics))
            .default_service(web::to(not_found)),
    );
}

pub use openapi::ApiDoc;

/// The per-customer endpoints' part of the OpenAPI document.
pub fn customers_doc_api() -> utoipa::openapi::OpenApi {
    <customers_doc::ApiDoc as utoipa::OpenApi>::openapi()
}
