//! The `KeyAuth` extractor of key-authenticated control-plane endpoints: the key
//! validated (`auth::validator`), the per-key rate limit applied, and what the
//! response layer reports left on the request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};

use super::identity::{KeyIdentity, KEY_HEADER};
use crate::error::{ApiError, ErrorCode};
use crate::ratelimit::RETRY_AFTER_SECS;
use crate::state::AppState;

/// The API version a request resolved to: set by key authentication when the key
/// carries a version setting, read by the control plane's `Service-Version` layer.
#[derive(Debug, Clone)]
pub struct KeyApiVersion(pub String);

/// A request authenticated by `X-Service-Key` on the control plane. The extractor
/// also applies the per-key rate limit and records what the response middleware
/// reports (`X-RateLimit-*`, the key's API version).
#[derive(Debug, Clone)]
pub struct KeyAuth(pub Arc<KeyIdentity>);

impl std::ops::Deref for KeyAuth {
    type Target = KeyIdentity;

    fn deref(&self) -> &KeyIdentity {
        &self.0
    }
}

async fn authenticate(req: HttpRequest, state: AppState, raw: Option<String>) -> Result<KeyAuth, ApiError> {
    let raw = raw.ok_or_else(ApiError::authentication_required)?;
    let identity = state.keys.validate(&raw).await?.ok_or_else(ApiError::authentication_required)?;
    let decision = state.rate_limits.check_key(&identity.key_id);
    let snapshot = decision.snapshot();
    if let Some(s) = snapshot {
        req.extensions_mut().insert(s);
    }
    if let Some(v) = &identity.api_version {
        req.extensions_mut().insert(KeyApiVersion(v.clone()));
    }
    if !decision.allowed {
        let mut err = ApiError::new(ErrorCode::RateLimitExceeded, "Rate limit exceeded for this API key")
            .with_header(header::RETRY_AFTER, RETRY_AFTER_SECS.to_string());
        for (name, value) in snapshot.iter().flat_map(|s| s.headers()) {
            err = err.with_header(name, value.to_str().unwrap_or_default());
        }
        return Err(err);
    }
    Ok(KeyAuth(identity))
}

impl FromRequest for KeyAuth {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let raw = req.headers().get(KEY_HEADER).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_owned());
        let state = req
            .app_data::<web::Data<AppState>>()
            .map(|d| d.get_ref().clone())
            .ok_or_else(|| ApiError::internal("application state missing"));
        let req = req.clone();
        Box::pin(async move { authenticate(req, state?, raw).await })
    }
}
