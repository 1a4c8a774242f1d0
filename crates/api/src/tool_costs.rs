//! Tool costs: `GET /api/tool-costs` (key or session viewer), `POST /api/tool-costs`
//! (manual override, session admin), `DELETE /api/tool-costs/{svc_tc_id}` (reset,
//! session admin) and `POST /api/tool-costs/discover` (key: a tool server registers
//! its tools).
//!
//! Discovery sets a tool's cost to its `tierCost` unless an admin set a manual cost,
//! which only a DELETE (reset to 0, `discovered`) gives back to discovery.

use std::collections::BTreeSet;

use actix_web::http::StatusCode;
use actix_web::{delete, get, post, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use spendgate_engine::auth::dual::DualAuth;
use spendgate_engine::auth::keys::KeyAuth;
use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::db::{self, models::ToolCost};
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::idempotency;
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::tool_costs::{self as rules, MAX_DESCRIPTION_CHARS, MAX_TOOLS_PER_DISCOVERY};
use spendgate_engine::util::json::JsonBody;
use spendgate_engine::util::{ids, time};

/// A tool's per-invocation cost.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCostView {
    /// `svc_tc_<uuid>`.
    id: String,
    /// `svc_usr_<uuid>`: the owner of the key that first discovered the tool.
    user_id: String,
    server_name: String,
    tool_name: String,
    /// Charged per invocation to MCP tool events that carry no explicit cost.
    cost_microdollars: i64,
    /// Suggested by the tool server at discovery.
    suggested_cost: Option<i64>,
    /// `discovered` or `manual`.
    source: String,
    description: Option<String>,
    #[schema(value_type = Option<Object>)]
    annotations: Option<Value>,
    last_seen_at: Option<String>,
    created_at: String,
    updated_at: String,
}

impl From<&ToolCost> for ToolCostView {
    fn from(t: &ToolCost) -> Self {
        ToolCostView {
            id: ids::prefixed(ids::TOOL_COST, &t.id),
            user_id: ids::prefixed(ids::USER, &t.user_id),
            server_name: t.server_name.clone(),
            tool_name: t.tool_name.clone(),
            cost_microdollars: t.cost_microdollars,
            suggested_cost: t.suggested_cost,
            source: t.source.clone(),
            description: t.description.clone(),
            annotations: t.annotations.as_deref().and_then(|a| serde_json::from_str(a).ok()),
            last_seen_at: time::iso_opt(t.last_seen_at),
            created_at: time::iso(t.created_at),
            updated_at: time::iso(t.updated_at),
        }
    }
}

/// Body of `POST /api/tool-costs`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManualCostBody {
    /// No `/`.
    server_name: String,
    tool_name: String,
    /// 0 to 10^12.
    cost_microdollars: i64,
}

/// One tool of `POST /api/tool-costs/discover`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredTool {
    /// Unique within the call.
    name: String,
    /// The tool's per-invocation cost as its server states it (microdollars).
    tier_cost: i64,
    suggested_cost: Option<i64>,
    /// At most 2,000 characters.
    description: Option<String>,
    /// An object, at most 10 nesting levels and 16 KB.
    #[schema(value_type = Option<Object>)]
    annotations: Option<Value>,
}

/// Body of `POST /api/tool-costs/discover`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverBody {
    server_name: String,
    /// 1 to 500 tools.
    tools: Vec<DiscoveredTool>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Registered {
    registered: usize,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Deleted {
    deleted: bool,
}

#[utoipa::path(get, path = "/api/tool-costs", tag = "tool-costs",
    security(("serviceKey" = []), ("session" = [])),
    description = "Dual: an API key, or a session (viewer and above). Every tool cost of the organization.",
    responses((status = 200, body = Data<Vec<ToolCostView>>), (status = 401, description = "authentication_required")))]
#[get("/tool-costs")]
pub async fn list_tool_costs(state: web::Data<AppState>, auth: DualAuth) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let rows = db::tool_costs::list(&state.pool, auth.org_id()).await?;
    Ok(HttpResponse::Ok().json(json!({ "data": rows.iter().map(ToolCostView::from).collect::<Vec<_>>() })))
}

