//! Webhook endpoints: list, create, update, delete, test ping, secret rotation and
//! the delivery history (dashboard session).
//!
//! Every change to an endpoint invalidates the organization's subscription cache
//! (`spendgate_engine::outbox`), so events are queued for exactly the enabled endpoints that
//! want them. Delivery itself is `spendgate_engine::webhooks`.

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::keys::json_body;
use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::db::models::{WebhookDelivery, WebhookEndpoint};
use spendgate_engine::db::webhooks::{EndpointChanges, Inserted};
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::double_option;
use spendgate_engine::util::{ids, time};
use spendgate_engine::webhooks::envelope::{self, EVENT_TYPES};
use spendgate_engine::webhooks::{send, sign, target};

pub const MAX_DESCRIPTION_CHARS: usize = 200;
pub const MAX_URL_CHARS: usize = 2_048;
/// Deliveries listed per endpoint.
pub const DELIVERIES_LISTED: i64 = 50;
/// The test ping's timeout.
pub const TEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Body of `POST /api/webhooks`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateWebhookBody {
    /// HTTPS; no private, loopback, link-local or metadata address, no `.local`, no IPv6 literal.
    url: String,
    /// At most 200 characters.
    description: Option<String>,
    /// Event kinds to receive; `[]` (default) = all 20.
    event_types: Option<Vec<String>>,
    /// `full` or `thin`; default `thin` on Free, `full` on Pro and above.
    payload_mode: Option<String>,
    /// The version of delivered payloads (`YYYY-MM-DD`); default the current one.
    api_version: Option<String>,
}

/// Body of `PATCH /api/webhooks/{id}`: at least one field; `description: null` clears it.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateWebhookBody {
    url: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    description: Option<Option<String>>,
    event_types: Option<Vec<String>>,
    enabled: Option<bool>,
    payload_mode: Option<String>,
}

/// A webhook endpoint (never with its secret, except on create).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookView {
    /// `svc_wh_<uuid>`.
    id: String,
    url: String,
    description: Option<String>,
    event_types: Vec<String>,
    enabled: bool,
    api_version: String,
    /// `full` or `thin`.
    payload_mode: String,
    /// When the endpoint started failing (its last attempt failed), or null. An
    /// endpoint failing for long is also counted in the `webhook_endpoints_failing` metric.
    failing_since: Option<String>,
    created_at: String,
    updated_at: String,
}

