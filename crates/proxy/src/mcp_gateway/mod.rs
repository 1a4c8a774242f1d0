//! The MCP gateway: `{proxy}/mcp/{name}` speaks MCP's streamable HTTP transport to
//! agents and forwards to the organization's MCP server `name`
//! (`spendgate_engine::mcp_servers`) as an intermediary.
//!
//! - `POST`: a JSON-RPC request, notification or response from the client; the server's
//!   answer (`application/json` or `text/event-stream`) is passed through as it comes,
//!   SSE event by event. `tools/list` answers register the server's tools
//!   ([`tools_list`]); `tools/call` requests are governed first ([`tools_call`]).
//! - `GET`: the server's SSE stream. `DELETE`: ends the session.
//!
//! Every request authenticates first ([`auth`]): no valid key is 401 before anything
//! reaches the server; a name the key's organization does not have is 404. The
//! server's `Mcp-Session-Id` is replaced by the gateway's own, bound to the key that
//! opened it ([`session`]).

pub mod auth;
pub mod forward;
pub mod session;
pub mod tools_call;
pub mod tools_list;

use actix_web::http::header::HeaderName;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;

use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::credentials::CredentialError;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::mcp_servers::Server;
use spendgate_engine::state::AppState;

use session::Session;

/// `Mcp-Session-Id`.
pub const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
/// Largest JSON-RPC message accepted from a client: 4 MiB.
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// What every gateway request has once it passed the checks.
pub struct Opened {
    pub key: std::sync::Arc<KeyIdentity>,
    pub server: std::sync::Arc<Server>,
    /// The session the request names, if it names one.
    pub session: Option<std::sync::Arc<Session>>,
}

/// Key, server, session, in that order.
async fn open(req: &HttpRequest, state: &AppState, name: &str) -> Result<Opened, ApiError> {
    let key = auth::authenticate(req, state).await?;
    let secret_key = state.config.secret_key.as_deref();
    let server = match state.mcp_servers.server(&state.pool, secret_key, &key.org_id, name).await {
        Ok(Some(server)) => server,
        Ok(None) => return Err(ApiError::not_found("MCP server")),
        Err(CredentialError::Db(e)) => return Err(ApiError::unavailable(e)),
        Err(e) => return Err(ApiError::new(ErrorCode::ServiceUnavailable, e.to_string())),
    };
    let session = match req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        None => None,
        Some(id) => Some(session::find(id, &key, &server).ok_or_else(|| ApiError::not_found("MCP session"))?),
    };
    Ok(Opened { key, server, session })
}

/// `POST {proxy}/mcp/{name}`.
pub async fn post(
    req: HttpRequest,
    state: web::Data<AppState>,
    name: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let opened = open(&req, &state, &name).await?;
    let body = read_body(payload).await?;
    let message: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    if let Some(call) = message.as_ref().and_then(tools_call::ToolCall::of) {
        return tools_call::handle(&req, &state, &opened, call, body).await;
    }
    if message.as_ref().is_some_and(tools_list::is_tools_list) {
        return tools_list::handle(&req, &state, &opened, body).await;
    }
    let response = forward::send(&req, &state, &opened, Some(body)).await?;
    Ok(forward::respond(response, &opened, false))
}

/// `GET {proxy}/mcp/{name}`: the server's stream.
pub async fn get(
    req: HttpRequest,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let opened = open(&req, &state, &name).await?;
    let response = forward::send(&req, &state, &opened, None).await?;
    Ok(forward::respond(response, &opened, false))
}

/// `DELETE {proxy}/mcp/{name}`: ends the session at the server and here.
pub async fn delete(
    req: HttpRequest,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let opened = open(&req, &state, &name).await?;
    let Some(session) = &opened.session else {
        return Err(ApiError::invalid_field(&["headers", "Mcp-Session-Id"], "is required to end a session"));
    };
    let response = forward::send(&req, &state, &opened, None).await?;
    session::end(&session.id);
    Ok(forward::respond(response, &opened, true))
}

async fn read_body(mut payload: web::Payload) -> Result<Bytes, ApiError> {
    use futures_util::StreamExt;
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::new(ErrorCode::InvalidInput, e.to_string()))?;
        if body.len() + chunk.len() > MAX_MESSAGE_BYTES {
            return Err(ApiError::new(ErrorCode::PayloadTooLarge, "An MCP message may be at most 4 MiB"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}
