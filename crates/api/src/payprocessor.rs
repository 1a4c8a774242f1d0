//! `/api/payprocessor/*`: connecting the organization's payment processor (Stripe)
//! and syncing its revenue, manually with a session or from a scheduler with
//! `Authorization: Bearer <cron_secret>`. Paid tiers only.

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{delete, get, post, web, FromRequest, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;

use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::crypto;
use spendgate_engine::db::processor::{self as store, Connection};
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::margins::sync::{self, SyncError, SyncReport};
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::processor::{self, ProcessorClient, ProcessorError};
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::JsonBody;
use spendgate_engine::util::{ids, time};

/// Refuses Free-tier organizations: margins and the processor are paid features.
pub fn require_paid(auth: &SessionAuth) -> Result<(), ApiError> {
    if auth.plan().is_paid() {
        Ok(())
    } else {
        Err(ApiError::forbidden("Margins need a paid plan (Pro and above)"))
    }
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectBody {
    /// A restricted key (`rk_…`); `sk_test_…` in development mode.
    processor_key: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionView {
    id: String,
    /// The key's mode prefix and last four characters; the key itself is never returned.
    key_prefix: String,
    status: String,
    created_at: String,
}

fn processor_key(body: ConnectBody, dev: bool) -> Result<String, ApiError> {
    let mut issues = Issues::new();
    let key = body.processor_key.unwrap_or_default();
    let well_formed = (8..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic());
    issues.check(!key.is_empty(), &["processorKey"], "is required");
    issues.check(key.is_empty() || well_formed, &["processorKey"], "must be 8-255 printable characters");
    let kind = if dev {
        "a restricted key (rk_…) or a test key (sk_test_…)"
    } else {
        "a restricted key (rk_…)"
    };
    issues.check(
        key.is_empty() || processor::key_kind_allowed(&key, dev),
        &["processorKey"],
        &format!("must be {kind}"),
    );
    issues.finish()?;
    Ok(key)
}

/// Connects the processor: the key is checked with a minimal listing call, then
/// stored encrypted (admin).
#[utoipa::path(post, path = "/api/payprocessor/connect", tag = "margins", request_body = ConnectBody,
    security(("session" = [])),
    description = "Session, admin and above; paid tiers (Free: 403 `forbidden`). The key must start with `rk_` \
        (`sk_test_` in development mode); it is validated with a one-customer listing call before it is stored, \
        encrypted with `secret_key`.",
    responses((status = 201, description = "`{ data: { id, keyPrefix, status, createdAt } }`", body = Data<ConnectionView>),
        (status = 400, description = "validation_error, processor_validation_failed"),
        (status = 409, description = "conflict: already connected")))]
#[post("/payprocessor/connect")]
pub async fn connect_processor(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    require_paid(&auth)?;
    auth.require(Role::Admin)?;
    let body = JsonBody::<ConnectBody>::from_request(&req, &mut payload.into_inner()).await?.value;
    let key = processor_key(body, state.config.dev)?;
    let secret = state.config.secret_key.as_deref().ok_or_else(|| {
        ApiError::new(ErrorCode::ServiceUnavailable, "Processor connections need the secret_key setting")
    })?;
    if store::connection(&state.pool, &auth.org.id).await?.is_some() {
        return Err(conflict());
    }
    match ProcessorClient::new(&state.config.processor_url, &key).validate().await {
        Ok(()) => {}
        Err(ProcessorError::Rejected(m)) => return Err(validation_failed(&m)),
        Err(e) => return Err(ApiError::unavailable(e)),
    }
    let row = Connection {
        org_id: auth.org.id.clone(),
        id: ids::new_id(),
        key_ciphertext: crypto::encrypt(secret, &auth.org.id, &key).map_err(ApiError::internal)?,
        key_prefix: processor::masked_prefix(&key),
        status: "active".to_owned(),
        created_at: time::now_ms(),
        last_sync_at: None,
        sync_status: "never".to_owned(),
        last_error: None,
        skipped_currencies: "{}".to_owned(),
    };
    if !store::insert_connection(&state.pool, &row).await? {
        return Err(conflict());
    }
    let view = ConnectionView {
        id: row.id,
        key_prefix: row.key_prefix,
        status: row.status,
        created_at: time::iso(row.created_at),
    };
    Ok(HttpResponse::Created().json(json!({ "data": view })))
}

fn conflict() -> ApiError {
    ApiError::new(ErrorCode::Conflict, "A payment processor is already connected")
}

fn validation_failed(message: &str) -> ApiError {
    ApiError::new(ErrorCode::ProcessorValidationFailed, format!("The processor rejected the key: {message}"))
}

/// Disconnects the processor and deletes its revenue data and every customer
/// mapping of the organization (admin).
#[utoipa::path(delete, path = "/api/payprocessor/disconnect", tag = "margins", security(("session" = [])),
    description = "Session, admin and above; paid tiers. Cascades to revenue data and customer mappings.",
    responses((status = 200, description = "`{ data: { deleted: true } }`"),
        (status = 404, description = "not_found: no connection")))]
