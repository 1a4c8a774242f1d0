//! `GET /api/health` and `GET /api/version`.

use actix_web::{get, web, HttpResponse};
use serde::Serialize;

use spendgate_engine::state::AppState;

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    status: &'static str,
    service: &'static str,
    database: &'static str,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    version: &'static str,
    api_version: &'static str,
    build_sha: String,
}

/// Liveness of the control plane and whether its database answers.
#[utoipa::path(get, path = "/api/health", tag = "health", security(()), responses((status = 200, body = Health), (status = 503, body = Health)))]
#[get("/health")]
pub async fn get_health(state: web::Data<AppState>) -> HttpResponse {
    let database_ok = state.pool.ping().await.is_ok();
    let body = Health {
        status: if database_ok { "ok" } else { "degraded" },
        service: "service-control",
        database: if database_ok { "ok" } else { "unavailable" },
    };
    if database_ok {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Build and API version.
#[utoipa::path(get, path = "/api/version", tag = "health", security(()), responses((status = 200, body = Version)))]
#[get("/version")]
pub async fn get_version(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(Version {
        version: env!("CARGO_PKG_VERSION"),
        api_version: spendgate_engine::API_VERSION,
        build_sha: state.config.build_sha.clone(),
    })
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_health).service(get_version);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(get_health, get_version))]
pub struct ApiDoc;
