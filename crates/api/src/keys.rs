//! API keys: list, create, update and revoke (dashboard session), and
//! `GET /api/auth/introspect` (the key itself).
//!
//! A key's raw secret is returned once, by create; only its SHA-256 and a short
//! clear prefix are stored. Updates and revocations flush the validator's cache
//! entry for the key at once, so they take effect on the next request.

use std::collections::BTreeMap;

use actix_web::{delete, get, patch, post, web, FromRequest, HttpRequest, HttpResponse};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

use spendgate_engine::auth::identity::{generate_raw_key, key_prefix, stored_list, stored_tags};
use spendgate_engine::auth::keys::KeyAuth;
use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::auth::sha256_hex;
use spendgate_engine::db::keys::{Inserted, KeyChanges};
use spendgate_engine::db::{self, models::ApiKey};
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::{double_option, JsonBody};
use spendgate_engine::util::pagination::{self, Cursor};
use spendgate_engine::util::{ids, time, validate};

pub const DEFAULT_PAGE_SIZE: i64 = 50;
pub const MAX_NAME_CHARS: usize = 50;
pub const MAX_ALLOWED_MODELS: usize = 50;
pub const MAX_MODEL_CHARS: usize = 200;
pub const MAX_ALLOWED_CUSTOMERS: usize = 100;
/// The providers a key may be restricted to. The spec names `openai` and
/// `anthropic`; `google` is accepted as well because the proxy also serves the
/// Gemini generative-content routes, and a key could otherwise not be limited to
/// them.
pub const KNOWN_PROVIDERS: &[&str] = &["openai", "anthropic", "google", "bedrock", "vertex", "azure"];

/// Body of `POST /api/keys`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateKeyBody {
    /// 1-50 characters after trimming.
    name: String,
    /// Tags merged into every request made with the key.
    default_tags: Option<BTreeMap<String, String>>,
    /// Null or absent = unrestricted; `[]` = no model allowed. At most 50 entries.
    allowed_models: Option<Vec<String>>,
    /// Null or absent = unrestricted. Entries: `openai`, `anthropic`, `google`.
    allowed_providers: Option<Vec<String>>,
    /// Null or absent = unrestricted. At most 100 customer identifiers.
    allowed_customers: Option<Vec<String>>,
    /// MCP tools the key may see and call through the gateway: null or absent = all,
    /// `[]` = none. At most 100 entries of `server/tool` or `server/*`.
    allowed_tools: Option<Vec<String>>,
    /// Default false.
    require_customer_id: Option<bool>,
    /// Default false. When true, a proxied call that brings its own provider
    /// credential is refused (403): the key must use the gateway's stored one.
    require_stored_credentials: Option<bool>,
    /// The key-level API version setting (`YYYY-MM-DD`); a request's
    /// `Service-Version` header overrides it.
    api_version: Option<String>,
}

/// Body of `PATCH /api/keys/{id}`: at least one field. For the allow-lists and
/// `apiVersion`, null clears the setting; the other fields may not be null.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateKeyBody {
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    name: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    default_tags: Option<Option<BTreeMap<String, String>>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<Vec<String>>)]
    allowed_models: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<Vec<String>>)]
    allowed_providers: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<Vec<String>>)]
    allowed_customers: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<Vec<String>>)]
    allowed_tools: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<bool>)]
    require_customer_id: Option<Option<bool>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<bool>)]
    require_stored_credentials: Option<Option<bool>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    api_version: Option<Option<String>>,
}

/// Query of `GET /api/keys`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListKeysQuery {
    /// Page size, 1-100 (default 50).
    limit: Option<String>,
    /// The previous page's `cursor`, JSON-encoded.
    cursor: Option<String>,
}

