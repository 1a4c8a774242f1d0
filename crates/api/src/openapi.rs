//! `GET /api/openapi.json`: serves the document assembled in `spendgate_engine::openapi` (above
//! this layer: it gathers every endpoint's part), which the wiring hands in as
//! [`Document`].

use actix_web::{get, web, HttpResponse};
use utoipa::OpenApi;

/// The document itself.
#[utoipa::path(get, path = "/api/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "This OpenAPI 3.1 document", content_type = "application/json")))]
#[get("/openapi.json")]
async fn get_openapi(document: web::Data<Document>) -> HttpResponse {
    HttpResponse::Ok().json(&document.0)
}

/// The assembled OpenAPI document, as app data of the control plane.
pub struct Document(pub utoipa::openapi::OpenApi);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_openapi);
}

#[derive(OpenApi)]
#[openapi(paths(get_openapi))]
pub struct ApiDoc;
