//! The Responses API's bookkeeping endpoints (retrieve, delete, cancel, list input
//! items, count input tokens): no model runs for them at the provider's price, so they
//! are authenticated like every proxied call (IP and key rate limits, the spendgate key
//! in `X-Service-Key` or in the provider key's place) and forwarded with the OpenAI
//! route's headers and the same provider credential a charged call would get, but neither reserved nor charged, and
//! they leave no cost event.

use std::time::Instant;

use super::credential;
use super::crossing;
use super::upstream::{self, Route};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::Method;
use actix_web::{web, HttpRequest, HttpResponse};
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::state::AppState;

/// `GET`/`DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
/// `GET /v1/responses/{id}/input_items`, `POST /v1/responses/input_tokens`.
pub async fn responses(req: HttpRequest, body: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    use actix_web::ResponseError;
    let mut version = spendgate_engine::API_VERSION.to_owned();
    let mut res = match forward(&req, body, &state, &mut version).await {
        Ok(res) => res,
        Err(e) => e.error_response(),
    };
    if let Ok(v) = HeaderValue::from_str(&version) {
        res.headers_mut().insert(header::HeaderName::from_static("service-version"), v);
    }
    res
}

async fn forward(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    version: &mut String,
) -> Result<HttpResponse, ApiError> {
    super::check_ip(req, state)?;
    let provider = Route::Responses.provider();
    let (key, key_source) = credential::key_of(req, state, provider).await?;
    if let Some(v) = key.api_version.clone() {
        *version = v;
    }
    let decision = state.rate_limits.check_key(&key.key_id);
    if !decision.allowed {
        return Err(super::rate_limited());
    }
    check_id(req.match_info().get("id"))?;
    let body = super::admission::read_body(req, payload).await?;
    let headers = super::headers::parse(req.headers())?;
    if let Some(v) = &headers.version {
        version.clone_from(v);
    }
    let named = req.match_info().get("upstream");
    let target =
        super::admission::upstream_target(state, Route::Responses, named, headers.upstream.as_deref())?;
    let brings_own = credential::brings_own(provider, req.headers(), req.query_string());
    if key.require_stored_credentials && brings_own {
        return Err(credential::own_credential_refused(provider));
    }
    let credential =
        credential::resolve(state, &key, key_source, Route::Responses, &target, brings_own).await?;
    let url = upstream_url(&target.base, req.path(), req.query_string());
    let traceparent = super::trace::trace_of(req).traceparent;
    let forwarded = crossing::forwarded_headers(
        Route::Responses,
        req.headers(),
        traceparent.as_deref(),
        &credential,
        target.key_header.as_deref(),
    );
    let client = upstream::client(&state.config);
    let mut request =
        client.request(req.method().clone(), &url).insert_header((header::ACCEPT_ENCODING, "identity"));
    for (name, value) in forwarded {
        request = request.insert_header((name, value));
    }
    let started = Instant::now();
    let sent = if req.method() == Method::POST {
        let content_type = req.headers().get(header::CONTENT_TYPE).cloned();
        let request = match content_type {
            Some(ct) => request.insert_header((header::CONTENT_TYPE, ct)),
            None => request,
        };
        tokio::time::timeout(state.config.upstream_timeout, request.send_body(body)).await
    } else {
        tokio::time::timeout(state.config.upstream_timeout, request.send()).await
    };
    let response = match sent {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, url = %url, elapsed_ms = started.elapsed().as_millis(), "upstream request failed");
            return Err(ApiError::new(
                ErrorCode::UpstreamError,
                format!("Could not reach the provider: {e}"),
            ));
        }
        Err(_) => {
            return Err(ApiError::new(ErrorCode::UpstreamTimeout, "The provider did not answer in time"))
        }
    };
    let mut builder = HttpResponse::build(response.status());
    for (name, value) in response.headers() {
        if crossing::passes_back(name) {
            builder.append_header((name.clone(), value.clone()));
        }
    }
    builder.insert_header(("x-service-request-id", headers.request_id.as_str()));
    Ok(builder.streaming(response))
}

/// A response id is one plain path segment (`resp_…`): anything that could make the
/// provider's URL point elsewhere (dots only, percent escapes, separators) is refused
/// before it goes anywhere, since these calls are not charged.
fn check_id(id: Option<&str>) -> Result<(), ApiError> {
    let Some(id) = id else { return Ok(()) };
    let plain = id.len() <= 200
        && id.bytes().any(|b| b != b'.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if plain {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            &["response_id"],
            "response id must be 1-200 of [A-Za-z0-9_.-], not dots only",
        ))
    }
}

/// The provider URL of a bookkeeping call: the base plus the request's own path from
/// `/v1/responses` on (the routes registered for this handler, at the root or under an
/// operator-defined upstream's `/upstreams/{name}` prefix) and query.
fn upstream_url(base: &str, path: &str, query: &str) -> String {
    let path = path.find("/v1/responses").map_or(path, |i| &path[i..]);
    if query.is_empty() {
        format!("{base}{path}")
    } else {
        format!("{base}{path}?{query}")
    }
}

#[cfg(test)]
mod tests {
    use super::{check_id, upstream_url};

    #[test]
    fn response_ids_are_plain_segments() {
        assert!(check_id(Some("resp_67ccd2bed1ec8190")).is_ok());
        assert!(check_id(None).is_ok());
        for bad in ["..", ".", "%2E%2E", "a/b", "", "a b", &"x".repeat(201)] {
            assert!(check_id(Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn path_and_query_follow_the_base() {
        assert_eq!(upstream_url("http://m", "/v1/responses/resp_1", ""), "http://m/v1/responses/resp_1");
        assert_eq!(
            upstream_url("http://m", "/v1/responses/resp_1/input_items", "limit=5"),
            "http://m/v1/responses/resp_1/input_items?limit=5"
        );
    }
}