/// The fields every API key view shares.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyFields {
    /// `svc_key_<uuid>`.
    id: String,
    name: String,
    /// The first 16 characters of the raw key.
    key_prefix: String,
    default_tags: BTreeMap<String, String>,
    allowed_models: Option<Vec<String>>,
    allowed_providers: Option<Vec<String>>,
    allowed_customers: Option<Vec<String>>,
    /// MCP tools (`server/tool`, `server/*`) the key may use; null = all.
    allowed_tools: Option<Vec<String>>,
    require_customer_id: bool,
    /// Calls must use the organization's stored provider credentials.
    require_stored_credentials: bool,
    /// The key-level API version setting, or null.
    api_version: Option<String>,
    created_at: String,
}

impl From<&ApiKey> for ApiKeyFields {
    fn from(k: &ApiKey) -> Self {
        ApiKeyFields {
            id: ids::prefixed(ids::API_KEY, &k.id),
            name: k.name.clone(),
            key_prefix: k.key_prefix.clone(),
            default_tags: stored_tags(&k.default_tags),
            allowed_models: stored_list(k.allowed_models.as_deref()),
            allowed_providers: stored_list(k.allowed_providers.as_deref()),
            allowed_customers: stored_list(k.allowed_customers.as_deref()),
            allowed_tools: stored_list(k.allowed_tools.as_deref()),
            require_customer_id: k.require_customer_id,
            require_stored_credentials: k.require_stored_credentials,
            api_version: k.api_version.clone(),
            created_at: time::iso(k.created_at),
        }
    }
}

/// An API key as listed and updated.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyView {
    #[serde(flatten)]
    key: ApiKeyFields,
    /// Null until the key is first used; updated at most once a minute.
    last_used_at: Option<String>,
}

impl From<&ApiKey> for ApiKeyView {
    fn from(k: &ApiKey) -> Self {
        ApiKeyView { key: ApiKeyFields::from(k), last_used_at: time::iso_opt(k.last_used_at) }
    }
}

/// A just-created API key, with its raw secret (shown only here).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedApiKeyView {
    #[serde(flatten)]
    key: ApiKeyFields,
    /// `svc_live_sk_` + 32 hex characters.
    raw_key: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApiKeyPage {
    data: Vec<ApiKeyView>,
    cursor: Option<Cursor>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevokedKey {
    id: String,
    revoked_at: String,
}

/// `GET /api/auth/introspect`: who the key speaks for. In local development mode
/// `keyId` is the literal `dev` and `dev` is true.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Introspection {
    user_id: String,
    key_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    dev: Option<bool>,
}

/// The restriction settings shared by create and update, checked together.
#[derive(Debug, Default)]
struct Restrictions<'a> {
    default_tags: Option<&'a BTreeMap<String, String>>,
    allowed_models: Option<&'a [String]>,
    allowed_providers: Option<&'a [String]>,
    allowed_customers: Option<&'a [String]>,
    allowed_tools: Option<&'a [String]>,
    api_version: Option<&'a str>,
    /// The operator's upstreams, whose names `allowedProviders` may list too.
    named_upstreams: &'a [spendgate_engine::upstreams::NamedUpstream],
}

fn check_restrictions(r: &Restrictions<'_>, issues: &mut Issues) {
    if let Some(tools) = r.allowed_tools {
        check_allowed_tools(tools, issues);
    }
    if let Some(tags) = r.default_tags {
        validate::check_tags(tags, "defaultTags", issues);
    }
    if let Some(models) = r.allowed_models {
        if models.len() > MAX_ALLOWED_MODELS {
            issues.push(&["allowedModels"], format!("at most {MAX_ALLOWED_MODELS} entries"));
        }
        for (i, m) in models.iter().enumerate() {
            if m.trim().is_empty() || m.chars().count() > MAX_MODEL_CHARS {
                issues.push(&["allowedModels", &i.to_string()], "must be 1 to 200 characters");
            }
        }
    }
    if let Some(providers) = r.allowed_providers {
        for (i, p) in providers.iter().enumerate() {
            if !KNOWN_PROVIDERS.contains(&p.as_str()) && !r.named_upstreams.iter().any(|u| u.name == *p) {
                issues.push(
                    &["allowedProviders", &i.to_string()],
                    "must be one of openai, anthropic, google, bedrock, vertex, azure or a configured upstream's name",
                );
            }
        }
    }
    if let Some(customers) = r.allowed_customers {
        if customers.len() > MAX_ALLOWED_CUSTOMERS {
            issues.push(&["allowedCustomers"], format!("at most {MAX_ALLOWED_CUSTOMERS} entries"));
        }
        for (i, c) in customers.iter().enumerate() {
            if !validate::is_customer_id(c) {
                issues.push(
                    &["allowedCustomers", &i.to_string()],
                    "must be 1 to 256 characters of [a-zA-Z0-9._:-]",
                );
            }
        }
    }
    if let Some(v) = r.api_version {
        if !crate::is_api_version(v) {
            issues.push(&["apiVersion"], "must be a date of the form YYYY-MM-DD");
        }
    }
}