#[utoipa::path(post, path = "/api/tool-costs", tag = "tool-costs", request_body = ManualCostBody,
    security(("session" = [])),
    description = "Session, admin and above. Sets a manual cost (source `manual`) that later discoveries keep.",
    responses((status = 200, body = Data<ToolCostView>), (status = 400, description = "validation_error"),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found: the tool was never discovered")))]
#[post("/tool-costs")]
pub async fn set_manual_cost(
    state: web::Data<AppState>,
    auth: SessionAuth,
    body: JsonBody<ManualCostBody>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let body = body.value;
    let mut issues = Issues::new();
    rules::check_server_name(&body.server_name, &["serverName"], &mut issues);
    rules::check_tool_name(&body.tool_name, &["toolName"], &mut issues);
    rules::check_cost(body.cost_microdollars, &["costMicrodollars"], &mut issues);
    issues.finish()?;
    let org = &auth.org.id;
    let row = db::tool_costs::set_manual(
        &state.pool,
        org,
        &body.server_name,
        &body.tool_name,
        body.cost_microdollars,
        time::now_ms(),
    )
    .await?
    .ok_or_else(|| ApiError::not_found("Tool"))?;
    state.tool_costs.invalidate(org, &row.server_name, &row.tool_name);
    Ok(HttpResponse::Ok().json(json!({ "data": ToolCostView::from(&row) })))
}

#[utoipa::path(delete, path = "/api/tool-costs/{id}", tag = "tool-costs",
    params(("id" = String, Path, description = "`svc_tc_<uuid>`; an unprefixed id is refused")),
    security(("session" = [])),
    description = "Session, admin and above. Resets the cost to 0 and the source to `discovered`.",
    responses((status = 200, body = Deleted), (status = 400, description = "validation_error: not a svc_tc_ id"),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found")))]
#[delete("/tool-costs/{id}")]
pub async fn reset_tool_cost(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let id = ids::parse_prefixed(ids::TOOL_COST, &path)
        .ok_or_else(|| ApiError::invalid_field(&["id"], "must be svc_tc_ followed by a UUID"))?;
    let org = &auth.org.id;
    let row = db::tool_costs::reset(&state.pool, org, &id, time::now_ms())
        .await?
        .ok_or_else(|| ApiError::not_found("Tool cost"))?;
    state.tool_costs.invalidate(org, &row.server_name, &row.tool_name);
    Ok(HttpResponse::Ok().json(Deleted { deleted: true }))
}

#[utoipa::path(post, path = "/api/tool-costs/discover", tag = "tool-costs", request_body = DiscoverBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "Replays the first answer for 24 h")),
    security(("serviceKey" = [])),
    description = "Key. Registers or refreshes 1-500 tools of one server; idempotent; manual costs are kept.",
    responses((status = 200, body = Registered), (status = 400, description = "validation_error or invalid_json"),
        (status = 401, description = "authentication_required"), (status = 413, description = "payload_too_large"),
        (status = 409, description = "limit_exceeded: the organization would hold more than max_tool_costs tools, or idempotency_conflict"),
        (status = 415, description = "unsupported_media_type"), (status = 429, description = "rate_limit_exceeded")))]
#[post("/tool-costs/discover")]
pub async fn discover_tools(
    state: web::Data<AppState>,
    req: HttpRequest,
    key: KeyAuth,
    body: JsonBody<DiscoverBody>,
) -> Result<HttpResponse, ApiError> {
    let header_key = idempotency::header_key(&req)?;
    validate_discovery(&body.value)?;
    let rows = discovered_rows(&key, body.value, time::now_ms());
    idempotency::run(
        &state.pool,
        &state.instance_id,
        header_key,
        &key.key_hash,
        "/api/tool-costs/discover",
        &body.raw,
        || async {
            let names: Vec<_> = rows.iter().map(|r| (r.server_name.clone(), r.tool_name.clone())).collect();
            let max = state.config.max_tool_costs;
            let registered = db::tool_costs::discover(&state.pool, rows, max).await?.ok_or_else(|| {
                ApiError::new(
                    ErrorCode::LimitExceeded,
                    format!("The organization would hold more than {max} tools; nothing was registered"),
                )
            })?;
            for (server, tool) in &names {
                state.tool_costs.invalidate(&key.org_id, server, tool);
            }
            Ok((StatusCode::OK, json!({ "registered": registered })))
        },
    )
    .await
}

fn validate_discovery(body: &DiscoverBody) -> Result<(), ApiError> {
    let mut issues = Issues::new();
    rules::check_server_name(&body.server_name, &["serverName"], &mut issues);
    issues.check(
        (1..=MAX_TOOLS_PER_DISCOVERY).contains(&body.tools.len()),
        &["tools"],
        "must hold 1 to 500 tools",
    );
    let mut seen = BTreeSet::new();
    for (i, tool) in body.tools.iter().enumerate() {
        let i = i.to_string();
        rules::check_tool_name(&tool.name, &["tools", &i, "name"], &mut issues);
        issues.check(seen.insert(tool.name.as_str()), &["tools", &i, "name"], "tool names must be unique");
        rules::check_cost(tool.tier_cost, &["tools", &i, "tierCost"], &mut issues);
        if let Some(cost) = tool.suggested_cost {
            rules::check_cost(cost, &["tools", &i, "suggestedCost"], &mut issues);
        }
        issues.check(
            tool.description.as_ref().is_none_or(|d| d.chars().count() <= MAX_DESCRIPTION_CHARS),
            &["tools", &i, "description"],
            "must be at most 2000 characters",
        );
        if let Some(a) = tool.annotations.as_ref().filter(|a| !a.is_null()) {
            rules::check_annotations(a, &["tools", &i, "annotations"], &mut issues);
        }
    }
    issues.finish()
}

fn discovered_rows(key: &KeyAuth, body: DiscoverBody, now: i64) -> Vec<ToolCost> {
    body.tools
        .into_iter()
        .map(|tool| {
            let annotations = tool.annotations.filter(|a| !a.is_null()).map(|a| a.to_string());
            ToolCost {
                id: ids::new_id(),
                org_id: key.org_id.clone(),
                user_id: key.user_id.clone(),
                server_name: body.server_name.clone(),
                tool_name: tool.name,
                cost_microdollars: tool.tier_cost,
                suggested_cost: tool.suggested_cost,
                source: db::tool_costs::DISCOVERED.to_owned(),
                description: tool.description,
                annotations,
                last_seen_at: Some(now),
                created_at: now,
                updated_at: now,
            }
        })
        .collect()
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_tool_costs).service(discover_tools).service(set_manual_cost).service(reset_tool_cost);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_tool_costs, set_manual_cost, reset_tool_cost, discover_tools))]
pub struct ApiDoc;
