//! The mock's Azure OpenAI face: `/openai/deployments/{deployment}/chat/completions`,
//! `/responses` and `/embeddings` (each requiring `api-version`), and the v1 paths
//! (`/openai/v1/...`, answered as the plain OpenAI routes). Every `/openai/` request
//! must carry `api-key`, equal to the key set with `MockUpstream::expect_azure_key`
//! when one is set; otherwise Azure's own 401 (or 404 without `api-version`).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use serde_json::json;

/// The plain OpenAI path an Azure deployment path stands for.
pub fn openai_path(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/openai/deployments/")?;
    let (_, op) = rest.split_once('/')?;
    matches!(op, "chat/completions" | "responses" | "embeddings").then(|| format!("/v1/{op}"))
}

/// Azure's refusal of a request to `/openai/...`, if it is refused.
pub fn refusal(req: &HttpRequest, expected_key: Option<&str>) -> Option<HttpResponse> {
    if !req.path().starts_with("/openai/") {
        return None;
    }
    let key = req.headers().get("api-key").and_then(|v| v.to_str().ok());
    let key_ok = key.is_some_and(|k| !k.is_empty() && expected_key.is_none_or(|e| e == k));
    if !key_ok {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.",
        ));
    }
    let versioned = req.query_string().split('&').any(|p| p.starts_with("api-version=") && p.len() > 12);
    if req.path().starts_with("/openai/deployments/") && !versioned {
        return Some(error(StatusCode::NOT_FOUND, "Resource not found"));
    }
    None
}

fn error(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header(("apim-request-id", "mock-apim-1"))
        .json(json!({ "error": { "code": status.as_u16().to_string(), "message": message } }))
}
