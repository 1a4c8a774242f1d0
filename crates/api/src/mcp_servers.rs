//! MCP servers of an organization, reached by agents at `{proxy}/mcp/{name}`: an admin
//! registers a server's URL (the webhook targets' rules) and the headers sent to it on
//! every request (its own token, say). Header values are encrypted with `secret_key`
//! and returned by no endpoint (lists show `headerNames`); every change is audited.

use std::collections::BTreeMap;

use actix_web::{delete, get, post, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;

use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::credentials::CredentialError;
use spendgate_engine::db;
use spendgate_engine::db::models::McpServer;
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::mcp_servers::{header_problem, is_server_name, MAX_HEADERS};
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::{ids, time};

/// Body of `POST /api/mcp-servers`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateMcpServerBody {
    /// `^[a-z0-9][a-z0-9_-]{0,63}$`; the `serverName` of its tools' costs and the
    /// `{name}` of `{proxy}/mcp/{name}`.
    name: String,
    /// The server's streamable HTTP endpoint: https, a public address
    /// (`SPENDGATE_DEV=1` also allows http and loopback).
    url: String,
    /// At most 20 headers sent to the server on every request; encrypted at rest and
    /// never returned.
    #[serde(default)]
    headers: Option<BTreeMap<String, String>>,
}

/// A server as listed: header names, never values.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerView {
    /// `svc_mcp_<uuid>`.
    id: String,
    name: String,
    url: String,
    header_names: Vec<String>,
    created_at: String,
}

impl From<&McpServer> for McpServerView {
    fn from(s: &McpServer) -> Self {
        McpServerView {
            id: ids::prefixed(ids::MCP_SERVER, &s.id),
            name: s.name.clone(),
            url: s.url.clone(),
            header_names: serde_json::from_str(&s.header_names).unwrap_or_default(),
            created_at: time::iso(s.created_at),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeletedMcpServer {
    deleted: bool,
}

/// Checks a create body (the URL's current addresses too).
async fn check_body(state: &AppState, body: &CreateMcpServerBody) -> Result<(), ApiError> {
    let mut issues = Issues::new();
    if !is_server_name(&body.name) {
        issues.push(&["name"], "must match ^[a-z0-9][a-z0-9_-]{0,63}$");
    }
    super::webhooks::check_target(&body.url, state.config.dev, &mut issues).await;
    let headers = body.headers.as_ref();
    if headers.is_some_and(|h| h.len() > MAX_HEADERS) {
        issues.push(&["headers"], format!("must hold at most {MAX_HEADERS} headers"));
    }
    let mut seen = std::collections::HashSet::new();
    for (name, value) in headers.into_iter().flatten() {
        if let Some(problem) = header_problem(name, value) {
            issues.push(&["headers", name], problem);
        } else if !seen.insert(name.to_ascii_lowercase()) {
            issues.push(&["headers", name], "is named twice (header names ignore case)");
        }
    }
    issues.finish()
}

/// The sealed headers, or `None` when there are none; 503 without a `secret_key`.
fn seal_headers(
    state: &AppState,
    org_id: &str,
    headers: &BTreeMap<String, String>,
) -> Result<Option<String>, ApiError> {
    if headers.is_empty() {
        return Ok(None);
    }
    let key = state.config.secret_key.as_deref().ok_or_else(|| {
        ApiError::new(ErrorCode::ServiceUnavailable, CredentialError::NoSecretKey.to_string())
    })?;
    let plain = serde_json::to_string(headers).map_err(ApiError::internal)?;
    spendgate_engine::crypto::encrypt(key, org_id, &plain).map(Some).map_err(ApiError::internal)
}

/// Lists the organization's MCP servers.
#[utoipa::path(get, path = "/api/mcp-servers", tag = "mcp-servers", security(("session" = [])),
    description = "Session, viewer and above. Header values are never returned; `headerNames` lists them.",
    responses((status = 200, description = "`{ data: McpServer[] }`", body = Data<Vec<McpServerView>>),
        (status = 401, description = "authentication_required")))]
#[get("/mcp-servers")]
pub async fn list_mcp_servers(
    state: web::Data<AppState>,
    auth: SessionAuth,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let rows = db::mcp_servers::list(&state.pool, &auth.org.id).await?;
    let data: Vec<McpServerView> = rows.iter().map(McpServerView::from).collect();
    Ok(HttpResponse::Ok().json(json!({ "data": data })))
}

/// Registers an MCP server for the organization.
#[utoipa::path(post, path = "/api/mcp-servers", tag = "mcp-servers",
    request_body = CreateMcpServerBody, security(("session" = [])),
    description = "Session, admin and above. Headers are encrypted at rest with `secret_key` and not returned.",
    responses((status = 201, description = "`{ data: { id, name, url, headerNames, createdAt } }`",
            body = Data<McpServerView>),
        (status = 400, description = "validation_error"), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden"),
        (status = 409, description = "conflict: the organization has a server of that name"),
        (status = 503, description = "service_unavailable: headers given and no secret_key is configured")))]
#[post("/mcp-servers")]
pub async fn create_mcp_server(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let body: CreateMcpServerBody = super::keys::json_body(&req, payload).await?;
    check_body(&state, &body).await?;
    let headers = body.headers.unwrap_or_default();
    let header_names: Vec<&String> = headers.keys().collect();
    let row = McpServer {
        id: ids::new_id(),
        org_id: auth.org.id.clone(),
        header_names: serde_json::to_string(&header_names).map_err(ApiError::internal)?,
        encrypted_headers: seal_headers(&state, &auth.org.id, &headers)?,
        name: body.name,
        url: body.url,
        created_at: time::now_ms(),
    };
    let row = db::mcp_servers::create(&state.pool, row, &auth.user.id).await.map_err(|e| {
        if e.is_unique_violation() {
            ApiError::new(ErrorCode::Conflict, "The organization already has an MCP server of that name")
        } else {
            e.into()
        }
    })?;
    state.mcp_servers.invalidate(&row.org_id, &row.name);
    Ok(HttpResponse::Created().json(json!({ "data": McpServerView::from(&row) })))
}

/// Removes an MCP server; agents' calls to it are 404 from then on.
#[utoipa::path(delete, path = "/api/mcp-servers/{id}", tag = "mcp-servers",
    security(("session" = [])), params(("id" = String, Path, description = "`svc_mcp_<uuid>`")),
    description = "Session, admin and above.",
    responses((status = 200, description = "`{ data: { deleted: true } }`", body = Data<DeletedMcpServer>),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found: missing or another organization's")))]
#[delete("/mcp-servers/{id}")]
pub async fn delete_mcp_server(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let not_found = || ApiError::not_found("MCP server");
    let id = ids::parse_prefixed(ids::MCP_SERVER, &path).ok_or_else(not_found)?;
    let row = db::mcp_servers::delete(&state.pool, &auth.org.id, &id, &auth.user.id)
        .await?
        .ok_or_else(not_found)?;
    state.mcp_servers.invalidate(&row.org_id, &row.name);
    Ok(HttpResponse::Ok().json(json!({ "data": DeletedMcpServer { deleted: true } })))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_mcp_servers).service(create_mcp_server).service(delete_mcp_server);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_mcp_servers, create_mcp_server, delete_mcp_server))]
pub struct ApiDoc;