fn check_name(raw: &str, issues: &mut Issues) -> Option<String> {
    let name = validate::trimmed_name(raw, 1, MAX_NAME_CHARS);
    if name.is_none() {
        issues.push(&["name"], "must be 1 to 50 characters after trimming");
    }
    name
}

/// The new value of a nullable PATCH list, when one is given.
fn given(v: &Option<Option<Vec<String>>>) -> Option<&[String]> {
    v.as_ref().and_then(|v| v.as_deref())
}

fn to_json<T: Serialize>(value: &T) -> Result<String, ApiError> {
    serde_json::to_string(value).map_err(ApiError::internal)
}

fn to_json_opt<T: Serialize>(value: Option<&T>) -> Result<Option<String>, ApiError> {
    value.map(to_json).transpose()
}

/// Reads the JSON body inside the handler, after the session is resolved.
///
/// Declared as a `JsonBody` argument, the body would be extracted concurrently with
/// `SessionAuth`, and a body error would drop the session lookup mid-query. On
/// SQLite, dropping a running query of diesel-async's `SyncConnectionWrapper` on
/// actix's current-thread runtime panics the worker (the cancel guard calls
/// `block_in_place`), so the caller got a dropped connection instead of a 400.
/// Sequential reading also puts 401/403 before body errors.
pub(crate) async fn json_body<T: DeserializeOwned + 'static>(
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T, ApiError> {
    let mut payload = payload.into_inner();
    Ok(JsonBody::<T>::from_request(req, &mut payload).await?.value)
}

/// Parses a path id; anything that is not `svc_key_<uuid>` names no key, so it is
/// a 404 like a missing key (DELETE lists no 400 in the spec; PATCH follows suit).
fn key_id(raw: &str) -> Result<String, ApiError> {
    ids::parse_prefixed(ids::API_KEY, raw).ok_or_else(|| ApiError::not_found("API key"))
}

/// Lists the organization's active keys, newest first.
#[utoipa::path(get, path = "/api/keys", tag = "keys", params(ListKeysQuery), security(("session" = [])),
    description = "Session, viewer and above. Revoked keys are not listed.",
    responses((status = 200, body = ApiKeyPage), (status = 400, description = "validation_error"),
        (status = 401, description = "authentication_required")))]
#[get("/keys")]
pub async fn list_keys(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let query = web::Query::<ListKeysQuery>::from_query(req.query_string())
        .map_err(|_| ApiError::invalid_field(&[], "malformed query string"))?
        .into_inner();
    let (limit, after) =
        pagination::parse(query.limit.as_deref(), query.cursor.as_deref(), DEFAULT_PAGE_SIZE, ids::API_KEY)?;
    let rows = db::keys::list_page(&state.pool, &auth.org.id, after.as_ref(), limit + 1).await?;
    let (rows, cursor) = pagination::page(rows, limit, ids::API_KEY, |k| (k.created_at, k.id.clone()));
    Ok(HttpResponse::Ok().json(ApiKeyPage { data: rows.iter().map(ApiKeyView::from).collect(), cursor }))
}

