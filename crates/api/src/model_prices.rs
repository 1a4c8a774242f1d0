//! Prices an organization sets at run time, over the built-in table and the
//! operator's pricing file: an admin prices a model (`PUT`) or removes its price
//! (`DELETE`), everyone in the organization lists them, and `GET /api/pricing` shows
//! the whole table in force with each entry's source and the models seen unpriced.
//! Every change is audited and reaches every instance through the change feed.

use std::sync::LazyLock;

use actix_web::{delete, get, put, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;

use spendgate_engine::auth::session::SessionAuth;
use spendgate_engine::db;
use spendgate_engine::db::models::RuntimePrice;
use spendgate_engine::error::{ApiError, Issues};
use spendgate_engine::model_prices::{self, OrgPrices};
use spendgate_engine::openapi::Data;
use spendgate_engine::plans::Role;
use spendgate_engine::pricing_report::RECENT_DAYS;
use spendgate_engine::state::AppState;
use spendgate_engine::util::bounds::{check_range, MAX_PRICE_MICRODOLLARS_PER_MILLION_TOKENS as MAX_PRICE};
use spendgate_engine::util::{ids, time};
use spendgate_llm::pricing::{ModelPrice, PricingTable, Provider};

/// Longest model name (as the proxy accepts and cost events store).
pub const MAX_MODEL_CHARS: usize = 200;

/// Body of `PUT /api/model-prices/{provider}/{model}`: µ$ per million tokens.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetPriceBody {
    /// Uncached prompt tokens, 0 to 10^10.
    input: i64,
    /// Output tokens, 0 to 10^10.
    output: i64,
    /// Prompt tokens read from the provider's cache; `input` when absent.
    cached_input: Option<i64>,
    /// 5-minute cache writes; `input` × 1.25 for the Anthropic format, else `input`.
    cache_write5m: Option<i64>,
    /// 1-hour cache writes; `input` × 2 for the Anthropic format, else `input`.
    cache_write1h: Option<i64>,
    /// Reasoning output tokens; `output` when absent.
    reasoning_output: Option<i64>,
}

/// A runtime price as stored (absent optional prices are null: their defaults apply).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelPriceView {
    provider: String,
    model: String,
    input: i64,
    output: i64,
    cached_input: Option<i64>,
    #[serde(rename = "cacheWrite5m")]
    cache_write_5m: Option<i64>,
    #[serde(rename = "cacheWrite1h")]
    cache_write_1h: Option<i64>,
    reasoning_output: Option<i64>,
    created_at: String,
    updated_at: String,
}

impl From<&RuntimePrice> for ModelPriceView {
    fn from(r: &RuntimePrice) -> Self {
        ModelPriceView {
            provider: r.provider.clone(),
            model: r.model.clone(),
            input: r.input,
            output: r.output,
            cached_input: r.cached_input,
            cache_write_5m: r.cache_write_5m,
            cache_write_1h: r.cache_write_1h,
            reasoning_output: r.reasoning_output,
            created_at: time::iso(r.created_at),
            updated_at: time::iso(r.updated_at),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeletedPrice {
    deleted: bool,
}

/// One price in force, with where it comes from.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PriceInForce {
    provider: String,
    model: String,
    /// `builtin` (shipped with the binary), `file` (the operator's pricing file) or
    /// `runtime` (set through this API; wins over the other two).
    source: &'static str,
    input: i64,
    output: i64,
    cached_input: i64,
    #[serde(rename = "cacheWrite5m")]
    cache_write_5m: i64,
    #[serde(rename = "cacheWrite1h")]
    cache_write_1h: i64,
    reasoning_output: i64,
}

impl PriceInForce {
    fn new(provider: &str, model: &str, source: &'static str, p: &ModelPrice) -> Self {
        PriceInForce {
            provider: provider.to_owned(),
            model: model.to_owned(),
            source,
            input: p.input,
            output: p.output,
            cached_input: p.cached_input_price(),
            cache_write_5m: p.cache_write_5m_price(),
            cache_write_1h: p.cache_write_1h_price(),
            reasoning_output: p.reasoning_output.unwrap_or(p.output),
        }
    }
}

/// A model called without a price in the window.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnpricedView {
    provider: String,
    model: String,
    calls: i64,
    last_seen: Option<String>,
}

/// `GET /api/pricing`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PricingView {
    /// The organization's setting: `estimate` or `block`.
    unpriced_models: &'static str,
    /// The day the built-in prices were last checked (`YYYY-MM-DD`).
    checked_at: Option<String>,
    /// Days `unpriced` looks back.
    window_days: i64,
    /// Every price in force for the organization, by provider and model.
    models: Vec<PriceInForce>,
    /// Models called in the window that still have no price, most recently seen first.
    unpriced: Vec<UnpricedView>,
}

