//! `GET /api/openapi.json`: the OpenAPI 3.1 document, generated from the handlers'
//! annotations. Each endpoint module contributes its own `ApiDoc`.

use actix_web::{get, web, HttpResponse};
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(title = "spendgate", description = "Spend-governance gateway for AI agents: control plane and proxy."),
    servers((url = "/", description = "this instance"))
)]
struct Root;

/// The merged document of every module.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = Root::openapi();
    for part in [
        super::health::ApiDoc::openapi(),
        super::auth::ApiDoc::openapi(),
        super::orgs::ApiDoc::openapi(),
        super::keys::ApiDoc::openapi(),
        super::audit::ApiDoc::openapi(),
        super::budgets::ApiDoc::openapi(),
        super::cost_events::ApiDoc::openapi(),
        super::cost_events_ingest::ApiDoc::openapi(),
        super::policy::ApiDoc::openapi(),
        crate::proxy::ApiDoc::openapi(),
    ] {
        doc.merge(part);
    }
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    doc
}

#[get("/openapi.json")]
async fn get_openapi() -> HttpResponse {
    HttpResponse::Ok().json(document())
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_openapi);
}