/// Creates a key in the session's organization, owned by the signed-in user. The
/// raw key is in this response only.
#[utoipa::path(post, path = "/api/keys", tag = "keys", request_body = CreateKeyBody, security(("session" = [])),
    description = "Session, member and above. Free tier: at most 10 active keys.",
    responses((status = 201, description = "`{ data: ApiKey + rawKey }`", body = Data<CreatedApiKeyView>),
        (status = 400, description = "validation_error"), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden"), (status = 409, description = "limit_exceeded")))]
#[post("/keys")]
pub async fn create_key(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Member)?;
    let body: CreateKeyBody = json_body(&req, payload).await?;
    let mut issues = Issues::new();
    let name = check_name(&body.name, &mut issues);
    check_restrictions(
        &Restrictions {
            default_tags: body.default_tags.as_ref(),
            allowed_models: body.allowed_models.as_deref(),
            allowed_providers: body.allowed_providers.as_deref(),
            allowed_customers: body.allowed_customers.as_deref(),
            allowed_tools: body.allowed_tools.as_deref(),
            api_version: body.api_version.as_deref(),
            named_upstreams: &state.config.upstreams,
        },
        &mut issues,
    );
    issues.finish()?;
    let name = name.ok_or_else(|| ApiError::internal("validated name missing"))?;

    let raw = generate_raw_key();
    let row = ApiKey {
        id: ids::new_id(),
        org_id: auth.org.id.clone(),
        user_id: auth.user.id.clone(),
        name,
        key_prefix: key_prefix(&raw),
        key_hash: sha256_hex(&raw),
        default_tags: to_json(&body.default_tags.unwrap_or_default())?,
        allowed_models: to_json_opt(body.allowed_models.as_ref())?,
        allowed_providers: to_json_opt(body.allowed_providers.as_ref())?,
        allowed_customers: to_json_opt(body.allowed_customers.as_ref())?,
        allowed_tools: to_json_opt(body.allowed_tools.as_ref())?,
        require_customer_id: body.require_customer_id.unwrap_or(false),
        api_version: body.api_version,
        last_used_at: None,
        created_at: time::now_ms(),
        revoked_at: None,
        require_stored_credentials: body.require_stored_credentials.unwrap_or(false),
    };
    let plan = auth.plan();
    let max = plan.limits().api_keys;
    match db::keys::insert(&state.pool, row.clone(), max).await? {
        Inserted::Created => Ok(HttpResponse::Created()
            .json(json!({ "data": CreatedApiKeyView { key: ApiKeyFields::from(&row), raw_key: raw } }))),
        Inserted::LimitReached => Err(ApiError::new(
            ErrorCode::LimitExceeded,
            format!(
                "The {} plan allows {} active API keys; revoke one or upgrade",
                plan.as_str(),
                max.unwrap_or_default()
            ),
        )
        .with_details(json!({ "limit": max, "plan": plan.as_str() }))),
    }
}