/// The provider and model of the path, checked: a known provider (`gemini` names
/// `google`), a model of 1-200 characters without control characters or surrounding
/// spaces (it may contain `/`).
fn parse_path(state: &AppState, provider: &str, model: &str, issues: &mut Issues) -> Option<String> {
    let canonical = model_prices::canonical_provider(&state.config, provider);
    if canonical.is_none() {
        let mut names = vec!["openai", "anthropic", "google"];
        names.extend(state.config.upstreams.iter().map(|u| u.name.as_str()));
        issues.push(&["provider"], format!("must be one of {}", names.join(", ")));
    }
    let ok = !model.is_empty()
        && model.chars().count() <= MAX_MODEL_CHARS
        && !model.chars().any(char::is_control)
        && model.trim() == model;
    issues.check(
        ok,
        &["model"],
        "must be 1 to 200 characters, without control characters or surrounding spaces",
    );
    canonical
}

fn check_prices(body: &SetPriceBody, issues: &mut Issues) {
    let prices = [
        ("input", Some(body.input)),
        ("output", Some(body.output)),
        ("cachedInput", body.cached_input),
        ("cacheWrite5m", body.cache_write5m),
        ("cacheWrite1h", body.cache_write1h),
        ("reasoningOutput", body.reasoning_output),
    ];
    for (field, value) in prices {
        if let Some(value) = value {
            check_range(value, 0, MAX_PRICE, &[field], issues);
        }
    }
}

/// Lists the organization's runtime prices.
#[utoipa::path(get, path = "/api/model-prices", tag = "model-prices", security(("session" = [])),
    description = "Session, viewer and above. Only the organization's own runtime prices; `GET /api/pricing` shows the whole table in force.",
    responses((status = 200, description = "`{ data: ModelPrice[] }`", body = Data<Vec<ModelPriceView>>),
        (status = 401, description = "authentication_required")))]
#[get("/model-prices")]
pub async fn list_model_prices(
    state: web::Data<AppState>,
    auth: SessionAuth,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let rows = db::model_prices::list(&state.pool, &auth.org.id).await?;
    let data: Vec<ModelPriceView> = rows.iter().map(ModelPriceView::from).collect();
    Ok(HttpResponse::Ok().json(json!({ "data": data })))
}

/// Prices a model for the organization, replacing any runtime price it had.
#[utoipa::path(put, path = "/api/model-prices/{provider}/{model}", tag = "model-prices",
    request_body = SetPriceBody, security(("session" = [])),
    params(("provider" = String, Path, description = "`openai`, `anthropic`, `google` (or `gemini`), or a configured upstream's name"),
        ("model" = String, Path, description = "The model name exactly as calls send it (1-200 characters; may contain `/`)")),
    description = "Session, admin and above. Prices in microdollars per million tokens, integers from 0 to 10^10. \
        Wins over the built-in table and the operator's pricing file for this exact model name; \
        every instance applies it within about a second. Audited as `model_price.set`.",
    responses((status = 200, description = "`{ data: ModelPrice }`", body = Data<ModelPriceView>),
        (status = 400, description = "validation_error or invalid_json"), (status = 401, description = "authentication_required"),
        (status = 403, description = "forbidden"), (status = 404, description = "not_found: the path names no model"),
        (status = 413, description = "payload_too_large"), (status = 415, description = "unsupported_media_type")))]
#[put("/model-prices/{provider}/{model:.+}")]
pub async fn set_model_price(
    state: web::Data<AppState>,
    auth: SessionAuth,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let (provider, model) = path.into_inner();
    let mut issues = Issues::new();
    let provider = parse_path(&state, &provider, &model, &mut issues);
    issues.finish()?;
    let body: SetPriceBody = super::keys::json_body(&req, payload).await?;
    let mut issues = Issues::new();
    check_prices(&body, &mut issues);
    issues.finish()?;
    let now = time::now_ms();
    let row = RuntimePrice {
        id: ids::new_id(),
        org_id: auth.org.id.clone(),
        provider: provider.unwrap_or_default(),
        model,
        input: body.input,
        output: body.output,
        cached_input: body.cached_input,
        cache_write_5m: body.cache_write5m,
        cache_write_1h: body.cache_write1h,
        reasoning_output: body.reasoning_output,
        created_at: now,
        updated_at: now,
    };
    let row = db::model_prices::store(&state.pool, row, &auth.user.id).await?;
    state.model_prices.invalidate(&row.org_id);
    Ok(HttpResponse::Ok().json(json!({ "data": ModelPriceView::from(&row) })))
}

