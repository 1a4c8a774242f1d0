//! Provider credentials held by the gateway: an admin stores one secret per upstream
//! for the organization, and proxied calls that bring no provider key are forwarded
//! with it, so agents never hold one. The secret is encrypted with `secret_key`,
//! returned by no endpoint (lists show `secretPrefix`), and every change is audited.

use actix_web::{delete, get, post, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;

use spendgate_engine::auth::identity::RAW_KEY_PREFIX;
use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::cloud_credentials::CloudCredential;
use spendgate_engine::credentials;
use spendgate_engine::db;
use spendgate_engine::db::models::ProviderCredential;
use spendgate_engine::db::provider_credentials::Stored;
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::{ids, time, validate};

pub const MAX_NAME_CHARS: usize = 50;
pub const MAX_SECRET_CHARS: usize = 4096;

/// Body of `POST /api/provider-credentials`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct StoreCredentialBody {
    /// `openai`, `anthropic`, `gemini`, `bedrock`, `vertex`, `azure`, or a configured
    /// upstream's name.
    upstream: String,
    /// The provider's API key: 1-4096 visible ASCII characters, not a spendgate key.
    /// For `bedrock`, `vertex` and `azure` a JSON object: `{ accessKeyId,
    /// secretAccessKey, sessionToken?, region, endpoint? }` or `{ apiKey, region,
    /// endpoint? }`; `{ serviceAccount, endpoint? }`; `{ apiKey, endpoint, deployments? }`.
    #[schema(value_type = Object)]
    secret: serde_json::Value,
    /// 1-50 characters after trimming; kept on rotation when absent.
    name: Option<String>,
}

/// A stored credential as listed: never its secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderCredentialView {
    /// `svc_cred_<uuid>`.
    id: String,
    upstream: String,
    name: Option<String>,
    /// The secret's first characters (at most 8, at most a quarter of it).
    secret_prefix: String,
    /// A cloud credential's parts that are not secret: access key id, region,
    /// service-account email, endpoint, deployments.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    details: Option<serde_json::Value>,
    created_at: String,
    updated_at: String,
}

impl From<&ProviderCredential> for ProviderCredentialView {
    fn from(c: &ProviderCredential) -> Self {
        ProviderCredentialView {
            id: ids::prefixed(ids::PROVIDER_CREDENTIAL, &c.id),
            upstream: c.upstream.clone(),
            name: c.name.clone(),
            secret_prefix: c.secret_prefix.clone(),
            details: c.details.as_deref().and_then(|d| serde_json::from_str(d).ok()),
            created_at: time::iso(c.created_at),
            updated_at: time::iso(c.updated_at),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeletedCredential {
    deleted: bool,
}

/// The `secret_key` credentials are encrypted with; 503 naming the setting without one
/// (PostgreSQL deployments must set it, the same on every instance).
fn secret_key(state: &AppState) -> Result<&str, ApiError> {
    state.config.secret_key.as_deref().ok_or_else(|| {
        ApiError::new(ErrorCode::ServiceUnavailable, credentials::CredentialError::NoSecretKey.to_string())
    })
}

/// A checked store body: the secret as stored, its prefix, its non-secret parts.
struct Checked {
    name: Option<String>,
    secret: String,
    prefix: String,
    details: Option<String>,
}

/// Checks a store body.
fn check_body(state: &AppState, body: &StoreCredentialBody) -> Result<Checked, ApiError> {
    let mut issues = Issues::new();
    if !credentials::is_credential_upstream(&state.config, &body.upstream) {
        issues.push(
            &["upstream"],
            format!("must be one of {}", state.config.configured_upstream_names().join(", ")),
        );
    }
    let secret = if credentials::is_cloud_upstream(&state.config, &body.upstream) {
        let cloud = CloudCredential::parse(&body.upstream, &body.secret, state.config.dev, &mut issues);
        cloud.map(|c| {
            (c.to_stored(), credentials::secret_prefix(c.secret_part()), Some(c.details().to_string()))
        })
    } else {
        check_key(&body.secret, &mut issues).map(|k| (k.to_owned(), credentials::secret_prefix(k), None))
    };
    let name = body.name.as_deref().map(|n| validate::trimmed_name(n, 1, MAX_NAME_CHARS));
    if matches!(name, Some(None)) {
        issues.push(&["name"], "must be 1 to 50 characters after trimming");
    }
    issues.finish()?;
    let (secret, prefix, details) = secret.ok_or_else(|| ApiError::internal("unchecked secret"))?;
    Ok(Checked { name: name.flatten(), secret, prefix, details })
}

/// A provider API key: 1-4096 visible ASCII characters, not a spendgate key.
fn check_key<'a>(secret: &'a serde_json::Value, issues: &mut Issues) -> Option<&'a str> {
    let Some(secret) = secret.as_str() else {
        issues.push(&["secret"], "must be a string: the provider's API key");
        return None;
    };
    let visible = secret.bytes().all(|b| b.is_ascii_graphic());
    if secret.is_empty() || secret.len() > MAX_SECRET_CHARS || !visible {
        issues.push(&["secret"], "must be 1 to 4096 visible ASCII characters without spaces");
        None
    } else if secret.starts_with(RAW_KEY_PREFIX) {
        issues.push(&["secret"], "is a spendgate API key; store the provider's own API key here");
        None
    } else {
        Some(secret)
    }
}

/// Lists the organization's stored credentials, masked.
#[utoipa::path(get, path = "/api/provider-credentials", tag = "provider-credentials", security(("session" = [])),
    description = "Session, viewer and above. Secrets are never returned; `secretPrefix` shows their start.",
    responses((status = 200, description = "`{ data: ProviderCredential[] }`", body = Data<Vec<ProviderCredentialView>>),
        (status = 401, description = "authentication_required")))]
