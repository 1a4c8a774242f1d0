//! `GET /api/openapi.json`: serves the document assembled in [`crate::openapi`].

use actix_web::{get, web, HttpResponse};
use utoipa::OpenApi;

/// The document itself.
#[utoipa::path(get, path = "/api/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "This OpenAPI 3.1 document", content_type = "application/json")))]
#[get("/openapi.json")]
async fn get_openapi() -> HttpResponse {
    HttpResponse::Ok().json(crate::openapi::document())
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_openapi);
}

#[derive(OpenApi)]
#[openapi(paths(get_openapi))]
pub struct ApiDoc;