/// Removes the organization's runtime price of a model: the table's price (or the
/// unpriced rule) applies again.
#[utoipa::path(delete, path = "/api/model-prices/{provider}/{model}", tag = "model-prices",
    security(("session" = [])),
    params(("provider" = String, Path, description = "As for PUT"), ("model" = String, Path, description = "As for PUT")),
    description = "Session, admin and above. Audited as `model_price.deleted`.",
    responses((status = 200, description = "`{ data: { deleted: true } }`", body = Data<DeletedPrice>),
        (status = 401, description = "authentication_required"), (status = 403, description = "forbidden"),
        (status = 404, description = "not_found: the organization sets no price for it")))]
#[delete("/model-prices/{provider}/{model:.+}")]
pub async fn delete_model_price(
    state: web::Data<AppState>,
    auth: SessionAuth,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Admin)?;
    let (provider, model) = path.into_inner();
    let not_found = || ApiError::not_found("Model price");
    let provider = model_prices::canonical_provider(&state.config, &provider).ok_or_else(not_found)?;
    let row = db::model_prices::delete(&state.pool, &auth.org.id, &provider, &model, &auth.user.id)
        .await?
        .ok_or_else(not_found)?;
    state.model_prices.invalidate(&row.org_id);
    Ok(HttpResponse::Ok().json(json!({ "data": DeletedPrice { deleted: true } })))
}

/// The built-in table as shipped, to tell its entries from the operator's file's.
static BUILTIN: LazyLock<Option<PricingTable>> = LazyLock::new(|| PricingTable::builtin().ok());

/// Every price in force for the organization, each marked by its source.
fn in_force(state: &AppState, org: &OrgPrices, runtime: &[RuntimePrice]) -> Vec<PriceInForce> {
    let builtin = BUILTIN.as_ref();
    let mut models: Vec<PriceInForce> = Vec::new();
    for (provider, model, price) in state.pricing.iter() {
        if org.get(provider.as_str(), model).is_some() {
            continue;
        }
        let source =
            if builtin.is_some_and(|b| b.has_exact(provider, model, price)) { "builtin" } else { "file" };
        models.push(PriceInForce::new(provider.as_str(), model, source, price));
    }
    for (name, model, price) in state.pricing.iter_named() {
        if org.get(name, model).is_none() {
            models.push(PriceInForce::new(name, model, "file", price));
        }
    }
    for row in runtime {
        let price = model_prices::price_of(row, model_prices::format_of(&state.config, &row.provider));
        models.push(PriceInForce::new(&row.provider, &row.model, "runtime", &price));
    }
    models.sort_by(|a, b| (&a.provider, &a.model).cmp(&(&b.provider, &b.model)));
    models
}

/// The models called without a price in the window that still have none.
async fn unpriced(state: &AppState, org_id: &str, org: &OrgPrices) -> Result<Vec<UnpricedView>, ApiError> {
    let since = time::now_ms().saturating_sub(RECENT_DAYS * 86_400_000);
    let seen = db::unpriced::recent(&state.pool, Some(org_id), since).await?;
    Ok(seen
        .into_iter()
        .filter(|m| {
            let named = state.config.upstream(&m.provider).is_some();
            let format = model_prices::format_of(&state.config, &m.provider);
            let known = named || Provider::from_name(&m.provider).is_some();
            !known || org.resolve(&state.pricing, &m.provider, format, named, &m.model).is_none()
        })
        .map(|m| UnpricedView {
            provider: m.provider,
            model: m.model,
            calls: m.calls,
            last_seen: time::iso_opt(m.last_seen_ms),
        })
        .collect())
}

/// The price table in force for the organization and the models seen unpriced.
#[utoipa::path(get, path = "/api/pricing", tag = "model-prices", security(("session" = [])),
    description = "Session, viewer and above. Every price in force (built-in, the operator's file, the organization's \
        runtime prices), in microdollars per million tokens with the defaults filled in, and the models called without \
        a price in the last 7 days that still have none.",
    responses((status = 200, description = "`{ data: { unpricedModels, checkedAt, windowDays, models, unpriced } }`",
            body = Data<PricingView>),
        (status = 401, description = "authentication_required")))]
#[get("/pricing")]
pub async fn get_pricing(state: web::Data<AppState>, auth: SessionAuth) -> Result<HttpResponse, ApiError> {
    auth.require(Role::Viewer)?;
    let org = state.model_prices.of(&state.pool, &state.config, &auth.org.id).await?;
    let runtime = db::model_prices::list(&state.pool, &auth.org.id).await?;
    let view = PricingView {
        unpriced_models: org.policy.as_str(),
        checked_at: state.pricing.checked_at().map(str::to_owned),
        window_days: RECENT_DAYS,
        models: in_force(&state, &org, &runtime),
        unpriced: unpriced(&state, &auth.org.id, &org).await?,
    };
    Ok(HttpResponse::Ok().json(json!({ "data": view })))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_model_prices).service(set_model_price).service(delete_model_price).service(get_pricing);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_model_prices, set_model_price, delete_model_price, get_pricing))]
pub struct ApiDoc;