#[get("/provider-credentials")]
pub async fn list_provider_credentials(
    state: web::Data<AppState>,
    auth: SessionAuth,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let rows = db::provider_credentials::list(&state.pool, &auth.org.id).await?;
    let data: Vec<ProviderCredentialView> = rows.iter().map(ProviderCredentialView::from).collect();
    Ok(HttpResponse::Ok().json(json!({ "data": data })))
}

/// Stores the organization's credential for an upstream; a second store for the same
/// upstream replaces the secret (rotation; calls in flight finish with the old one).
#[utoipa::path(post, path = "/api/provider-credentials", tag = "provider-credentials",
    request_body = StoreCredentialBody, security(("session" = [])),
    description = "Session, admin and above. Encrypted at rest with `secret_key`; the secret is not returned.",
    responses((status = 201, description = "`{ data: { id, upstream, name, secretPrefix, createdAt, updatedAt } }`",
            body = Data<ProviderCredentialView>),
        (status = 400, description = "validation_error"), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden"),
        (status = 503, description = "service_unavailable: no secret_key is configured")))]
#[post("/provider-credentials")]
pub async fn store_provider_credential(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let body: StoreCredentialBody = super::keys::json_body(&req, payload).await?;
    let checked = check_body(&state, &body)?;
    let key = secret_key(&state)?;
    let now = time::now_ms();
    let row = ProviderCredential {
        id: ids::new_id(),
        org_id: auth.org.id.clone(),
        encrypted_secret: spendgate_engine::crypto::encrypt(key, &auth.org.id, &checked.secret)
            .map_err(ApiError::internal)?,
        secret_prefix: checked.prefix,
        upstream: body.upstream,
        name: checked.name,
        created_at: now,
        updated_at: now,
        details: checked.details,
    };
    let (row, stored) = db::provider_credentials::store(&state.pool, row, &auth.user.id).await?;
    state.credentials.invalidate(&row.org_id, &row.upstream);
    tracing::info!(upstream = %row.upstream, rotated = stored == Stored::Rotated, "provider credential stored");
    Ok(HttpResponse::Created().json(json!({ "data": ProviderCredentialView::from(&row) })))
}

/// Deletes a stored credential; calls that relied on it are refused from then on.
#[utoipa::path(delete, path = "/api/provider-credentials/{id}", tag = "provider-credentials",
    security(("session" = [])), params(("id" = String, Path, description = "`svc_cred_<uuid>`")),
    description = "Session, admin and above.",
    responses((status = 200, description = "`{ data: { deleted: true } }`", body = Data<DeletedCredential>),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found: missing or another organization's")))]
#[delete("/provider-credentials/{id}")]
pub async fn delete_provider_credential(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let not_found = || ApiError::not_found("Provider credential");
    let id = ids::parse_prefixed(ids::PROVIDER_CREDENTIAL, &path).ok_or_else(not_found)?;
    let row = db::provider_credentials::delete(&state.pool, &auth.org.id, &id, &auth.user.id)
        .await?
        .ok_or_else(not_found)?;
    state.credentials.invalidate(&row.org_id, &row.upstream);
    Ok(HttpResponse::Ok().json(json!({ "data": DeletedCredential { deleted: true } })))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_provider_credentials)
        .service(store_provider_credential)
        .service(delete_provider_credential);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_provider_credentials, store_provider_credential, delete_provider_credential))]
pub struct ApiDoc;