impl From<&WebhookEndpoint> for WebhookView {
    fn from(e: &WebhookEndpoint) -> Self {
        WebhookView {
            id: ids::prefixed(ids::WEBHOOK, &e.id),
            url: e.url.clone(),
            description: e.description.clone(),
            event_types: serde_json::from_str(&e.event_types).unwrap_or_default(),
            enabled: e.enabled,
            api_version: e.api_version.clone(),
            payload_mode: e.payload_mode.clone(),
            failing_since: time::iso_opt(e.failing_since),
            created_at: time::iso(e.created_at),
            updated_at: time::iso(e.updated_at),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedWebhookView {
    #[serde(flatten)]
    endpoint: WebhookView,
    /// `whsec_` + 64 hex characters; shown only here and by rotate-secret.
    signing_secret: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RotatedSecret {
    signing_secret: String,
    secret_rotated_at: String,
}

/// One delivery of an event to an endpoint.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    /// `svc_del_<uuid>`.
    id: String,
    event_type: String,
    /// `evt_<uuid>`, the envelope's `id`.
    event_id: String,
    /// `pending`, `delivered` or `failed`.
    status: String,
    attempts: i64,
    last_attempt_at: Option<String>,
    response_status: Option<i64>,
    created_at: String,
}

impl From<&WebhookDelivery> for DeliveryView {
    fn from(d: &WebhookDelivery) -> Self {
        DeliveryView {
            id: ids::prefixed(ids::DELIVERY, &d.id),
            event_type: d.event_type.clone(),
            event_id: envelope::event_id(&d.outbox_id),
            status: d.status.clone(),
            attempts: d.attempts,
            last_attempt_at: time::iso_opt(d.last_attempt_at),
            response_status: d.response_status,
            created_at: time::iso(d.created_at),
        }
    }
}

/// `POST /api/webhooks/{id}/test` answer (not wrapped in `data`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestResult {
    success: bool,
    /// Null when no answer came (unreachable, refused target, timeout).
    status_code: Option<u16>,
    response_preview: String,
}

fn endpoint_id(raw: &str) -> Result<String, ApiError> {
    ids::parse_prefixed(ids::WEBHOOK, raw).ok_or_else(|| ApiError::not_found("Webhook endpoint"))
}

/// The URL rules, including the addresses a hostname resolves to now. A name that
/// does not resolve (yet) is accepted: it is checked again at every send.
pub(crate) async fn check_target(url: &str, dev: bool, issues: &mut Issues) {
    if url.chars().count() > MAX_URL_CHARS {
        issues.push(&["url"], format!("must be at most {MAX_URL_CHARS} characters"));
        return;
    }
    let parsed = match target::check_url(url, dev) {
        Ok(u) => u,
        Err(e) => return issues.push(&["url"], e.0),
    };
    if let Some(url::Host::Domain(host)) = parsed.host() {
        let port = parsed.port_or_known_default().unwrap_or(443);
        let lookup = tokio::time::timeout(TEST_TIMEOUT, target::resolve_checked(host, port, dev)).await;
        if let Ok(Err(e)) = lookup {
            if !e.0.starts_with("could not resolve") {
                issues.push(&["url"], e.0);
            }
        }
    }
}

fn check_fields(
    description: Option<&str>,
    event_types: Option<&[String]>,
    payload_mode: Option<&str>,
    issues: &mut Issues,
) {
    if description.is_some_and(|d| d.chars().count() > MAX_DESCRIPTION_CHARS) {
        issues.push(&["description"], format!("must be at most {MAX_DESCRIPTION_CHARS} characters"));
    }
    for (i, kind) in event_types.unwrap_or_default().iter().enumerate() {
        if !EVENT_TYPES.contains(&kind.as_str()) {
            issues.push(&["eventTypes", &i.to_string()], "must be one of the 20 event kinds");
        }
    }
    if payload_mode.is_some_and(|m| m != "full" && m != "thin") {
        issues.push(&["payloadMode"], "must be full or thin");
    }
}

/// The stored event-type list: deduplicated, in the given order.
fn stored_kinds(kinds: &[String]) -> Result<String, ApiError> {
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&String> = kinds.iter().filter(|k| seen.insert(k.as_str())).collect();
    serde_json::to_string(&unique).map_err(ApiError::internal)
}

/// Lists the organization's endpoints, newest first.
#[utoipa::path(get, path = "/api/webhooks", tag = "webhooks", security(("session" = [])),
    description = "Session, viewer and above. Secrets are never listed.",
    responses((status = 200, description = "`{ data: Webhook[] }`", body = Data<Vec<WebhookView>>),
        (status = 401, description = "authentication_required")))]
#[get("/webhooks")]
pub async fn list_webhooks(state: web::Data<AppState>, auth: SessionAuth) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let rows = spendgate_engine::db::webhooks::list(&state.pool, &auth.org.id).await?;
    Ok(HttpResponse::Ok().json(json!({ "data": rows.iter().map(WebhookView::from).collect::<Vec<_>>() })))
}