/// Changes a key's name or settings. Takes effect on the key's next request.
#[utoipa::path(patch, path = "/api/keys/{id}", tag = "keys", request_body = UpdateKeyBody, security(("session" = [])),
    params(("id" = String, Path, description = "`svc_key_<uuid>`")),
    description = "Session, admin and above. At least one field; null clears an allow-list.",
    responses((status = 200, description = "`{ data: ApiKey }`", body = Data<ApiKeyView>),
        (status = 400, description = "validation_error"), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden"), (status = 404, description = "not_found: missing, revoked or another organization's")))]
#[patch("/keys/{id}")]
pub async fn update_key(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let id = key_id(&path)?;
    let changes = changes_of(json_body(&req, payload).await?, &state.config.upstreams)?;
    let row = db::keys::update(&state.pool, &auth.org.id, &id, changes)
        .await?
        .ok_or_else(|| ApiError::not_found("API key"))?;
    state.keys.invalidate(&row.key_hash);
    Ok(HttpResponse::Ok().json(json!({ "data": ApiKeyView::from(&row) })))
}

/// `allowedTools`: at most 100 entries of `server/tool` or `server/*`.
fn check_allowed_tools(tools: &[String], issues: &mut Issues) {
    if tools.len() > spendgate_engine::mcp_servers::MAX_ALLOWED_TOOLS {
        issues.push(&["allowedTools"], "at most 100 entries");
    }
    for (i, entry) in tools.iter().enumerate() {
        if !spendgate_engine::mcp_servers::is_tool_rule(entry) {
            issues.push(&["allowedTools", &i.to_string()], "must be server/tool or server/*");
        }
    }
}

/// Validates a PATCH body and turns it into column changes.
fn changes_of(
    body: UpdateKeyBody,
    named_upstreams: &[spendgate_engine::upstreams::NamedUpstream],
) -> Result<KeyChanges, ApiError> {
    let mut issues = Issues::new();
    let not_null = |field: &str, present: bool, issues: &mut Issues| {
        if present {
            issues.push(&[field], "must not be null");
        }
    };
    not_null("name", matches!(body.name, Some(None)), &mut issues);
    not_null("defaultTags", matches!(body.default_tags, Some(None)), &mut issues);
    not_null("requireCustomerId", matches!(body.require_customer_id, Some(None)), &mut issues);
    not_null("requireStoredCredentials", matches!(body.require_stored_credentials, Some(None)), &mut issues);
    let name = body.name.flatten().and_then(|n| check_name(&n, &mut issues));
    check_restrictions(
        &Restrictions {
            default_tags: body.default_tags.as_ref().and_then(Option::as_ref),
            allowed_models: given(&body.allowed_models),
            allowed_providers: given(&body.allowed_providers),
            allowed_customers: given(&body.allowed_customers),
            allowed_tools: given(&body.allowed_tools),
            api_version: body.api_version.as_ref().and_then(|v| v.as_deref()),
            named_upstreams,
        },
        &mut issues,
    );
    issues.finish()?;
    let list = |v: Option<Option<Vec<String>>>| v.map(|inner| to_json_opt(inner.as_ref())).transpose();
    let changes = KeyChanges {
        name,
        default_tags: body.default_tags.flatten().map(|t| to_json(&t)).transpose()?,
        allowed_models: list(body.allowed_models)?,
        allowed_providers: list(body.allowed_providers)?,
        allowed_customers: list(body.allowed_customers)?,
        allowed_tools: list(body.allowed_tools)?,
        require_customer_id: body.require_customer_id.flatten(),
        require_stored_credentials: body.require_stored_credentials.flatten(),
        api_version: body.api_version,
    };
    if changes.is_empty() {
        return Err(ApiError::invalid_field(
            &[],
            "at least one of name, defaultTags, allowedModels, allowedProviders, allowedCustomers, \
             allowedTools, requireCustomerId, requireStoredCredentials, apiVersion is required",
        ));
    }
    Ok(changes)
}

/// Revokes a key. It stops working immediately and disappears from the list.
#[utoipa::path(delete, path = "/api/keys/{id}", tag = "keys", security(("session" = [])),
    params(("id" = String, Path, description = "`svc_key_<uuid>`")),
    description = "Session, admin and above.",
    responses((status = 200, description = "`{ data: { id, revokedAt } }`", body = Data<RevokedKey>),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found: missing, already revoked or another organization's")))]
#[delete("/keys/{id}")]
pub async fn revoke_key(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let id = key_id(&path)?;
    let row = db::keys::revoke(&state.pool, &auth.org.id, &id, time::now_ms())
        .await?
        .ok_or_else(|| ApiError::not_found("API key"))?;
    state.keys.invalidate(&row.key_hash);
    let revoked_at = row.revoked_at.ok_or_else(|| ApiError::internal("revoked key without revokedAt"))?;
    Ok(HttpResponse::Ok().json(json!({ "data": RevokedKey {
        id: ids::prefixed(ids::API_KEY, &row.id),
        revoked_at: time::iso(revoked_at),
    }})))
}

/// Tells a key holder whom the key belongs to. Carries `X-RateLimit-*` and
/// `Service-Version`.
#[utoipa::path(get, path = "/api/auth/introspect", tag = "keys", security(("serviceKey" = [])),
    description = "API key. In local development mode `keyId` is `dev` and `dev` is true.",
    responses((status = 200, body = Introspection), (status = 401, description = "authentication_required"),
        (status = 429, description = "rate_limit_exceeded; Retry-After: 60")))]
