//! Forward, the stage that calls the provider: the request body as the client sent it
//! (one exception: `stream_options.include_usage` added to a chat-completions (OpenAI or Azure)
//! stream that did not ask for usage), the route's forwarded headers, the upstream timeout, and one
//! retry when a pooled keep-alive connection turned out closed before any answer.

use std::time::Instant;

use actix_web::http::header;
use actix_web::HttpRequest;

use super::admitted::Admitted;
use super::crossing;
use super::upstream;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::state::AppState;
use spendgate_llm::usage;

/// The provider's answer body.
pub trait UpstreamBody:
    futures_util::Stream<Item = Result<bytes::Bytes, awc::error::PayloadError>> + 'static
{
}
impl<S: futures_util::Stream<Item = Result<bytes::Bytes, awc::error::PayloadError>> + 'static> UpstreamBody
    for S
{
}

/// What came back (the head; the body still to be read), and how.
pub struct Forwarded<S> {
    pub response: awc::ClientResponse<S>,
    /// The proxy asked for usage the client did not: drop the usage-only chunk.
    pub strip_usage: bool,
    pub upstream_time: std::time::Duration,
}

/// Sends the call upstream. Errors are the proxy's own 502/504 answers; the caller's
/// reservation is released by its owner's drop.
pub async fn send(
    state: &AppState,
    req: &HttpRequest,
    a: &Admitted,
) -> Result<Forwarded<impl UpstreamBody>, ApiError> {
    let provider = a.provider;
    // Chat completions only: the Responses API reports usage in its terminal event.
    let wants_usage =
        a.route.format() == usage::WireFormat::OpenAiChat && a.summary.stream && !a.summary.include_usage;
    let spliced =
        if wants_usage { usage::openai_add_include_usage(&a.body).map(bytes::Bytes::from) } else { None };
    let strip_usage = spliced.is_some();
    let body = spliced.unwrap_or_else(|| a.body.clone());
    let url = match a.route.cloud_prefix() {
        Some(prefix) => {
            let tail = req.path().strip_prefix(prefix).unwrap_or_default();
            upstream::cloud_url(&a.target.base, tail, req.query_string())
        }
        None => upstream::url(&a.target.base, a.route, &a.model, req.query_string()),
    };
    let client = upstream::client(&state.config);
    let traceparent = super::trace::trace_of(req).traceparent;
    let forwarded = crossing::forwarded_headers(
        a.route,
        req.headers(),
        traceparent.as_deref(),
        &a.credential,
        a.target.key_header.as_deref(),
    );
    let signed = super::cloud::signed(&a.credential, &url, &body)?;
    let send = || {
        let mut request = client
            .post(&url)
            .insert_header((header::CONTENT_TYPE, "application/json"))
            .insert_header((header::ACCEPT_ENCODING, "identity"));
        for (name, value) in forwarded.iter().chain(&signed) {
            request = request.insert_header((name.clone(), value.clone()));
        }
        request.send_body(body.clone())
    };
    let started = Instant::now();
    let sent = tokio::time::timeout(state.config.upstream_timeout, async {
        match send().await {
            // A pooled keep-alive connection the provider had closed: the request never
            // got an answer; send it once more on a fresh connection.
            Err(awc::error::SendRequestError::Connect(awc::error::ConnectError::Disconnected)) => {
                send().await
            }
            other => other,
        }
    })
    .await;
    let upstream_time = started.elapsed();
    let failed = |code, message: String| {
        state.metrics.proxy_requests.with_label_values(&[provider.as_str(), "upstream_error"]).inc();
        Err(ApiError::new(code, message))
    };
    match sent {
        Ok(Ok(response)) => Ok(Forwarded { response, strip_usage, upstream_time }),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, url = %url, "upstream request failed");
            failed(ErrorCode::UpstreamError, format!("Could not reach the provider: {e}"))
        }
        Err(_) => failed(ErrorCode::UpstreamTimeout, "The provider did not answer in time".to_owned()),
    }
}
