//! One MCP message to the server and its answer back: the client's transport headers
//! and the server's stored headers go out (never the spendgate key), the server's
//! session id is swapped for the gateway's, and the answer streams back as it comes.
//!
//! The server's URL is checked against the webhook targets' rules again before every
//! request, and the connection goes only to addresses those rules allow (the checked
//! resolver), so a name that changes its answer cannot point the gateway inward.

use std::cell::RefCell;

use actix_web::http::header::{self, HeaderName};
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder};
use awc::error::PayloadError;
use awc::ClientResponse;
use bytes::Bytes;

use super::{session, Opened, SESSION_HEADER};
use spendgate_engine::config::Config;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::state::AppState;
use spendgate_engine::webhooks::{send, target};

/// Request headers of the transport passed from the client to the server.
const FORWARDED: &[&str] = &["accept", "content-type", "mcp-protocol-version", "last-event-id"];
/// Answer headers passed back (besides the session id, swapped).
const PASSED_BACK: &[&str] = &["content-type", "cache-control", "mcp-protocol-version", "retry-after"];

/// An answer's body as it arrives.
pub trait Body: futures_util::Stream<Item = Result<Bytes, PayloadError>> + Unpin + 'static {}
impl<S: futures_util::Stream<Item = Result<Bytes, PayloadError>> + Unpin + 'static> Body for S {}

thread_local! {
    static CLIENT: RefCell<Option<awc::Client>> = const { RefCell::new(None) };
}

fn client(config: &Config) -> awc::Client {
    CLIENT.with(|c| {
        c.borrow_mut()
            .get_or_insert_with(|| send::streaming_client(config.dev, config.upstream_connect_timeout))
            .clone()
    })
}

/// Sends the request's method with `body` to the server; the answer's head within
/// `upstream_timeout`.
pub async fn send(
    req: &HttpRequest,
    state: &AppState,
    opened: &Opened,
    body: Option<Bytes>,
) -> Result<ClientResponse<impl Body>, ApiError> {
    let server = &opened.server;
    if let Err(e) = target::check_url(&server.url, state.config.dev) {
        return Err(ApiError::new(
            ErrorCode::UpstreamError,
            format!("MCP server {} refused: {e}", server.name),
        ));
    }
    let mut request = client(&state.config)
        .request(req.method().clone(), &server.url)
        .insert_header((header::ACCEPT_ENCODING, "identity"));
    for name in FORWARDED {
        if let Some(value) = req.headers().get(*name) {
            request = request.insert_header((*name, value.clone()));
        }
    }
    for (name, value) in &server.headers {
        request = request.insert_header((name.as_str(), value.as_str()));
    }
    if let Some(s) = &opened.session {
        request = request.insert_header((SESSION_HEADER, s.upstream_id.as_str()));
    }
    let sent = match body {
        Some(body) => tokio::time::timeout(state.config.upstream_timeout, request.send_body(body)).await,
        None => tokio::time::timeout(state.config.upstream_timeout, request.send()).await,
    };
    match sent {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(ApiError::new(
            ErrorCode::UpstreamError,
            format!("Could not reach MCP server {}: {e}", server.name),
        )),
        Err(_) => Err(ApiError::new(
            ErrorCode::UpstreamTimeout,
            format!("MCP server {} did not answer in time", server.name),
        )),
    }
}

/// The answer's status and headers, the session id swapped: an answer naming a
/// session for a request that had none opens a gateway session.
pub fn head<B>(response: &ClientResponse<B>, opened: &Opened) -> HttpResponseBuilder {
    let mut builder = HttpResponse::build(response.status());
    for (name, value) in response.headers() {
        if PASSED_BACK.contains(&name.as_str()) {
            builder.append_header((name.clone(), value.clone()));
        }
    }
    let upstream = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok());
    let id = match (&opened.session, upstream) {
        (Some(s), _) => Some(s.id.clone()),
        (None, Some(upstream)) => Some(session::open(&opened.key, &opened.server, upstream)),
        (None, None) => None,
    };
    if let Some(id) = id {
        builder.insert_header((HeaderName::from_static("mcp-session-id"), id));
    }
    builder
}

/// The answer, streamed as it comes (an SSE answer event by event). `ended`: the
/// session was just ended, so no id goes back.
pub fn respond(response: ClientResponse<impl Body>, opened: &Opened, ended: bool) -> HttpResponse {
    if ended {
        let mut builder = HttpResponse::build(response.status());
        return builder.streaming(response);
    }
    head(&response, opened).streaming(response)
}
