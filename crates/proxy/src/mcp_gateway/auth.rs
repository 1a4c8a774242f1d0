//! Who is calling the gateway: the spendgate key where MCP clients put a token
//! (`Authorization: Bearer svc_live_sk_…`) or in `X-Service-Key`, then the proxy's
//! per-IP and per-key rate limits. Nothing reaches a server before this passes.

use std::sync::Arc;

use actix_web::HttpRequest;

use spendgate_engine::auth::identity::{KeyIdentity, RAW_KEY_PREFIX};
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::state::AppState;

/// The raw key the request carries: `X-Service-Key` first, else a bearer token that
/// is a spendgate key.
pub fn raw_key(req: &HttpRequest) -> Option<&str> {
    let headers = req.headers();
    if let Some(key) = headers.get("x-service-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim());
    }
    let value = headers.get("authorization")?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && token.starts_with(RAW_KEY_PREFIX)).then_some(token)
}

/// 401 `unauthorized` without a valid key; 429 over a rate limit.
pub async fn authenticate(req: &HttpRequest, state: &AppState) -> Result<Arc<KeyIdentity>, ApiError> {
    crate::check_ip(req, state)?;
    let unauthorized =
        || ApiError::new(ErrorCode::Unauthorized, "Missing or invalid key: send Authorization: Bearer <key>");
    let raw = raw_key(req).ok_or_else(unauthorized)?;
    let key = match state.keys.validate(raw).await {
        Ok(Some(key)) => key,
        Ok(None) => return Err(unauthorized()),
        Err(e) => return Err(ApiError::unavailable(e)),
    };
    if !state.rate_limits.check_key(&key.key_id).allowed {
        return Err(crate::rate_limited());
    }
    Ok(key)
}
