//! `GET /api/audit-log`: the current organization's record of membership,
//! ownership and settings changes, for admins.

use actix_web::{get, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::db::{self, models::AuditEvent};
use spendgate_engine::error::ApiError;
use spendgate_engine::openapi::Page;
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::{pagination, time};

/// Default page size of the audit log.
const DEFAULT_LIMIT: i64 = 50;
/// Longest accepted `action` filter; no emitted action comes near it.
const MAX_ACTION_LEN: usize = 100;

/// One audit event. Ids appear as they did on the wire when the event happened.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEventView {
    /// A plain UUID.
    id: String,
    /// The acting user (`svc_usr_…`), or null for operator changes.
    actor_id: Option<String>,
    /// Free-form, for example `member.role_changed`.
    action: String,
    resource_type: String,
    resource_id: Option<String>,
    #[schema(value_type = Object)]
    metadata: Value,
    created_at: String,
}

impl From<AuditEvent> for AuditEventView {
    fn from(ev: AuditEvent) -> Self {
        // Rows are written from JSON values, so a parse failure means a hand-edited
        // row; show it as empty metadata rather than failing the whole page.
        let metadata = serde_json::from_str(&ev.metadata).unwrap_or_else(|_| json!({}));
        AuditEventView {
            id: ev.id,
            actor_id: ev.actor_id,
            action: ev.action,
            resource_type: ev.resource_type,
            resource_id: ev.resource_id,
            metadata,
            created_at: time::iso(ev.created_at),
        }
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditLogQuery {
    /// 1-100, default 50.
    limit: Option<String>,
    /// The previous page's `cursor`, JSON-encoded.
    cursor: Option<String>,
    /// Only events with exactly this action.
    action: Option<String>,
}

/// The current organization's audit log, newest first (admin).
#[utoipa::path(get, path = "/api/audit-log", tag = "audit", params(AuditLogQuery), security(("session" = [])),
    description = "Session, admin and above. Newest first.",
    responses((status = 200, description = "`{ data: AuditEvent[], cursor }`", body = Page<AuditEventView>),
        (status = 400, description = "validation_error")))]
#[get("/audit-log")]
pub async fn list_audit_log(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let q: AuditLogQuery = super::orgs::query(&req)?;
    let (limit, after) = pagination::parse(q.limit.as_deref(), q.cursor.as_deref(), DEFAULT_LIMIT, "")?;
    let action = q.action.filter(|a| !a.is_empty());
    if action.as_ref().is_some_and(|a| a.chars().count() > MAX_ACTION_LEN) {
        return Err(ApiError::invalid_field(&["action"], "must be at most 100 characters"));
    }
    let rows = db::audit::list(&state.pool, &auth.org.id, action.as_deref(), limit, after.as_ref()).await?;
    let (rows, cursor) = pagination::page(rows, limit, "", |ev| (ev.created_at, ev.id.clone()));
    let data: Vec<AuditEventView> = rows.into_iter().map(AuditEventView::from).collect();
    Ok(HttpResponse::Ok().json(json!({ "data": data, "cursor": cursor })))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_audit_log);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_audit_log))]
pub struct ApiDoc;
