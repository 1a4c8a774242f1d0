//! Placeholder: being written.

use actix_web::web;

pub fn configure(_cfg: &mut web::ServiceConfig) {}

#[derive(utoipa::OpenApi)]
#[openapi()]
pub struct ApiDoc;