/// Creates an endpoint; its signing secret is in this response only.
#[utoipa::path(post, path = "/api/webhooks", tag = "webhooks", request_body = CreateWebhookBody,
    security(("session" = [])),
    description = "Session, admin and above. Free tier: at most 2 endpoints, `thin` payloads by default.",
    responses((status = 201, description = "`{ data: Webhook + signingSecret }`", body = Data<CreatedWebhookView>),
        (status = 400, description = "validation_error"), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden"), (status = 409, description = "limit_exceeded")))]
#[post("/webhooks")]
pub async fn create_webhook(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let body: CreateWebhookBody = json_body(&req, payload).await?;
    let mut issues = Issues::new();
    check_target(&body.url, state.config.dev, &mut issues).await;
    check_fields(
        body.description.as_deref(),
        body.event_types.as_deref(),
        body.payload_mode.as_deref(),
        &mut issues,
    );
    if body.api_version.as_deref().is_some_and(|v| !crate::is_api_version(v)) {
        issues.push(&["apiVersion"], "must be a date of the form YYYY-MM-DD");
    }
    issues.finish()?;
    let plan = auth.plan();
    let default_mode = if plan.is_paid() { "full" } else { "thin" };
    let now = time::now_ms();
    let secret = sign::new_secret();
    let row = WebhookEndpoint {
        id: ids::new_id(),
        org_id: auth.org.id.clone(),
        url: body.url,
        description: body.description,
        event_types: stored_kinds(&body.event_types.unwrap_or_default())?,
        enabled: true,
        api_version: body.api_version.unwrap_or_else(|| spendgate_engine::API_VERSION.to_owned()),
        payload_mode: body.payload_mode.unwrap_or_else(|| default_mode.to_owned()),
        signing_secret: secret.clone(),
        previous_secret: None,
        previous_secret_expires_at: None,
        secret_rotated_at: None,
        failing_since: None,
        created_at: now,
        updated_at: now,
    };
    let max = plan.limits().webhook_endpoints;
    match spendgate_engine::db::webhooks::insert(&state.pool, row.clone(), max).await? {
        Inserted::Created => {
            state.outbox.invalidate(&auth.org.id);
            let view = CreatedWebhookView { endpoint: WebhookView::from(&row), signing_secret: secret };
            Ok(HttpResponse::Created().json(json!({ "data": view })))
        }
        Inserted::LimitReached => Err(ApiError::new(
            ErrorCode::LimitExceeded,
            format!(
                "The {} plan allows {} webhook endpoints; delete one or upgrade",
                plan.as_str(),
                max.unwrap_or_default()
            ),
        )
        .with_details(json!({ "limit": max, "plan": plan.as_str() }))),
    }
}

/// Changes an endpoint. Subscriptions take effect for the next event.
#[utoipa::path(patch, path = "/api/webhooks/{id}", tag = "webhooks", request_body = UpdateWebhookBody,
    security(("session" = [])), params(("id" = String, Path, description = "`svc_wh_<uuid>`")),
    description = "Session, admin and above. At least one field.",
    responses((status = 200, description = "`{ data: Webhook }`", body = Data<WebhookView>),
        (status = 400, description = "validation_error"), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden"), (status = 404, description = "not_found")))]
#[patch("/webhooks/{id}")]
pub async fn update_webhook(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let id = endpoint_id(&path)?;
    let body: UpdateWebhookBody = json_body(&req, payload).await?;
    let mut issues = Issues::new();
    if let Some(url) = &body.url {
        check_target(url, state.config.dev, &mut issues).await;
    }
    let description = body.description.as_ref().and_then(|d| d.as_deref());
    check_fields(description, body.event_types.as_deref(), body.payload_mode.as_deref(), &mut issues);
    issues.finish()?;
    let changes = EndpointChanges {
        url: body.url,
        description: body.description,
        event_types: body.event_types.as_deref().map(stored_kinds).transpose()?,
        enabled: body.enabled,
        payload_mode: body.payload_mode,
        updated_at: None,
    };
    if changes.url.is_none()
        && changes.description.is_none()
        && changes.event_types.is_none()
        && changes.enabled.is_none()
        && changes.payload_mode.is_none()
    {
        return Err(ApiError::invalid_field(
            &[],
            "at least one of url, description, eventTypes, enabled, payloadMode is required",
        ));
    }
    let changes = EndpointChanges { updated_at: Some(time::now_ms()), ..changes };
    let row = spendgate_engine::db::webhooks::update(&state.pool, &auth.org.id, &id, changes)
        .await?
        .ok_or_else(|| ApiError::not_found("Webhook endpoint"))?;
    state.outbox.invalidate(&auth.org.id);
    Ok(HttpResponse::Ok().json(json!({ "data": WebhookView::from(&row) })))
}

/// Deletes an endpoint and its delivery history.
#[utoipa::path(delete, path = "/api/webhooks/{id}", tag = "webhooks", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_wh_<uuid>`")),
    description = "Session, admin and above. 200 `{ success: true }`.",
    responses((status = 200, description = "`{ success: true }`"),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found")))]
#[delete("/webhooks/{id}")]
pub async fn delete_webhook(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let id = endpoint_id(&path)?;
    if !spendgate_engine::db::webhooks::delete(&state.pool, &auth.org.id, &id).await? {
        return Err(ApiError::not_found("Webhook endpoint"));
    }
    state.outbox.invalidate(&auth.org.id);
    Ok(HttpResponse::Ok().json(json!({ "success": true })))
}

/// Sends a signed `test.ping` now (5-second timeout) and reports the answer.
#[utoipa::path(post, path = "/api/webhooks/{id}/test", tag = "webhooks", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_wh_<uuid>`")),
    description = "Session, admin and above. Always 200 when the endpoint exists; an unreachable or \
        refused target gives `success: false, statusCode: null`.",
    responses((status = 200, body = TestResult), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden"), (status = 404, description = "not_found")))]
#[post("/webhooks/{id}/test")]
pub async fn test_webhook(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let id = endpoint_id(&path)?;
    let endpoint = spendgate_engine::db::webhooks::get(&state.pool, &auth.org.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("Webhook endpoint"))?;
    let now = time::now_ms();
    let event_id = envelope::event_id(&ids::new_id());
    let event = envelope::Event {
        id: &event_id,
        kind: "test.ping",
        api_version: &endpoint.api_version,
        created_at_ms: now,
    };
    let body = envelope::full(&event, json!({ "message": "Test webhook from spendgate" }));
    let call = send::Call {
        url: &endpoint.url,
        event_id: &event_id,
        body: body.to_string().into_bytes(),
        secrets: spendgate_engine::webhooks::deliver::signing_secrets(&endpoint, now),
        timestamp: now.div_euclid(1000),
    };
    let client = send::client(state.config.dev, TEST_TIMEOUT);
    let (attempt, preview) = send::send(&client, state.config.dev, call).await;
    use spendgate_engine::webhooks::schedule::Attempt;
    let (success, status_code) = match attempt {
        Attempt::Delivered(s) => (true, Some(s)),
        Attempt::Retry(s, _) | Attempt::Permanent(s, _) => (false, s),
    };
    Ok(HttpResponse::Ok().json(TestResult { success, status_code, response_preview: preview }))
}

/// Replaces the signing secret; the previous one keeps signing for 24 hours.
#[utoipa::path(post, path = "/api/webhooks/{id}/rotate-secret", tag = "webhooks", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_wh_<uuid>`")),
    description = "Session, admin and above. For 24 hours deliveries carry a second `v1=` signature made \
        with the previous secret.",
    responses((status = 200, description = "`{ data: { signingSecret, secretRotatedAt } }`", body = Data<RotatedSecret>),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found")))]
#[post("/webhooks/{id}/rotate-secret")]
pub async fn rotate_webhook_secret(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let id = endpoint_id(&path)?;
    let now = time::now_ms();
    let secret = sign::new_secret();
    let until = now + sign::ROTATION_OVERLAP_MS;
    spendgate_engine::db::webhooks::rotate(&state.pool, &auth.org.id, &id, &secret, now, until)
        .await?
        .ok_or_else(|| ApiError::not_found("Webhook endpoint"))?;
    let body = RotatedSecret { signing_secret: secret, secret_rotated_at: time::iso(now) };
    Ok(HttpResponse::Ok().json(json!({ "data": body })))
}

/// The endpoint's 50 most recent deliveries, newest first.
#[utoipa::path(get, path = "/api/webhooks/{id}/deliveries", tag = "webhooks", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_wh_<uuid>`")),
    description = "Session, viewer and above.",
    responses((status = 200, description = "`{ data: Delivery[] }`", body = Data<Vec<DeliveryView>>),
        (status = 401, description = "authentication_required"), (status = 404, description = "not_found")))]
#[get("/webhooks/{id}/deliveries")]
pub async fn list_webhook_deliveries(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let id = endpoint_id(&path)?;
    spendgate_engine::db::webhooks::get(&state.pool, &auth.org.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("Webhook endpoint"))?;
    let rows = spendgate_engine::db::webhooks::recent_deliveries(&state.pool, &id, DELIVERIES_LISTED).await?;
    Ok(HttpResponse::Ok().json(json!({ "data": rows.iter().map(DeliveryView::from).collect::<Vec<_>>() })))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_webhooks)
        .service(create_webhook)
        .service(update_webhook)
        .service(delete_webhook)
        .service(test_webhook)
        .service(rotate_webhook_secret)
        .service(list_webhook_deliveries);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    list_webhooks,
    create_webhook,
    update_webhook,
    delete_webhook,
    test_webhook,
    rotate_webhook_secret,
    list_webhook_deliveries
))]
pub struct ApiDoc;
