//! Proxy health routes: liveness, readiness (the database answers), metrics and
//! live feature flags. No authentication.

use actix_web::http::header;
use actix_web::{get, web, HttpRequest, HttpResponse};
use serde_json::json;

use spendgate_engine::state::AppState;

/// Liveness.
#[utoipa::path(get, path = "/health", tag = "proxy-health", operation_id = "get_proxy_health", security(()),
    responses((status = 200, description = "`{ status: ok, service: service-proxy }`", body = ProxyHealth)))]
#[get("/health")]
pub async fn get_health() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok", "service": "service-proxy" }))
}

/// Readiness: 200 only while the database answers.
#[utoipa::path(get, path = "/health/ready", tag = "proxy-health", security(()),
    responses((status = 200, description = "The database answers", body = ProxyHealth),
        (status = 503, description = "`{ status: unavailable, service, reason }`", body = ProxyHealth)))]
#[get("/health/ready")]
pub async fn get_ready(state: web::Data<AppState>) -> HttpResponse {
    match state.pool.ping().await {
        Ok(()) => HttpResponse::Ok().json(json!({ "status": "ok", "service": "service-proxy" })),
        Err(e) => HttpResponse::ServiceUnavailable().json(json!({
            "status": "unavailable", "service": "service-proxy", "reason": e.to_string()
        })),
    }
}

/// Metrics: Prometheus text when `Accept` asks for `text/plain` or OpenMetrics,
/// JSON otherwise.
#[utoipa::path(get, path = "/health/metrics", tag = "proxy-health", security(()),
    responses((status = 200, description = "JSON by default; Prometheus text when Accept asks for text/plain or OpenMetrics",
        content((Object = "application/json"), (String = "text/plain")))))]
#[get("/health/metrics")]
pub async fn get_metrics(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    state.metrics.observe_registry(state.budgets.registry());
    state.metrics.accounting_queue.set(i64::try_from(state.writer.queued()).unwrap_or(i64::MAX));
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if accept.contains("text/plain") || accept.contains("application/openmetrics-text") {
        HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4; charset=utf-8")
            .body(state.metrics.render_text())
    } else {
        HttpResponse::Ok().json(state.metrics.render_json())
    }
}

/// Live values of the feature flags.
#[utoipa::path(get, path = "/health/feature-flags", tag = "proxy-health", security(()),
    responses((status = 200, body = FeatureFlags)))]
#[get("/health/feature-flags")]
pub async fn get_feature_flags(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "PLAN_COUNTER_ENABLED": true,
        "SERVICE_CLOUD": false,
        "CACHE_SCHEMA_VERSION": 1,
        "build_sha": state.config.build_sha,
    }))
}

/// Body of `/health` and `/health/ready`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "documentation only")]
pub struct ProxyHealth {
    /// `ok`, or `unavailable` on `/health/ready` when the database does not answer.
    status: String,
    /// `service-proxy`.
    service: String,
    /// Why the database did not answer (503 only).
    reason: Option<String>,
}

#[derive(utoipa::ToSchema)]
#[allow(non_snake_case, dead_code, reason = "documentation only; the spec's flag names")]
pub struct FeatureFlags {
    PLAN_COUNTER_ENABLED: bool,
    SERVICE_CLOUD: bool,
    CACHE_SCHEMA_VERSION: i64,
    build_sha: String,
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_health).service(get_ready).service(get_metrics).service(get_feature_flags);
}