#[delete("/payprocessor/disconnect")]
pub async fn disconnect_processor(
    state: web::Data<AppState>,
    auth: SessionAuth,
) -> Result<HttpResponse, ApiError> {
    require_paid(&auth)?;
    auth.require(Role::Admin)?;
    if !store::delete_connection(&state.pool, &auth.org.id).await? {
        return Err(ApiError::not_found("Processor connection"));
    }
    Ok(HttpResponse::Ok().json(json!({ "data": { "deleted": true } })))
}

/// The scheduler's response.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ScheduledSync {
    synced: i64,
    errors: i64,
}

/// Syncs revenue. With `Authorization: Bearer <cron_secret>`: every connected
/// paid organization (`{ synced, errors }`); with a session (member): the session's
/// organization (the detailed report).
#[utoipa::path(get, path = "/api/payprocessor/revenue-sync", tag = "margins",
    security(("session" = []), ("cronSecret" = [])),
    description = "Scheduler: `Authorization: Bearer <cron_secret>` → `{ data: { synced, errors } }`. Manual: \
        session, member and above, paid tiers → the sync report. A wrong bearer secret is 401.",
    responses((status = 200, description = "`{ data: ScheduledSync }` or `{ data: SyncReport }`", body = Data<SyncReport>),
        (status = 400, description = "processor_validation_failed: the stored key no longer works"),
        (status = 404, description = "not_found: no connection")))]
#[get("/payprocessor/revenue-sync")]
pub async fn revenue_sync(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    if let Some(bearer) = bearer(&req) {
        let expected = state.config.cron_secret.as_deref().unwrap_or_default();
        let ok = !expected.is_empty()
            && bool::from(subtle::ConstantTimeEq::ct_eq(bearer.as_bytes(), expected.as_bytes()));
        if !ok {
            return Err(ApiError::authentication_required());
        }
        let round =
            spendgate_engine::margins::scheduler::sync_all(&state.pool, &state.outbox, &state.config).await;
        let data = ScheduledSync { synced: round.synced, errors: round.errors };
        return Ok(HttpResponse::Ok().json(json!({ "data": data })));
    }
    let auth = SessionAuth::from_request(&req, &mut Payload::None).await?;
    require_paid(&auth)?;
    auth.require(Role::Member)?;
    match sync::sync_org(&state.pool, &state.outbox, &state.config, &auth.org.id).await {
        Ok(report) => Ok(HttpResponse::Ok().json(json!({ "data": report }))),
        Err(SyncError::NotConnected) => Err(ApiError::not_found("Processor connection")),
        Err(SyncError::Processor(ProcessorError::Rejected(m))) => Err(validation_failed(&m)),
        Err(SyncError::Db(e)) => Err(e.into()),
        Err(e) => Err(ApiError::unavailable(e)),
    }
}

fn bearer(req: &HttpRequest) -> Option<String> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned())
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(connect_processor).service(disconnect_processor).service(revenue_sync);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(connect_processor, disconnect_processor, revenue_sync))]
pub struct ApiDoc;