#[get("/auth/introspect")]
pub async fn introspect_key(state: web::Data<AppState>, key: KeyAuth) -> Result<HttpResponse, ApiError> {
    let user_id = ids::prefixed(ids::USER, &key.user_id);
    let body = if state.config.dev {
        Introspection { user_id, key_id: "dev".to_owned(), dev: Some(true) }
    } else {
        Introspection { user_id, key_id: ids::prefixed(ids::API_KEY, &key.key_id), dev: None }
    };
    Ok(HttpResponse::Ok().json(body))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_keys)
        .service(create_key)
        .service(update_key)
        .service(revoke_key)
        .service(introspect_key);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_keys, create_key, update_key, revoke_key, introspect_key))]
pub struct ApiDoc;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn issues_of(r: &Restrictions<'_>) -> usize {
        let mut issues = Issues::new();
        check_restrictions(r, &mut issues);
        issues.finish().err().map_or(0, |e| e.details.unwrap()["issues"].as_array().unwrap().len())
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn allow_list_rules() {
        let fifty = vec!["m".to_owned(); 50];
        let fifty_one = vec!["m".to_owned(); 51];
        assert_eq!(issues_of(&Restrictions { allowed_models: Some(&fifty), ..Default::default() }), 0);
        assert_eq!(issues_of(&Restrictions { allowed_models: Some(&fifty_one), ..Default::default() }), 1);
        let bad_models = strings(&["", " ", &"x".repeat(201), &"x".repeat(200)]);
        assert_eq!(issues_of(&Restrictions { allowed_models: Some(&bad_models), ..Default::default() }), 3);
        let providers =
            strings(&["openai", "anthropic", "google", "OpenAI", "azure", "bedrock", "vertex", "aws"]);
        assert_eq!(issues_of(&Restrictions { allowed_providers: Some(&providers), ..Default::default() }), 2);
        let customers = vec!["c".to_owned(); 101];
        assert_eq!(issues_of(&Restrictions { allowed_customers: Some(&customers), ..Default::default() }), 1);
        let customers = strings(&["acme:eu-1", "a b", &"c".repeat(257)]);
        assert_eq!(issues_of(&Restrictions { allowed_customers: Some(&customers), ..Default::default() }), 2);
        assert_eq!(issues_of(&Restrictions { allowed_models: Some(&[]), ..Default::default() }), 0);
        assert_eq!(issues_of(&Restrictions { api_version: Some("2026-13-01"), ..Default::default() }), 1);
        assert_eq!(issues_of(&Restrictions { api_version: Some("2026-04-01"), ..Default::default() }), 0);
    }

    #[test]
    fn patch_bodies() {
        assert!(changes_of(UpdateKeyBody::default(), &[]).is_err());
        let body: UpdateKeyBody = serde_json::from_str(r#"{"allowedModels":null}"#).unwrap();
        let changes = changes_of(body, &[]).unwrap();
        assert_eq!(changes.allowed_models, Some(None));
        assert_eq!(changes.allowed_customers, None);
        let body: UpdateKeyBody =
            serde_json::from_str(r#"{"name":"  ci  ","allowedProviders":["openai"]}"#).unwrap();
        let changes = changes_of(body, &[]).unwrap();
        assert_eq!(changes.name.as_deref(), Some("ci"));
        assert_eq!(changes.allowed_providers, Some(Some(r#"["openai"]"#.to_owned())));
        for bad in [
            r#"{"name":null}"#,
            r#"{"defaultTags":null}"#,
            r#"{"requireCustomerId":null}"#,
            r#"{"name":"  "}"#,
        ] {
            let body: UpdateKeyBody = serde_json::from_str(bad).unwrap();
            assert!(changes_of(body, &[]).is_err(), "{bad}");
        }
    }
}
